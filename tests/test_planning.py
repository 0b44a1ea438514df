import dataclasses
import math

import pytest

from omnitune import planning
from omnitune.core.errors import UserError
from omnitune.core.profile import Calibration
from omnitune.core.recipe import Recipe
from omnitune.core.protocols import Gossip, Groups, SoftSync, Sync
from omnitune.efficiency import balance
from omnitune.efficiency.perfmodel import PerfModel
from omnitune.efficiency.statmodel import ProbeConfig, ProbeResult, ProbeStatus
from omnitune.planning import budget
from omnitune.planning.space import Config, Scored
from omnitune.planning.study import new_study

BEST_LR = 0.003      # the fake workload's best effective learning rate: no fixed grid holds it


class FakeProber:
    """Iterations to target shrink with the update batch, grow with asynchrony and with the
    distance (in decades) of the effective step from BEST_LR, like real SGD."""

    def __init__(self):
        self.calls: list[tuple[ProbeConfig, int]] = []

    def __call__(self, cfg: ProbeConfig, max_iters: int, max_seconds: float = 30.0, on_eval=lambda it, acc: False,
                 evals: int = 16) -> ProbeResult:
        self.calls.append((cfg, max_iters))
        step = cfg.lr / cfg.variant.lr_gain
        iters = 4000 / math.sqrt(cfg.samples_per_update) * (1 + 0.5 * (cfg.variant.asynchrony - 1)) \
            * (1 + 2 * abs(math.log10(step / BEST_LR))) * (1 + abs(cfg.momentum - 0.6))
        reached = iters <= max_iters          # a probe cut short extrapolates, exactly here
        return ProbeResult(cfg, iters, reached, ((int(min(iters, max_iters)), 0.9),),
                           cfg.variant.asynchrony - 1.0, 0.0, "reached" if reached else "extrapolated",
                           None if reached else (0.8 * iters, 1.25 * iters))


def fast_groups(profile):
    """The sample profile with groups made fast: a calibration saying g = 2 takes 0.1 ms per update."""
    cal = tuple(Calibration("one-per-core", "groups", 2, b, 1e-4) for b in (8, 32))
    return dataclasses.replace(profile, calibration=cal)


def test_setups_respect_pins(sample_profile):
    space = planning.Space(protocols=("groups",), batch_sizes=(16,))
    setups = planning.enumerate_setups(sample_profile, space)
    assert setups and all(isinstance(s.variant, Groups) and s.variant.groups >= 2 and s.batch == 16 for s in setups)
    assert all(s.sec_per_iter > 0 and s.samples_per_s > 0 for s in setups)


def test_learning_rate_is_found_over_decades_then_refined(sample_profile):
    prober = FakeProber()
    scored = planning.search(sample_profile, planning.Space(protocols=("sync",)), prober).scored
    sync_lrs = [cfg.lr for cfg, _ in prober.calls]
    assert sync_lrs[:4] == [0.1, 0.01, 0.001, 0.0001]                # Omnivore's decades first
    assert 0.0033 in sync_lrs or 0.003 in sync_lrs                   # refined: a third of a decade above 0.001
    assert scored[0].config.lr == pytest.approx(BEST_LR, rel=0.15)
    assert scored[0].config.momentum == 0.9                          # the synchronous cold start


def test_batches_are_compared_before_the_rate_is_refined(sample_profile):
    """A short budget goes to which batch before a rate's last half decade: after the decades at
    the reference, every other batch at the best rate and the scaled one; the refinement last,
    half a decade either side of the best of those, at its setup, the larger first (where the
    budget holds one, short-horizon bias would favour the smaller)."""
    prober = FakeProber()
    planning.search(sample_profile, planning.Space(protocols=("sync",)), prober)
    calls = [c for c, _ in prober.calls]
    ref = calls[0].batches
    assert [c.lr for c in calls[:4]] == list(planning.space.LR_DECADES) and all(c.batches == ref for c in calls[:4])
    *others, above, below = calls[4:]
    setups = planning.enumerate_setups(sample_profile, planning.Space(protocols=("sync",)))
    assert {c.batches for c in others} == {s.batches for s in setups if planning.space.faster_twin(s, setups) is None} - {ref}
    assert below.batches == above.batches and above.lr / below.lr == pytest.approx(9, rel=0.1)
    assert any(c.batches == below.batches and c.lr == pytest.approx(3 * below.lr, rel=0.05) for c in calls[:-2])


def test_search_ranks_by_predicted_time_and_caps_probes(sample_profile, monkeypatch):
    """Each probe trains the iterations its share of the budget buys at its setup's probe cost
    (every replica's compute, in one process): the budget's probe_s, set from the best predicted
    time so far (none before the first probe) and the time spent (a fake clock: 50 ms a probe). It never trains more iterations than could still
    beat the best time so far at its setup's seconds per iteration. The candidates rank by time
    to target, those with none after.

    Fails if OmnivoreLoop.cap divides by the setup's sec_per_iter instead of its probe cost, if
    run_probe's cap leaves out beat(), or if ordered() sorts by seconds per iteration first."""
    clock = {"t": 0.0}
    monkeypatch.setattr(planning.phases.Spending, "elapsed", lambda self: clock["t"])
    prof, prober, starts = fast_groups(sample_profile), FakeProber(), []

    def timed(cfg, max_iters, max_seconds, on_eval=lambda it, acc: False, evals=16):
        starts.append(clock["t"])
        clock["t"] += 0.05
        return prober(cfg, max_iters, max_seconds, on_eval, evals)
    scored = planning.search(prof, planning.Space(), timed).scored
    setups = {(s.variant, s.batches): s for s in planning.enumerate_setups(prof, planning.Space())}
    assert len(setups) == len(planning.enumerate_setups(prof, planning.Space()))   # a probe names its setup
    outcome = {s.probe.config: s for s in scored if s.probe}       # what the search made of each probe
    scouts = [c for c, _ in prober.calls[:len(planning.space.LR_DECADES)]]
    assert [c.lr for c in scouts] == list(planning.space.LR_DECADES) and len({c.batches for c in scouts}) == 1
    best, by_budget, by_beat = math.inf, 0, 0
    for i, ((cfg, cap), t) in enumerate(zip(prober.calls, starts)):
        s = setups[cfg.variant, cfg.batches]
        share = budget.plan_budget(None if math.isinf(best) else best, t).probe_s
        buys = max(budget.RULES.min_probe_iters, int(share / s.probe_sec_per_iter))
        beat = math.inf if math.isinf(best) else int(best / s.sec_per_iter)
        assert cap == min(buys, beat), (i, cfg, cap, buys, beat)
        by_budget, by_beat = by_budget + (buys < beat), by_beat + (beat < buys)
        if outcome[cfg].time_to_target_s is not None:
            best = min(best, outcome[cfg].time_to_target_s)
    assert by_budget and by_beat                # both limits bound some probe
    assert scored[0].time_to_target_s == best
    times = [s.time_to_target_s for s in scored if s.time_to_target_s is not None]
    assert [s.time_to_target_s for s in scored[:len(times)]] == sorted(times)
    # Every setup appears, probed or with the reason it was not.
    listed = {(s.config.layout, s.config.variant, s.config.batch) for s in scored}
    assert listed == {(s.layout, s.variant, s.batch) for s in setups.values()}
    assert all(s.probe or s.note for s in scored)


def test_no_reachable_target_is_a_clear_error(sample_profile):
    def never(cfg, max_iters, max_seconds, on_eval=None, evals=16):
        return ProbeResult(cfg, None, False, ((max_iters, 0.1),), 0.0, 0.0, "not reached in 10 iterations")
    found = planning.search(sample_profile, planning.Space(lrs=(0.05,), batch_sizes=(16,)), never)
    with pytest.raises(UserError, match="no probe reached it.*not reached in 10 iterations"):
        planning.build_plan(found, sample_profile, "p.json", "lenet-digits", None, 0.99, 0, "now")


def test_plan_from_search_is_valid(sample_profile):
    found = planning.search(fast_groups(sample_profile), planning.Space(), FakeProber())
    plan = planning.build_plan(found, sample_profile, "p.json", "lenet-digits", None, 0.9, 0, "now")
    assert plan.prediction.time_to_target_s == pytest.approx(found.scored[0].time_to_target_s)
    assert len(plan.candidates) == len(found.scored)
    assert plan.implicit_momentum == pytest.approx(plan.spec.variant.implicit_momentum())
    assert plan.spec.target_accuracy == 0.9 and plan.schema_version == 2


