"""benchmarks/retune.py's glue, with the profile, the plan and the runs stubbed."""

from pathlib import Path
from types import SimpleNamespace

import pytest

from benchmarks import retune as bench_retune
from omnitune.core import plan as plan_mod
from tests.conftest import DATA


def test_re_tuned_and_pinned_runs_alternate_and_pauses_count(tmp_path, monkeypatch):
    """Seed by seed, re-tuned, over rates only, then pinned, rotated each seed; only re-tuned prices other batches
    (its re-tuner gets the hardware model of the plan's profile, as api.run gives it); a re-tuned
    run's time is its training to the target plus its pauses; a miss counts as the limit; the
    ratios are of the medians. Fails if the pauses are left out of the
    re-tuned time, if the pinned run is handed a re-tuner, or if the runs go arm by arm."""
    plan_path = tmp_path / "w-plan-s0.json"
    plan_mod.save(plan_mod.load(DATA / "plan-v1.json"), plan_path)
    monkeypatch.setattr(bench_retune.profiler, "profile", lambda *a, **k: plan_mod.load(plan_path))
    monkeypatch.setattr(bench_retune.profile_mod, "save", lambda *a, **k: None)
    monkeypatch.setattr(bench_retune, "planned_with", lambda *a, **k: {"path": plan_path,
                                                                       "plan": plan_mod.load(plan_path)})
    monkeypatch.setattr(bench_retune, "describe_plan", lambda plan: {})
    order = []

    def run(path, out_dir, options, replan=None, first_pause_s=None):
        name = Path(out_dir).name
        order.append((name.removeprefix("teacher-mlp-").rsplit("-", 1)[0], options.retune,
                      callable(replan.keywords["step_s"]) if replan else None))
        assert (first_pause_s is not None and first_pause_s > 0) == options.retune
        reached = name != "teacher-mlp-pinned-s2"
        return SimpleNamespace(reached_target=reached, time_to_target_s=10.0 if reached else None,
                               replan_s=3.0 if options.retune else 0.0, replans=1 if options.retune else 0,
                               wall_s=20.0, eval_s=1.0, stalled_at_s=None, iterations=90 if options.retune else 100)
    monkeypatch.setattr(bench_retune.job, "run", run)
    rows = bench_retune.bench("teacher-mlp", 50.0, (1, 2), tmp_path, quick=False, arms=("re-tuned", "rates only", "pinned"))
    arms = [("re-tuned", True, True), ("rates-only", True, False), ("pinned", False, None)]
    assert order == arms + arms[1:] + arms[:1]                      # the second seed in a rotated order
    tuned, rates, pinned = rows
    assert [r["time_s"] for r in tuned["runs"]] == [13.0, 13.0] and [r["time_s"] for r in pinned["runs"]] == [10.0, 50.0]
    # pinned missed one of its two: its median (30 s) is half a miss, a bound, so no ratio is taken
    assert tuned["retuned_over_pinned"] is None and tuned["batches_over_rates_only"] == 1.0
    # iterations paired by seed: seed 1 only, where both reached (a miss has no iterations to target)
    assert tuned["iters_over_pinned"] == pytest.approx(0.9) and "iters_over_pinned" not in pinned


def test_a_ratio_needs_a_median_that_reached_the_target():
    """retune.median_reached: the middle run (both middle ones of an even count), by time, must
    have reached; a miss counts as the limit (240 s) and a re-tuned hit may take longer, pauses
    counted. Fails if a majority of hits is taken for a median hit."""
    from benchmarks.retune import median_reached

    def run(t, reached):
        return {"time_s": t, "reached": reached}
    assert median_reached([run(100, True), run(262, True), run(204, True)])
    assert not median_reached([run(100, True), run(240, False), run(262, True)])      # two hits, a missed median
    assert median_reached([run(240, False), run(100, True), run(120, True)])
    assert not median_reached([run(10, True), run(50, False)])



def test_a_given_plan_runs_with_its_start_and_profile_and_nothing_is_planned(tmp_path, monkeypatch):
    """--plan: the plan, its start checkpoint and its profile are copied into the work folder and the
    arms run on that copy; no profile is taken and no plan made. A profile the plan names in
    another folder (`../profiles/p.json`, relative to the plan) lands beside the copy, which names
    it so. Fails if the runs read the user's files in place (a run writes beside its plan), if the
    benchmark plans anyway, or if the profile lands where the copy's pauses do not find it (they
    would compare rates only: 2026-11-28, a batch-128 plan's re-tuned arm read no batch)."""
    from dataclasses import replace

    given = tmp_path / "mine"
    given.mkdir()
    (tmp_path / "profiles").mkdir()
    plan = replace(plan_mod.load(DATA / "plan-v1.json"), profile="../profiles/p.json", start="p.start.pt")
    plan_mod.save(plan, given / "p.json.plan")
    (tmp_path / "profiles" / "p.json").write_text("{}")
    (given / "p.start.pt").write_bytes(b"x")
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.setattr(bench_retune.profiler, "profile", lambda *a, **k: (_ for _ in ()).throw(AssertionError))
    monkeypatch.setattr(bench_retune, "describe_plan", lambda plan: {})
    ran = []

    def run(path, out_dir, options, replan=None, first_pause_s=None):
        ran.append(Path(path).parent)
        return SimpleNamespace(reached_target=True, time_to_target_s=10.0, replan_s=0.0, replans=0, wall_s=20.0, iterations=100,
                               eval_s=1.0, stalled_at_s=None)
    monkeypatch.setattr(bench_retune.job, "run", run)
    rows = bench_retune.bench("teacher-mlp", 50.0, (1,), work, quick=False, arms=("pinned",),
                              given=given / "p.json.plan")
    assert ran == [work] and rows[0]["median_s"] == 10.0
    assert sorted(p.name for p in work.iterdir()) == ["p.json", "p.json.plan", "p.start.pt",
                                                      "teacher-mlp-plan-seed1.json"]
    assert plan_mod.load(work / "p.json.plan").profile == "p.json"


def test_a_given_plans_results_are_named_for_its_batch_and_rate():
    """Two given plans' runs do not overwrite each other's file (plan-v1: batch 32 a device, lr 0.05)."""
    from dataclasses import replace

    plan = plan_mod.load(DATA / "plan-v1.json")
    assert bench_retune.given_name(plan) == "retune-plan-b32-lr0.05"
    assert bench_retune.given_name(replace(plan, spec=replace(plan.spec, lr=0.033))) == "retune-plan-b32-lr0.033"
