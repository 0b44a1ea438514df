"""Devices of unequal speed: the noise margin, subsets pruned by the hardware model, groups formed
by speed, balanced batches across asynchronous groups, and averages weighted by samples. Pure,
but for one real run."""

import dataclasses
import math

import pytest

from omnitune import planning
from omnitune.core import protocols
from omnitune.core.plan import Planning
from omnitune.core.protocols import Gossip, Groups, HPSGD, SoftSync, Sync
from omnitune.efficiency import balance
from omnitune.efficiency.perfmodel import PerfModel
from omnitune.efficiency.statmodel import ProbeResult
from tests.conftest import many_workers_profile


def slowed(sample, tmp_path, factors, spread=0.05, wobble=0.0):
    """n one-thread workers measured as the sample's cpu0 with each step `factors[i]` times longer,
    the repeats' spread `spread`; `wobble` moves alternate batch sizes up and down (noise between
    identical devices)."""
    prof = many_workers_profile(sample, len(factors), tmp_path)

    def scaled(step, f, k):
        f *= math.exp(wobble * (-1) ** k)
        return dataclasses.replace(step, sec_per_step=step.sec_per_step * f, samples_per_s=step.samples_per_s / f,
                                   spread=spread)
    devices = tuple(dataclasses.replace(d, steps=tuple(scaled(s, f, k + i) for k, s in enumerate(d.steps)))
                    for i, (d, f) in enumerate(zip(prof.devices, factors)))
    return dataclasses.replace(prof, devices=devices)


def ids(n):
    return tuple(f"cpu{i}" for i in range(n))


def test_unequal_speed_is_declared_beyond_the_noise_of_the_repeats(sample_profile, tmp_path):
    # Identical devices whose measurements wobble 12% either way across batch sizes: noise.
    assert not planning.hardware.heterogeneous(slowed(sample_profile, tmp_path, [1, 1], spread=0.15, wobble=0.12), ids(2))
    # A device 1.5× slower, measured with the same noise: real.
    assert planning.hardware.heterogeneous(slowed(sample_profile, tmp_path, [1, 1.5], spread=0.15), ids(2))
    # 5% apart with tight repeats is real too; with loose ones it is not.
    assert planning.hardware.heterogeneous(slowed(sample_profile, tmp_path, [1, 1.05], spread=0.01), ids(2))
    assert not planning.hardware.heterogeneous(slowed(sample_profile, tmp_path, [1, 1.05], spread=0.2), ids(2))
    # Profiles without spreads (schema 1-2): a fixed 10%.
    assert not planning.hardware.heterogeneous(slowed(sample_profile, tmp_path, [1, 1.05], spread=0.0), ids(2))
    assert planning.hardware.heterogeneous(slowed(sample_profile, tmp_path, [1, 1.2], spread=0.0), ids(2))


def test_slow_spells_at_some_batch_sizes_are_noise_and_a_ratio_that_grows_with_the_batch_is_not(sample_profile,
                                                                                               tmp_path):
    """perfmodel.slower takes the noise from the ratio's scatter about a line in log batch where
    that is larger than the repeats' spread: an H200 machine's identical cores, with slow spells
    at some sizes and tight repeats, read one core slower in each of three profiles; a GPU's
    ratio to a core grows with the batch, and that is a difference, not scatter."""
    from omnitune.efficiency.perfmodel import slower

    prof = slowed(sample_profile, tmp_path, [1, 1], spread=0.02)
    a, b = prof.devices

    def stretched(d, factor):
        return dataclasses.replace(d, steps=tuple(dataclasses.replace(t, sec_per_step=t.sec_per_step * factor(k, t),
                                                                      samples_per_s=t.samples_per_s / factor(k, t))
                                                  for k, t in enumerate(d.steps)))
    spells = (1.0, 1.45, 1.0, 1.4, 1.0, 1.45, 1.12)        # 40-45% slower at three of seven sizes
    assert len(b.steps) == len(spells)
    assert not slower(a, stretched(b, lambda k, t: spells[k]))
    assert slower(a, stretched(b, lambda k, t: 1.5))                      # slower at every size: real
    assert slower(a, stretched(b, lambda k, t: t.batch_size ** 0.5))       # more so with the batch: real


def layouts(setups):
    return {s.layout: dict(s.idle) for s in setups}