def test_same_seed_same_plan_with_real_probes(sample_profile, digits):
    from omnitune.probing.probe import make_prober
    wl, _, _ = digits
    space = planning.Space(protocols=("sync", "groups"), batch_sizes=(32,), lrs=(0.05, 0.1), momentum=0.5)
    plans = []
    for _ in range(2):
        found = planning.search(sample_profile, space, make_prober(wl, None, 0.9, seed=7), max_probe_iters=300,
                                 budget_s=600)       # ample: no probe meets the wall-clock guard on a slow machine
        plans.append(planning.build_plan(found, sample_profile, "p.json", "lenet-digits", None, 0.9, 7, "now"))
    # Probe lengths are iteration caps, so the same probes give the same plan; only the seconds differ.
    assert dataclasses.replace(plans[0], planning=None) == dataclasses.replace(plans[1], planning=None)
    assert plans[0].planning.probes == plans[1].planning.probes


def test_a_rung_probes_values_at_most_the_previous_optimum(sample_profile):
    prober = FakeProber()
    scored = planning.search(fast_groups(sample_profile), planning.Space(protocols=("sync", "groups")), prober).scored
    kinds = [type(c.variant) for c, _ in prober.calls]
    assert Groups in kinds and kinds.index(Groups) > max(i for i, k in enumerate(kinds) if k is Sync)
    best = min((x for x in scored if isinstance(x.config.variant, Sync) and x.probe and x.iters),
               key=lambda x: x.time_to_target_s).config
    groups = [c for c, _ in prober.calls if isinstance(c.variant, Groups)]
    assert {c.momentum for c in groups} == {0.4, 0.0, 0.3, 0.6, 0.9}       # the rule's value, then the grid
    assert {round(c.lr / best.lr, 3) for c in groups} == {1.0, 0.333, 0.1}
    assert {c.batches[0][0] for c in groups} <= {best.batch, best.batch // 2}   # Rudra: no larger batch


def test_rudras_rule_gets_its_base_rate_raised(sample_profile, tmp_path):
    """Softsync dividing each step by its staleness (about 3 with 4 learners at n = 4) is
    probed at base rates 3 times the previous rung's, so it is compared at its own best rate,
    not at a third of everyone else's step."""
    from tests.conftest import many_workers_profile

    prof = many_workers_profile(sample_profile, 4, tmp_path)
    cal = tuple(Calibration("cluster", f"softsync/n={n}", 4, 32, t) for n, t in ((1, 4e-3), (2, 1e-3), (4, 1e-4)))
    prof = dataclasses.replace(prof, calibration=cal)
    prober = FakeProber()
    planning.search(prof, planning.Space(protocols=("softsync",), batch_sizes=(32,)), prober)
    by_n = {n: {c.lr for c, _ in prober.calls if c.variant.n == n} for n in (2, 4)}
    assert SoftSync(learners=4, n=4).lr_gain == 3 and by_n[4]
    assert max(by_n[4]) == pytest.approx(3 * max(by_n[2]), rel=0.01)


def test_settings_at_least_as_large_as_a_divergence_are_skipped(sample_profile):
    calls = []

    def diverges_above(cfg, max_iters, max_seconds, on_eval=None, evals=16):
        calls.append(cfg)
        if isinstance(cfg.variant, Groups) and cfg.momentum >= 0.3:
            return ProbeResult(cfg, None, False, (), 1.0, 0.0, "diverged", status=ProbeStatus.DIVERGED)
        return ProbeResult(cfg, 100.0, True, ((100, 0.95),), 0.0, 0.0, "reached")
    space = planning.Space(protocols=("sync", "groups"), lrs=(0.05,), batch_sizes=(32,))
    planning.search(fast_groups(sample_profile), space, diverges_above)
    g2 = [c.momentum for c in calls if isinstance(c.variant, Groups)]
    assert g2[0] == pytest.approx(0.4)            # the rule's momentum, 0.4, is tried first and diverges
    assert not [m for m in g2[1:] if m >= g2[0]], g2    # so 0.6 and 0.9 are never tried
    assert 0.0 in g2 and 0.3 in g2


def test_a_ladder_stops_when_samples_per_second_do_not_improve(sample_profile):
    # Groups look slow: a calibration that says g = 2 takes a full second per update.
    slow = tuple(Calibration("one-per-core", "groups", 2, b, 1.0) for b in (8, 32))
    prof = dataclasses.replace(sample_profile, calibration=slow)
    prober, logs = FakeProber(), []
    scored = planning.search(prof, planning.Space(protocols=("sync", "groups")), prober, log=logs.append).scored
    assert all(isinstance(cfg.variant, Sync) for cfg, _ in prober.calls)
    assert any("stop adding asynchrony" in m for m in logs)
    assert any("stop adding asynchrony" in s.note for s in scored if isinstance(s.config.variant, Groups))


def test_interrupted_search_resumes_from_storage(sample_profile, tmp_path):
    storage = tmp_path / "study.jsonl"
    first = FakeProber()
    a = planning.search(sample_profile, planning.Space(), first, budget_s=600, study=new_study(storage, "s")).scored
    again = FakeProber()
    b = planning.search(sample_profile, planning.Space(), again, budget_s=600, study=new_study(storage, "s")).scored
    assert first.calls and not again.calls            # every probe came back from the study
    assert [(s.config, s.iters) for s in a] == [(s.config, s.iters) for s in b]


def test_a_journal_cut_off_mid_line_resumes_and_an_unreadable_one_says_so(sample_profile, tmp_path):
    """study.new_study: a `plan` killed as it wrote leaves half a line, which the next change
    would join and make the whole journal unreadable; it is dropped, and the search resumes from
    the rest. A journal that cannot be read is a one-line error naming it, not a traceback."""
    from omnitune.core.errors import UserError

    storage = tmp_path / "study.jsonl"
    first = FakeProber()
    planning.search(sample_profile, planning.Space(), first, budget_s=600, study=new_study(storage, "s"))
    with open(storage, "ab") as f:
        f.write(b'{"op_code": 5, "worker_id": "x", "trial_id')
    other = FakeProber()        # another request's study in the same journal: it writes after the cut
    planning.search(sample_profile, planning.Space(), other, budget_s=600, study=new_study(storage, "t"))
    for name in ("s", "t"):
        again = FakeProber()
        planning.search(sample_profile, planning.Space(), again, budget_s=600, study=new_study(storage, name))
        assert not again.calls                      # every probe came back from the journal
    assert first.calls and other.calls
    storage.write_text("this is not a journal\n")
    with pytest.raises(UserError, match="study.jsonl: the plan's study journal cannot be read"):
        new_study(storage, "s")


def test_budget_stops_probing(sample_profile):
    prober = FakeProber()
    scored = planning.search(sample_profile, planning.Space(), prober, budget_s=0.0).scored
    assert len(prober.calls) <= 1 and any("budget" in s.note for s in scored)


@pytest.mark.parametrize("budget_s", [None, 2.0])
def test_a_probe_that_would_overrun_the_budget_is_not_started(sample_profile, monkeypatch, budget_s):
    """Probes take the time the profile predicts (a fake clock): planning ends within its budget,
    the fixed one no prediction gives included, instead of starting a last probe just before it
    runs out."""
    clock = {"t": 0.0}
    monkeypatch.setattr(planning.phases.Spending, "elapsed", lambda self: clock["t"])
    cost = {}
    for s in planning.enumerate_setups(sample_profile, planning.Space()):
        key = (s.variant, s.probe(0.1, 0.0).batches)
        cost[key] = max(cost.get(key, 0.0), s.probe_sec_per_iter)

    def slow(cfg, max_iters, max_seconds=30.0, on_eval=None, evals=16):
        clock["t"] += max_iters * cost[(cfg.variant, cfg.batches)]
        loss = 1.0 + abs(math.log10(cfg.lr / 0.1))
        return dataclasses.replace(ProbeResult(cfg, None, False, ((max_iters, 0.2),), 0.0, 0.0, "not reached"),
                                   train_loss=loss, iters=max_iters)
    found = planning.search(sample_profile, planning.Space(), slow, budget_s=budget_s)
    assert found.planning.probes >= 1 and clock["t"] <= found.planning.budget_s
    assert any("budget" in s.note for s in found.scored)


def test_lagging_probes_are_pruned(sample_profile):
    """A probe whose accuracy lags the median of the finished probes at the same predicted
    training time stops there, well before its cap; a probe that keeps up is not stopped.
    Learners at 0.01 and above reach the target at 410 iterations, those below learn ten times
    slower; the pinned rates alternate the two, and a fixed budget makes no probe a scout (scouts
    are not pruned). The median pruner waits for three finished probes, so the first lagging probe
    runs to its cap, and every later one is pruned.

    Fails if run_probe's on_eval never returns True (`return trial.should_prune()` made
    `return False`), or if study.new_study's MedianPruner is replaced by optuna's NopPruner."""
    runs = {}                # config -> (its cap, the iterations it trained)

    def slow_learner(cfg, max_iters, max_seconds, on_eval, evals=16):
        good = cfg.lr >= 0.01
        for it in range(10, max_iters + 1, 10):
            acc = min(0.99, it / 450) if good else min(0.99, it / 4500)
            if acc >= 0.9:
                runs[cfg] = (max_iters, it)
                return ProbeResult(cfg, float(it), True, ((it, acc),), 0.0, 0.0, "reached")
            if on_eval(it, acc):
                runs[cfg] = (max_iters, it)
                return ProbeResult(cfg, None, False, ((it, acc),), 0.0, 0.0, "pruned", status=ProbeStatus.PRUNED)
        runs[cfg] = (max_iters, max_iters)
        return ProbeResult(cfg, None, False, ((max_iters, acc),), 0.0, 0.0, "not reached")
    space = planning.Space(protocols=("sync",), layouts=("one-worker",), batch_sizes=(16, 32),
                            lrs=(0.1, 0.001, 0.03, 0.0003, 0.01, 0.0001))
    scored = planning.search(sample_profile, space, slow_learner, budget_s=60.0).scored
    pruned = {s.probe.config for s in scored if s.probe and s.probe.note == "pruned: lagging the median"}
    lagging = [cfg for cfg in runs if cfg.lr < 0.01]                  # in the order they ran
    assert pruned and pruned == set(lagging[1:])
    assert all(runs[cfg][1] < runs[cfg][0] / 2 for cfg in pruned)     # stopped early, not at their cap
    assert all(s.probe.reached for s in scored if s.probe and s.config.lr >= 0.01)


def test_every_protocol_has_its_own_probe(sample_profile):
    """Groups at g = 2, hpsgd and gossip no longer share one statistical estimate, and a probe
    trains each device's batch as that device does."""
    setups = planning.enumerate_setups(sample_profile, planning.Space(batch_sizes=(16, 32)))
    probes = {(s.layout, s.variant.label, s.batch): s.probe(0.05, 0.4) for s in setups}
    per_core = [p for (layout, _, b), p in probes.items() if layout == "one-per-core" and b == 16]
    assert len(per_core) == len(set(per_core))
    assert probes[("one-per-core", "sync", 16)].batches == ((16, 16),)
    assert probes[("one-worker", "sync", 32)].batches == ((32,),)


def test_balanced_batches_favour_the_faster_device(sample_profile):
    from omnitune.efficiency.perfmodel import ComputeModel, PerfModel
    perf = PerfModel.from_profile(sample_profile)
    slow = ComputeModel(perf.compute["cpu1"].batches, perf.compute["cpu1"].seconds * 3)
    perf = dataclasses.replace(perf, compute={**perf.compute, "cpu1": slow})
    b = balance.device_batches(perf.compute, Sync(balanced=True), (("cpu0", "cpu1"),), 32)
    assert b["cpu0"] > b["cpu1"] and b["cpu0"] + b["cpu1"] == 64


def test_when_no_scout_can_predict_probes_train_equally_long_and_rank_by_loss(sample_profile):
    """Scouts too short to predict the time to target: a fixed budget, later probes train for the
    same predicted training time as the scouts (more iterations on faster setups), and the plan
    is the lowest training loss (Omnivore's criterion), with no predicted time."""
    calls = []

    def loss_only(cfg, max_iters, max_seconds, on_eval=None, evals=16):
        calls.append((cfg, max_iters, evals))
        loss = 1.0 + abs(math.log10(cfg.lr / 0.1)) + 100.0 / max_iters      # more iterations, lower loss
        return dataclasses.replace(ProbeResult(cfg, None, False, ((max_iters, 0.2),), 0.0, 0.0, "not reached"),
                                   train_loss=loss, iters=max_iters)
    found = planning.search(sample_profile, planning.Space(protocols=("sync",)), loss_only)
    assert found.ranked and found.planning.budget_s == budget.RULES.unknown_budget_s
    assert [c.lr for c, _, _ in calls[:3]] == [0.1, 0.01, 1.0]     # decades stop at the first worse one
    setups = {s.probe(c.lr, c.momentum): s for s in planning.enumerate_setups(sample_profile, planning.Space())
              for c, _, _ in calls}
    trained = [cap * setups[c].sec_per_iter for c, cap, _ in calls if cap > budget.RULES.min_probe_iters]
    assert trained and max(trained) == pytest.approx(min(trained), rel=0.2)
    assert all(evals <= budget.RULES.ranking_evals for _, _, evals in calls[3:])
    plan = planning.build_plan(found, sample_profile, "p.json", "lenet-digits", None, 0.99, 0, "now")
    losses = [s.probe.train_loss for s in found.scored if s.probe]
    assert plan.spec.lr == 0.1 and plan.prediction.time_to_target_s is None
    assert found.scored[0].probe.train_loss == min(losses)


def test_a_far_extrapolation_does_not_outrank_a_lower_loss(sample_profile):
    """A scout whose curve extrapolates far past its own length (beyond the evidence, where the
    heterogeneous benchmark's slowest rate did) neither sets the budget nor beats scouts with no
    estimate: the search ranks by training loss, and the lowest loss wins."""
    def far_guess(cfg, max_iters, max_seconds, on_eval=None, evals=16):
        far = 0.005 < cfg.lr < 0.05                                # around 0.01: a far, optimistic guess
        r = ProbeResult(cfg, 50.0 * max_iters if far else None, False, ((max_iters, 0.5),), 0.0, 0.0,
                        "extrapolated 50x past the probe: beyond its evidence" if far else "not reached",
                        (40.0 * max_iters, 60.0 * max_iters) if far else None, beyond=50.0 if far else 0.0)
        return dataclasses.replace(r, train_loss=1.0 + abs(math.log10(cfg.lr / 0.1)), iters=max_iters,
                                   start_loss=2.3)
    found = planning.search(sample_profile, planning.Space(protocols=("sync",), batch_sizes=(32,)), far_guess)
    assert found.ranked and found.planning.budget_s == budget.RULES.unknown_budget_s
    assert found.scored[0].config.lr == pytest.approx(0.1, rel=0.5)
    # Within the evidence the same guess would rank by time, and win; not when refits of its curve
    # say it may never come true (a band with no top).
    near = lambda *a, **k: dataclasses.replace(far_guess(*a, **k), beyond=5.0)
    found = planning.search(sample_profile, planning.Space(protocols=("sync",), batch_sizes=(32,)), near)
    assert not found.ranked and 0.005 < found.scored[0].config.lr < 0.05
    def open_band(*a, **k):
        r = near(*a, **k)
        return dataclasses.replace(r, interval=(r.interval[0], math.inf)) if r.interval else r
    found = planning.search(sample_profile, planning.Space(protocols=("sync",), batch_sizes=(32,)), open_band)
    assert found.ranked and found.scored[0].config.lr == pytest.approx(0.1, rel=0.5)


def test_ranking_by_loss_skips_setups_too_slow_for_equal_training_time(sample_profile):
    """A slow model (2 ms per sample): at the scouts' training time (batch 16) batch 64 would
    train fewer than budget.RULES.min_probe_iters iterations; floored there, it would train longer than the
    others and win on loss for that alone. It is not probed, and says why."""
    steps = lambda d: tuple(dataclasses.replace(t, sec_per_step=0.002 * t.batch_size, samples_per_s=500.0)
                            for t in d.steps)
    slow = dataclasses.replace(sample_profile, devices=tuple(dataclasses.replace(d, steps=steps(d))
                                                             for d in sample_profile.devices), calibration=())

    def by_samples(cfg, max_iters, max_seconds, on_eval=None, evals=16):
        seen = max_iters * cfg.samples_per_update                  # more samples seen, lower loss
        r = ProbeResult(cfg, None, False, ((max_iters, 0.2),), 0.0, 0.0, "not reached")
        return dataclasses.replace(r, train_loss=1.0 / (1.0 + seen / 1000), iters=max_iters, start_loss=2.3)
    found = planning.search(slow, planning.Space(protocols=("sync",), layouts=("one-worker",), lrs=(0.1,),
                                                   batch_sizes=(8, 16, 64)), by_samples)
    assert found.ranked
    skipped = [s for s in found.scored if "no fair comparison by loss" in s.note]
    assert [s.config.batch for s in skipped] == [64]
    assert found.scored[0].config.batch < 64


def test_a_longer_probe_of_the_winner_predicts_its_time(sample_profile):
    """--predict-s: where the search ranked by loss, one longer probe of the chosen configuration
    reaches far enough to predict its time to target, with a band, and planning records it."""
    def needs_long_curves(cfg, max_iters, max_seconds, on_eval=None, evals=16):
        predicts = max_iters >= 20_000
        r = ProbeResult(cfg, 30_000.0 if predicts else None, False, ((max_iters, 0.5),), 0.0, 1e-4 * max_iters,
                        "extrapolated" if predicts else "not reached", (25_000.0, 40_000.0) if predicts else None)
        return dataclasses.replace(r, train_loss=1.0 + abs(math.log10(cfg.lr / 0.1)), iters=max_iters)
    found = planning.search(sample_profile, planning.Space(protocols=("sync",)), needs_long_curves)
    assert found.ranked and found.scored[0].time_to_target_s is None
    longer = planning.predict(found, needs_long_curves, seconds=3.0)         # 1e-4 s per iteration: 30,000
    best = longer.scored[0]
    assert best.config == found.scored[0].config and best.iters == 30_000.0
    assert longer.planning.probes == found.planning.probes + 1 and "predict" in longer.planning.reason
    plan = planning.build_plan(longer, sample_profile, "p.json", "lenet-digits", None, 0.99, 0, "now")
    assert plan.prediction.time_to_target_s == pytest.approx(30_000 * best.sec_per_iter)
    assert plan.candidates[0].iters_band == (25_000.0, 40_000.0)
    assert planning.predict(found, needs_long_curves, seconds=0.0) is found


class Continuing:
    """A prober that keeps hand-offs (probe.make_prober's `handoffs`): `loss(cfg, went_on)` is a
    probe's training loss, `went_on` whether it went on from a hand-off (a finalist)."""

    class Handoff:
        def __init__(self, iterations):
            self.iterations = iterations

    def __init__(self, loss):
        self.loss, self.handoffs, self.went_on = loss, {}, []

    def __call__(self, cfg, max_iters, max_seconds, on_eval=None, evals=16, start=None):
        if start is not None:
            self.went_on.append((cfg, start.iterations, max_iters))
        self.handoffs[cfg] = self.Handoff(max_iters)
        r = ProbeResult(cfg, None, False, ((max_iters, 0.2),), 0.0, 0.0, "not reached")
        return dataclasses.replace(r, train_loss=self.loss(cfg, start is not None), iters=max_iters, start_loss=30.0)

    def without_handoffs(self):
        """The same probes from a prober that keeps no hand-offs: no final round."""
        return lambda *a, **k: Continuing(self.loss)(*a, **k)


def test_the_leaders_train_on_from_their_probes_and_the_lowest_loss_then_wins(sample_profile):
    """Ranked by loss, the best of the two best setups go on from where their probes stopped
    (start=their hand-off) to budget.RULES.final_growth times as long; the one with the lower loss at that end
    wins, even if it trailed at the probes' length (a smaller batch leads early, a larger later)."""
    def loss(cfg, went_on):
        batch = cfg.samples_per_update
        return 1.0 + abs(math.log10(cfg.lr / 0.01)) + (10 / batch if went_on else batch / 100)
    prober = Continuing(loss)
    space = planning.Space(protocols=("sync",), layouts=("one-worker",), batch_sizes=(8, 32, 128),
                            lrs=(0.01, 0.1))
    found = planning.search(sample_profile, space, prober)
    assert found.ranked and len(prober.went_on) == budget.RULES.finalists
    # the best rate of each of the two best setups (batch 8 and 32, not batch 8 at another rate)
    assert sorted((cfg.samples_per_update, cfg.lr) for cfg, _, _ in prober.went_on) == [(8, 0.01), (32, 0.01)]
    assert all(total >= budget.RULES.final_growth * at - 1 for _, at, total in prober.went_on)
    assert found.scored[0].config.batch == 32 and found.planning.finalists == budget.RULES.finalists
    assert "trained on" in found.planning.reason
    # A prober that keeps no hand-offs: no final round, the probes' ranking stands.
    assert planning.search(sample_profile, space, prober.without_handoffs()).scored[0].config.batch == 8


def test_each_finalist_setup_goes_on_at_its_own_lowest_loss(sample_profile):
    """A setup whose larger rate won the search's tie goes to the final round at its lowest-loss
    rate: the round compares setups, not one setup's tie-won rate with another's lower one."""
    prober = Continuing(lambda cfg, went_on: 1.0 + 0.05 * math.log10(cfg.lr / 0.01)      # 0.1 ties 0.01
                        + cfg.samples_per_update / 1000)
    space = planning.Space(protocols=("sync",), layouts=("one-worker",), batch_sizes=(8, 32), lrs=(0.01, 0.1))
    top = planning.search(sample_profile, space, prober.without_handoffs()).scored[0].config
    assert (top.batch, top.lr) == (8, 0.1)                         # the search's tie went to the larger rate
    planning.search(sample_profile, space, prober)
    assert sorted((cfg.samples_per_update, cfg.lr) for cfg, _, _ in prober.went_on) == [(8, 0.01), (32, 0.01)]


def test_finalists_that_tie_go_to_the_larger_learning_rate(sample_profile):
    """The final round is short too: a finalist within LOSS_TIE of the best loss wins on the larger
    learning rate (teacher-mlp: batch 128 at 0.01 led 256 at 0.04 by 0.2508 to 0.2519 and took
    twice as long to the target)."""
    table = {(8, 0.01): (1.0, 1.0), (8, 0.1): (1.5, 1.5), (32, 0.01): (1.6, 1.6), (32, 0.1): (1.15, 1.02)}
    prober = Continuing(lambda cfg, went_on: table[cfg.samples_per_update, cfg.lr][went_on])
    space = planning.Space(protocols=("sync",), layouts=("one-worker",), batch_sizes=(8, 32), lrs=(0.01, 0.1))
    found = planning.search(sample_profile, space, prober)
    assert sorted((cfg.samples_per_update, cfg.lr) for cfg, _, _ in prober.went_on) == [(8, 0.01), (32, 0.1)]
    assert (found.scored[0].config.batch, found.scored[0].config.lr) == (32, 0.1)


def test_losses_that_tie_go_to_the_larger_learning_rate():
    """Short-horizon bias: a loss within LOSS_TIE of the best (of the loss, and of the progress
    from the untrained loss) ties with it, and the larger rate per sample wins the tie."""
    keys = planning.ranking.long_horizon_keys([((1, 0.272), 0.01, 2.3), ((1, 0.297), 0.12, 2.3), ((1, 0.409), 0.1, 2.3)])
    assert keys.index(min(keys)) == 1                              # 0.297 is within 10% of 0.272
    assert keys[2] > keys[0] > keys[1]                             # 0.409 is not a tie: it ranks by loss
    # Near chance (untrained 2.30): 2.33 did not learn at all; a tie on the loss alone would pick it.
    keys = planning.ranking.long_horizon_keys([((1, 2.188), 0.1, 2.30), ((1, 2.33), 1.0, 2.30), ((1, 2.19), 0.3, 2.31)])
    assert keys.index(min(keys)) == 2 and keys[1] > keys[0]
    # A reached time ranks before any loss; a probe that cannot rank stays None.
    keys = planning.ranking.long_horizon_keys([((1, 0.1), 1.0, 2.3), ((0, 5.0), 0.01, None), (None, 0.5, None)])
    assert keys[1] < keys[0] and keys[2] is None


def test_a_tie_goes_to_the_larger_rate_per_sample_and_equal_ones_to_the_lower_loss():
    """A rate scaled with its update's batch takes the same step per sample: in a tie it does not
    beat the unscaled rate at the smaller batch, whose lower loss wins (teacher-mlp's plan of seed
    5, 2026-11-30: both cores at batch 256 each and lr 0.08, loss 0.301, won the tie over one
    worker at 256 and 0.04, loss 0.276, and ran 65.7 s against one worker's 35-43). A larger rate
    per sample still wins its tie."""
    def scored(groups, batch, lr, loss, sec_per_iter):
        config = Config("layout", Sync(), groups, batch, lr, 0.9)
        probe = ProbeResult(ProbeConfig(Sync(), tuple((batch,) * len(g) for g in groups), lr, 0.9), None, False,
                            ((100, 0.9),), 0.0, 1.0, "not reached", train_loss=loss, iters=100, start_loss=2.21)
        return Scored(config, sec_per_iter, probe)
    one, both = (("cpu-all",),), (("cpu0", "cpu1"),)
    alone, side_by_side = scored(one, 256, 0.04, 0.276, 0.0036), scored(both, 256, 0.08, 0.301, 0.0086)
    assert planning.ranking.rate_per_sample(alone.config) == planning.ranking.rate_per_sample(side_by_side.config)
    assert planning.ranking.ordered([side_by_side, alone], by_loss=True)[0] is alone
    hotter = scored(both, 256, 0.16, 0.301, 0.0086)                 # twice the step per sample: it wins the tie
    assert planning.ranking.ordered([alone, hotter], by_loss=True)[0] is hotter


def test_ranked_search_prefers_the_larger_of_tied_learning_rates(sample_profile):
    """Ranking by loss, the plan takes the largest learning rate whose loss ties with the best."""
    def loss_only(cfg, max_iters, max_seconds, on_eval=None, evals=16):
        loss = 0.30 + 0.05 * abs(math.log10(cfg.lr / 0.01))          # best at 0.01; 0.03 within 10%
        r = ProbeResult(cfg, None, False, ((max_iters, 0.2),), 0.0, 0.0, "not reached")
        return dataclasses.replace(r, train_loss=loss, iters=max_iters, start_loss=2.3)
    found = planning.search(sample_profile, planning.Space(protocols=("sync",), batch_sizes=(32,)), loss_only)
    assert found.ranked
    best = min(s.probe.train_loss for s in found.scored if s.probe)
    assert found.scored[0].config.lr > 0.01 and found.scored[0].probe.train_loss <= 1.1 * best


def linked_at(profile, mbit: float, model_bytes: int = 1_326_120):
    """The sample profile for a model of `model_bytes`, its devices joined by a link of `mbit`
    Mbit/s: an all-reduce of two sends a message each way at once, a round trip there and back.
    No calibration, so the hardware model rests on the link alone."""
    from omnitune.core.profile import AllReduceTiming, Network, P2PTiming
    rate = mbit * 1e6 / 8                                      # bytes per second
    sizes = (4096, model_bytes // 4, model_bytes, 4 * model_bytes)
    net = Network("shaped", tuple(AllReduceTiming(2, b, 1e-4 + b / rate) for b in sizes),
                  tuple(P2PTiming(b, 2e-4 + 2 * b / rate) for b in sizes), profile.network.server_update_s)
    return dataclasses.replace(profile, model_bytes=model_bytes, network=net, calibration=())


def bytes_per_sample(c: planning.Config, model_bytes: int) -> float:
    """Bytes across the link per training sample: a model each way per exchange (an all-reduce
    of every device's batch, a group's push and pull, a gossip swap every `every` steps)."""
    devices = sum(len(g) for g in c.groups)
    if isinstance(c.variant, Gossip):
        return 2 * model_bytes / (devices * c.batch * c.variant.every)
    if c.variant.has_server:
        return 2 * model_bytes / (devices // c.g * c.batch)
    return 2 * model_bytes / (devices * c.batch)


def test_the_plan_moves_fewer_bytes_per_sample_on_a_slow_link(sample_profile):
    """A 1.3 MB model: at 20 Mbit/s the plan sends fewer bytes across the link per sample than on
    a link as fast as memory (larger batches, groups or fewer exchanges), as the hardware model
    predicts. (The sample profile's devices compute a step in about a millisecond, so even
    1 Gbit/s is slow for them; benchmarks/network.py compares 1 Gbit/s with 20 Mbit/s on real
    shaped links, with real probes.)"""
    chosen = {}
    for mbit in (100_000.0, 20.0):
        prof = linked_at(sample_profile, mbit)
        found = planning.search(prof, planning.Space(layouts=("one-per-core",)), FakeProber(), budget_s=60.0)
        chosen[mbit] = found.scored[0].config
    fast, slow = (bytes_per_sample(chosen[m], 1_326_120) for m in (100_000.0, 20.0))
    assert chosen[20.0] != chosen[100_000.0] and slow < fast, chosen


def test_scouts_run_where_they_train_enough_iterations(sample_profile):
    """The scouts' reference is the batch nearest the middle (16 here), unless a scout there would
    train fewer than budget.RULES.scout_iters iterations: at 4 ms per sample, batch 16 gets 23 in
    budget.RULES.scout_s and batch 8 gets 46, so the scouts run at 8."""
    steps = lambda d: tuple(dataclasses.replace(t, sec_per_step=0.004 * t.batch_size, samples_per_s=250.0)
                            for t in d.steps)
    slow = dataclasses.replace(sample_profile, devices=tuple(dataclasses.replace(d, steps=steps(d))
                                                             for d in sample_profile.devices), calibration=())
    seen = []

    def recording(cfg, max_iters, max_seconds, on_eval=None, evals=16):
        seen.append(cfg.batches)
        r = ProbeResult(cfg, None, False, ((max_iters, 0.2),), 0.0, 0.0, "not reached")
        return dataclasses.replace(r, train_loss=1.0, iters=max_iters, start_loss=2.3)
    planning.search(slow, planning.Space(protocols=("sync",), layouts=("one-worker",), batch_sizes=(8, 16, 64)),
                     recording)
    assert seen[0] == ((8,),) and seen.count(((8,),)) >= budget.RULES.scouts


def test_a_sync_setup_with_a_faster_twin_is_not_probed(sample_profile):
    """Sync setups with as many samples per update make the same updates: only the faster is
    probed, and the slower is listed with the reason."""
    space = planning.Space(protocols=("sync",), batch_sizes=(16, 32), lrs=(0.05,))
    setups = planning.enumerate_setups(sample_profile, space)
    pairs = {(s.layout, s.batch): s for s in setups}
    worker, cores = pairs[("one-worker", 32)], pairs[("one-per-core", 16)]      # 32 samples an update each
    slower, faster = sorted((worker, cores), key=lambda s: s.sec_per_iter)[::-1]
    assert planning.space.faster_twin(slower, setups) is faster and planning.space.faster_twin(faster, setups) is None
    assert planning.space.faster_twin(pairs[("one-worker", 16)], setups) is None            # no other 16
    probed = []

    def prober(cfg, max_iters, max_seconds, on_eval=None, evals=16):
        probed.append(cfg.batches)
        return ProbeResult(cfg, 100.0, True, ((100, 0.95),), 0.0, 0.1, "reached")
    found = planning.search(sample_profile, space, prober)
    assert slower.probe(0.05, 0.9).batches not in probed and faster.probe(0.05, 0.9).batches in probed
    notes = [s.note for s in found.scored if (s.config.layout, s.config.batch) == (slower.layout, slower.batch)]
    assert any(n.startswith(f"not probed: the same updates as {faster.layout} at batch {faster.batch}") for n in notes)


def test_a_probe_on_one_device_alone_costs_what_its_calibration_job_timed():
    from omnitune.core import profile as profile_mod
    from tests.conftest import DATA

    prof = profile_mod.load(DATA / "profile-v1-calibrated.json")
    space = planning.Space(batch_sizes=(16, 64), protocols=("sync",))

    def costs(p) -> dict:
        return {(s.layout, s.batch): s.probe_sec_per_iter for s in planning.enumerate_setups(p, space)}
    before = costs(prof)
    loop = {16: 0.0031, 64: 0.0045}                  # the runtime's loop on both cores, above the bare steps
    timed = dataclasses.replace(prof, calibration=prof.calibration + tuple(
        Calibration(layout="one-worker", protocol="sync", groups=1, batch_size=b, sec_per_iter=s)
        for b, s in loop.items()))
    after = costs(timed)
    for b, s in loop.items():
        assert before[("one-worker", b)] < s and after[("one-worker", b)] == pytest.approx(s)
        # Several devices: a probe computes every replica in one process; their cost is unchanged.
        assert after[("one-per-core", b)] == before[("one-per-core", b)]


class FakeTimer:
    """A real job's seconds per iteration: `sec(config)` for every configuration it is asked to time."""

    def __init__(self, sec=None):
        self.sec, self.calls = sec, []

    def __call__(self, config):
        self.calls.append(config)
        return self.sec(config) if callable(self.sec) else self.sec


def unmeasured(profile):
    perf = PerfModel.from_profile(profile)
    return lambda c: not planning.measured_shape(perf, c)


def setup_of(c):
    return c.layout, c.variant, c.groups, c.batch


def model_speeds(profile, space):
    return {setup_of(s.config(0.1, 0.9)): s.sec_per_iter for s in planning.enumerate_setups(profile, space)}


SYNC_TWO = planning.Space(protocols=("sync",), layouts=("one-per-core",), batch_sizes=(16, 32, 64, 128))


def test_setups_the_model_puts_above_every_measured_one_are_timed_before_the_search(sample_profile):
    """The sample profile has no calibration jobs: its two-device setups' speeds come from the model
    alone. The fastest of them by the model are timed, each once, the fastest first, at most
    MAX_TIMED, before any probe; the leader's setup measured ten times slower, it loses to a
    setup whose speed was measured.

    Fails if time_fastest is skipped (the model's figure wins), or times a setup the model puts
    below a measured one."""
    model = model_speeds(sample_profile, SYNC_TWO)
    before = planning.search(sample_profile, SYNC_TWO, FakeProber(), budget_s=60.0).scored[0]
    slow = setup_of(before.config)
    assert unmeasured(sample_profile)(before.config)
    timer = FakeTimer(sec=lambda c: (10 if setup_of(c) == slow else 1) * model[setup_of(c)])
    found = planning.search(sample_profile, SYNC_TWO, FakeProber(), budget_s=60.0, timer=timer)
    timed = [setup_of(c) for c in timer.calls]
    assert len(set(timed)) == len(timed) <= planning.timed.MAX_TIMED and slow in timed
    setups = {setup_of(s.config(0.1, 0.9)): s for s in planning.enumerate_setups(sample_profile, SYNC_TWO)}
    measured_best = max((s.samples_per_s for s in setups.values() if not unmeasured(sample_profile)(s.config(0.1, 0.9))),
                        default=0.0)
    assert all(setups[k].samples_per_s > measured_best for k in timed)
    assert [setups[k].samples_per_s for k in timed] == sorted((setups[k].samples_per_s for k in timed), reverse=True)
    best = found.scored[0]
    assert setup_of(best.config) != slow
    assert best.model_sec_per_iter is not None or not unmeasured(sample_profile)(best.config)
    slowed = [s for s in found.scored if setup_of(s.config) == slow]
    assert slowed and all(s.sec_per_iter == pytest.approx(10 * model[slow]) for s in slowed)


def test_a_setup_the_model_puts_only_a_little_above_the_measured_ones_is_not_timed_before_the_search():
    """time_fastest times a setup only where the model puts it TIMING_GAIN above the fastest
    measured one (100 samples a second): 105 is not worth a job of seconds before the search, 130
    is. Fails if every setup above the measured ones is timed."""
    from omnitune.core.protocols import Sync
    from omnitune.planning.space import Setup
    from omnitune.planning.timed import TIMING_GAIN, time_fastest

    def setup(batch, samples_per_s):
        return Setup("one-worker", Sync(), (("cpu0",),), batch, ((batch,),), batch / samples_per_s)
    measured, little, much = setup(8, 100.0), setup(16, 100.0 * (1 + TIMING_GAIN / 2)), setup(32, 130.0)
    timer = FakeTimer(sec=lambda c: c.batch / 120.0)
    out = time_fastest([measured, little, much], timer, lambda c: c.batch != 8)
    assert [c.batch for c in timer.calls] == [32]
    assert [s.sec_per_iter for s in out] == [measured.sec_per_iter, little.sec_per_iter, pytest.approx(32 / 120.0)]


def test_a_timed_setup_that_runs_as_predicted_wins_and_the_plan_keeps_both_figures(sample_profile):
    model = model_speeds(sample_profile, SYNC_TWO)
    before = planning.search(sample_profile, SYNC_TWO, FakeProber(), budget_s=60.0).scored[0]
    found = planning.search(sample_profile, SYNC_TWO, FakeProber(), budget_s=60.0,
                             timer=FakeTimer(sec=lambda c: 1.05 * model[setup_of(c)]))
    assert setup_of(found.scored[0].config) == setup_of(before.config)
    plan = planning.build_plan(found, sample_profile, "p.json", "lenet-digits", None, 0.9, 0, "now")
    assert plan.hardware_model == "measured"
    assert plan.prediction.sec_per_iter == pytest.approx(1.05 * plan.prediction.model_sec_per_iter)
    assert plan.candidates[0].model_sec_per_iter == plan.prediction.model_sec_per_iter


def test_a_setup_whose_timing_job_fails_is_left_out(sample_profile):
    space = planning.Space(protocols=("sync",), batch_sizes=(16, 64))
    timer = FakeTimer(sec=None)
    found = planning.search(sample_profile, space, FakeProber(), budget_s=60.0, timer=timer)
    failed = {setup_of(c) for c in timer.calls}
    assert failed and not failed & {setup_of(s.config) for s in found.scored}
    with pytest.raises(UserError, match="every configuration's timing job failed"):
        planning.search(sample_profile, SYNC_TWO, FakeProber(), budget_s=60.0, timer=FakeTimer(sec=None))


def test_a_leader_whose_speed_was_calibrated_is_not_timed(sample_profile):
    cal = tuple(Calibration("one-per-core", "sync", 1, b, 1e-3 * b / 8) for b in (8, 32, 128))
    prof = dataclasses.replace(sample_profile, calibration=cal)
    timer = FakeTimer(sec=1.0)
    found = planning.search(prof, planning.Space(protocols=("sync",), layouts=("one-per-core",)), FakeProber(),
                             timer=timer)
    assert found.scored[0].probe is not None and not unmeasured(prof)(found.scored[0].config)
    assert timer.calls == []


def test_ranked_by_loss_a_leader_measured_slower_trains_again_for_the_same_time_at_its_speed(sample_profile,
                                                                                            monkeypatch):
    """At equal training time a setup the model thought 3x faster than it runs trained 3x the
    iterations it deserved: timed, it trains again for that time at its measured speed, and
    with fewer iterations its loss no longer leads."""
    calls = []

    def loss_only(cfg, max_iters, max_seconds, on_eval=None, evals=16, start=None):
        calls.append((cfg, max_iters))
        loss = 1.0 + abs(math.log10(cfg.lr / 0.1)) + 100.0 / max_iters      # more iterations, lower loss
        return dataclasses.replace(ProbeResult(cfg, None, False, ((max_iters, 0.2),), 0.0, 0.0, "not reached"),
                                   train_loss=loss, iters=max_iters)
    space = planning.Space(protocols=("sync",), layouts=("one-per-core",))
    before = planning.search(sample_profile, space, loss_only)
    leader = before.scored[0]
    assert before.ranked and unmeasured(sample_profile)(leader.config)
    calls.clear()
    model = model_speeds(sample_profile, space)
    timer = FakeTimer(sec=lambda c: (3 if setup_of(c) == setup_of(leader.config) else 1) * model[setup_of(c)])
    monkeypatch.setattr(planning.omnivore, "time_fastest", lambda setups, *a, **k: setups)   # a leader it did not reach
    found = planning.search(sample_profile, space, loss_only, timer=timer)
    retrained = [cap for cfg, cap in calls if cfg == leader.probe.config]
    assert len(retrained) == 2 and retrained[1] == pytest.approx(retrained[0] / 3, rel=0.05)
    again = next(s for s in found.scored if s.config == leader.config)
    assert again.probe.iters == retrained[1] and again.sec_per_iter == pytest.approx(3 * leader.sec_per_iter)
    assert found.scored[0].config != leader.config


class LossOnly:
    """Probes that never reach the target: training loss 1.0 at lr 0.1, more a decade away, and
    `label_loss` the prober's loss of predicting the labels' frequencies (None: not known)."""
    def __init__(self, label_loss):
        self.label_loss = label_loss

    def __call__(self, cfg, max_iters, max_seconds, on_eval=None, evals=16, start=None):
        loss = 1.0 + abs(math.log10(cfg.lr / 0.1)) + 10.0 / max_iters
        return dataclasses.replace(ProbeResult(cfg, None, False, ((max_iters, 0.2),), 0.0, 0.0, "not reached"),
                                   train_loss=loss, iters=max_iters)


@pytest.mark.parametrize("labels, guess", [(1.0, True), (1.15, True), (1.25, False), (None, False)])
def test_a_ranking_by_loss_whose_probes_never_got_below_the_labels_frequencies_is_a_guess(sample_profile, labels,
                                                                                           guess):
    """Probes whose training loss has not fallen 10% below the loss of predicting the training
    labels' frequencies learned nothing from the inputs: the plan says its ranking is a guess.
    A prober that does not know that loss never calls one."""
    space = planning.Space(protocols=("sync",), layouts=("one-per-core",))
    found = planning.search(sample_profile, space, LossOnly(labels))
    assert found.ranked
    assert found.planning.blind is guess and found.planning.label_loss == labels
    best = min(s.probe.train_loss for s in found.scored if s.probe is not None)
    assert 1.0 < best < 1.1         # the premise: 1.15 is a guess only with the 10% margin, 1.25 not


class Blind:
    """Probes that never reach the target and learn little, from an untrained 2.3 (the labels'
    loss): training loss 2.1 at lr 0.01 and batch 64, 0.05 more a decade away (no tie: 10% of the
    0.2 it came down is 0.02) and 0.03 more a halving of the batch (no tie either: a tie would go
    to the smaller batch's larger rate per sample), half a unit more past lr 0.05: above the
    labels' loss."""
    label_loss = 2.3

    def __call__(self, cfg, max_iters, max_seconds, on_eval=None, evals=16, start=None):
        batch = max(b for group in cfg.batches for b in group)
        loss = (2.1 + 0.05 * abs(math.log10(cfg.lr / 0.01)) + 0.03 * math.log2(64 / batch)
                + (0.5 if cfg.lr > 0.05 else 0.0))
        return dataclasses.replace(ProbeResult(cfg, None, False, ((max_iters, 0.2),), 0.0, 0.0, "not reached"),
                                   train_loss=loss, iters=max_iters, start_loss=2.3)


def test_a_guess_goes_to_the_largest_rate_whose_probe_fell_below_the_labels_loss(sample_profile):
    """A blind ranking says little, and a run at too low a rate only goes slowly where one at too
    high a rate stalls or diverges and re-tunes: the plan leads with the leading setup's probe of
    the largest learning rate whose loss fell below the labels' at all, not with the lowest loss."""
    found = planning.search(sample_profile, planning.Space(protocols=("sync",), layouts=("one-per-core",)), Blind())
    assert found.ranked and found.planning.blind and found.planning.finalists == 0
    probed = [s for s in found.scored if s.probe is not None]
    lowest = min(probed, key=lambda s: s.probe.train_loss)
    mine = [s for s in probed if s.setup_key == lowest.setup_key]
    below = [s.config.lr for s in mine if s.probe.train_loss < Blind.label_loss]
    assert found.scored[0].setup_key == lowest.setup_key
    assert found.scored[0].config.lr == max(below) > lowest.config.lr
    assert any(s.config.lr > max(below) for s in mine)             # a rate whose probe learned nothing is passed over


def blind_scored(batch: int, lr: float, loss: float, reached: bool = False) -> Scored:
    config = planning.Config("one-per-core", Sync(), (("cpu0", "cpu1"),), batch, lr, 0.9)
    probe = ProbeResult(None, 100.0 if reached else None, reached, ((10, 0.2),), 0.0, 1.0,
                        "reached" if reached else "not reached", train_loss=loss, iters=10)
    return Scored(config, 0.01, probe)


def test_a_guess_keeps_to_its_leading_setup_and_leaves_a_reached_target_alone():
    """Probes of other setups trained for the same time, not the same iterations: the guess keeps
    to the leader's setup. A leader that ranks by its time to target is no guess to re-lead; nor
    is a setup none of whose probes fell below the labels' loss."""
    lead, bold, other = blind_scored(64, 0.01, 2.10), blind_scored(64, 0.03, 2.20), blind_scored(8, 0.3, 2.15)
    assert planning.ranking.boldest([lead, other, bold], 2.3) == [bold, lead, other]
    assert planning.ranking.boldest([lead, other, bold], 2.15) == [lead, other, bold]   # bold is above 2.15
    reached = blind_scored(64, 0.01, 2.25, reached=True)
    assert planning.ranking.boldest([reached, bold], 2.3) == [reached, bold]


class HighLoss(FakeProber):
    """FakeProber's times to target, each probe's training loss 5.0 against the labels' 1.0."""
    label_loss = 1.0

    def __call__(self, *args, **kwargs) -> ProbeResult:
        return dataclasses.replace(super().__call__(*args, **kwargs), train_loss=5.0)


def test_a_search_that_ranked_by_time_is_no_guess(sample_profile):
    """Probes that predict a time to target rank by it, and their losses are no guess."""
    found = planning.search(sample_profile, planning.Space(protocols=("sync",), layouts=("one-per-core",)), HighLoss())
    assert not found.ranked and found.planning.label_loss == 1.0 and found.planning.blind is False


class DecayProber(FakeProber):
    """FakeProber whose iterations also grow with the distance (in decades) of the weight decay
    from `best` (None: the decay leaves them alone)."""

    def __init__(self, best: float | None):
        super().__init__()
        self.best = best

    def __call__(self, cfg, max_iters, max_seconds=30.0, on_eval=lambda it, acc: False, evals=16):
        r = super().__call__(cfg, max_iters, max_seconds, on_eval, evals)
        wd = 0.1 if cfg.weight_decay is None else cfg.weight_decay          # the recipe's is 0.1
        if self.best is None or r.iters_to_target is None:
            return r
        iters = r.iters_to_target * (1 + abs(math.log10(wd / self.best)))
        return dataclasses.replace(r, iters_to_target=iters, reached=iters <= max_iters)


def decay_space(**pins):
    return planning.Space(protocols=("sync",), **pins).for_recipe(Recipe(optimizer="sgd", weight_decay=0.1))


def test_a_recipes_weight_decay_is_compared_on_a_coarse_grid_and_the_winner_kept(sample_profile):
    prober = DecayProber(best=0.01)
    found = planning.search(sample_profile, decay_space(), prober)
    decays = [c.weight_decay for c, _ in prober.calls]
    assert decays[:4] == [None] * 4                                 # the decades at the recipe's decay
    assert set(decays[4:6]) == {0.01, 1.0}                          # then the grid, at the best decade's rate
    assert all(wd == 0.01 for wd in decays[6:]) and len(decays) > 6  # and every later probe at the winner
    plan = planning.build_plan(found, sample_profile, "p.json", "lenet-digits", None, 0.99, 0, "now")
    assert plan.spec.weight_decay == 0.01 and plan.candidates[0].weight_decay == 0.01


def test_a_weight_decay_that_does_not_beat_the_recipes_leaves_it(sample_profile):
    prober = DecayProber(best=None)
    found = planning.search(sample_profile, decay_space(), prober)
    assert sum(c.weight_decay is not None for c, _ in prober.calls) == 2      # the grid's two others, once each
    plan = planning.build_plan(found, sample_profile, "p.json", "lenet-digits", None, 0.99, 0, "now")
    assert plan.spec.weight_decay is None                                      # the recipe's: a tie is no reason


def test_scouts_that_rank_by_loss_spend_no_probe_on_the_decay_grid(sample_profile):
    """charlm-stdlib: no 20-iteration scout predicts a time, the decays 0.1, 0.01 and 1 read
    3.040, 3.041 and 3.054, and those two probes left none of a 15-s budget for the rate's half
    decades. Here too no scout predicts a time, and a decay moves the loss by a hair: the grid is
    not probed, the recipe's decay stays, and the refinement is reached. Fails if the grid is
    probed where every scout ranks by loss."""
    def by_loss(cfg, max_iters, max_seconds, on_eval=None, evals=16):
        wd = 0.1 if cfg.weight_decay is None else cfg.weight_decay
        loss = 1.0 + abs(math.log10(cfg.lr / 0.01)) + 0.001 * abs(math.log10(wd / 0.1))
        return ProbeResult(cfg, None, False, ((max_iters, 0.5),), 0.0, 0.0, "not reached", train_loss=loss,
                           iters=max_iters, start_loss=4.0)
    calls = []
    found = planning.search(sample_profile, decay_space(batch_sizes=(32,)),
                            lambda cfg, *a, **k: calls.append(cfg) or by_loss(cfg, *a, **k))
    assert found.ranked and {c.weight_decay for c in calls} == {None}
    assert any(abs(c.lr - 0.0033) < 4e-4 or abs(c.lr - 0.033) < 4e-3 for c in calls)    # a half decade probed
    assert found.scored[0].config.weight_decay is None


def test_a_search_of_one_setup_keeps_nothing_for_a_final_round(sample_profile, monkeypatch):
    """Ranked by loss, probes keep room in the budget for the final round (final.py), which needs
    two setups. charlm-stdlib had probed one when its rate's refinement came (its other sync
    setups step too slowly to compare by loss), kept 5 s of 16 for a round it could not hold,
    and never probed the refinement. Here one setup, probes
    of 1 s on a fake clock, a 6 s budget: the refinement on both sides is probed. Fails if the
    room is kept while one setup is probed (the probes stop after 4: one side of the refinement
    only)."""
    from types import SimpleNamespace as NS

    from omnitune.planning import omnivore, phases
    clock = NS(t=0.0)
    for module in (omnivore, phases):
        monkeypatch.setattr(module, "time", NS(perf_counter=lambda: clock.t))

    def second_each(cfg, max_iters, max_seconds, on_eval=None, evals=16):
        clock.t += 1.0
        return ProbeResult(cfg, None, False, ((max_iters, 0.5),), 0.0, 1.0, "not reached",
                           train_loss=1.0 + abs(math.log10(cfg.lr / 0.01)), iters=max_iters, start_loss=4.0)
    calls = []
    space = planning.Space(protocols=("sync",), layouts=("one-worker",), batch_sizes=(32,))
    found = planning.search(sample_profile, space, lambda cfg, *a, **k: calls.append(cfg.lr) or second_each(cfg, *a, **k))
    assert found.ranked and found.planning.budget_s == budget.RULES.unknown_budget_s
    assert calls[:3] == [0.1, 0.01, 0.001]
    assert {0.0033, 0.03} <= set(calls), calls                       # half a decade either side of 0.01


def test_a_pinned_weight_decay_is_every_probes(sample_profile):
    prober = DecayProber(best=0.01)
    found = planning.search(sample_profile, decay_space(decays=(0.5,)), prober)
    assert {c.weight_decay for c, _ in prober.calls} == {0.5}
    assert found.scored[0].config.weight_decay == 0.5


def test_scouts_that_have_not_learned_train_longer_before_they_rank(sample_profile):
    """shapes-resnet: at 20 iterations every decade's loss sits within noise of the untrained one,
    and the search picked a rate whose run took twice the best one's. Here the loss falls 12% of
    the untrained 2.3 in 4 first probes' worth of iterations, 3% in one: the first decade trains
    again at twice and four times its iterations, every later decade at least as long, and the
    budget grows to cover the scouts. A prober whose first probe learned is not lengthened.
    Fails if Trials.lengthen is skipped, if the longer length is not kept for later probes, or if
    the budget stays too small for them."""
    calls = []

    def slow_start(cfg, max_iters, max_seconds, on_eval=None, evals=16):
        calls.append((cfg.lr, max_iters))
        first = calls[0][1]
        loss = 2.3 * (1 - 0.12 * min(1.0, max_iters / (4 * first)) * (1 - abs(math.log10(cfg.lr / 0.1)) / 4))
        return dataclasses.replace(ProbeResult(cfg, None, False, ((max_iters, 0.2),), 0.0, 0.0, "not reached"),
                                   train_loss=loss, iters=max_iters, start_loss=2.3)
    space = planning.Space(protocols=("sync",), layouts=("one-worker",), batch_sizes=(32,))
    found = planning.search(sample_profile, space, slow_start)
    n = calls[0][1]
    assert calls[:3] == [(0.1, n), (0.1, 2 * n), (0.1, 4 * n)]
    assert all(iters >= 4 * n for _, iters in calls[3:]) and len(calls) > 3
    setup = planning.enumerate_setups(sample_profile, space)[0]
    assert found.planning.budget_s >= budget.RULES.scouts * 4 * n * setup.probe_sec_per_iter
    assert found.scored[0].config.lr == 0.1

    calls.clear()
    quick = lambda cfg, max_iters, max_seconds, on_eval=None, evals=16: dataclasses.replace(   # noqa: E731
        slow_start(cfg, max_iters, max_seconds), train_loss=1.0)
    planning.search(sample_profile, space, quick)
    assert calls[1][0] == 0.01 and calls[1][1] < 2 * calls[0][1]       # the next decade: not the first, longer


def test_a_scout_that_trains_longer_goes_on_from_where_it_stopped(sample_profile):
    """With a prober that hands on, a scout that has not learned trains on from its hand-off
    (20 -> 40 -> 80 iterations: 80 trained, not 140); the other decades start from scratch.
    Fails if ProbeRunner.run trains a longer probe of the same configuration again from the start."""
    calls = []

    class Slow:
        handoffs: dict = {}

        def __call__(self, cfg, max_iters, max_seconds, on_eval=None, evals=16, start=None):
            calls.append((cfg.lr, start.iterations if start else 0, max_iters))
            self.handoffs[cfg] = Continuing.Handoff(max_iters)
            learned = max_iters >= 4 * calls[0][2]
            r = ProbeResult(cfg, None, False, ((max_iters, 0.2),), 0.0, 0.0, "not reached")
            return dataclasses.replace(r, train_loss=1.5 if learned else 2.29, iters=max_iters, start_loss=2.3)
    prober = Slow()
    prober.handoffs = {}
    space = planning.Space(protocols=("sync",), layouts=("one-worker",), batch_sizes=(32,))
    planning.search(sample_profile, space, prober)
    n = calls[0][2]
    assert calls[:3] == [(0.1, 0, n), (0.1, n, 2 * n), (0.1, 2 * n, 4 * n)]
    assert all(start == 0 for lr, start, _ in calls[3:] if lr != 0.1), calls


@pytest.mark.parametrize("top_learned, scan", [(True, [0.1, 0.01]), (False, [0.1, 0.01, 0.001, 0.0001])])
def test_a_pruned_decade_ends_the_scan_only_below_one_that_learned(sample_profile, top_learned, scan):
    """The decades stop at a pruned scout (it lagged the median) where a decade above it learned;
    where none had (accuracies at chance, which the pruner reads as noise), the scan goes on.
    Fails if a pruned decade is passed over below one that learned (the 4th decade probed), or
    ends the scan below one that had not (shapes-resnet: the edge then carried on to lr 1)."""
    calls = []

    def prober(cfg, max_iters, max_seconds, on_eval=None, evals=16):
        calls.append(cfg.lr)
        r = dataclasses.replace(ProbeResult(cfg, None, False, ((max_iters, 0.2),), 0.0, 0.0, "not reached"),
                                train_loss=1.0 if top_learned else 2.29, iters=max_iters, start_loss=2.3)
        return dataclasses.replace(r, status=ProbeStatus.PRUNED, train_loss=None) if cfg.lr == 0.01 else r
    space = planning.Space(protocols=("sync",), layouts=("one-worker",), batch_sizes=(32,))
    planning.search(sample_profile, space, prober, budget_s=100.0)
    decades = [lr for lr in dict.fromkeys(calls) if lr in planning.space.LR_DECADES]
    assert decades == scan, calls


def test_the_final_round_trains_on_only_as_far_as_the_budget_left_allows():
    """The finalists train on to budget.RULES.final_growth times their probes' training time where the budget
    left covers it, to less where it does not, and not at all where it would not reach half again
    (an H200 machine's planning ran 12.3 s on a 9.9 s budget with the round outside it)."""
    from types import SimpleNamespace as NS
    from omnitune.planning.final import fitting_growth
    # Two finalists, 1 ms per iteration predicted, probes of 100 iterations in 0.2 s (2 ms each).
    first = [NS(sec_per_iter=1e-3, probe=NS(seconds=0.2, iters=100, config=name)) for name in "ab"]
    prober = NS(handoffs={name: NS(iterations=100) for name in "ab"})
    train_s = 0.1                                    # 100 iterations of predicted training time
    # Growth g costs 2 finalists x (100 g - 100) iterations x 2 ms = 0.4 (g - 1) s.
    assert fitting_growth(first, prober, train_s, 10.0) == budget.RULES.final_growth
    assert fitting_growth(first, prober, train_s, 0.4) == pytest.approx(2.0)
    assert fitting_growth(first, prober, train_s, 0.1) is None         # 1.25x: no round
    assert fitting_growth(first, prober, train_s, -1.0) is None
    assert budget.final_reserve_s(0.2) == pytest.approx(0.4)            # room for 2x, probes of 0.2 s
