import weakref
from types import SimpleNamespace

import pytest
import torch
from torch.utils.data import TensorDataset

from omnitune.core.cluster import Device
from omnitune.core.errors import UserError
from omnitune.core.recipe import Recipe
from omnitune.runtime.measure import (GROW_CAP, GROW_GAIN, GROW_S, GROW_STEP_S, Settings, StepTimer, alone_steps,
                                      barriers, batch_sizes, grow_steps, measure_steps)


def test_batch_sizes():
    assert batch_sizes(1) == [1]
    assert batch_sizes(16) == [1, 2, 4, 8, 16]
    assert batch_sizes(48) == [1, 2, 4, 8, 16, 32, 48]


def test_measure_steps_stops_at_the_time_cap(digits):
    import torch
    wl, train, _ = digits
    timer = StepTimer(wl, train, torch.device("cpu"))
    steps = measure_steps(timer, Settings(max_batch=32, max_step_s=1e-9, repeats=1, warmup=0))
    assert [s.batch_size for s in steps] == [1]          # the first step already exceeded the cap
    steps = measure_steps(timer, Settings.make(quick=True, max_batch=16))
    assert [s.batch_size for s in steps] == [1, 2, 4, 8, 16]
    assert all(s.sec_per_step > 0 and s.samples_per_s == s.batch_size / s.sec_per_step for s in steps)
    assert all(s.spread >= 0 for s in steps) and any(s.spread > 0 for s in steps)   # repeats never agree to the ns


def test_the_timer_draws_batches_of_the_training_set_without_shuffling_all_of_it(digits, monkeypatch):
    """A size's timing gathers random samples, as the runtime gathers its slices, and starts no
    stream of the run's, whose first batch shuffles the whole set (0.1-0.25 s on a million)."""
    from omnitune.runtime import workload
    wl, train, _ = digits
    monkeypatch.setattr(workload, "batches", lambda *a, **k: pytest.fail("a stream shuffles the whole set"))
    timer = StepTimer(wl, train, torch.device("cpu"))
    x, y = next(timer.stream(32))
    assert x.shape[0] == y.shape[0] == 32
    rows = {tuple(r.flatten().tolist()) for r in train.tensors[0]}
    assert all(tuple(r.flatten().tolist()) in rows for r in x)
    assert timer.time(8, Settings.make(quick=True))


def test_quick_settings_are_lighter():
    assert Settings.make(True).repeats < Settings.make(False).repeats
    assert Settings.make(False, max_batch=128).max_batch == 128


@pytest.mark.parametrize("spell", [0, 1, 2])
def test_a_slow_spell_in_one_pass_leaves_the_steps_as_they_were(spell):
    """Steps of 1 ms a sample, ten times slower through one of three passes over the sizes (a slow
    spell of the host): every size's step is still about 1 ms a sample."""
    s = Settings(max_batch=8, max_step_s=1.0, passes=3)
    met = []                                                     # the barrier: once per size and pass

    class Spell:
        def time(self, batch, settings, first=True):
            slow = 10 if (len(met) - 1) // len(batch_sizes(s.max_batch)) == spell else 1
            return [batch * 1e-3 * slow * (1 + 0.01 * i) for i in range(3 if first else 1)]
    steps = measure_steps(Spell(), s, barrier=lambda: met.append(1))
    assert len(met) == barriers(s)
    assert [x.batch_size for x in steps] == [1, 2, 4, 8]
    assert [x.sec_per_step for x in steps] == pytest.approx([b * 1e-3 for b in (1, 2, 4, 8)], rel=0.02)
    assert all(x.spread == pytest.approx(0.01, rel=0.1) for x in steps)      # within a pass, not between


GPU = Device("cuda0", "cuda", cuda_index=0)


class Curve:
    """A timer whose step at batch b takes step_s(b) seconds, and that runs out of memory above
    batch `fits`."""

    def __init__(self, step_s, fits=1 << 30, name="cuda0"):
        self.step_s, self.fits, self.name, self.asked = step_s, fits, name, []

    def time(self, batch, settings, first=True):
        self.asked.append(batch)
        return None if batch > self.fits else [self.step_s(batch)] * (3 if first else 1)


def saturating(b):
    """1 ms a step plus 1 us a sample: throughput rises toward 1e6 samples/s, ever more slowly."""
    return 1e-3 + b * 1e-6


def sizes(steps):
    return [x.batch_size for x in steps]


def test_a_gpu_grows_past_max_batch_until_throughput_stops_rising_by_5_percent():
    s = Settings()
    timer = Curve(saturating)
    steps = alone_steps(timer, GPU, s)
    grown = [x for x in steps if x.batch_size > s.max_batch]
    assert grown and sizes(grown) == [s.max_batch << k for k in range(1, len(grown) + 1)]
    best = [max(x.samples_per_s for x in steps[:i]) for i in range(len(steps) - len(grown), len(steps))]
    gains = [x.samples_per_s / b for x, b in zip(grown, best)]
    assert all(g > GROW_GAIN for g in gains[:-1]) and gains[-1] <= GROW_GAIN    # the flat size is kept
    assert max(timer.asked) == grown[-1].batch_size


def test_a_gpu_grows_until_memory_runs_out_first_and_says_so():
    s = Settings()
    said = []
    timer = Curve(saturating, fits=2048)
    steps = alone_steps(timer, GPU, s, said.append)
    assert sizes(steps)[-1] == 2048 and max(timer.asked) == 4096
    assert said == ["cuda0: batch 4096 does not fit in GPU memory; its range ends at 2048"]


