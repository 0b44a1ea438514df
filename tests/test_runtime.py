"""Real runs: torch.distributed processes over gloo on this machine."""

import json
import math
from pathlib import Path

import pytest
import torch

from omnitune.planning import retune as retune_mod
from omnitune.runtime import job, monitor
from omnitune.runtime.job import RunOptions
from tests.conftest import make_plan

pytestmark = pytest.mark.slow


def read_metrics(run_dir):
    return [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]


def check_run_dir(run_dir, summary):
    metrics = read_metrics(run_dir)
    assert metrics and metrics[-1]["test_accuracy"] == pytest.approx(summary.final_accuracy)
    assert all(a["iteration"] <= b["iteration"] for a, b in zip(metrics, metrics[1:]))
    state = torch.load(run_dir / "checkpoint.pt", weights_only=True)
    assert state["iteration"] == summary.iterations
    assert json.loads((run_dir / "summary.json").read_text())["reached_target"] is True


def test_sync_run_reaches_target(tmp_path):
    plan = make_plan(tmp_path / "plan.json", "sync", [["cpu0", "cpu1"]], target=0.9)
    s = job.run(str(plan), str(tmp_path / "run"), RunOptions(max_time_s=60))
    assert s.reached_target and s.final_accuracy >= 0.9
    assert s.processes == 2 and s.updates_per_group == (s.iterations,)
    assert s.staleness == (s.iterations,) and 0 < s.time_to_target_s <= s.wall_s
    check_run_dir(tmp_path / "run", s)


def test_groups_run_reaches_target_with_both_groups(tmp_path):
    plan = make_plan(tmp_path / "plan.json", "groups", [["cpu0"], ["cpu1"]], momentum=0.4, target=0.9)
    s = job.run(str(plan), str(tmp_path / "run"), RunOptions(max_time_s=60))
    assert s.reached_target and s.processes == 3
    assert len(s.updates_per_group) == 2 and min(s.updates_per_group) > 0
    assert sum(s.updates_per_group) == s.iterations == sum(s.staleness)
    # Two equal groups at one server take turns: a gradient is most often g - 1 = 1 update old,
    # and 1 on average (a loaded machine breaks some turns: (40, 149, 31, 4) was measured).
    assert max(range(len(s.staleness)), key=s.staleness.__getitem__) == 1 and 0.6 < s.mean_staleness < 1.4
    check_run_dir(tmp_path / "run", s)


def test_run_stops_at_max_time(tmp_path):
    plan = make_plan(tmp_path / "plan.json", "sync", [["cpu0"]], lr=1e-5, target=0.99)
    s = job.run(str(plan), str(tmp_path / "run"), RunOptions(max_time_s=1.0))
    assert not s.reached_target and s.time_to_target_s is None
    assert 1.0 <= s.wall_s < 10


def test_groups_of_two_all_reduce_inside_and_share_the_server(tmp_path):
    groups = [["cpu0", "cpu1"], ["cpu2", "cpu3"]]
    plan = make_plan(tmp_path / "plan.json", "groups", groups, batch=16, momentum=0.4, target=0.85)
    s = job.run(str(plan), str(tmp_path / "run"), RunOptions(max_time_s=90))
    assert s.reached_target and s.processes == 5 and min(s.updates_per_group) > 0


def test_resume_goes_on_from_the_checkpoint(tmp_path):
    run_dir = tmp_path / "run"
    slow = make_plan(tmp_path / "slow.json", "sync", [["cpu0"]], lr=0.002, target=0.99)
    first = job.run(str(slow), str(run_dir), RunOptions(max_time_s=0.6))
    assert not first.reached_target
    plan = make_plan(tmp_path / "plan.json", "sync", [["cpu0"]], lr=0.05, target=0.9)
    s = job.run(str(plan), str(run_dir), RunOptions(max_time_s=60, resume=True))
    assert s.reached_target and s.iterations > first.iterations
    assert s.time_to_target_s > first.wall_s - first.eval_s      # the training clock went on
    metrics = read_metrics(run_dir)
    assert metrics[0]["iteration"] < first.iterations < metrics[-1]["iteration"]


