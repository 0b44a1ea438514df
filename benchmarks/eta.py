"""Does the live ETA tell a run's time to target early? Replayed on real runs' readings.

    python -m benchmarks.eta DIR [DIR ...] [--quick]
    python -m benchmarks.eta --collect DIR [--seeds N] [--only NAME ...]

`omnitune run` re-fits its time to target as test readings arrive (efficiency/eta.py) and shows
it with a band. This benchmark replays that estimate on finished runs: every run directory under
each DIR (a `summary.json` beside a `metrics.jsonl`, as `benchmarks.plan_quality --work-dir`,
`benchmarks.retune --keep` and `--collect` keep them) whose run reached its target. From the
readings (and the changes in place) up to a quarter and a half of the run's training time to
target, the ETA predicts the time to target (the training so far plus the training left); the
truth is the time the run reached it (its summary's `time_to_target_s`, evaluations left out, as
the ETA's clock). A run whose readings up to then give no estimate counts as "no estimate", and
one whose band has no top as "no band": neither has held.

Six models side by side, each with its own band: "power", a power law of the iterations fitted
to the readings past the first quarter (a curve that slows as it goes), "between", the geometric
mean of the pace's and the power law's iterations left, "pace-drift", the pace corrected by its
own drift (the finish times it said over the latest half of the run, extrapolated to where they
meet the clock), "curves", the ensemble of curve families
(efficiency/curves.py: exponential, power law, power law to a floor, weighted by how each
forecast the curve's own last third), "curves-recent", the same on the readings past the first
quarter of the iterations, and "pace", the recent pace alone (the ETA before them).
Each band's factors are the 10th and 90th percentiles of the training actually left over the
estimated, at every twentieth of each DEVELOP workload's run (`calibration`); the held-out
workloads' runs (every other workload: shapes-resnet, gru-count, denoise-waves), in no
calibration, give the reported figures. A band that holds by being wide says so: its median
width, the band's top over its bottom in time to target.

Goals (issue 85), on the held-out runs: at a quarter of the run the median error <= 15%, the band
holding in >= 80% of runs with a median width <= 2.5; at half the run the median error <= 10%;
the fitting's cost under 1% of the run (the live thread fits at most once every ETA_EVERY_S
seconds: the largest fit's CPU time over that).
--quick: the first 4 runs found. Writes benchmarks/results/eta.json (eta-quick.json with --quick).

`--collect DIR [--only NAME ...]` makes runs to replay: on each workload of COLLECT (or those
named), one worker at the batches and rates listed (ones that reached the target within the cap in plan_quality's screening), seeds
interleaved, each to plan_quality's cap for the workload.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

from benchmarks import harness
from benchmarks.common import Journal, print_rows, recorded, write_results
from omnitune.core.protocols import Sync
from omnitune.core.target import Target, from_fields
from omnitune.efficiency import eta
from omnitune.planning import Config
from omnitune.runtime import summary as summary_mod

SHARES = (0.25, 0.5)          # of the run's time to target at which the ETA is read
MODELS = ("pace", "power", "between", "backtested", "pace-drift", "curves", "curves-recent")   # the first is eta.estimate's own: unprefixed
GOALS = {"median_error_0.25": 0.15, "held_share_0.25": 0.80, "median_width_0.25": 2.5, "median_error_0.5": 0.10,
         "cost_share": 0.01}
QUICK_RUNS = 4
ETA_EVERY_S = 2.0             # the live thread's least interval between fits (cli/commands.py)
# Per workload, one worker's (batch, lr): each reached the target within the cap in plan_quality's
# screening or finalists (benchmarks/results/plan_quality.json), or in benchmarks.retune's plans.
COLLECT = {"lenet-digits": ((16, 0.01), (64, 0.03)), "cnn1d-mnist1d": ((16, 0.01), (64, 0.03)),
           "teacher-mlp": ((256, 0.1), (256, 0.03), (64, 0.03)), "charlm-stdlib": ((8, 0.003),),
           "shapes-resnet": ((32, 0.1), (32, 0.03)), "gru-count": ((64, 0.03), (64, 0.01)),
           "denoise-waves": ((64, 0.1), (64, 0.03))}
DEVELOP = ("lenet-digits", "cnn1d-mnist1d", "teacher-mlp", "charlm-stdlib")   # the bands are calibrated on these
COLUMNS = ["run", "time_to_target_s", "at_0.25_s", "predicted_0.25_s", "ratio_0.25", "band_0.25", "holds_0.25",
           "curves_ratio_0.25", "curves-recent_ratio_0.25", "ratio_0.5", "curves_ratio_0.5"]


def run_dirs(roots: list[Path]) -> list[Path]:
    """Every run directory under the roots (a summary.json beside a metrics.jsonl), in name order."""
    found = {p.parent for root in roots for p in root.rglob("summary.json") if (p.parent / "metrics.jsonl").is_file()}
    return sorted(found)


def replay(lines: list[dict], target: Target, actual_s: float, share: float, model: str = MODELS[0],
           band: tuple[float, float] = eta.BAND) -> dict:
    """The ETA from the lines up to `share` of `actual_s` of training: its predicted time to
    target, that over the actual, whether its band held the actual (None: no band, or a band with
    no top), the band's width (top over bottom), and the fit's CPU seconds."""
    seen = upto(lines, share * actual_s)
    began = time.process_time()
    e = eta.estimate(seen, target, model=model, band=band)
    cost = time.process_time() - began
    readings = len(eta.attempt_readings(seen, target))
    if e is None or e.eta_s is None:
        return {"at_s": seen[-1]["train_s"] if seen else 0.0, "readings": readings, "predicted_s": None,
                "ratio": None, "band_s": None, "holds": None, "width": None, "cost_s": cost,
                "note": e.note if e else "too few readings"}
    bounds = (e.train_s + e.band_s[0], e.train_s + e.band_s[1]) if e.band_s and e.band_s[1] is not None else None
    return {"at_s": e.train_s, "readings": readings, "predicted_s": e.train_s + e.eta_s,
            "ratio": (e.train_s + e.eta_s) / actual_s, "band_s": bounds,
            "holds": None if bounds is None else bounds[0] <= actual_s <= bounds[1],
            "width": None if bounds is None or bounds[0] <= 0 else bounds[1] / bounds[0], "cost_s": cost,
            "note": e.note}


def finished(run_dir: Path) -> tuple[summary_mod.RunSummary, Target, list[dict]] | None:
    """A run's summary, target and metrics lines (its readings and its changes in place); None
    where it did not reach its target or has none."""
    s = summary_mod.load(run_dir / "summary.json")
    target = from_fields(s.target_accuracy, s.target_loss)
    if not s.reached_target or target is None:
        return None
    text = (run_dir / "metrics.jsonl").read_text()
    return s, target, [json.loads(x) for x in text.splitlines() if x.strip()]


def upto(lines: list[dict], train_s: float) -> list[dict]:
    """The lines written by `train_s` of training."""
    return [x for x in lines if x.get("train_s", 0.0) <= train_s]


def row_of(run_dir: Path, bands: dict[str, tuple[float, float]] | None = None) -> dict | None:
    """A run's replays by each model at each share; None where it did not reach its target or has
    no target. `bands`: each model's band factors (default eta.BAND)."""
    if (run := finished(run_dir)) is None:
        return None
    s, target, lines = run
    name = workload_of(run_dir)
    first = next((x.get("time") for x in lines if x.get("time")), None)
    row = {"run": str(run_dir), "workload": name, "develop": name in DEVELOP, "time_to_target_s": s.time_to_target_s,
           "retunes": s.replans, "changes": sum(1 for x in lines if x.get("event") == "change"),
           "run_date": datetime.fromtimestamp(first, timezone.utc).isoformat(timespec="seconds") if first else None}
    for model in MODELS:
        prefix = "" if model == MODELS[0] else f"{model}_"
        for share in SHARES:
            r = replay(lines, target, s.time_to_target_s, share, model, (bands or {}).get(model, eta.BAND))
            row.update({f"{prefix}at_{share}_s": r["at_s"], f"{prefix}readings_{share}": r["readings"],
                        f"{prefix}predicted_{share}_s": r["predicted_s"], f"{prefix}ratio_{share}": r["ratio"],
                        f"{prefix}band_{share}": "no estimate" if r["predicted_s"] is None else
                        "no band" if r["band_s"] is None else f"{r['band_s'][0]:.0f}-{r['band_s'][1]:.0f}",
                        f"{prefix}holds_{share}": r["holds"], f"{prefix}width_{share}": r["width"],
                        f"{prefix}note_{share}": r["note"]})
        end = replay(lines, target, s.time_to_target_s, 0.999, model)       # the largest fit: every reading
        row[f"{prefix}cost_s"] = end["cost_s"]
    return row


