import math

import pytest

from omnitune import optimizer
from omnitune.errors import UserError
from omnitune.protocols import Groups, Sync
from omnitune.statmodel import ProbeConfig, ProbeResult


class FakeProber:
    """Iterations to target grow with staleness and shrink with the update batch, like real SGD."""

    def __init__(self):
        self.calls: list[tuple[ProbeConfig, int]] = []

    def __call__(self, cfg: ProbeConfig, max_iters: int, on_eval=lambda it, acc: False) -> ProbeResult:
        self.calls.append((cfg, max_iters))
        iters = 4000 / math.sqrt(cfg.batch) * (1 + 0.5 * (cfg.groups - 1)) * (1 + abs(cfg.lr - 0.05) * 10)
        reached = iters <= max_iters
        return ProbeResult(cfg, iters if reached else None, reached, ((int(min(iters, max_iters)), 0.9),),
                           cfg.groups - 1.0, 0.0, "reached" if reached else "stopped")


def test_enumeration_respects_pins_and_the_momentum_rule(sample_profile):
    space = optimizer.Space(protocols=("groups",), batch_sizes=(16,), lrs=(0.05,))
    configs = optimizer.enumerate_configs(sample_profile, space)
    assert configs and all(isinstance(c.variant, Groups) and c.g >= 2 and c.batch == 16 for c in configs)
    # The rule's momentum first, then Omnivore's grid.
    assert configs[0].momentum == pytest.approx(0.9 - (1 - 1 / configs[0].g))
    assert {c.momentum for c in configs} >= set(optimizer.OMNIVORE_MOMENTA)
    synced = optimizer.enumerate_configs(sample_profile, optimizer.Space(protocols=("sync",), momentum=0.5))
    assert all(c.g == 1 and c.momentum == 0.5 for c in synced)


def test_search_ranks_by_predicted_time_and_caps_probes(sample_profile):
    prober = FakeProber()
    scored = optimizer.search(sample_profile, optimizer.Space(), prober)
    times = [s.time_to_target_s for s in scored if s.time_to_target_s is not None]
    assert times == sorted(times) and scored[0].time_to_target_s == times[0]
    # Each probe is capped at what could still beat the best so far: caps never grow after the first.
    caps = [cap for _, cap in prober.calls]
    assert all(b <= caps[0] for b in caps[1:])
    # Every configuration appears once, probed or not.
    assert len(scored) == len(optimizer.enumerate_configs(sample_profile, optimizer.Space()))
    # The winner beats every probed alternative, by construction of the product.
    best = scored[0]
    assert best.time_to_target_s == pytest.approx(best.sec_per_iter * best.iters)


def test_no_reachable_target_is_a_clear_error(sample_profile):
    def never(cfg, max_iters, on_eval=None):
        return ProbeResult(cfg, None, False, ((max_iters, 0.1),), 0.0, 0.0, "not reached in 10 iterations")
    scored = optimizer.search(sample_profile, optimizer.Space(lrs=(0.05,), batch_sizes=(16,)), never)
    with pytest.raises(UserError, match="no probe reached it.*not reached in 10 iterations"):
        optimizer.build_plan(scored, sample_profile, "p.json", "lenet-digits", None, 0.99, 0, "now")


def test_plan_from_search_is_valid(sample_profile):
    scored = optimizer.search(sample_profile, optimizer.Space(), FakeProber())
    plan = optimizer.build_plan(scored, sample_profile, "p.json", "lenet-digits", None, 0.9, 0, "now")
    assert plan.prediction.time_to_target_s == pytest.approx(scored[0].time_to_target_s)
    assert len(plan.candidates) == len(scored)
    assert plan.implicit_momentum == pytest.approx(plan.spec.variant.implicit_momentum())
    assert plan.spec.target_accuracy == 0.9 and plan.schema_version == 2


def test_same_seed_same_plan_with_real_probes(sample_profile, digits):
    from omnitune.probe import make_prober
    wl, _, _ = digits
    space = optimizer.Space(batch_sizes=(32,), lrs=(0.05, 0.1), momentum=0.5)
    plans = []
    for _ in range(2):
        scored = optimizer.search(sample_profile, space, make_prober(wl, None, 0.9, seed=7), max_probe_iters=300)
        plans.append(optimizer.build_plan(scored, sample_profile, "p.json", "lenet-digits", None, 0.9, 7, "now"))
    assert plans[0] == plans[1]


def test_measured_implicit_momentum_sets_the_explicit_one(sample_profile):
    space = optimizer.Space(protocols=("groups",), implicit={2: 0.3}, batch_sizes=(16,), lrs=(0.05,))
    configs = [c for c in optimizer.enumerate_configs(sample_profile, space) if c.g == 2]
    assert configs[0].momentum == pytest.approx(0.9 - 0.3)


def test_larger_groups_only_probe_values_at_most_the_previous_optimum(sample_profile):
    prober = FakeProber()
    optimizer.search(sample_profile, optimizer.Space(), prober)
    by_g = {}
    for cfg, _ in prober.calls:
        by_g.setdefault(cfg.groups, []).append(cfg)
    assert 1 in by_g and 2 in by_g
    g1 = [c for c in by_g[1]]
    best1 = min(g1, key=lambda c: 4000 / c.batch ** 0.5 * (1 + abs(c.lr - 0.05) * 10))
    assert all(c.lr <= best1.lr and c.momentum <= best1.momentum and c.batch <= best1.batch for c in by_g[2])