def test_replan_during_a_real_run(tmp_path):
    """Softsync with four learners: the re-tuning probes emulate it, and its fall-back keeps one
    learner per group (it once split them into groups of two and crashed)."""
    from functools import partial

    from omnitune.probing.pause import retune

    learners = [["cpu0"], ["cpu1"], ["cpu2"], ["cpu3"]]
    plan = make_plan(tmp_path / "plan.json", "softsync", learners, softsync_n=4, lr=0.05, momentum=0.4, target=0.985)
    run_dir = tmp_path / "run"
    s = job.run(str(plan), str(run_dir), RunOptions(max_time_s=1.0, replan_every_s=0.5), replan=partial(retune, iters=15))
    records = [json.loads(line) for line in (run_dir / "replans.jsonl").read_text().splitlines()]
    assert s.replans == len(records) >= 1 and s.replan_s > 0
    for r in records:
        assert {"before", "after", "scores", "switched", "margin", "iteration", "train_s", "spent_s"} <= set(r)
        # the rates read, a plateau check's among them (its third of the rate may win), or one cooled
        scored = {x["lr"] for x in r["scores"] + r.get("plateau", {}).get("readings", [])}
        assert r["after"]["lr"] in scored | {float(f"{lr * retune_mod.RULES.cool_rate:.3g}") for lr in scored}
        assert r["switched"] or r["after"]["lr"] == r["before"]["lr"]
        assert r["after"]["groups"] == 4
        assert r["after"]["protocol"].startswith("softsync")
    assert json.loads((run_dir / "summary.json").read_text())["replans"] == s.replans
    assert launches(run_dir) == 1          # the processes waited through every pause (runtime/segments.py)


def launches(run_dir: Path) -> int:
    """How many times a run launched its processes: torchelastic logs each launch in a folder."""
    return len([d for d in (run_dir / "logs").iterdir() if d.is_dir()])


def test_a_pause_that_doubles_the_batch_goes_on_from_its_checkpoint_at_it(tmp_path):
    """A pause's winner may be twice the batch (planning/retune.py): the processes restart from the
    checkpoint with the new batches and the run reaches its target. Fails if a restart keeps the
    plan's batches or cannot take a checkpoint written at other ones."""
    plan = make_plan(tmp_path / "plan.json", "sync", [["cpu0", "cpu1"]], batch=8, lr=0.005, target=0.9)
    run_dir = tmp_path / "run"

    def replan(spec, checkpoint, why):
        new = retune_mod.retuned(spec, retune_mod.Setting(spec.lr * 2, spec.momentum, 2.0)) \
            if max(spec.batch_size.values()) < 16 else spec
        return new, {"before": {"batch_size": spec.batch_size}, "after": {"batch_size": new.batch_size},
                     "switched": new != spec}

    s = job.run(str(plan), str(run_dir), RunOptions(max_time_s=60, replan_every_s=0.5), replan=replan)
    records = [json.loads(line) for line in (run_dir / "replans.jsonl").read_text().splitlines()]
    assert s.reached_target and records[0]["switched"] and records[0]["after"]["batch_size"] == {"cpu0": 16, "cpu1": 16}
    assert json.loads((run_dir / "plan-replan-1.json").read_text())["spec"]["batch_size"] == {"cpu0": 16, "cpu1": 16}
    assert s.iterations > records[0]["iteration"]
    assert launches(run_dir) == 1            # the same processes, at other batches


def test_a_pause_that_changes_the_protocol_goes_on_from_its_checkpoint_under_it(tmp_path):
    """A pause's winner may be another protocol on the same devices (retune.faster_protocols):
    from sync on two workers, the run restarts from the checkpoint as groups of one worker each,
    a parameter server among its processes, and reaches its target."""
    from omnitune.core.protocols import Groups

    plan = make_plan(tmp_path / "plan.json", "sync", [["cpu0", "cpu1"]], batch=16, lr=0.005, target=0.9)
    run_dir = tmp_path / "run"

    def replan(spec, checkpoint, why):
        new = retune_mod.retuned(spec, retune_mod.Setting(spec.lr, 0.4, 1.0, Groups(g=2))) \
            if spec.variant != Groups(g=2) else spec
        return new, {"before": {}, "after": {"protocol": new.variant.label}, "switched": new != spec}

    s = job.run(str(plan), str(run_dir), RunOptions(max_time_s=60, replan_every_s=0.5), replan=replan)
    after = json.loads((run_dir / "plan-replan-1.json").read_text())["spec"]
    assert s.reached_target and s.protocol == "groups" and s.processes == 3
    assert after["variant"] == {"protocol": "groups", "balanced": False, "g": 2}
    assert after["groups"] == [["cpu0"], ["cpu1"]] and after["momentum"] == 0.4
    assert launches(run_dir) == 2            # a server among them: the processes were launched anew