@pytest.mark.parametrize("factors, expected", [
    ([1, 4], {"cluster": set(), "cluster less cpu1": {"cpu1"}}),
    ([1, 1, 6], {"cluster": set(), "cluster less cpu2": {"cpu2"}}),
    ([1, 1.5], {"cluster": set()}),
    ([1, 1, 1], {"cluster": set()}),
])
def test_a_device_is_left_out_only_where_the_hardware_model_runs_faster_without_it(
        sample_profile, tmp_path, factors, expected):
    prof = slowed(sample_profile, tmp_path, factors)
    found = layouts(planning.enumerate_setups(prof, planning.Space(batch_sizes=(16, 32, 64))))
    assert {name: set(idle) for name, idle in found.items()} == expected
    for name, idle in found.items():
        assert all("samples per second without it" in why for why in idle.values())


def test_balanced_batches_that_leave_a_device_all_but_idle_are_not_offered(sample_profile, tmp_path):
    """On the [1, 1, 6]× cluster balanced sync would give the slow device 2 of 96 at batch 32
    (the benchmark measured such a plan at twice the fastest device's time): no balanced setup
    gives any device under a tenth of the nominal batch, and the subset without it is offered."""
    setups = planning.enumerate_setups(slowed(sample_profile, tmp_path, [1, 1, 6]),
                                        planning.Space(protocols=("sync",), batch_sizes=(8, 32)))
    balanced = [s for s in setups if s.variant.balanced]
    assert balanced and all(min(map(min, s.batches)) >= balance.MIN_BALANCED_SHARE * s.batch for s in balanced)
    assert {s.batch for s in balanced} == {8}                    # at 32 the slow device would get 2
    assert any(s.layout == "cluster less cpu2" and s.batch == 32 for s in setups)


def test_cpus_beside_a_gpu_also_come_alone(sample_profile, tmp_path):
    prof = slowed(sample_profile, tmp_path, [1, 1, 0.1])
    gpu = dataclasses.replace(prof.cluster.devices[2], id="cuda0", kind="cuda", cuda_index=0)
    cluster = dataclasses.replace(prof.cluster, devices=prof.cluster.devices[:2] + (gpu,),
                                  layouts={"cluster": ("cpu0", "cpu1", "cuda0")})
    prof = dataclasses.replace(prof, cluster=cluster,
                               devices=prof.devices[:2] + (dataclasses.replace(prof.devices[2], device_id="cuda0"),))
    found = layouts(planning.enumerate_setups(prof, planning.Space(batch_sizes=(32,))))
    assert set(found["cluster: cuda only"]) == {"cpu0", "cpu1"} and set(found["cluster: cpu only"]) == {"cuda0"}
    assert "cluster" in found


def test_groups_are_formed_by_speed_and_may_differ_in_size():
    speed = {"a": 4.0, "b": 1.0, "c": 1.0, "d": 1.0, "e": 1.0}
    # Equal batches: like speeds together, so a slow device holds back only its own group.
    assert protocols.by_speed(("b", "a", "c", "d", "e"), speed, 2, balanced=False) == (("a", "b", "c"), ("d", "e"))
    # Balanced batches: groups of near-equal summed speed, however many members that takes.
    assert protocols.by_speed(("b", "c", "d", "e", "a"), speed, 2, balanced=True) == (("a",), ("b", "c", "d", "e"))
    assert protocols.split(("a", "b", "c"), 2) == (("a", "b"), ("c",))
    Groups(g=2).validate((3, 2))


def test_unequal_groups_update_by_their_speed(sample_profile, tmp_path):
    """Groups of a 4× slower device: the fast group sends about 4 gradients per slow one, so the
    staleness the probes replay is not g - 1 = 1 throughout, as it is for equal groups: mostly 0
    (the fast group's, with no update between), and about 4 for the slow one's. The mean stays
    g - 1 (every update ages the other groups' gradients in flight by one)."""
    het = planning.enumerate_setups(slowed(sample_profile, tmp_path, [1, 4]),
                                     planning.Space(protocols=("groups",), batch_sizes=(32,)))
    same = planning.enumerate_setups(slowed(sample_profile, tmp_path, [1, 1]),
                                      planning.Space(protocols=("groups",), batch_sizes=(32,)))
    plain = next(s for s in het if s.layout == "cluster" and not s.variant.balanced)
    # Balanced, 4× slower would get 1 of 64 (balance.MIN_BALANCED_SHARE): not offered; 1.5× is.
    assert not any(s.variant.balanced for s in het if s.layout == "cluster")
    balanced = next(s for s in planning.enumerate_setups(slowed(sample_profile, tmp_path, [1, 1.5]),
                                                          planning.Space(protocols=("groups",), batch_sizes=(32,)))
                    if s.layout == "cluster" and s.variant.balanced)

    def mean(h):
        return sum(k * n for k, n in enumerate(h)) / sum(h)
    assert same[0].staleness[1] >= 0.9 * sum(same[0].staleness)
    assert plain.staleness[0] > 0.4 * sum(plain.staleness) and sum(plain.staleness[3:]) > 0.15 * sum(plain.staleness)
    assert mean(plain.staleness) == pytest.approx(1.0, abs=0.2)
    # Balanced: each group's step takes as long, so the fast device gets the larger batch and the
    # two take turns again.
    assert balanced.batches[0][0] > 2 * balanced.batches[1][0] and sum(map(sum, balanced.batches)) == 64
    assert balanced.staleness[1] > 0.6 * sum(balanced.staleness)


