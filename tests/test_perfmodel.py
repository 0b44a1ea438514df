import numpy as np
import pytest

from omnitune.core.profile import AllReduceTiming, Network, P2PTiming
from omnitune.core.protocols import HPSGD, Gossip, Groups, SoftSync, Sync
from omnitune.efficiency.perfmodel import ComputeModel, Linear, NetworkModel, PerfModel, Piecewise, Shape, calibration_shape


def test_linear_fit_recovers_ground_truth():
    x = np.array([4e3, 4e4, 1.6e5, 6.4e5])
    truth = Linear(2e-4, 3e-9)
    fit = Linear.fit(x, truth(x) * (1 + np.array([0.01, -0.01, 0.02, -0.02])))
    assert fit.intercept == pytest.approx(truth.intercept, rel=0.1)
    assert fit.slope == pytest.approx(truth.slope, rel=0.1)


def test_calibration_recovers_a_bent_law_between_and_beyond_its_batches():
    """Ground truth that bends where real jobs bend (steeper at large batches, as teacher-mlp's
    5.7, 7.2 and 11.5 ms against 2.1, 4.1 and 6.6 analytic): y = 4e-3 + 0.5 x up to x = 4e-3,
    then y = 1.2e-3 + 1.2 x. Measured at x = 2, 4 and 7 ms (three repeats each, the median exact),
    the fit gives the truth at x it never saw: between neighbours on the piece that holds them,
    below the first and beyond the last on the nearest piece extended.

    Fails if Piecewise.__call__ picks the piece without the `- 1` after searchsorted (the piece
    to the right of x), or clamps beyond the ends to the measured y; if Piecewise.fit takes the
    mean of repeats instead of their median; or if one x fixes a difference rather than a ratio."""
    first, second = Linear(4e-3, 0.5), Linear(1.2e-3, 1.2)

    def truth(x: float) -> float:
        return float(first(x) if x <= 4e-3 else second(x))
    noise = (1.0, 1.3, 0.98)                  # an outlier among each x's repeats: the median ignores it
    fit = Piecewise.fit([(x, truth(x) * e) for x in (2e-3, 4e-3, 7e-3) for e in noise])
    for x in (1e-3, 3e-3, 5e-3, 6e-3, 9e-3, 14e-3):       # below, between, between, between, beyond, beyond
        assert fit(x) == pytest.approx(truth(x), rel=1e-6), x
    one = Piecewise.fit([(2e-3, 5e-3), (2e-3, 7e-3), (2e-3, 6e-3)])     # one x: the median ratio, 3
    assert [one(x) for x in (1e-3, 4e-3)] == pytest.approx([3e-3, 12e-3])


def test_compute_model_passes_through_measurements_and_grows():
    b = np.array([1, 2, 4, 8, 16, 32])
    t = 1e-3 + 1e-4 * b
    m = ComputeModel(b.astype(float), t)
    assert np.allclose(m(b), t)
    grid = np.arange(1, 200)
    pred = m(grid)
    assert (pred > 0).all() and (np.diff(pred) >= 0).all()        # never negative, never faster
    assert (grid / pred)[-1] >= (grid / pred)[0]                    # batching raises throughput
    assert pred[-1] == pytest.approx(t[-1] + 1e-4 * (199 - 32))    # the fitted line beyond the profile
    assert m.tail.slope == pytest.approx(1e-4) and m.tail.intercept == pytest.approx(1e-3)