def summarise(rows: list[dict], share: float, model: str = MODELS[0]) -> dict:
    """A model's median error of the predicted time to target (no estimate counted apart), how
    many bands held, and their median width, over `rows`."""
    p = "" if model == MODELS[0] else f"{model}_"
    ratios = [r[f"{p}ratio_{share}"] for r in rows if r[f"{p}ratio_{share}"] is not None]
    widths = [r[f"{p}width_{share}"] for r in rows if r.get(f"{p}width_{share}") is not None]
    held = sum(1 for r in rows if r[f"{p}holds_{share}"])
    errors = [abs(x - 1.0) for x in ratios]
    return {"model": model, "runs": len(rows), "estimates": len(ratios),
            "median_error": statistics.median(errors) if errors else None,
            "median_ratio": statistics.median(ratios) if ratios else None,
            "no_band": sum(1 for r in rows if r[f"{p}ratio_{share}"] is not None and r[f"{p}holds_{share}"] is None),
            "held": held, "held_share": held / len(rows) if rows else None,
            "median_width": statistics.median(widths) if widths else None}


CALIBRATION_SHARES = tuple(k / 20 for k in range(1, 20))


def calibration(run_dirs: list[Path], model: str = MODELS[0]) -> dict:
    """The training actually left over the ETA's (eta_s), at every twentieth of each run's time to
    target: its 10th, 50th and 90th percentiles over the runs given (those that reached their
    target): a model's band."""
    ratios = []
    for s, target, lines in filter(None, map(finished, run_dirs)):
        for share in CALIBRATION_SHARES:
            e = eta.estimate(upto(lines, share * s.time_to_target_s), target, model=model)
            if e is not None and e.eta_s:
                ratios.append((s.time_to_target_s - e.train_s) / e.eta_s)
    if len(ratios) < 2:
        return {"model": model, "points": len(ratios)}
    q = statistics.quantiles(ratios, n=10, method="inclusive")
    return {"model": model, "points": len(ratios), "q10": q[0], "median": statistics.median(ratios), "q90": q[-1],
            "runs": [str(d) for d in run_dirs]}


