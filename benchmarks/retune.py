"""Does re-tuning during the run pay? One plan, run re-tuned and pinned, on real runs.

    python -m benchmarks.retune [--quick] [--only NAME] [--seeds N] [--arms re-tuned,pinned] [--plan PLAN]

For each workload: a profile and `omnitune plan` (seed 0), then the plan's run from its start
checkpoint in several ways, seed by seed across them (interleaved, so the machine's drift falls on
all alike, and each seed in a rotated order, so no arm always runs first): re-tuned as `omnitune
run --no-in-place` re-tunes (rates, momenta and, priced by the profile's hardware model, twice
and half the batch), re-tuned over rates and momenta only (the pauses before batches were candidates),
pinned (`--no-retune`), tuned in place with no pause (`--in-place --no-retune`), and tuned in
place with pauses only as insurance (`omnitune run`'s default, whose pauses read less:
pause.lean_read), and so with pauses that read every candidate ("tuned-read"). Beside each arm's median time,
its iterations to target over the pinned run's of the same seed (`paired_iterations`). A re-tuned run's time is what the user waits for: its training to the
target plus its pauses (probes and restarts). A run that misses its target counts as its time
limit. Rows: the median time and min-max of each, the ratios, the pauses and what they cost, and
the rates and batches the pauses chose.

Workloads: teacher-mlp (develop), gru-count, denoise-waves and pointset-shapes (held out; the
last written after every rule it judges), each run limited to
240 s, 3 seeds; with --quick, lenet-digits to 0.97, 30 s, one seed (too short to pause: a
check of the glue). --only names any of benchmarks.harness's workloads (gru-count, held out,
too); --arms runs some of the arms (the others' rows stay); --keep DIR keeps each run's directory there (its metrics.jsonl
and summary.json: runs that `benchmarks.eta` replays). Writes benchmarks/results/retune.json
(retune-quick.json with --quick).

    python -m benchmarks.retune --only teacher-mlp --plan PLAN.json [--arms ...]

runs the arms on a plan `omnitune plan` wrote (its start checkpoint and profile beside it), not
on one planned here: how re-tuning copes with a given plan, say a poor one, without waiting for
the planner to make it. Writes benchmarks/results/retune-plan-bBATCH-lrLR.json (the plan's).
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import tempfile
from dataclasses import replace
from datetime import datetime, timezone
from pathlib import Path

from benchmarks.common import RESULTS, print_rows, recorded, write_results
from benchmarks.harness import WORKLOADS, describe_plan, planned_with
from omnitune import api
from omnitune.core import plan as plan_mod, profile as profile_mod
from omnitune.core.change import changes
from omnitune.core.cluster import local_cluster
from omnitune.profiling import profiler
from omnitune.runtime import job

FULL = ("teacher-mlp", "gru-count", "denoise-waves", "pointset-shapes")
QUICK = ("lenet-digits",)
COLUMNS = ["workload", "config", "median_s", "spread_s", "reached", "iters_over_pinned", "pauses", "pause_s", "changes", "lrs", "batches"]
# What the run may change: everything at pauses, on a schedule and as insurance (`--no-in-place`);
# lr and momentum at pauses; nothing; with no pause, what the in-run tuner changes in place
# (job.IN_PLACE: stability and cool-down); or in place with pauses only as insurance, at a
# divergence, a stall or a pace that misses the limit (`omnitune run`'s default, whose pauses read
# less: pause.lean_read); or so, with pauses that read every candidate as re-tuned ones do.
ARMS = ("re-tuned", "rates only", "pinned", "in place", "tuned", "tuned-read")


def one_run(plan_path: Path, work: Path, tag: str, limit_s: float, arm: str) -> dict:
    options = job.RunOptions(max_time_s=limit_s, retune=arm not in ("pinned", "in place"),
                             in_place=job.IN_PLACE if arm in ("in place", "tuned", "tuned-read") else None)
    replan, first_pause_s = api.retuner(plan_path, options.replan_probe_iters, arm in ("re-tuned", "tuned", "tuned-read"),
                                        lean=arm == "tuned") if options.retune else (None, None)
    s = job.run(str(plan_path), str(work / tag), options, replan, first_pause_s)
    pauses = work / tag / "replans.jsonl"
    chosen = [json.loads(line) for line in pauses.read_text().splitlines()] if pauses.is_file() else []
    metrics = work / tag / "metrics.jsonl"
    lines = [json.loads(x) for x in metrics.read_text().splitlines()] if metrics.is_file() else []
    return {"time_s": (s.time_to_target_s + s.replan_s) if s.reached_target else limit_s,
            "reached": s.reached_target, "iterations": s.iterations if s.reached_target else None,
            "pauses": s.replans, "pause_s": s.replan_s,
            "changes": [{k: c[k] for k in ("iteration", "train_s", "why", "lr", "batch_size")} for c in changes(lines)],
            "train_s": s.wall_s - s.eval_s, "stalled_at_s": s.stalled_at_s, "decisions": chosen}


def bench(name: str, limit_s: float, seeds: tuple[int, ...], work: Path, quick: bool,
          arms: tuple[str, ...] = ARMS, given: Path | None = None) -> list[dict]:
    if given is None:
        prof = profiler.profile(local_cluster(), WORKLOADS[name].spec(name), None, profiler.Settings.make(quick),
                                work / "logs")
        prof_path = work / f"{name}.profile.json"
        profile_mod.save(prof, prof_path)
        planned = planned_with(prof, prof_path, name, WORKLOADS[name], 0, work)
    else:
        planned = given_plan(given, work)
    runs: dict[str, list[dict]] = {arm: [] for arm in arms}
    for k, seed in enumerate(seeds):         # seed by seed across the arms, each seed in another order
        plan = plan_mod.load(planned["path"])          # beside it: its start checkpoint, shared
        path = work / f"{name}-plan-seed{seed}.json"
        plan_mod.save(replace(plan, spec=replace(plan.spec, seed=seed)), path)
        for arm in arms[k % len(arms):] + arms[:k % len(arms)]:
            runs[arm].append(one_run(path, work, f"{name}-{arm.replace(' ', '-')}-s{seed}", limit_s, arm))
            print(f"{name} {arm} seed {seed}: {runs[arm][-1]['time_s']:.1f}s", flush=True)
    rows = []
    for arm, rs in runs.items():
        times = [r["time_s"] for r in rs]
        switched = [d["after"] for r in rs for d in r["decisions"] if d["switched"]]
        rows.append({"workload": name, "config": arm, "median_s": statistics.median(times),
                     "spread_s": [min(times), max(times)], "reached": f"{sum(r['reached'] for r in rs)} of {len(rs)}",
                     "pauses": statistics.median(r["pauses"] for r in rs),
                     "pause_s": statistics.median(r["pause_s"] for r in rs),
                     "changes": statistics.median(len(r["changes"]) for r in rs),
                     "lrs": sorted({a["lr"] for a in switched}),
                     "batches": sorted({sum(a["batch_size"].values()) for a in switched if "batch_size" in a}),
                     "runs": rs, "plan": describe_plan(planned["plan"])})
    by = {r["config"]: r for r in rows}
    for arm, r in by.items():       # the same seed's runs side by side: the machine's drift is not in iterations
        if arm != "pinned" and "pinned" in by:
            r["iters_over_pinned"] = paired_iterations(r["runs"], by["pinned"]["runs"])
    for arm, over, key in (("re-tuned", "pinned", "retuned_over_pinned"), ("re-tuned", "rates only", "batches_over_rates_only"),
                           ("rates only", "pinned", "retuned_over_pinned"), ("in place", "pinned", "in_place_over_pinned"),
                           ("in place", "re-tuned", "in_place_over_retuned"), ("tuned", "pinned", "tuned_over_pinned"),
                           ("tuned", "re-tuned", "tuned_over_retuned"), ("tuned", "tuned-read", "lean_over_full_reads")):
        if arm in by and over in by:        # a median that is a miss is only a bound: no ratio
            by[arm][key] = (by[arm]["median_s"] / by[over]["median_s"]
                            if median_reached(by[arm]["runs"]) and median_reached(by[over]["runs"]) else None)
    for r in rows:
        r["held_out"] = WORKLOADS[name].held_out
        r["recorded"] = recorded()        # the row's own: a run of --only keeps the rows of other sessions
    return rows


def paired_iterations(runs: list[dict], pinned: list[dict]) -> float | None:
    """The median over seeds of a run's iterations to target over the pinned run's of the same
    seed (both reached): what the changes did to the iterations, free of the seconds an
    iteration took on the machine at the time, which moved a run's time by up to a fifth where
    both made the same iterations (2026-12-06). On one worker an iteration is a model update; on
    several a step of every replica. None where no seed reached in both."""
    ratios = [r["iterations"] / p["iterations"] for r, p in zip(runs, pinned)
              if r.get("iterations") and p.get("iterations")]
    return statistics.median(ratios) if ratios else None


def given_plan(path: Path, work: Path) -> dict:
    """`--plan`: a plan written by `omnitune plan`, copied into `work` with its start checkpoint
    (beside it) and its profile (put beside the copy, which names it so), so that each arm runs
    from the same start and its pauses price batches with the same hardware model."""
    plan = plan_mod.load(path)
    if plan.start and (path.parent / plan.start).is_file():
        shutil.copy(path.parent / plan.start, work / plan.start)
    # The profile lands beside the copy, which names it so (api.profile_path looks there first).
    found = api.profile_path(plan, path)
    if found is not None:
        shutil.copy(found, work / found.name)
        plan = replace(plan, profile=found.name)
    plan_mod.save(plan, work / path.name)
    return {"path": work / path.name, "plan": plan}


def given_name(plan) -> str:
    """The results' name for a given plan's runs: retune-plan-b64-lr0.03 for one at batch 64 a
    device and lr 0.03."""
    return f"retune-plan-b{plan.spec.batch_size[plan.spec.devices[0].id]}-lr{plan.spec.lr:g}"


def median_reached(runs: list[dict]) -> bool:
    """Whether the runs' median time is of runs that reached the target (the middle one, or both
    middle ones): a miss counts as the limit, and a re-tuned run that reached it may take longer,
    its pauses counted, so a majority of hits does not make the median one."""
    ordered = sorted(runs, key=lambda r: r["time_s"])
    return all(r["reached"] for r in ordered[(len(ordered) - 1) // 2: len(ordered) // 2 + 1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="lenet-digits, one seed: a check of the glue")
    parser.add_argument("--only", action="append", help="a workload (repeatable)")
    parser.add_argument("--seeds", type=int, default=None, help="seeds per configuration (default 3; 1 with --quick)")
    parser.add_argument("--arms", default=",".join(ARMS), help=f"which of {', '.join(ARMS)} to run (comma-separated)")
    parser.add_argument("--plan", type=Path, help="with one --only: run the arms on this plan (its start checkpoint "
                        "and profile beside it) instead of profiling and planning; writes retune-plan-bBATCH-lrLR.json")
    parser.add_argument("--keep", type=Path, help="keep the run directories here (for benchmarks.eta)")
    args = parser.parse_args()
    arms = tuple(a.strip() for a in args.arms.split(","))
    if not arms or any(a not in ARMS for a in arms):
        parser.error(f"--arms: each of {', '.join(ARMS)}, got {args.arms!r}")
    if any(k not in WORKLOADS for k in args.only or ()):
        parser.error(f"--only: one of {', '.join(WORKLOADS)}")
    workloads = list(args.only) if args.only else list(QUICK if args.quick else FULL)
    if args.plan is not None and (len(workloads) != 1 or not args.plan.is_file()
                                  or plan_mod.load(args.plan).spec.workload != WORKLOADS[workloads[0]].spec(workloads[0])):
        parser.error(f"--plan: a plan file for the one workload of --only, got {args.plan}")
    seeds = tuple(range(1, 1 + (args.seeds or (1 if args.quick else 3))))
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp) if args.keep is None else args.keep
        work.mkdir(parents=True, exist_ok=True)
        for name in workloads:
            rows += bench(name, WORKLOADS[name].cap_s, seeds, work, args.quick, arms, args.plan)
    if args.plan is not None:                 # a given plan's rows are kept apart from the benchmark's own
        for r in rows:
            r["given_plan"] = str(args.plan)
    elif args.only and not args.quick:        # the rows of the last full run that this one did not run stay
        last = RESULTS / "retune.json"
        kept = json.loads(last.read_text())["rows"] if last.is_file() else []
        rows = [r for r in kept if r["workload"] in FULL and (r["workload"] not in workloads or r["config"] not in arms)] \
            + rows
    print_rows("re-tuned, over rates only, pinned, and tuned in place (median s; a miss counts as the limit)", rows, COLUMNS)
    name = given_name(plan_mod.load(args.plan)) if args.plan is not None else "retune"
    path = write_results(name, {"quick": args.quick, "measured_at": datetime.now(timezone.utc).isoformat(
        timespec="seconds"), "seeds": list(seeds), "rows": rows})
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
