"""benchmarks/plan_quality.py: the rows it keeps beside a run of one workload."""

import json
import zlib

from benchmarks import harness, plan_quality
from tests.conftest import DATA


def plan_row(per_seed_batches: list[int], iterations: list[int]) -> dict:
    config = {"layout": "one-worker", "protocol": "sync", "groups": 1, "lr": 0.1, "momentum": 0.9}
    return {"name": "w", "plan": {**config, "batch": per_seed_batches[0], "iters_band": [100, 200],
                                  "per_seed": [{"seed": i + 1, **config, "batch": b}
                                               for i, b in enumerate(per_seed_batches)],
                                  "runs": [{"reached": True, "iterations": n} for n in iterations]}}


def test_a_kept_rows_band_is_judged_on_the_runs_of_the_configuration_it_came_from(tmp_path, monkeypatch):
    # The band comes from a longer probe of the first seed's plan (batch 32); seeds 2 and 3 planned
    # batch 64, whose runs (80 iterations, out of the band) say nothing about it.
    monkeypatch.setattr(plan_quality, "RESULTS", tmp_path)
    rows = [plan_row([32, 64, 64], [150, 80, 80]), {**plan_row([32], [250]), "name": "v"}]
    (tmp_path / "plan_quality.json").write_text(json.dumps({"version": 2, "quick": False, "workloads": rows}))
    kept = plan_quality.kept_rows(quick=False)
    assert [r["band_holds"] for r in kept] == [[True], [False]]
    assert plan_quality.kept_rows(quick=True) == []


def test_a_row_without_per_seed_plans_judges_every_run():
    row = plan_row([32], [150, 80])
    del row["plan"]["per_seed"]
    assert plan_quality.kept_runs_of_the_first_plan(row["plan"]) == row["plan"]["runs"]


def test_a_band_with_no_top_has_not_held_it_is_no_band():
    """(low,) cannot fail on any run at or past low: counted apart, as no band. Fails if
    band_holds treats a missing top as infinity."""
    from benchmarks.common import band_holds

    assert band_holds((100.0, 200.0), 150) is True and band_holds((100.0, 200.0), 250) is False
    assert band_holds((100.0,), 10_000) is None and band_holds((), 150) is None
    assert plan_quality.holds_per_run([100.0], [{"reached": True, "iterations": 500}]) == [None]


def test_a_journal_with_no_folder_keeps_nothing_between_runs():
    from benchmarks.common import Journal

    j = Journal()
    assert j.put("k", {"x": 1}) == {"x": 1} and j.get("k") == {"x": 1} and Journal().get("k") is None


def test_a_fixed_configuration_decays_over_the_cap_as_a_plan_without_a_prediction_runs(sample_profile):
    """fixed_spec with a cap: the recipe's schedule spans the iterations the hardware model fits in
    the cap (job.scheduled), as `omnitune run` spans a plan's that predicts none; without a cap the
    rate stays constant (horizon 0). Fails if the grid's runs keep a constant rate while the plan's
    decays, as charlm-stdlib's did."""
    from omnitune import planning
    from omnitune.efficiency.perfmodel import Shape

    b = harness.WORKLOADS["charlm-stdlib"]
    c = plan_quality.grid(sample_profile, b, False)[0]
    spec = harness.fixed_spec(sample_profile, "lenet-digits", b.goal, c, 240.0)
    step_s, _ = planning.profiled(sample_profile)(Shape(c.groups, dict(spec.batch_size), c.variant, c.layout), c.batch)
    assert spec.horizon == round(240.0 / step_s) > 0
    assert harness.fixed_spec(sample_profile, "lenet-digits", b.goal, c).horizon == 0


class Cut(Exception):
    """A run cut off."""