def test_a_flat_tail_does_not_make_large_batches_free():
    """A CPU worker whose steps read alike from batch 16 to 64 (a quick profile, timed beside 15
    others): past 64 its fitted slope is about zero, and balancing once gave it 6,457 samples to
    the GPU's 919. Its step at 100× the range is at least half of 100× its best measured step
    per sample, the steepest the rule allows; a growing curve keeps its own, steeper slope.

    Fails if the extrapolation follows the flat fitted line, or if the floor replaces the slope
    of a curve that grows faster."""
    b = np.array([1.0, 2, 4, 8, 16, 32, 64])
    flat = ComputeModel(b, np.array([0.48, 1.54, 1.74, 1.78, 2.14, 2.15, 2.14]) * 1e-3)
    best = 2.14e-3 / 64
    assert flat(6400.0) == pytest.approx(2.14e-3 + (6400 - 64) * best / 2, rel=1e-9)
    assert 6400 / flat(6400.0) <= 2 * 64 / 2.14e-3
    steep = ComputeModel(b, 1e-3 + 1e-4 * b)
    assert steep(640.0) == pytest.approx(1e-3 + 1e-4 * 640, rel=1e-9)


def net(server_update_s=1e-4):
    ar = tuple(AllReduceTiming(2, m, 1e-4 + 2e-9 * m) for m in (4096, 40000, 160000))
    p2p = tuple(P2PTiming(m, 5e-5 + 1e-9 * m) for m in (4096, 40000, 160000))
    return Network("loopback-gloo", ar, p2p, server_update_s)


def perf(server_update_s=1e-4, n=8):
    b = np.array([1.0, 8, 64])
    compute = {f"d{i}": ComputeModel(b, 1e-3 + 1e-4 * b) for i in range(n)}
    return PerfModel(compute, NetworkModel.from_profile(net(server_update_s)), model_bytes=40000)


def test_allreduce_extrapolates_to_larger_groups_sublinearly():
    nm = NetworkModel.from_profile(net())
    t = [nm.allreduce_s(k, 40000) for k in (1, 2, 4, 8)]
    assert t[0] == 0 and t[1] < t[2] < t[3]
    assert t[3] / t[1] < 8                                           # not linear in group size


def test_sync_pays_allreduce_and_more_devices_never_speed_up_one_step():
    m = perf()
    batch = {f"d{i}": 8 for i in range(8)}
    one = m.sec_per_iter(Shape((("d0",),), batch))
    two = m.sec_per_iter(Shape((("d0", "d1"),), batch))
    assert two > one
    # ...but throughput (samples per second) is sublinear yet higher with two.
    assert one * 2 > two


def test_groups_scale_until_the_server_saturates():
    m = perf(server_update_s=2e-3)
    batch = {f"d{i}": 8 for i in range(8)}
    rates = [1 / m.sec_per_iter(Shape(tuple((f"d{i}",) for i in range(g)), batch, Groups(g=g))) for g in (1, 2, 4, 8)]
    assert all(a <= b + 1e-12 for a, b in zip(rates, rates[1:]))     # more groups never slower
    assert rates[-1] <= 1 / m.server_service_s() + 1e-9             # the queueing bound holds
    assert rates[-1] == pytest.approx(1 / m.server_service_s())     # and binds at 8 groups


def test_single_device_profile_has_no_network(sample_profile):
    m = PerfModel.from_profile(sample_profile)
    d = sample_profile.devices[0].device_id
    assert m.sec_per_iter(Shape(((d,),), {d: 16})) > 0
    assert NetworkModel.from_profile(None).allreduce_s(1, 1e6) == 0


# Synthetic ground truth per protocol: sec_per_iter_real = a + c * sec_per_iter_analytic.
TRUTH = {"sync": Linear(4.0e-3, 1.2), "groups": Linear(1.5e-3, 1.1)}


def synthetic_calibration(batches=(8, 32, 128), bend: float = 1.0):
    """profile-v1-calibrated with its sync and groups jobs (one-per-core) replaced by jobs at
    `batches` that take exactly TRUTH's law of the analytic model (times `bend` above batch 32);
    and the analytic model."""
    from dataclasses import replace

    from omnitune.core import profile as profile_mod
    from tests.conftest import DATA

    prof = profile_mod.load(DATA / "profile-v1-calibrated.json")
    analytic = PerfModel.from_profile(replace(prof, calibration=()))
    templates = {cal.protocol: cal for cal in prof.calibration}
    assert set(templates) == set(TRUTH)
    jobs = []
    for key, law in TRUTH.items():
        for b in batches:
            job = replace(templates[key], batch_size=b)
            real = float(law(analytic.sec_per_iter(calibration_shape(prof, job)))) * (bend if b > 32 else 1.0)
            jobs.append(replace(job, sec_per_iter=real))
    return replace(prof, calibration=tuple(jobs)), analytic


