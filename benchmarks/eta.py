"""Does the live ETA tell a run's time to target early? Replayed on real runs' readings.

    python -m benchmarks.eta DIR [DIR ...] [--quick]

`omnitune run` re-fits its time to target as test readings arrive (efficiency/eta.py) and shows
it with a band. This benchmark replays that estimate on finished runs: every run directory under
each DIR (a `summary.json` beside a `metrics.jsonl`, as `benchmarks.plan_quality --work-dir` and
`benchmarks.retune` keep them) whose run reached its target. From the readings up to a quarter
(and a half) of the run's training time to target, the ETA predicts the time to target (the
training so far plus the training left); the truth is the time the run reached it (its summary's
`time_to_target_s`, evaluations left out, as the ETA's clock). A run whose readings up to then
give no estimate counts as "no estimate", and one whose band has no top as "no band": neither
has held. A replay, not the thread: the live thread fits at most every 20 times its last fit's
CPU time, so it may show an older fit than this one.

Goal (issue 37): at a quarter of the run, the ETA within 15% of the actual time to target (median
over runs) and its band holding the actual time in at least 80% of runs.
--quick: the first 4 runs found. Writes benchmarks/results/eta.json (eta-quick.json with --quick).
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

from benchmarks.common import print_rows, write_results
from omnitune.core.target import Target, from_fields
from omnitune.efficiency import eta
from omnitune.runtime import summary as summary_mod
from omnitune.runtime.job import readings

SHARES = (0.25, 0.5)          # of the run's time to target at which the ETA is read
GOAL_ERROR, GOAL_HOLDS = 0.15, 0.80
QUICK_RUNS = 4
COLUMNS = ["run", "time_to_target_s", "at_0.25_s", "predicted_0.25_s", "ratio_0.25", "band_0.25", "holds_0.25",
           "ratio_0.5", "holds_0.5"]


def run_dirs(roots: list[Path]) -> list[Path]:
    """Every run directory under the roots (a summary.json beside a metrics.jsonl), in name order."""
    found = {p.parent for root in roots for p in root.rglob("summary.json") if (p.parent / "metrics.jsonl").is_file()}
    return sorted(found)


def replay(lines: list[dict], target: Target, actual_s: float, share: float) -> dict:
    """The ETA from the readings up to `share` of `actual_s` of training: its predicted time to
    target, that over the actual, and whether its band held the actual (None: no band, or a band
    with no top)."""
    seen = [x for x in lines if x.get("train_s", 0.0) <= share * actual_s]
    e = eta.estimate(seen, target)
    if e is None or e.eta_s is None:
        return {"at_s": seen[-1]["train_s"] if seen else 0.0, "readings": len(seen), "predicted_s": None,
                "ratio": None, "band_s": None, "holds": None, "note": e.note if e else "too few readings"}
    band = (e.train_s + e.band_s[0], e.train_s + e.band_s[1]) if e.band_s and e.band_s[1] is not None else None
    return {"at_s": e.train_s, "readings": len(seen), "predicted_s": e.train_s + e.eta_s,
            "ratio": (e.train_s + e.eta_s) / actual_s, "band_s": band,
            "holds": None if band is None else band[0] <= actual_s <= band[1], "note": e.note}


def row_of(run_dir: Path) -> dict | None:
    """A run's replays at each share; None where it did not reach its target or has no target."""
    s = summary_mod.load(run_dir / "summary.json")
    target = from_fields(s.target_accuracy, s.target_loss)
    if not s.reached_target or target is None:
        return None
    lines = readings(run_dir)
    row = {"run": str(run_dir), "time_to_target_s": s.time_to_target_s, "retunes": s.replans}
    for share in SHARES:
        r = replay(lines, target, s.time_to_target_s, share)
        row.update({f"at_{share}_s": r["at_s"], f"readings_{share}": r["readings"],
                    f"predicted_{share}_s": r["predicted_s"], f"ratio_{share}": r["ratio"],
                    f"band_{share}": "no estimate" if r["predicted_s"] is None else
                    "no band" if r["band_s"] is None else f"{r['band_s'][0]:.0f}-{r['band_s'][1]:.0f}",
                    f"holds_{share}": r["holds"], f"note_{share}": r["note"]})
    return row


def summarise(rows: list[dict], share: float) -> dict:
    """The median error of the predicted time to target (no estimate counted apart) and how many
    bands held, of all runs."""
    ratios = [r[f"ratio_{share}"] for r in rows if r[f"ratio_{share}"] is not None]
    held = sum(1 for r in rows if r[f"holds_{share}"])
    errors = [abs(x - 1.0) for x in ratios]
    return {"runs": len(rows), "estimates": len(ratios), "median_error": statistics.median(errors) if errors else None,
            "median_ratio": statistics.median(ratios) if ratios else None,
            "no_band": sum(1 for r in rows if r[f"ratio_{share}"] is not None and r[f"holds_{share}"] is None),
            "held": held, "held_share": held / len(rows) if rows else None}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("dirs", nargs="+", type=Path, help="folders holding finished run directories")
    parser.add_argument("--quick", action="store_true", help=f"the first {QUICK_RUNS} runs found")
    args = parser.parse_args(argv)
    missing = [str(d) for d in args.dirs if not d.is_dir()]
    if missing:
        sys.exit(f"error: not a folder: {', '.join(missing)}")
    dirs = run_dirs(args.dirs)
    rows, missed = [], 0
    for d in dirs[:QUICK_RUNS] if args.quick else dirs:
        row = row_of(d)
        missed += row is None
        rows += [row] if row else []
    if not rows:
        sys.exit(f"error: no run that reached its target under {', '.join(map(str, args.dirs))}")
    print_rows("the live ETA, replayed", rows, COLUMNS)
    shares = [{"share": share, **summarise(rows, share)} for share in SHARES]
    q = shares[0]
    goals_met = {"eta_within_15pct_at_a_quarter": q["median_error"] is not None and q["median_error"] <= GOAL_ERROR,
                 "band_holds_in_80pct": q["held_share"] is not None and q["held_share"] >= GOAL_HOLDS}
    for s in shares:
        print(f"at {s['share']:g} of the run: {s['estimates']} of {s['runs']} runs with an estimate, median error "
              f"{s['median_error'] if s['median_error'] is None else round(s['median_error'], 3)}, "
              f"band held in {s['held']} of {s['runs']} ({s['no_band']} with no band)")
    path = write_results("eta", {"quick": args.quick, "dirs": [str(d) for d in args.dirs], "not_reached": missed,
                                 "rows": rows, "shares": shares, "goals": {"median_error": GOAL_ERROR,
                                                                           "held_share": GOAL_HOLDS},
                                 "goals_met": goals_met})
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