def test_settings_at_least_as_large_as_a_divergence_are_skipped(sample_profile):
    calls = []

    def diverges_above(cfg, max_iters, on_eval=None):
        calls.append(cfg)
        if cfg.groups == 2 and cfg.momentum >= 0.3:
            return ProbeResult(cfg, None, False, (), 1.0, 0.0, "diverged")
        return ProbeResult(cfg, 100.0, True, ((100, 0.95),), 0.0, 0.0, "reached")
    optimizer.search(sample_profile, optimizer.Space(lrs=(0.05,), batch_sizes=(32,)), diverges_above)
    g2 = [c.momentum for c in calls if c.groups == 2]
    first = g2[0]                          # the rule's momentum, 0.4, is tried first and diverges
    assert first == pytest.approx(0.4)
    assert not [m for m in g2[1:] if m >= first], g2    # so 0.6 and 0.9 are never tried
    assert 0.0 in g2 and 0.3 in g2


def test_stop_adding_groups_when_seconds_per_iteration_do_not_improve(sample_profile):
    import dataclasses
    from omnitune.profile import Calibration
    # Make groups look slow: a calibration that says g = 2 takes a full second per update.
    slow = tuple(Calibration("one-per-core", "groups", 2, b, 1.0) for b in (8, 32))
    prof = dataclasses.replace(sample_profile, calibration=slow)
    prober = FakeProber()
    logs = []
    optimizer.search(prof, optimizer.Space(protocols=("sync", "groups")), prober, log=logs.append)
    assert {cfg.groups for cfg, _ in prober.calls} == {1}
    assert any("stop adding groups" in m for m in logs)


def test_interrupted_search_resumes_from_storage(sample_profile, tmp_path):
    storage = f"sqlite:///{tmp_path / 'study.db'}"
    first = FakeProber()
    a = optimizer.search(sample_profile, optimizer.Space(), first, study=optimizer.new_study(storage, "s"))
    again = FakeProber()
    b = optimizer.search(sample_profile, optimizer.Space(), again, study=optimizer.new_study(storage, "s"))
    assert first.calls and not again.calls            # every probe came back from the study
    assert [(s.config, s.iters) for s in a] == [(s.config, s.iters) for s in b]


def test_budget_stops_probing(sample_profile):
    prober = FakeProber()
    optimizer.search(sample_profile, optimizer.Space(), prober, budget_s=0.0)
    assert len(prober.calls) <= 1


def test_lagging_probes_are_pruned(sample_profile):
    """A probe that reports a worse accuracy than the median at the same training time stops."""
    def slow_learner(cfg, max_iters, on_eval):
        good = cfg.lr != 0.02
        for it in range(10, max_iters + 1, 10):
            acc = min(0.99, it / 300) if good else min(0.99, it / 3000)
            if acc >= 0.9:
                return ProbeResult(cfg, float(it), True, ((it, acc),), 0.0, 0.0, "reached")
            if on_eval(it, acc):
                return ProbeResult(cfg, None, False, ((it, acc),), 0.0, 0.0, "pruned")
        return ProbeResult(cfg, None, False, ((max_iters, 0.5),), 0.0, 0.0, "not reached")
    scored = optimizer.search(sample_profile, optimizer.Space(), slow_learner)
    notes = {s.probe.note for s in scored if s.probe and s.config.lr == 0.02}
    assert any(n.startswith("pruned") or n.startswith("cannot beat") for n in notes)




def test_every_protocol_is_a_candidate_with_its_emulation(sample_profile):
    configs = optimizer.enumerate_configs(sample_profile, optimizer.Space(batch_sizes=(16,), lrs=(0.05,)))
    by = {c.variant.label for c in configs if c.layout == "one-per-core"}
    assert {"sync", "groups", "softsync (n=1)", "softsync (n=2)", "hpsgd", "gossip (every=1)",
            "gossip (every=4)"} <= by
    probe = {c.variant.detail or c.variant.protocol: c.probe_config() for c in configs if c.layout == "one-per-core"}
    assert probe["n=1"].groups == 1 and probe["n=1"].batch == 32        # waits for both learners
    assert probe["n=2"].groups == 2 and probe["n=2"].scale_by_staleness  # asynchronous, lr / staleness
    assert probe["every=4"].groups == 5


def test_balanced_batches_favour_the_faster_device(sample_profile):
    import dataclasses
    from omnitune.perfmodel import ComputeModel, PerfModel
    perf = PerfModel.from_profile(sample_profile)
    slow = ComputeModel(perf.compute["cpu1"].batches, perf.compute["cpu1"].seconds * 3)
    perf = dataclasses.replace(perf, compute={**perf.compute, "cpu1": slow})
    c = optimizer.Config("one-per-core", Sync(balanced=True), (("cpu0", "cpu1"),), 32, 0.05, 0.9)
    b = optimizer.device_batches(perf, c)
    assert b["cpu0"] > b["cpu1"] and b["cpu0"] + b["cpu1"] == 64