def test_calibration_recovers_a_known_law_at_batches_it_did_not_run():
    """Jobs at batches 8, 32 and 128 that follow a + c * analytic, with its own (a, c) per
    protocol: the calibrated model gives a + c * analytic at batches between (12, 20, 64, 100)
    and beyond (1, 2, 4, 256, 512) them, for each protocol, and a layout without jobs keeps the
    analytic figure.

    Fails if fit_calibration takes its x from cal.batch_size rather than the analytic seconds,
    if sec_per_iter returns the analytic figure where a fit exists, or if Piecewise clamps x to
    its calibrated range."""
    prof, analytic = synthetic_calibration()
    model = PerfModel.from_profile(prof)
    ids = prof.cluster.layouts["one-per-core"]
    for key, law in TRUTH.items():
        variant = Sync() if key == "sync" else Groups(g=2)
        for b in (1, 2, 4, 12, 20, 64, 100, 256, 512):
            shape = Shape(variant.group(ids), dict.fromkeys(ids, b), variant, "one-per-core")
            want = float(law(analytic.sec_per_iter(shape)))
            assert model.sec_per_iter(shape) == pytest.approx(want, rel=1e-6), (key, b)
            assert model.sec_per_iter(shape) > analytic.sec_per_iter(shape)      # the law adds a > 0 and has c > 1
    d = prof.devices[0].device_id
    elsewhere = Shape(((d,),), {d: 8}, layout="elsewhere")
    assert model.sec_per_iter(elsewhere) == analytic.sec_per_iter(elsewhere)


def test_calibrated_predictions_grow_with_the_batch_where_the_analytic_model_does():
    """Synthetic jobs whose batch-128 job runs 20% above TRUTH's law (real jobs bend up so): on
    each calibrated protocol, over batches 1-512, where the analytic model's seconds per iteration
    do not fall with the batch, neither do the calibrated ones (each piece has c >= 0, and the
    pieces meet at the calibrated points).

    Fails if Piecewise.__call__ drops the `- 1` after searchsorted: just above the first
    calibrated point it takes the steeper next piece, which lies below the first there, and the
    prediction drops."""
    prof, _ = synthetic_calibration(bend=1.2)
    model = PerfModel.from_profile(prof)
    bare = PerfModel(model.compute, model.network, model.model_bytes, cores=model.cores)
    batches = np.unique(np.geomspace(1, 512, 60).astype(int))
    calibrated_shapes = {s.key: s for s in (calibration_shape(prof, cal) for cal in prof.calibration)}
    assert len(calibrated_shapes) == len(TRUTH)
    for s in calibrated_shapes.values():
        ids = [d for g in s.groups for d in g]
        shapes = [Shape(s.groups, dict.fromkeys(ids, int(b)), s.variant, s.layout) for b in batches]
        analytic = np.array([bare.sec_per_iter(x) for x in shapes])
        calibrated = np.array([model.sec_per_iter(x) for x in shapes])
        rising = np.diff(analytic) >= 0
        assert rising.mean() > 0.9                                # the premise: the analytic model rises
        assert (calibrated > 0).all() and (np.diff(calibrated)[rising] >= 0).all()


def test_protocols_have_their_own_hardware_story():
    m = perf(server_update_s=1e-4, n=2)
    batch = {"d0": 8, "d1": 8}
    both, each = (("d0", "d1"),), (("d0",), ("d1",))
    sync = m.sec_per_iter(Shape(both, batch, Sync()))
    hpsgd = m.sec_per_iter(Shape(both, batch, HPSGD()))
    assert hpsgd < sync                                  # overlap hides the all-reduce
    waits = m.sec_per_iter(Shape(each, batch, SoftSync(learners=2, n=1)))
    free = m.sec_per_iter(Shape(each, batch, SoftSync(learners=2, n=2)))
    assert free < waits                                  # n = learners updates on every gradient
    rare = m.sec_per_iter(Shape(both, batch, Gossip(every=4)))
    often = m.sec_per_iter(Shape(both, batch, Gossip(every=1)))
    assert rare < often


