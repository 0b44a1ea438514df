"""benchmarks/plan_quality.py: the rows it keeps beside a run of one workload."""

import json

from benchmarks import plan_quality


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
