"""Does the live ETA tell a run's time to target early? Replayed on real runs' readings.

    python -m benchmarks.eta DIR [DIR ...] [--quick]
    python -m benchmarks.eta --collect DIR [--seeds N]

`omnitune run` re-fits its time to target as test readings arrive (efficiency/eta.py) and shows
it with a band. This benchmark replays that estimate on finished runs: every run directory under
each DIR (a `summary.json` beside a `metrics.jsonl`, as `benchmarks.plan_quality --work-dir` and
`benchmarks.retune` keep them) whose run reached its target. From the readings up to a quarter
(and a half) of the run's training time to target, the ETA predicts the time to target (the
training so far plus the training left); the truth is the time the run reached it (its summary's
`time_to_target_s`, evaluations left out, as the ETA's clock). A run whose readings up to then
give no estimate counts as "no estimate", and one whose band has no top as "no band": neither
has held. The plans' runs (plan_quality's NAME-plan-sN) are also counted apart: they start
from their probe's checkpoint and are re-tuned, as a user's run is. A replay, not the thread:
the live thread fits at most every 20 times its last fit's CPU time, so it may show an older
fit than this one.

The band's factors (eta.BAND) are read from the DEVELOP workloads' runs: at every twentieth of
each run, the training actually left over the ETA's, 10th and 90th percentiles over them all
(`calibration` in the JSON; a consistency check on those runs). The held-out workloads' runs
check them out of sample: each share's figures are given for the develop runs, the held-out ones
and all.

Goal (issue 37): at a quarter of the run, the ETA within 15% of the actual time to target (median
over runs) and its band holding the actual time in at least 80% of runs.
--quick: the first 4 runs found. Writes benchmarks/results/eta.json (eta-quick.json with --quick).

`--collect DIR` makes runs to replay: on each workload of COLLECT, one worker at the batches and
rates listed (ones that reached the target within the cap in plan_quality's screening), seeds
interleaved, each to plan_quality's cap for the workload. The ETA's rules are chosen on the
DEVELOP workloads' runs; the others' (shapes-resnet, gru-count) are reported apart, out of sample.
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

from benchmarks import plan_quality
from benchmarks.common import Journal, print_rows, write_results
from omnitune.core.protocols import Sync
from omnitune.core.target import Target, from_fields
from omnitune.efficiency import eta
from omnitune.planning import Config
from omnitune.runtime import summary as summary_mod
from omnitune.runtime.job import readings

SHARES = (0.25, 0.5)          # of the run's time to target at which the ETA is read
GOAL_ERROR, GOAL_HOLDS = 0.15, 0.80
QUICK_RUNS = 4
# Per workload, one worker's (batch, lr): each reached the target within the cap in plan_quality's
# screening or finalists (benchmarks/results/plan_quality.json).
COLLECT = {"lenet-digits": ((16, 0.01), (64, 0.03)), "cnn1d-mnist1d": ((16, 0.01), (64, 0.03)),
           "teacher-mlp": ((256, 0.1), (256, 0.03), (64, 0.03)), "charlm-stdlib": ((8, 0.003),),
           "shapes-resnet": ((32, 0.1), (32, 0.03)), "gru-count": ((64, 0.03), (64, 0.01))}
DEVELOP = ("lenet-digits", "cnn1d-mnist1d", "teacher-mlp", "charlm-stdlib")   # the ETA's rules are chosen on these
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
    seen = upto(lines, share * actual_s)
    e = eta.estimate(seen, target)
    if e is None or e.eta_s is None:
        return {"at_s": seen[-1]["train_s"] if seen else 0.0, "readings": len(seen), "predicted_s": None,
                "ratio": None, "band_s": None, "holds": None, "note": e.note if e else "too few readings"}
    band = (e.train_s + e.band_s[0], e.train_s + e.band_s[1]) if e.band_s and e.band_s[1] is not None else None
    return {"at_s": e.train_s, "readings": len(seen), "predicted_s": e.train_s + e.eta_s,
            "ratio": (e.train_s + e.eta_s) / actual_s, "band_s": band,
            "holds": None if band is None else band[0] <= actual_s <= band[1], "note": e.note}


def finished(run_dir: Path) -> tuple[summary_mod.RunSummary, Target, list[dict]] | None:
    """A run's summary, target and readings; None where it did not reach its target or has none."""
    s = summary_mod.load(run_dir / "summary.json")
    target = from_fields(s.target_accuracy, s.target_loss)
    if not s.reached_target or target is None:
        return None
    return s, target, readings(run_dir)


def upto(lines: list[dict], train_s: float) -> list[dict]:
    """The readings taken by `train_s` of training."""
    return [x for x in lines if x.get("train_s", 0.0) <= train_s]


def row_of(run_dir: Path) -> dict | None:
    """A run's replays at each share; None where it did not reach its target or has no target."""
    if (run := finished(run_dir)) is None:
        return None
    s, target, lines = run
    name = workload_of(run_dir)
    row = {"run": str(run_dir), "workload": name, "develop": name in DEVELOP, "time_to_target_s": s.time_to_target_s,
           "retunes": s.replans}
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


CALIBRATION_SHARES = tuple(k / 20 for k in range(1, 20))


