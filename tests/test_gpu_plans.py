"""Plans for a machine with a GPU, made here from a profile taken on one (an H200 with 16 cores,
../shared/measurements/h200-16-cores): the probes train on this CPU, the seconds per iteration
come from the profile. The runs that the figures below come from were measured on that H200:
the GPU alone at batch 64 ran 5.6 ms an iteration; cuda0 beside two 8-thread workers (batches
163/15/14) 26.0 ms; all 17 devices 42.0 ms."""

import pytest

from omnitune import planning
from omnitune.core import profile as profile_mod
from omnitune.core.protocols import Sync
from omnitune.efficiency.perfmodel import Shape
from tests.conftest import DATA

H200 = DATA / "profile-h200-shapes-resnet.json"
GPU_ALONE_S, MIXED_S, ALL_S = 5.6e-3, 26.0e-3, 42.0e-3


@pytest.fixture(scope="module")
def h200():
    return profile_mod.load(H200)


def test_the_model_predicts_the_gpu_alone_and_puts_the_crowded_mixed_setup_far_behind_it(h200):
    """The GPU's steps were timed beside 16 busy CPU workers (13.5 ms at batch 32, 6.1 at 128):
    the monotone envelope reads 6.1 ms at 64. Beside two 8-thread workers the GPU's process makes
    17 threads on 16 cores, and the model stretches the CPU workers' steps for it."""
    hardware = planning.profiled(h200)
    gpu, _ = hardware(Shape((("cuda0",),), {"cuda0": 64}, Sync(), "one-per-core"), 64)
    assert gpu == pytest.approx(GPU_ALONE_S, rel=0.30)
    mixed_batch = {"cuda0": 163, "cpu2x0": 15, "cpu2x1": 14}
    mixed, _ = hardware(Shape((tuple(mixed_batch),), mixed_batch, Sync(balanced=True), "2-workers"), 64)
    assert mixed > 2.5 * gpu
    # Measured 26.0 ms; the time-sharing factor alone gives about 18 (oversubscribed OpenMP costs
    # more than that, which is why layouts leave the GPU's core free and finalists are timed).
    assert mixed == pytest.approx(MIXED_S, rel=0.35)


def test_a_plan_made_here_from_the_h200_profile_uses_the_gpu_and_neither_slow_setup(h200, tmp_path):
    from omnitune.runtime import workload
    from omnitune.probing.probe import make_prober
    prober = make_prober(workload.load("shapes-resnet"), None, 0.9, 0)
    found = planning.search(h200, planning.Space(), prober, budget_s=8.0)
    plan = planning.build_plan(found, h200, str(H200), "shapes-resnet", None, 0.9, 0, "now")
    devices = set(plan.spec.batch_size)
    assert "cuda0" in devices
    assert devices != {"cuda0", "cpu2x0", "cpu2x1"}
    assert len(devices) < 17
    assert plan.prediction.sec_per_iter < 0.5 * MIXED_S
