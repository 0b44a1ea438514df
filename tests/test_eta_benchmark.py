"""benchmarks.eta: the live ETA replayed on finished runs' readings."""

import json

import pytest

from benchmarks import common, eta as bench
from omnitune.runtime.summary import RunSummary, save


def run_dir(root, name: str, reached_at: float | None, curve_exponent: float = -0.5):
    """A run directory: readings every 50 iterations at 10 ms each of a curve 0.99 - 0.9 (it /
    10)^e (0.95 at 5,063 iterations for e = -0.5), and a summary saying it reached 0.95 at
    `reached_at` seconds of training (None: it did not)."""
    d = root / name
    d.mkdir(parents=True)
    lines = [{"attempt": 0, "iteration": it, "train_s": it * 0.01, "time": 1e9 + it,
              "test_accuracy": 0.99 - 0.9 * (it / 10) ** curve_exponent} for it in range(50, 5100, 50)]
    (d / "metrics.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))
    save(RunSummary(1, reached_at is not None, reached_at, reached_at, 5100, 0.95, 0.95, None, 0.01, 0.01, 51.0, 0.0,
                    "plan.json", "sync", 1, (5100,), 0.0, 100), d / "summary.json")
    return d


def test_the_replay_reads_only_the_readings_up_to_the_share_and_compares_with_the_truth(tmp_path):
    """At a quarter of a 50.6-s run the replay sees the readings up to 12.7 s (25 of them), and
    its predicted time to target is the training so far plus the ETA. The same curve with a truth
    twice as late reads a ratio half as large. Fails if the replay reads past the share, or
    compares the ETA (the time left) with the whole time to target."""
    on_time = bench.row_of(run_dir(tmp_path, "a", 50.63))
    late = bench.row_of(run_dir(tmp_path, "b", 101.26))
    assert on_time["readings_0.25"] == 25 and on_time["at_0.25_s"] == pytest.approx(12.5)
    assert on_time["ratio_0.25"] is not None
    assert on_time["predicted_0.25_s"] == pytest.approx(on_time["ratio_0.25"] * 50.63)
    assert late["ratio_0.5"] == pytest.approx(bench.row_of(run_dir(tmp_path, "c", 202.52))["ratio_0.25"] * 2, rel=1e-6)


def test_runs_that_missed_or_gave_no_estimate_are_counted_apart(tmp_path):
    """A run that did not reach its target is no row; one whose readings up to the share are too
    few has no estimate, which neither counts toward the median nor holds. Fails if a missed run
    is read as one, or a run with no estimate counts as held."""
    run_dir(tmp_path, "missed", None)
    run_dir(tmp_path, "early", 0.3)             # a quarter of 0.3 s holds no reading
    run_dir(tmp_path, "ok", 50.63)
    rows = [r for d in bench.run_dirs([tmp_path]) if (r := bench.row_of(d))]
    assert [r["run"].rsplit("/", 1)[-1] for r in rows] == ["early", "ok"]
    early = rows[0]
    assert early["ratio_0.25"] is None and early["band_0.25"] == "no estimate" and early["holds_0.25"] is None
    s = bench.summarise(rows, 0.25)
    assert s["runs"] == 2 and s["estimates"] == 1 and s["held"] <= 1 and s["held_share"] <= 0.5


def test_a_folder_with_no_run_is_a_one_line_error(tmp_path):
    with pytest.raises(SystemExit, match="no run that reached"):
        bench.main([str(tmp_path)])
    with pytest.raises(SystemExit, match="not a folder"):
        bench.main([str(tmp_path / "nowhere")])


def test_the_band_is_calibrated_on_the_develop_runs_and_judged_on_the_held_out_ones(tmp_path, monkeypatch):
    """A run is develop or held out by its workload's name; calibration reads the training left,
    actual over the ETA's, at every twentieth of each run; the goals are judged on the held-out
    runs. Fails if the split or the ratio's direction is lost (a truth twice as late doubles the
    median), or if the plans' runs are not told apart by name."""
    dev = run_dir(tmp_path, "teacher-mlp-b256-lr0.1-s1", 50.63)
    run_dir(tmp_path, "shapes-resnet-b32-lr0.1-s1", 50.63)
    rows = [bench.row_of(d) for d in bench.run_dirs([tmp_path])]
    assert [(r["workload"], r["develop"]) for r in rows] == [("shapes-resnet", False), ("teacher-mlp", True)]
    once = bench.calibration([dev])
    assert once["points"] > 10 and once["q10"] <= once["median"] <= once["q90"]
    late = bench.calibration([run_dir(tmp_path / "late", "teacher-mlp-late", 101.26)])
    assert late["median"] > 2 * once["median"]
    run_dir(tmp_path, "teacher-mlp-plan-s1", 50.63)         # a plan's run (plan_quality's name), counted apart too
    monkeypatch.setattr(common, "RESULTS", tmp_path / "results")
    bench.main([str(tmp_path)])
    written = json.loads((tmp_path / "results" / "eta.json").read_text())
    assert written["goals_judged_on"] == "held out"
    runs = {s["runs_of"]: s["runs"] for s in written["shares"] if s["share"] == 0.25}
    assert runs == {"develop": 3, "held out": 1, "all": 4, "plans": 1}      # develop: the late run too
