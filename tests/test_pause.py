"""A pause's readers (probing/pause.py): reading side by side, in processes of their own, gives
the readings that reading one after another in the pause's own process gives."""

import pytest
import torch

from omnitune.planning.retune import Setting
from omnitune.probing import pause
from omnitune.probing.emulator import emulator
from omnitune.probing.probe import probe_config
from omnitune.runtime import workload as workload_mod
from tests.conftest import make_spec


@pytest.fixture(scope="module")
def paused(tmp_path_factory):
    """mlp-digits (its datasets are not cached: the readers load a copy) after 40 updates at
    batch 32, lr 0.05, checkpointed as a run's pause finds it."""
    wl = workload_mod.load("mlp-digits")
    datasets = wl.build_datasets(None, 0)
    spec = make_spec("sync", [["cpu0"]], batch=32, lr=0.05, momentum=0.9, workload="mlp-digits")
    emu = emulator(wl, datasets[0], probe_config(spec, spec.lr, spec.momentum), 0)
    for _ in range(40):
        emu.step()
    ckpt = tmp_path_factory.mktemp("run") / "checkpoint.pt"
    torch.save(emu.checkpoint_state(), ckpt)
    return wl, datasets, spec, ckpt, torch.load(ckpt, weights_only=True)


JOBS = [(Setting(0.05, 0.9), 1, 20, True), (Setting(0.15, 0.9), 1, 20, True), (Setting(0.0167, 0.9), 2, 30, False)]


def read(paused, processes: int, checkpoint=None):
    wl, datasets, spec, ckpt, state = paused
    held = workload_mod.first(datasets[1], 256)
    readers = pause.Readers(wl, datasets, held, spec, checkpoint or ckpt, 256, processes)
    try:
        return readers.read(state, JOBS), readers
    finally:
        readers.close()


def test_two_readers_read_what_the_pause_reads_alone_and_leave_no_copy(paused):
    """Three readings (two with their cool-down, one without) by two reader processes match,
    within float rounding of their threads, those taken here one after another; the datasets'
    copy the readers loaded is gone after. Fails if a reader reads another setting, data order
    or number of updates than it was given, or from another state."""
    here, _ = read(paused, 1)
    apart, readers = read(paused, 2)
    assert readers.processes == 2 and not readers.broken
    assert len({r.cooled for r in here}) == 3          # three different readings, not one thrice
    for a, b in zip(here, apart):
        assert b.raw == pytest.approx(a.raw, rel=1e-4) and b.cooled == pytest.approx(a.cooled, rel=1e-4)
    assert here[2].raw == here[2].cooled               # no cool-down
    assert not (paused[3].parent / "pause-datasets.pt").exists()


def test_readers_that_cannot_start_leave_the_readings_to_the_pause(paused, tmp_path):
    """Readers whose checkpoint cannot be loaded (as one killed would fail) break; the pause says
    so and takes the readings itself: the same readings."""
    here, _ = read(paused, 1)
    fallback, readers = read(paused, 2, checkpoint=tmp_path / "gone.pt")
    assert "readers failed" in readers.broken
    assert [r.cooled for r in fallback] == [r.cooled for r in here]


def test_readers_start_only_for_readings_that_would_take_long_here():
    """A pause starts readers, at most one per thread and per reading, only where its readings
    left would take READERS_FROM_S or more one after another."""
    threads = torch.get_num_threads()
    assert pause.reader_processes(6, pause.READERS_FROM_S - 0.1) == 1
    assert pause.reader_processes(6, pause.READERS_FROM_S) == min(threads, 6)
    assert pause.reader_processes(1, 100.0) == 1