def test_out_of_memory_below_max_batch_ends_the_range_there():
    said = []
    steps = alone_steps(Curve(saturating, fits=64), GPU, Settings(), said.append)
    assert sizes(steps) == [1, 2, 4, 8, 16, 32, 64]
    assert said == ["cuda0: batch 128 does not fit in GPU memory; its range ends at 64"]


def test_not_even_batch_1_fitting_names_the_device():
    with pytest.raises(UserError, match="batch size 1 fits on cuda0"):
        alone_steps(Curve(saturating, fits=0), GPU, Settings())


def test_a_model_too_big_for_the_device_names_it():
    class Huge(torch.nn.Linear):
        def to(self, device):
            raise torch.OutOfMemoryError("CUDA out of memory (a test's)")
    wl = SimpleNamespace(build_model=lambda: Huge(4, 2))
    with pytest.raises(UserError, match="model does not fit on cuda0"):
        StepTimer(wl, None, torch.device("cpu"), GPU)


def test_growth_stops_at_its_cap():
    steps = alone_steps(Curve(lambda b: 1e-3), GPU, Settings())       # throughput doubles with the batch
    assert steps[-1].batch_size == GROW_CAP


def test_growth_stops_after_a_step_over_GROW_STEP_S():
    s = Settings(max_step_s=1.0)
    steps = alone_steps(Curve(lambda b: 0.1 + b * 2e-5), GPU, s)       # throughput still rising there
    assert steps[-1].batch_size > s.max_batch and steps[-1].sec_per_step > GROW_STEP_S
    assert all(x.sec_per_step <= GROW_STEP_S for x in steps[:-1])


def test_growth_stops_once_it_has_taken_GROW_S():
    now = [0.0]

    class Slow(Curve):
        def time(self, batch, settings, first=True):
            now[0] += GROW_S / 2.5                            # the third size ends past GROW_S
            return super().time(batch, settings, first)
    s = Settings()
    base = measure_steps(Slow(lambda b: 1e-3), s)
    now[0] = 0.0
    grown = grow_steps(Slow(lambda b: 1e-3), s, base, clock=lambda: now[0])
    assert sizes(grown) == [1024, 2048, 4096]


def test_a_cpu_worker_alone_and_a_range_ended_below_max_batch_do_not_grow():
    s = Settings()
    assert sizes(alone_steps(Curve(saturating), Device("cpu0", "cpu"), s))[-1] == s.max_batch
    timer = Curve(lambda b: b * 1e-3)                         # past max_step_s at 256
    assert sizes(alone_steps(timer, GPU, s))[-1] == 256 and max(timer.asked) == 256


@pytest.mark.parametrize("passes", [1, 2])
def test_the_concurrent_path_meets_its_barrier_as_often_and_never_grows(passes):
    s = Settings(max_batch=64, passes=passes)
    met, full = [], []
    timer = Curve(saturating, fits=8)
    steps = measure_steps(timer, s, barrier=lambda: met.append(1), on_full=lambda b, last: full.append((b, last)))
    assert len(met) == barriers(s)
    assert sizes(steps) == [1, 2, 4, 8] and full == [(16, 8)]
    timer = Curve(saturating)
    measure_steps(timer, s, barrier=lambda: met.append(1))
    assert len(met) == 2 * barriers(s) and max(timer.asked) == s.max_batch


class Tiny(torch.nn.Module):
    """A model that runs out of memory above batch `fits` in its forward, after its activation is
    made, or (`in_step`) in the optimizer's step, once the gradients are made."""

    def __init__(self, fits, made, in_step=False):
        super().__init__()
        self.fits, self.made, self.in_step, self.layer = fits, made, in_step, torch.nn.Linear(4, 2)

    def forward(self, x):
        h = self.layer(x)
        self.made.append(weakref.ref(h))
        self.full = x.shape[0] > self.fits
        if self.full and not self.in_step:
            raise torch.OutOfMemoryError("CUDA out of memory (a test's)")
        return h


def tiny_timer(fits, made, in_step=False):
    def loss_fn(out, y):
        loss = torch.nn.functional.cross_entropy(out, y)
        made.extend([weakref.ref(y), weakref.ref(loss)])
        return loss
    wl = SimpleNamespace(build_model=lambda: Tiny(fits, made, in_step), loss_fn=loss_fn, recipe=Recipe())
    train = TensorDataset(torch.randn(64, 4), torch.randint(0, 2, (64,)))
    timer = StepTimer(wl, train, torch.device("cpu"), GPU)
    step = timer.opt.step

    def step_or_full():
        if timer.model.full:
            raise torch.OutOfMemoryError("CUDA out of memory (a test's)")
        step()
    timer.opt.step = step_or_full
    return timer


@pytest.mark.parametrize("in_step", [False, True])
def test_a_size_that_does_not_fit_frees_what_its_step_took(monkeypatch, in_step):
    """Out of memory, the timer drops the gradients and optimizer state and empties the cache
    once the failed step's tensors are gone; the next size still fits."""
    made, alive_at_empty = [], []
    monkeypatch.setattr(torch.cuda, "empty_cache", lambda: alive_at_empty.append(any(r() is not None for r in made)))
    timer = tiny_timer(8, made, in_step)
    s = Settings(repeats=3, warmup=1)
    assert timer.time(8, s) is not None and timer.opt.state
    assert timer.time(16, s) is None
    assert alive_at_empty == [False]
    assert all(p.grad is None for p in timer.model.parameters()) and not timer.opt.state
    assert timer.time(4, s) is not None


def test_no_tensor_of_a_size_outlives_its_measurement():
    made = []
    timer = tiny_timer(fits=1 << 20, made=made)
    assert timer.time(32, Settings(repeats=3, warmup=1)) is not None
    assert made and all(r() is None for r in made)