def is_plan_run(run_dir: Path) -> bool:
    """Whether a run is a plan's, as `omnitune run` runs it (plan_quality's NAME-plan-sN): from the
    checkpoint its chosen probe handed on, re-tuned during the run."""
    return "-plan-s" in run_dir.name


def workload_of(run_dir: Path) -> str | None:
    """The workload a run directory's name starts with (plan_quality's, retune's and collect's names)."""
    return next((n for n in sorted(harness.WORKLOADS, key=len, reverse=True) if run_dir.name.startswith(n)), None)


def collect(work: Path, seeds: tuple[int, ...], only: tuple[str, ...] = ()) -> None:
    """COLLECT's runs (of the workloads `only` names, or all) into `work`, seed by seed across
    each workload's configurations; a journal per workload (work/NAME.journal.jsonl) lets the
    same command go on where it was cut off."""
    for name, points in COLLECT.items():
        if only and name not in only:
            continue
        b = harness.WORKLOADS[name]
        journal = Journal(work / f"{name}.journal.jsonl")
        prof, _, _ = harness.journaled_profile(journal, name, b, False, work)
        one = prof.cluster.layouts.get("one-worker", prof.cluster.layouts["one-per-core"][:1])
        specs = {f"{name}-b{batch}-lr{lr:g}": harness.fixed_spec(
                     prof, b.spec(name), b.goal, Config("one-worker", Sync(), (one,), batch, lr, 0.9), b.cap_s)
                 for batch, lr in points}
        harness.interleaved(specs, work, b.cap_s, seeds, on_run=harness.said, journal=journal)