def stub_bench(monkeypatch, calls: list, cut_at: int | None):
    """bench() with its profile, plans and runs stubbed: each run's time from its tag and seed;
    once `cut_at` plans and runs are done, the next raises Cut, once, as a session's end would."""
    from dataclasses import replace as dc_replace

    from omnitune.core import plan as plan_mod
    from omnitune.core import profile as profile_mod
    from omnitune.core.plan import Planning

    prof = profile_mod.load(DATA / "profile-v1.json")
    cut = []
    plan = plan_mod.load(DATA / "plan-v1.json")
    plan = dc_replace(plan, planning=Planning(5.0, 3, 6.0, True, "stub"))
    monkeypatch.setattr(harness.profiler, "profile", lambda *a, **k: prof)

    def planned_with(prof, prof_path, name, b, seed, work, budget_s=None):
        calls.append(f"plan-s{seed}")
        path = work / f"{name}-plan-s{seed}.json"
        plan_mod.save(plan, path)
        return {"plan": plan, "found": None, "prober": None, "wall_s": 5.0, "spent_s": 4.0 + seed, "log": ["x"],
                "path": path}
    monkeypatch.setattr(plan_quality, "planned_with", planned_with)
    monkeypatch.setattr(plan_quality.planning, "predict", lambda found, prober, s: found)
    monkeypatch.setattr(plan_quality.planning, "build_plan", lambda *a, **k: plan)

    def timed(tag, seed_or_limit):
        if len(calls) == cut_at and not cut:
            cut.append(tag)
            raise Cut
        calls.append(tag)
        t = 10.0 + zlib.crc32(tag.encode()) % 97 / 10
        return {"time_s": t, "reached": True, "iterations": int(10 * t), "final_accuracy": 0.9, "final_loss": 0.3,
                "sec_per_iter": 0.01, "started_at_s": 0.0}
    stub_measure(monkeypatch, lambda spec, work, tag, limit_s, start=None: timed(tag, limit_s))
    monkeypatch.setattr(harness, "measure_plan", lambda path, work, tag, limit_s: timed(tag, limit_s))


def stub_measure(monkeypatch, measure) -> None:
    """`measure` for every run of a row: the screening's (plan_quality's) and interleaved's (the harness's)."""
    monkeypatch.setattr(plan_quality, "measure", measure)
    monkeypatch.setattr(harness, "measure", measure)


def test_a_row_cut_off_and_started_again_is_the_row_of_an_uncut_run(tmp_path, monkeypatch):
    """bench() with --work-dir, cut off in the screening and started again on the same folder: the
    profile, the plans and the finished screening runs are read back (not run again), and the row
    equals an uncut run's. Fails if a journaled measurement runs again, if a read-back plan or
    screening row differs from the one measured, or if resuming changes the finalists."""
    from benchmarks.common import Journal

    b = harness.Bench(0.9, 30.0, False, (0.01, 0.1), (16,))
    uncut_calls, cut_calls = [], []
    stub_bench(monkeypatch, uncut_calls, None)
    (tmp_path / "a").mkdir()
    uncut = plan_quality.bench("lenet-digits", b, False, tmp_path / "a", seeds=(1, 2),
                               journal=Journal(tmp_path / "a" / "j.jsonl"))
    stub_bench(monkeypatch, cut_calls, cut_at=5)         # the plans and 3 screening runs
    (tmp_path / "b").mkdir()
    try:
        plan_quality.bench("lenet-digits", b, False, tmp_path / "b", seeds=(1, 2), journal=Journal(tmp_path / "b" / "j.jsonl"))
    except Cut:
        pass
    assert cut_calls == uncut_calls[:len(cut_calls)] and len(cut_calls) == 2 + 3
    again = plan_quality.bench("lenet-digits", b, False, tmp_path / "b", seeds=(1, 2),
                               journal=Journal(tmp_path / "b" / "j.jsonl"))
    assert cut_calls == uncut_calls        # nothing measured twice, nothing left out
    timed = ("plan", "profile_s", "profile_planning_frac", "recorded")     # paths, timing, the clock
    strip = lambda row: {k: v for k, v in row.items() if k not in timed}   # noqa: E731
    assert strip(again) == strip(uncut) and again["plan"]["per_seed"] == uncut["plan"]["per_seed"]


def test_a_journal_of_another_grid_is_refused(tmp_path, monkeypatch):
    """A screening row read back must be the grid point it now stands for (as after a change to the
    grid's rates): else the run stops, naming the journal. Fails if old times are kept for new points."""
    import pytest

    from benchmarks.common import Journal

    stub_bench(monkeypatch, [], None)
    journal = Journal(tmp_path / "j.jsonl")
    plan_quality.bench("lenet-digits", harness.Bench(0.9, 30.0, False, (0.01,), (16,)), False, tmp_path,
                       seeds=(1,), journal=journal)
    with pytest.raises(SystemExit, match="j.jsonl: screen0"):
        plan_quality.bench("lenet-digits", harness.Bench(0.9, 30.0, False, (0.03,), (16,)), False, tmp_path,
                           seeds=(1,), journal=Journal(tmp_path / "j.jsonl"))