def test_a_gpus_step_is_never_slower_than_at_a_larger_batch():
    m = ComputeModel(np.array([1.0, 32, 64, 128, 256]), np.array([4.4e-3, 13.5e-3, 9.1e-3, 6.1e-3, 6.5e-3])).monotone()
    assert list(m.seconds) == pytest.approx([4.4e-3, 6.1e-3, 6.1e-3, 6.1e-3, 6.5e-3])
    assert all(np.diff(m.seconds) >= 0)


def test_a_lone_spike_in_a_devices_steps_is_the_hosts_spell_and_bumps_stay():
    """teacher-mlp's one worker (profile of 2026-11-28): 2.8 ms at batch 128, 9.2 at 256, 9.6 at
    512, where the runtime took 2.8-3.3, 4.6-5.9 and 9.9-10.2 ms. The spike at 256 is replaced by
    the log-log line through its neighbours, so throughput rises with the batch as the runtime's
    did; a bump within SPIKE stays, and so do two neighbours off together (a step change, not a
    spike). Fails if the spike stays, or if a bump or a step change is smoothed away."""
    batches = np.array([1.0, 2, 4, 8, 16, 32, 64, 128, 256, 512])
    seconds = np.array([0.702, 0.838, 0.84, 1.032, 1.022, 1.333, 1.816, 2.817, 9.228, 9.601]) * 1e-3
    m = ComputeModel(batches, seconds).despiked()
    assert m.seconds[8] == pytest.approx((2.817 * 9.601) ** 0.5 * 1e-3)
    assert np.delete(m.seconds, 8) == pytest.approx(np.delete(seconds, 8))
    samples_per_s = batches / m.seconds
    assert all(np.diff(samples_per_s[3:]) > 0)
    bumpy = seconds.copy()
    bumpy[8] = 1.4 * (2.817 * 9.601) ** 0.5 * 1e-3              # within SPIKE of its neighbours' line
    assert ComputeModel(batches, bumpy).despiked().seconds == pytest.approx(bumpy)
    stepped = np.array([1.0, 1.1, 3.0, 3.2, 3.5]) * 1e-3       # 2 and 4 both off their neighbours' lines
    assert ComputeModel(batches[:5], stepped).despiked().seconds == pytest.approx(stepped)


def test_cpu_workers_crowding_a_gpus_core_are_stretched_and_the_gpu_is_not():
    from omnitune.efficiency.perfmodel import Cores
    cores = Cores(16, {"cuda0": 1, "a": 8, "b": 8, "c": 7, "rest": 15}, dict.fromkeys(["cuda0", "a", "b", "c", "rest"], 0),
                  frozenset({"cuda0"}))
    assert cores.slowdown(["cuda0", "a", "b"]) == {"cuda0": 1.0, "a": 2.0, "b": 2.0}      # 17 threads on 16 cores
    assert cores.slowdown(["cuda0", "rest"]) == {"cuda0": 1.0, "rest": 1.0}               # the GPU's core left free
    assert cores.slowdown(["a", "b"]) == {"a": 1.0, "b": 1.0}                             # CPU workers as laid out
    assert cores.slowdown(["cuda0", "a", "c"]) == {"cuda0": 1.0, "a": 1.0, "c": 1.0}


def test_a_calibration_job_answers_only_for_its_own_devices():
    one = Shape((("cuda0",),), {"cuda0": 64}, layout="one-per-core")
    every = Shape((("cpu0", "cpu1", "cuda0"),), dict.fromkeys(["cpu0", "cpu1", "cuda0"], 64), layout="one-per-core")
    assert one.key != every.key and one.key[:3] == every.key[:3]