@pytest.mark.parametrize("variant", [Groups(g=2, balanced=True), SoftSync(learners=2, n=2, balanced=True),
                                     HPSGD(balanced=True), Gossip(balanced=True), Sync(balanced=True)])
def test_balanced_batches_apply_in_every_protocol(sample_profile, tmp_path, variant):
    perf = PerfModel.from_profile(slowed(sample_profile, tmp_path, [1, 3]))
    groups = variant.group(ids(2))
    b = balance.device_batches(perf.compute, variant, groups, 32)
    assert b["cpu0"] > 2 * b["cpu1"] and sum(b.values()) == 64


def test_devices_alike_within_the_noise_get_equal_balanced_batches(sample_profile, tmp_path):
    """Two identical cores whose measurements wobble 12% either way, beside one 6× slower: the two
    share one step model (perfmodel.pooled), so balancing splits evenly between them."""
    prof = slowed(sample_profile, tmp_path, [1, 1, 6], spread=0.15, wobble=0.12)
    b = balance.device_batches(PerfModel.from_profile(prof).compute, Sync(balanced=True), (ids(3),), 32)
    assert abs(b["cpu0"] - b["cpu1"]) <= 1 and b["cpu2"] < b["cpu0"] / 3


def test_averages_are_weighted_by_samples():
    assert protocols.sample_weights([48, 16]) == [0.75, 0.25]
    assert protocols.sample_weights([32, 32]) == [0.5, 0.5]


def test_the_plan_names_its_idle_devices(sample_profile, tmp_path):
    prof = slowed(sample_profile, tmp_path, [1, 1, 6])
    setups = planning.enumerate_setups(prof, planning.Space(protocols=("sync",), batch_sizes=(32,)))
    s = next(s for s in setups if s.idle)
    probe = ProbeResult(s.probe(0.1, 0.9), 100.0, True, ((100, 0.9),), 0.0, 0.0, "reached")
    found = planning.Search([planning.Scored(s.config(0.1, 0.9), s.sec_per_iter, probe)],
                             Planning(1.0, 1, 10.0, True, "test"))
    plan = planning.build_plan(found, prof, "p.json", "lenet-digits", None, 0.9, 0, "now")
    assert plan.spec.device_ids == ("cpu0", "cpu1") and set(plan.idle) == {"cpu2"}
    assert "samples per second without it" in plan.idle["cpu2"]


def test_calibration_jobs_cover_groups_formed_by_speed(sample_profile, tmp_path):
    """The profile's extra calibration jobs on devices of unequal speed: the server protocols'
    groups by speed and balanced batches, as the planner forms them; none on alike devices, none
    that repeat an in-order job, and none with balanced batches the planner would not offer."""
    assert balance.speed_calibrations(list(slowed(sample_profile, tmp_path, [1, 1]).devices), 16) == []
    pair = balance.speed_calibrations(list(slowed(sample_profile, tmp_path, [1, 1.5]).devices), 16)
    assert {v for v, _, _ in pair} == {Groups(g=2, balanced=True), SoftSync(learners=2, n=1, balanced=True),
                                        SoftSync(learners=2, n=2, balanced=True)}
    assert all(b["cpu0"] > 2 * b["cpu1"] and b["cpu0"] + b["cpu1"] == 32 for _, _, b in pair)
    # 4× slower: balanced, the slow device would get under a tenth of the batch (balance.wasted).
    assert balance.speed_calibrations(list(slowed(sample_profile, tmp_path, [1, 4]).devices), 16) == []
    prof = slowed(sample_profile, tmp_path, [1, 1, 6])
    three = {v: (groups, b) for v, groups, b in balance.speed_calibrations(list(prof.devices), 16)}
    fast = planning.hardware.speeds(prof, ids(3))
    assert three[Groups(g=2)] == (protocols.by_speed(ids(3), fast, 2, False), {d: 16 for d in ids(3)})
    assert three[Groups(g=2)][0] == (("cpu0", "cpu1"), ("cpu2",))        # no in-order job: 3 % 2
    assert Groups(g=3) not in three                                    # g = 3 in order: its own job
    assert not any(v.balanced for v in three)                          # the 6× device's share is wasted


