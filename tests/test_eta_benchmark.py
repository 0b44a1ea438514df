"""benchmarks.eta: the live ETA replayed on finished runs' readings."""

import json

import pytest

from benchmarks import eta as bench
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
    assert 0.5 < on_time["ratio_0.25"] < 2.0
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