def test_a_default_measured_again_at_a_longer_cap_keeps_the_rest_of_the_row(tmp_path, monkeypatch):
    """default_again (--default-cap-s): the default runs again at the longer cap, seed by seed beside
    the row's oracle configuration; the plan's figures stay, default / plan is the new default's
    over the kept plan's, and the oracle again is recorded apart. Fails if the plan or finalists
    run again, if the default keeps the row's cap, or if the oracle's figure is replaced."""
    b = harness.Bench(0.9, 30.0, False, (0.01, 0.1), (16,))
    stub_bench(monkeypatch, [], None)
    row = plan_quality.bench("lenet-digits", b, False, tmp_path, seeds=(1, 2))
    calls, limits = [], []
    stub_bench(monkeypatch, calls, None)
    measure = plan_quality.measure
    stub_measure(monkeypatch, lambda spec, work, tag, limit_s, start=None:
                 limits.append(limit_s) or measure(spec, work, tag, limit_s, start))
    again = plan_quality.default_again("lenet-digits", b, row, tmp_path, 90.0, seeds=(1, 2))
    assert calls == ["lenet-digits-default-s1", "lenet-digits-oracle-s1", "lenet-digits-default-s2",
                     "lenet-digits-oracle-s2"] and limits == [90.0] * 4
    assert again["default_cap_s"] == 90.0 == again["default"]["cap_s"]
    assert again["plan"] == row["plan"] and again["oracle"] == row["oracle"]
    assert again["default_over_plan"] == again["default"]["median_s"] / row["plan_time_to_target_s"]
    check = again["default_check"]
    assert check["oracle_before_s"] == row["oracle_time_to_target_s"]
    assert check["default_over_oracle_again"] == again["default"]["median_s"] / check["oracle_again"]["median_s"]


def test_every_workloads_grid_holds_at_least_24_configurations(sample_profile):
    """Issue 37: the oracle is the best of a grid of 24 or more fixed configurations; --quick's 12."""
    for name, b in harness.WORKLOADS.items():
        assert len(set(plan_quality.grid(sample_profile, b, False))) >= 24, name
    assert len(plan_quality.grid(sample_profile, harness.WORKLOADS["lenet-digits"], True)) == 12


def test_the_finalists_are_the_screening_points_that_reached_the_target_first(tmp_path, monkeypatch):
    """Two screening points stopped unreached at a time below every reached one's: the finalists are
    the four that reached (an unreached point was stopped at 1.5x the best so far), and the journal
    records them, so that a journal whose finalists were others is refused. Fails if the finalists
    are ranked by time alone."""
    import pytest

    from benchmarks.common import Journal

    b = harness.Bench(0.9, 30.0, False, (0.01, 0.1), (16,))
    stub_bench(monkeypatch, [], None)
    measure = plan_quality.measure

    def screened(spec, work, tag, limit_s, start=None):
        r = measure(spec, work, tag, limit_s, start)
        return {**r, "time_s": 5.0, "reached": False} if tag.endswith(("grid0", "grid1")) else r
    stub_measure(monkeypatch, screened)
    journal = Journal(tmp_path / "j.jsonl")
    row = plan_quality.bench("lenet-digits", b, False, tmp_path, seeds=(1,), journal=journal)
    configs = plan_quality.grid(harness.profiler.profile(), b, False)
    finalists = [{k: f[k] for k in plan_quality.describe(configs[0])} for f in row["finalists"]]
    assert len(finalists) == 4 and all(plan_quality.describe(c) not in finalists for c in configs[:2])
    assert journal.get("finalists") == finalists
    journal.put("finalists", finalists[::-1])
    with pytest.raises(SystemExit, match="j.jsonl: its finalists were"):
        plan_quality.bench("lenet-digits", b, False, tmp_path, seeds=(1,), journal=Journal(tmp_path / "j.jsonl"))


def test_a_replan_keeps_a_finalist_that_missed_by_its_configuration_not_its_place(tmp_path, monkeypatch):
    """--replan keeps a finalist that missed its cap in every run of the last row, matched by its
    configuration: with the last row's finalists in another order (an older ranking), the one that
    missed is still the one not run again. Fails if it is matched by its place."""
    b = harness.Bench(0.9, 30.0, False, (0.01, 0.1), (16,))
    stub_bench(monkeypatch, [], None)
    row = plan_quality.bench("lenet-digits", b, False, tmp_path, seeds=(1,))
    missed = {**row["finalists"][2], "runs": [{**r, "reached": False} for r in row["finalists"][2]["runs"]]}
    previous = {**row, "finalists": [missed] + [f for k, f in enumerate(row["finalists"]) if k != 2]}
    calls = []
    stub_bench(monkeypatch, calls, None)
    again = plan_quality.bench("lenet-digits", b, False, tmp_path, previous, seeds=(1,))
    assert "lenet-digits-best2-s1" not in calls and "lenet-digits-best0-s1" in calls
    assert again["finalists"][2]["runs"] == missed["runs"]