def test_groups_formed_by_speed_are_timed_at_powers_of_two_and_at_every_device(sample_profile, tmp_path):
    """The g between the powers of two are left to the model (balance.timed_g): on 16 cores the
    profile timed 33 such jobs."""
    six = balance.speed_calibrations(list(slowed(sample_profile, tmp_path, [1, 1, 1, 1, 1, 1.5]).devices), 16)
    timed = {v.groups for v, _, _ in six if isinstance(v, Groups)}
    assert 4 in timed and not timed & {3, 5}             # 3 and 5 are not in order: timed before
    assert [g for g in range(2, 17) if balance.timed_g(g, 16)] == [2, 4, 8, 16]


def test_the_plan_takes_staleness_from_the_job_of_its_own_groups(sample_profile, tmp_path):
    """A calibration job's staleness answers for a shape only if it ran the same groups, balanced
    alike: groups formed by speed never borrow the in-order job's histogram."""
    from omnitune.efficiency.perfmodel import Shape
    from omnitune.core.profile import Calibration

    prof = slowed(sample_profile, tmp_path, [1, 1, 6])
    in_order = Calibration("cluster", "groups", 3, 16, 0.01, (5, 5, 5))
    by_speed = Calibration("cluster", "groups", 2, 16, 0.01, (8, 1, 1), members=(("cpu0", "cpu1"), ("cpu2",)),
                           batches=((16, 16), (16,)))
    prof = dataclasses.replace(prof, calibration=(in_order, by_speed))
    shape = lambda v, groups: Shape(groups, {d: 16 for d in ids(3)}, v, "cluster")
    assert planning.hardware.measured_staleness(prof, shape(Groups(g=2), (("cpu2",), ("cpu1", "cpu0"))), 32) == (8, 1, 1)
    assert planning.hardware.measured_staleness(prof, shape(Groups(g=2), (("cpu0", "cpu2"), ("cpu1",))), 16) == ()
    assert planning.hardware.measured_staleness(prof, shape(Groups(g=2, balanced=True), (("cpu0", "cpu1"), ("cpu2",))), 16) == ()
    assert planning.hardware.measured_staleness(prof, shape(Groups(g=3), (("cpu0",), ("cpu1",), ("cpu2",))), 16) == (5, 5, 5)


@pytest.mark.slow
def test_a_real_profile_measures_the_staleness_of_groups_formed_by_speed(tmp_path):
    """gloo: profiling two workers, the second emulated 4× slower, runs balanced jobs of groups
    formed by speed besides the in-order ones, and the plan's setups take their histograms."""
    from omnitune.profiling import profiler
    from omnitune.core.cluster import load_cluster

    spec = tmp_path / "pair.yaml"
    spec.write_text("nodes:\n  - host: 127.0.0.1\n    cpu_workers: [1, 1]\n    emulated_slowdown: [1, 4]\n")
    prof = profiler.profile(load_cluster(spec), "lenet-digits", None, profiler.Settings.make(True), tmp_path / "logs")
    mine = [c for c in prof.calibration if c.members]
    assert {(c.protocol, c.balanced) for c in mine} == {("groups", True), ("softsync/n=1", True),
                                                         ("softsync/n=2", True)}
    for c in mine:
        (fast,), (slow,) = c.batches
        assert fast > slow and fast + slow == 2 * c.batch_size and sum(c.staleness) > 0
    setups = planning.enumerate_setups(prof, planning.Space(protocols=("groups",), batch_sizes=(8,)))
    balanced = next(s for s in setups if s.variant == Groups(g=2, balanced=True) and s.layout == "cluster")
    assert balanced.staleness == next(c for c in mine if c.protocol == "groups").staleness