def goals(shares: list[dict], cost_s: float | None) -> dict:
    """Each goal against the adopted model's figures on the runs the goals are judged on."""
    def of(share):
        return next(s for s in shares if s["share"] == share and s["model"] == MODELS[0] and s["judged"])
    q, h = of(0.25), of(0.5)
    def within(x, goal):
        return x is not None and x <= goal
    return {"eta_within_15pct_at_a_quarter": within(q["median_error"], GOALS["median_error_0.25"]),
            "band_holds_in_80pct": q["held_share"] is not None and q["held_share"] >= GOALS["held_share_0.25"],
            "band_width_at_most_2.5": within(q["median_width"], GOALS["median_width_0.25"]),
            "eta_within_10pct_at_half": within(h["median_error"], GOALS["median_error_0.5"]),
            "cost_under_1pct": within(None if cost_s is None else cost_s / ETA_EVERY_S, GOALS["cost_share"])}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("dirs", nargs="*", type=Path, help="folders holding finished run directories")
    parser.add_argument("--quick", action="store_true", help=f"the first {QUICK_RUNS} runs found")
    parser.add_argument("--collect", type=Path, metavar="DIR", help="make the runs to replay in DIR (kept), "
                        "then replay them")
    parser.add_argument("--seeds", type=int, default=2, help="with --collect: seeds 1 to this (default 2)")
    parser.add_argument("--only", action="append", choices=sorted(COLLECT), help="with --collect: this "
                        "workload's runs only (repeatable)")
    args = parser.parse_args(argv)
    if args.collect is not None:
        if args.seeds < 1:
            parser.error(f"--seeds must be at least 1, got {args.seeds}")
        args.collect.mkdir(parents=True, exist_ok=True)
        collect(args.collect.resolve(), tuple(range(1, args.seeds + 1)), tuple(args.only or ()))
        args.dirs = [*args.dirs, args.collect]
    if not args.dirs:
        parser.error("give folders of finished runs, or --collect DIR")
    missing = [str(d) for d in args.dirs if not d.is_dir()]
    if missing:
        sys.exit(f"error: not a folder: {', '.join(missing)}")
    dirs = run_dirs(args.dirs)
    dirs = dirs[:QUICK_RUNS] if args.quick else dirs
    reached = [d for d in dirs if finished(d) is not None]
    if not reached:
        sys.exit(f"error: no run that reached its target under {', '.join(map(str, args.dirs))}")
    develop = [d for d in reached if workload_of(d) in DEVELOP]
    calibrated = {m: calibration(develop, m) for m in MODELS}
    bands = {m: (c["q10"], c["q90"]) for m, c in calibrated.items() if "q10" in c}
    rows = [row_of(d, bands) for d in reached]
    print_rows("the live ETA, replayed (the recent pace; curves: the ensemble)", rows, COLUMNS)
    judged = "held out" if any(not r["develop"] for r in rows) else "all"
    sets = {"develop": [r for r in rows if r["develop"]], "held out": [r for r in rows if not r["develop"]], "all": rows,
            "plans": [r for r in rows if is_plan_run(Path(r["run"]))],
            "with changes": [r for r in rows if r["changes"]]}
    shares = [{"share": share, "runs_of": name, "judged": name == judged, **summarise(of, share, model)}
              for share in SHARES for model in MODELS for name, of in sets.items() if of]
    costs = [r["cost_s"] for r in sets[judged]]
    cost_s = statistics.median(costs) if costs else None
    for s in shares:
        print(f"{s['model']} at {s['share']:g} ({s['runs_of']}): {s['estimates']} of {s['runs']} estimated, median "
              f"error {_num(s['median_error'])}, ratio {_num(s['median_ratio'])}, band held in {s['held']} of "
              f"{s['runs']}, width {_num(s['median_width'])}")
    met = goals(shares, cost_s)
    path = write_results("eta", {"quick": args.quick, "dirs": [str(d) for d in args.dirs],
                                 "not_reached": len(dirs) - len(reached), "rows": rows, "shares": shares,
                                 "calibration": list(calibrated.values()), "bands": bands,
                                 "held_out_runs": [r["run"] for r in sets["held out"]],
                                 "cost_s": cost_s, "goals": GOALS, "goals_judged_on": judged, "goals_met": met,
                                 "replayed": recorded()})
    print(f"bands (training left, actual over estimated, 10th-90th percentile on {len(develop)} develop runs): "
          + ", ".join(f"{m} {b[0]:.2f}-{b[1]:.2f}" for m, b in bands.items()))
    print(f"goals on the {judged} runs: {met}")
    print(f"wrote {path}")


def _num(x) -> str:
    return "-" if x is None else f"{x:.3f}"


if __name__ == "__main__":
    main()