def test_resume_without_checkpoint_is_a_clear_error(tmp_path):
    from omnitune.core.errors import UserError
    plan = make_plan(tmp_path / "plan.json", "sync", [["cpu0"]])
    with pytest.raises(UserError, match="no checkpoint.pt"):
        job.run(str(plan), str(tmp_path / "empty"), RunOptions(resume=True))


def test_the_server_notices_a_leader_gone_silent():
    """Asynchronous groups never wait for one another, so the server checks that each still sends."""
    from omnitune.runtime.server import Liveness

    now = [0.0]
    live = Liveness([1, 2, 3], timeout_s=10, clock=lambda: now[0])
    live.forget([3])                              # done: it stops sending by design
    now[0] = 5
    live.heard_from(1)
    live.heard_from(2)
    now[0] = 14
    live.heard_from(2)                            # 1 spoke 9 s ago: still fine
    now[0] = 16
    with pytest.raises(RuntimeError, match=r"timed out: rank\(s\) \[1\] sent nothing for 10 s"):
        live.heard_from(2)


def test_a_plan_of_twelve_groups_with_negative_momentum_runs(tmp_path, sample_profile):
    """12 groups: the rule 0.9 - (1 - 1/12) gives a negative explicit momentum, which torch's SGD
    refuses. The plan `plan` writes must be one `run` takes."""
    from omnitune import planning
    from omnitune.core import plan as plan_mod
    from omnitune.efficiency.statmodel import ProbeResult
    from tests.conftest import many_workers_profile

    def prober(cfg, max_iters, max_seconds, on_eval=None, evals=16):          # every setting alike: the rule's momentum wins
        return ProbeResult(cfg, 100.0, True, ((100, 0.9),), 0.0, 0.0, "reached")

    prof = many_workers_profile(sample_profile, 12, tmp_path)
    space = planning.Space(protocols=("groups",), groups=(12,), batch_sizes=(16,), lrs=(0.05,))
    found = planning.search(prof, space, prober)
    plan = planning.build_plan(found, prof, "p.json", "logreg-digits", None, 0.8, 0, "now")
    assert len(plan.spec.groups) == 12 and plan.spec.momentum < 0
    assert plan.spec.momentum == pytest.approx(0.9 - (1 - 1 / 12), abs=1e-4)
    plan_mod.save(plan, tmp_path / "plan.json")
    s = job.run(str(tmp_path / "plan.json"), str(tmp_path / "run"), RunOptions(max_time_s=60))
    assert s.reached_target and s.processes == 13 and min(s.updates_per_group) > 0


def test_retuning_raises_a_rate_too_small(tmp_path):
    """lenet-digits on one core from lr 0.001 (momentum 0.9), paused after a second of training:
    the model is still near chance, and a larger rate lowers the validation loss well beyond the
    noise of repeats, so the rate goes up, and the decision's figures are in replans.jsonl. Fails
    if the probes do not start from the checkpoint, if decide keeps the plan's rate against a clear
    winner or switches without beating the margin, or if the run does not go on with the winner.
    Lowering a rate is not tested on a real run: from lr 0.1 the current setting's repeats spread
    by up to 0.55, and the hysteresis then keeps it in some runs and not others."""
    from functools import partial

    from omnitune.probing.pause import retune

    plan = make_plan(tmp_path / "plan.json", "sync", [["cpu0"]], lr=0.001, momentum=0.9, target=0.999)
    run_dir = tmp_path / "run"
    job.run(str(plan), str(run_dir), RunOptions(max_time_s=1.5, replan_every_s=1.0), replan=partial(retune, iters=60))
    first = json.loads((run_dir / "replans.jsonl").read_text().splitlines()[0])
    assert first["switched"] and first["after"]["lr"] > 0.001, first
    after = next(x for x in first["scores"] if x["lr"] == first["after"]["lr"])
    before = next(x for x in first["scores"] if x["lr"] == 0.001)
    assert before["loss"] - after["loss"] > first["margin"] and before["raw_loss"] > after["raw_loss"]
    plan_after = json.loads((run_dir / "plan-replan-1.json").read_text())
    assert plan_after["spec"]["lr"] == first["after"]["lr"]