def calibration(run_dirs: list[Path]) -> dict:
    """The training actually left over the ETA's (eta_s), at every twentieth of each run's time to
    target: its 10th, 50th and 90th percentiles over the runs given (those that reached their
    target), as eta.BAND is read."""
    ratios = []
    for s, target, lines in filter(None, map(finished, run_dirs)):
        for share in CALIBRATION_SHARES:
            e = eta.estimate(upto(lines, share * s.time_to_target_s), target)
            if e is not None and e.eta_s:
                ratios.append((s.time_to_target_s - e.train_s) / e.eta_s)
    if not ratios:
        return {"points": 0}
    q = statistics.quantiles(ratios, n=10, method="inclusive")
    return {"points": len(ratios), "q10": q[0], "median": statistics.median(ratios), "q90": q[-1],
            "band": list(eta.BAND)}


def is_plan_run(run_dir: Path) -> bool:
    """Whether a run is a plan's, as `omnitune run` runs it (plan_quality's NAME-plan-sN): from the
    checkpoint its chosen probe handed on, re-tuned during the run."""
    return "-plan-s" in run_dir.name


def workload_of(run_dir: Path) -> str | None:
    """The workload a run directory's name starts with (plan_quality's and collect's names)."""
    return next((n for n in sorted(plan_quality.WORKLOADS, key=len, reverse=True) if run_dir.name.startswith(n)), None)


def collect(work: Path, seeds: tuple[int, ...]) -> None:
    """COLLECT's runs into `work`, seed by seed across each workload's configurations; a journal
    per workload (work/NAME.journal.jsonl) lets the same command go on where it was cut off."""
    for name, points in COLLECT.items():
        b = plan_quality.WORKLOADS[name]
        journal = Journal(work / f"{name}.journal.jsonl")
        prof, _, _ = plan_quality.journaled_profile(journal, name, b, False, work)
        one = prof.cluster.layouts.get("one-worker", prof.cluster.layouts["one-per-core"][:1])
        specs = {f"{name}-b{batch}-lr{lr:g}": plan_quality.fixed_spec(
                     prof, b.spec(name), b.goal, Config("one-worker", Sync(), (one,), batch, lr, 0.9), b.cap_s)
                 for batch, lr in points}
        plan_quality.interleaved(specs, work, b.cap_s, seeds, on_run=plan_quality.said, journal=journal)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("dirs", nargs="*", type=Path, help="folders holding finished run directories")
    parser.add_argument("--quick", action="store_true", help=f"the first {QUICK_RUNS} runs found")
    parser.add_argument("--collect", type=Path, metavar="DIR", help="make the runs to replay in DIR (kept), "
                        "then replay them")
    parser.add_argument("--seeds", type=int, default=2, help="with --collect: seeds 1 to this (default 2)")
    args = parser.parse_args(argv)
    if args.collect is not None:
        if args.seeds < 1:
            parser.error(f"--seeds must be at least 1, got {args.seeds}")
        args.collect.mkdir(parents=True, exist_ok=True)
        collect(args.collect.resolve(), tuple(range(1, args.seeds + 1)))
        args.dirs = [*args.dirs, args.collect]
    if not args.dirs:
        parser.error("give folders of finished runs, or --collect DIR")
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
    sets = {"develop": [r for r in rows if r["develop"]], "held out": [r for r in rows if not r["develop"]], "all": rows,
            "plans": [r for r in rows if is_plan_run(Path(r["run"]))]}
    shares = [{"share": share, "runs_of": name, **summarise(of, share)}
              for share in SHARES for name, of in sets.items() if of]
    # The goals are judged out of sample where there are held-out runs.
    judged = "held out" if sets["held out"] else "all"
    q = next(s for s in shares if s["runs_of"] == judged)
    calibrated = calibration([Path(r["run"]) for r in sets["develop"]])
    goals_met = {"eta_within_15pct_at_a_quarter": q["median_error"] is not None and q["median_error"] <= GOAL_ERROR,
                 "band_holds_in_80pct": q["held_share"] is not None and q["held_share"] >= GOAL_HOLDS}
    for s in shares:
        print(f"at {s['share']:g} of the run ({s['runs_of']}): {s['estimates']} of {s['runs']} runs with an estimate, "
              f"median error "
              f"{s['median_error'] if s['median_error'] is None else round(s['median_error'], 3)}, "
              f"band held in {s['held']} of {s['runs']} ({s['no_band']} with no band)")
    path = write_results("eta", {"quick": args.quick, "dirs": [str(d) for d in args.dirs], "not_reached": missed,
                                 "rows": rows, "shares": shares, "calibration": calibrated, "goals": {"median_error": GOAL_ERROR,
                                                                           "held_share": GOAL_HOLDS},
                                 "goals_judged_on": judged, "goals_met": goals_met})
    if calibrated["points"]:
        print(f"the develop runs' training left, actual over the ETA's, at every twentieth ({calibrated['points']} "
              f"points): 10th percentile {calibrated['q10']:.2f}, median {calibrated['median']:.2f}, 90th "
              f"{calibrated['q90']:.2f} (eta.BAND: {eta.BAND[0]}, {eta.BAND[1]})")
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