@pytest.mark.slow
@pytest.mark.parametrize("protocol, groups, batches, every", [
    # Unequal groups formed by speed (two fast devices, then the 3× slower one), batches balanced
    # across the asynchronous groups: every device's step takes about as long.
    ("groups", [["cpu0", "cpu1"], ["cpu2"]], {"cpu0": 20, "cpu1": 20, "cpu2": 8}, 1),
    # Replicas on unequal batches: the merged change and the pairs' means weighted by samples.
    ("hpsgd", [["cpu0", "cpu1", "cpu2"]], {"cpu0": 20, "cpu1": 20, "cpu2": 8}, 1),
    # Gossip averaging every 2 steps, so that its rounds show they follow `every`.
    ("gossip", [["cpu0", "cpu1", "cpu2"]], {"cpu0": 20, "cpu1": 20, "cpu2": 8}, 2),
])
def test_a_real_run_of_unequal_groups_and_balanced_batches(tmp_path, protocol, groups, batches, every):
    """gloo processes on this machine, the slow device emulated 3× slower. Besides reaching the
    target, the coordinator's record in the summary shows the protocol ran as configured.

    hpsgd: the replicas' average change merged once a step, one step late (the all-reduce of a
    step's change runs during the next step), from the second step to the one past the judged
    model, where the stop it sent comes back: as many merges as iterations, each 1 step old.
    Fails if the change is all-reduced only every other step (`work = dist.all_reduce(...)` in
    train_hpsgd made `... if iterations % 2 else None`).

    gossip, every 2 steps: a round every 2 steps up to the judged model and a few past it (the
    stop's margin); in each round the coordinator averaged with its partner in the seeded
    matching of that round, and sat it out when the matching left it out (3 workers: one each
    round), so its exchanges, peers and the steps its state drifted alone between exchanges
    (its staleness) follow from protocols.matching. Fails if train_gossip averages every step
    whatever `every` is, or draws its matching from another seed (`spec.seed + 1`)."""
    from collections import Counter

    from omnitune.core.protocols import matching
    from omnitune.runtime import job
    from tests.conftest import make_spec

    spec = make_spec(protocol, groups, momentum=0.4 if protocol == "groups" else 0.9, target=0.9,
                     slowdown={"cpu2": 3.0}, gossip_every=every)
    s = job.run_spec(dataclasses.replace(spec, batch_size=batches), str(tmp_path / "run"), max_time_s=90)
    assert s.reached_target          # (gossip's final model, a few rounds on, may sit just under it)
    if protocol == "groups":
        assert s.processes == 4 and len(s.updates_per_group) == 2 and min(s.updates_per_group) > 0
        assert sum(s.updates_per_group) == s.iterations
    if protocol == "hpsgd":
        assert s.staleness == (0, s.iterations), s.staleness
        overlapped = s.protocol_stats["overlapped_fraction"] * s.iterations      # of s.iterations merges
        assert 0 <= round(overlapped) <= s.iterations and overlapped == pytest.approx(round(overlapped))
    if protocol == "gossip":
        stats, n = s.protocol_stats, len(spec.devices)
        rounds = int(stats["rounds"])
        assert s.iterations / every <= rounds <= 1.5 * s.iterations / every, (rounds, s.iterations)
        partners = [matching(r, n, spec.seed)[0] for r in range(rounds)]
        paired = [r for r, p in enumerate(partners) if p >= 0]
        assert stats["exchanges"] == len(paired) < rounds, stats
        assert stats["peers"] == len({partners[r] for r in paired}) == n - 1
        ends = [(r + 1) * every for r in paired]                     # the step each exchange followed
        drift = Counter(b - a for a, b in zip([0] + ends, ends))
        assert s.staleness == tuple(drift.get(t, 0) for t in range(max(drift) + 1)), s.staleness


@pytest.mark.slow
def test_the_server_rebalances_asynchronous_groups_during_a_real_run(tmp_path):
    """Two one-device groups with balanced batches, started equal (32 each), the second device
    emulated 3× slower: the server times them and moves batch to the fast one as they train.
    Balanced on the devices alone it would be 48/16; the costs both groups share (the server,
    gloo) pull it toward 32/32, more so on a loaded machine (38/26 once under CI). Without
    rebalancing it stays 32/32."""
    from tests.conftest import make_spec
    from omnitune.runtime import job

    spec = make_spec("groups", [["cpu0"], ["cpu1"]], momentum=0.4, target=0.95, rebalance=True,
                     slowdown={"cpu1": 3.0})
    s = job.run_spec(spec, str(tmp_path / "run"), max_time_s=60)
    stats = s.protocol_stats
    assert stats["batch_group0"] > 1.25 * stats["batch_group1"], stats
    assert stats["batch_group0"] + stats["batch_group1"] == 64