def test_a_stall_is_seen_and_with_stop_on_progress_ends_the_run(tmp_path):
    """lenet-digits at lr 1e-7 does not learn: its accuracy stays where it starts. Without
    re-tuning and with stop_on_stall, the run ends on the stall long before its time limit, the
    summary says when, and metrics.jsonl marks the evaluations while it lasted. Fails if the
    monitor never flags a flat curve, or flags it without ending the run."""
    plan = make_plan(tmp_path / "plan.json", "sync", [["cpu0"]], lr=1e-7, momentum=0.0, target=0.99)
    s = job.run(str(plan), str(tmp_path / "run"), RunOptions(max_time_s=60, stop_on_stall=True))
    assert not s.reached_target and s.stalled_at_s is not None and s.wall_s < 30
    lines = [json.loads(x) for x in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert lines[-1].get("stalled") and len(lines) >= monitor.STALL_EVALS


def test_the_monitor_flags_a_stall_when_the_latest_fifth_of_the_training_reads_no_higher(tmp_path, monkeypatch):
    """A fake clock: accuracy 0.5 at 1 s, 0.6 at 2 s, then 0.6 at every second. With five
    evaluations made, the run is stalled once the median of the latest fifth of its training is no
    higher than the fifth before's: at 5 s (0.6 against 0.6). A better accuracy at 8 s ends the
    stall; the first one stays recorded. Fails if the rule ignores STALL_EVALS or forgets the
    first stall."""
    import torch

    clock = {"t": 0.0}
    readings = iter([0.5, 0.6, 0.6, 0.6, 0.6, 0.6, 0.6, 0.7])
    monkeypatch.setattr(monitor, "evaluate", lambda *a: (1.0, next(readings)))
    m = monitor.Monitor(None, None, 0.99, 100.0, 1.0, tmp_path / "metrics.jsonl")
    monkeypatch.setattr(monitor.Monitor, "elapsed", lambda self: clock["t"])
    model = torch.nn.Linear(1, 1)
    stalled = []
    for t in range(1, 9):
        clock["t"] = float(t)
        m.evaluate(model, t)
        stalled.append(m.stalled)
    assert stalled == [False, False, False, False, True, True, True, False]
    assert m.stalled_at_s == 5.0 and m.best_at_s == 8.0


def test_a_run_is_off_pace_when_its_halves_pace_misses_the_target_within_the_limit():
    """monitor.off_pace: medians 0.2 (first half, at 2 s) and 0.4 (latest, at 6 s) rise 0.05 a
    second; 0.5 to go from 8 s reaches 0.9 at 18 s: on pace for a 20 s limit, off for 15 s; flat
    is off pace for any limit up to ten times the training so far (statmodel.EVIDENCE), and
    neither is judged past it; at the target, or with a half empty, never. Fails if the pace is
    taken from the best reading, from the run's start, or ignores the limit or the evidence."""
    rising = [(1.0, 0.1), (2.0, 0.2), (3.0, 0.9), (5.0, 0.4), (6.0, 0.4), (7.0, 0.5)]
    assert not monitor.off_pace(rising, 8.0, 0.9, 20.0)
    assert monitor.off_pace(rising, 8.0, 0.9, 15.0)
    flat = [(1.0, 0.4), (2.0, 0.4), (3.0, 0.4), (5.0, 0.4), (6.0, 0.4), (7.0, 0.4)]
    assert monitor.off_pace(flat, 8.0, 0.9, 80.0)
    assert not monitor.off_pace(flat, 8.0, 0.9, 81.0) and not monitor.off_pace(flat, 8.0, 0.9, 1e9)
    assert not monitor.off_pace([(1.0, 0.4), (2.0, 0.4), (3.0, 0.4), (5.0, 0.95), (6.0, 0.95), (7.0, 0.95)], 8.0,
                                0.9, 10.0)
    assert not monitor.off_pace([(5.0, 0.4), (6.0, 0.4)], 8.0, 0.9, 10.0)
    one_before = [(1.0, 0.1), (5.0, 0.4), (6.0, 0.4), (7.0, 0.4)]      # a median of one reading: no pace
    assert not monitor.off_pace(one_before, 8.0, 0.9, 10.0)
    assert monitor.off_pace([(0.5, 0.1)] * 3 + one_before[1:], 8.0, 0.9, 10.0)


@pytest.mark.parametrize("wait_s, ends_at_s", [(2.0, 6), (4.0, 8), (math.inf, None)])
def test_a_run_off_pace_ends_its_segment_once_its_latest_half_lasted_pace_wait_s(tmp_path, monkeypatch, wait_s,
                                                                                ends_at_s):
    """Readings on a fake clock, one a second, creeping up 0.01 a second from 0.2: a 40 s limit
    and a target of 0.99 are far out of reach at that pace. With no budget for a pause
    (stall_stop_from_s infinite), being off pace ends the segment once the latest half of the
    training lasted `pace_wait_s`: at 6 s (the first with three readings in each half) for a 2 s
    wait, at 8 s for 4 s, never for an infinite one (a pinned run). The short stall never marks
    this curve (it climbs).
    Fails if the wait or the pace is ignored, or if a pinned run is ended."""
    import torch

    clock = {"t": 0.0}
    monkeypatch.setattr(monitor, "evaluate", lambda *a: (1.0, 0.2 + 0.01 * clock["t"]))
    m = monitor.Monitor(None, None, 0.99, 100.0, 1.0, tmp_path / "metrics.jsonl", pace_wait_s=wait_s, limit_s=40.0)
    monkeypatch.setattr(monitor.Monitor, "elapsed", lambda self: clock["t"])
    model = torch.nn.Linear(1, 1)
    ended = None
    for t in range(1, 20):
        clock["t"] = float(t)
        if m.check(model, t):
            ended = t
            break
    assert m.stalled_at_s is None and ended == ends_at_s
    lines = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert [bool(x.get("off_pace")) for x in lines] == [math.isfinite(wait_s) and k >= 6 for k in range(1, len(lines) + 1)]


def test_an_off_pace_or_stalled_run_is_not_paused_where_the_pause_would_leave_less_than_it_costs(tmp_path,
                                                                                               monkeypatch):
    """A 40 s limit. The off-pace curve above, with a 9-s pause: its latest half lasts 9 s at 18 s,
    and a pause there leaves 13 s of the limit after its 9, so the segment ends; with a 12-s pause,
    due at 24 s, it would leave 4: the run goes on to its limit. A flat curve whose stall may
    stop it at once: stalled at 5 s, it ends there for a 12-s pause (23 s left after it), and not
    for a 20-s one (15 s). Fails if either stop ignores the limit."""
    import torch

    def ends(curve, wait_s: float, stall_from_s: float = math.inf) -> int | None:
        clock = {"t": 0.0}
        monkeypatch.setattr(monitor, "evaluate", lambda *a: (1.0, curve(clock["t"])))
        m = monitor.Monitor(None, None, 0.99, 100.0, 1.0, tmp_path / f"m{wait_s}.jsonl", pace_wait_s=wait_s,
                            limit_s=40.0, stall_stop_from_s=stall_from_s)
        monkeypatch.setattr(monitor.Monitor, "elapsed", lambda self: clock["t"])
        model = torch.nn.Linear(1, 1)
        for t in range(1, 40):
            clock["t"] = float(t)
            if m.check(model, t):
                return t
        return None
    creeping, flat = (lambda t: 0.2 + 0.01 * t), (lambda t: 0.5)
    assert ends(creeping, 9.0) == 18 and ends(creeping, 12.0) is None
    assert ends(flat, 12.0, 0.0) == 5 and ends(flat, 20.0, 0.0) is None
    assert monitor.pause_pays(10.0, 15.0, 40.0) and not monitor.pause_pays(10.0, 15.1, 40.0)
    assert monitor.pause_pays(39.0, math.inf, 40.0)        # no pause weighed (--stop-on-stall): a stall stops


def test_a_curve_that_climbs_slowly_through_noise_is_not_stalled(tmp_path, monkeypatch):
    """Accuracy 0.5 + 0.002 t, with one lucky reading of +0.05 at 10 s: no better reading comes
    from 10 s until 36 s, which the old rule (no new best for a fifth of the training) called a
    stall from 13 s on, but the medians of the windows climb throughout. Fails if the rule reads
    the age of the best reading, or a window's mean."""
    import torch

    clock = {"t": 0.0}
    monkeypatch.setattr(monitor.Monitor, "elapsed", lambda self: clock["t"])
    readings = iter([0.5 + 0.002 * t + (0.05 if t == 10 else 0.0) for t in range(1, 41)])
    monkeypatch.setattr(monitor, "evaluate", lambda *a: (1.0, next(readings)))
    m = monitor.Monitor(None, None, 0.99, 100.0, 1.0, tmp_path / "metrics.jsonl")
    model = torch.nn.Linear(1, 1)
    for t in range(1, 41):
        clock["t"] = float(t)
        m.evaluate(model, t)
        assert not m.stalled, t
    assert m.best_at_s == 40.0 and m.stalled_at_s is None


def test_the_monitor_flags_a_divergence_and_keeps_the_best_checkpoint(tmp_path, monkeypatch):
    """A fake clock, one evaluation a second after 100 minibatches each. Their losses: noisy
    around 1.0, 0.8, 0.6, 0.5 and 0.5 (each minibatch 0.5x or 1.5x its level, alternating: the
    mean of an evaluation's few minibatches could read twice another's; the moving average does
    not), then 3.0 (diverged), then 0.5 again (not), then NaN (diverged). The best checkpoint is
    written on a new best score, at most every BEST_EVERY_S, never while diverged; with
    diverge_stop a divergence ends the run. Fails if noise reads as a divergence, if a real one
    or a NaN is missed, or if a diverged model is kept as the best."""
    import math

    import torch

    clock = {"t": 0.0}
    scores = iter([0.5, 0.6, 0.7, 0.8, 0.85, 0.9, 0.95, 0.97])
    monkeypatch.setattr(monitor, "evaluate", lambda *a: (1.0, next(scores)))
    m = monitor.Monitor(None, None, 0.99, 100.0, 1.0, tmp_path / "metrics.jsonl", diverge_stop=True)
    monkeypatch.setattr(monitor.Monitor, "elapsed", lambda self: clock["t"])
    saved = []
    m.best_saver = lambda it, train_s: saved.append(it)
    model = torch.nn.Linear(1, 1)
    diverged, stops = [], []
    for t, level in enumerate([1.0, 0.8, 0.6, 0.5, 0.5, 3.0, 0.5, math.nan], start=1):
        clock["t"] = float(t)
        for k in range(100):
            m.record_loss(level * (0.5 if k % 2 else 1.5))
        m.evaluate(model, t)
        diverged.append(m.diverged)
        m.next_eval = math.inf                   # check() only decides, evaluating nothing more
        stops.append(m.check(model, t))
    assert diverged == [False, False, False, False, False, True, False, True]
    assert stops == diverged and m.diverged_at_s == 6.0
    assert saved == [1, 3, 5, 7]                 # every BEST_EVERY_S (2 s); 6 and 8 diverged
    lines = [json.loads(x) for x in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert [bool(x.get("diverged")) for x in lines] == diverged


def test_a_diverging_run_goes_on_from_its_best_checkpoint_at_a_lower_rate(tmp_path):
    """The quadratic at lr 3 with momentum 0.9 (its step times the largest curvature is past
    heavy ball's stable 2 (1 + momentum)): the loss overflows within the first evaluation. Re-tuned,
    the run stops at once, goes back to its best checkpoint (where it started), the pause's
    probes from there choose a lower rate, and the run reaches its target loss; the summary and
    replans.jsonl say so, and the JSON files hold no NaN. Fails if divergence is not caught, if
    the run goes on from the diverged weights, or if the pause keeps the rate."""
    from functools import partial

    from omnitune.probing.pause import retune

    plan = make_plan(tmp_path / "plan.json", "sync", [["cpu0"]], workload=str(Path(__file__).parent / "workloads" /
                     "quadratic.py"), batch=8, lr=3.0, momentum=0.9, target=None, target_loss=2.0)
    run_dir = tmp_path / "run"
    s = job.run(str(plan), str(run_dir), RunOptions(max_time_s=20, retune=True), replan=partial(retune, iters=30))
    assert s.reached_target and s.diverged_at_s is not None and s.replans >= 1
    first = json.loads((run_dir / "replans.jsonl").read_text().splitlines()[0])
    assert first["why"] == "divergence" and first["back_to_iteration"] == 0
    assert first["switched"] and first["after"]["lr"] < 3.0
    assert any(m.get("diverged") for m in read_metrics(run_dir))


def test_without_retuning_a_divergence_is_reported_not_answered(tmp_path):
    """The same diverging quadratic, pinned: the run goes on to its time limit, and its summary
    and metrics say when it diverged; no best checkpoint is kept."""
    plan = make_plan(tmp_path / "plan.json", "sync", [["cpu0"]], workload=str(Path(__file__).parent / "workloads" /
                     "quadratic.py"), batch=8, lr=3.0, momentum=0.9, target=None, target_loss=2.0)
    s = job.run(str(plan), str(tmp_path / "run"), RunOptions(max_time_s=1.0))
    assert not s.reached_target and s.diverged_at_s is not None and s.replans == 0 and s.final_loss is None
    assert not (tmp_path / "run" / "best.pt").exists()


ADAMW = str(Path(__file__).parent / "workloads" / "adamw_digits.py")


@pytest.mark.parametrize("protocol, groups", [("sync", [["cpu0", "cpu1"]]), ("groups", [["cpu0"], ["cpu1"]]),
                                              ("hpsgd", [["cpu0", "cpu1"]])])
def test_an_adamw_recipe_runs_to_a_target_loss(tmp_path, protocol, groups):
    """AdamW, its schedule and clipping under each kind of protocol, stopping on a test loss; the
    checkpoint holds AdamW's state, one step per iteration of the scheduled run."""
    plan = make_plan(tmp_path / "plan.json", protocol, groups, workload=ADAMW, lr=3e-3, momentum=0.5 if protocol ==
                     "groups" else 0.9, target=None, target_loss=0.3, horizon=400)
    s = job.run(str(plan), str(tmp_path / "run"), RunOptions(max_time_s=60))
    assert s.reached_target and s.final_loss <= 0.3 and s.target_loss == 0.3
    state = torch.load(tmp_path / "run" / "checkpoint.pt", weights_only=True)["optimizer"]
    assert set(state["state"][0]) == {"step", "exp_avg", "exp_avg_sq"}
    # The coordinator's own AdamW's steps; hpsgd's replica steps once past the merge that was judged.
    assert 0 <= float(state["state"][0]["step"]) - s.iterations <= (protocol == "hpsgd")
    metrics = read_metrics(tmp_path / "run")
    assert metrics[-1]["test_loss"] <= 0.3 < metrics[0]["test_loss"]


def test_an_adamw_run_resumes_its_state(tmp_path):
    """A resumed run goes on from the checkpoint's AdamW moments and step count: after 30 + 20
    iterations the step count is 50 (a fresh AdamW would count 20)."""
    from tests.conftest import make_spec

    run_dir = tmp_path / "run"
    spec = make_spec("sync", [["cpu0"]], workload=ADAMW, lr=1e-3, target=None, target_loss=0.01, horizon=100)
    first = job.run_spec(spec, str(run_dir), max_time_s=60, max_iters=30)
    saved = torch.load(run_dir / "checkpoint.pt", weights_only=True)
    assert first.iterations == 30 and float(saved["optimizer"]["state"][0]["step"]) == 30
    job.run_spec(spec, str(run_dir), max_time_s=60, resume=True, max_iters=50)
    again = torch.load(run_dir / "checkpoint.pt", weights_only=True)
    assert again["iteration"] == 50 and float(again["optimizer"]["state"][0]["step"]) == 50


def test_a_plans_own_weight_decay_is_the_runs(tmp_path):
    """A plan's weight decay (RunSpec.weight_decay, chosen over the recipe's 0.01) is what every
    step applies: 10 AdamW steps at lr 1e-3 with decay 50 shrink the weights by about 40%, which
    the recipe's own decay does not."""
    from tests.conftest import make_spec

    def norm(weight_decay, name):
        spec = make_spec("sync", [["cpu0"]], workload=ADAMW, lr=1e-3, target=None, target_loss=0.01,
                         weight_decay=weight_decay)
        job.run_spec(spec, str(tmp_path / name), max_time_s=60, max_iters=10)
        model = torch.load(tmp_path / name / "checkpoint.pt", weights_only=True)["model"]
        return float(torch.linalg.vector_norm(torch.cat([v.flatten() for k, v in model.items() if "weight" in k])))
    assert norm(50.0, "heavy") < 0.8 * norm(None, "recipes")
