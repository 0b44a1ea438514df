import numpy as np
import pytest

from omnitune.perfmodel import ComputeModel, Linear, NetworkModel, PerfModel, Piecewise, Shape, calibration_shape
from omnitune.profile import AllReduceTiming, Network, P2PTiming
from omnitune.protocols import HPSGD, Gossip, Groups, SoftSync, Sync


def test_linear_fit_recovers_ground_truth():
    x = np.array([4e3, 4e4, 1.6e5, 6.4e5])
    truth = Linear(2e-4, 3e-9)
    fit = Linear.fit(x, truth(x) * (1 + np.array([0.01, -0.01, 0.02, -0.02])))
    assert fit.intercept == pytest.approx(truth.intercept, rel=0.1)
    assert fit.slope == pytest.approx(truth.slope, rel=0.1)


def test_calibration_bends_through_three_batches():
    # teacher-mlp on both cores: real jobs against the analytic model at batches 16, 128, 256.
    fit = Piecewise.fit([(2.1e-3, 5.7e-3), (6.6e-3, 11.5e-3), (4.1e-3, 7.2e-3)])
    assert [fit(x) for x in (2.1e-3, 4.1e-3, 6.6e-3)] == pytest.approx([5.7e-3, 7.2e-3, 11.5e-3], rel=1e-6)
    assert fit(3.1e-3) == pytest.approx((5.7e-3 + 7.2e-3) / 2, rel=1e-6)      # between neighbours
    assert fit(9.1e-3) > Linear.fit([2.1e-3, 4.1e-3], [5.7e-3, 7.2e-3])(9.1e-3)   # beyond: the last piece's slope
    assert Piecewise.fit([(2e-3, 5e-3), (2e-3, 7e-3)])(4e-3) == pytest.approx(12e-3)    # one x: a ratio


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


def test_calibration_pulls_predictions_to_real_jobs():
    from omnitune import profile as profile_mod
    from tests.conftest import DATA

    prof = profile_mod.load(DATA / "profile-v1-calibrated.json")
    m = PerfModel.from_profile(prof)
    uncalibrated = PerfModel(m.compute, m.network, m.model_bytes)
    for cal in prof.calibration:
        shape = calibration_shape(prof, cal)
        calibrated, analytic = m.sec_per_iter(shape), uncalibrated.sec_per_iter(shape)
        # Two points per fit: the fit passes through the measurements.
        assert calibrated == pytest.approx(cal.sec_per_iter, rel=0.05)
        assert abs(calibrated - cal.sec_per_iter) <= abs(analytic - cal.sec_per_iter) + 1e-9
    # A layout without calibration keeps the analytic value.
    d = prof.devices[0].device_id
    shape = Shape(((d,),), {d: 8}, layout="elsewhere")
    assert m.sec_per_iter(shape) == uncalibrated.sec_per_iter(shape)


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


def test_cpu_workers_crowding_a_gpus_core_are_stretched_and_the_gpu_is_not():
    from omnitune.perfmodel import Cores
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
