"""Does re-tuning during the run pay? One plan, run re-tuned and pinned, on real runs.

    python -m benchmarks.retune [--quick] [--only NAME] [--seeds N]

For each workload: a profile and `omnitune plan` (seed 0), then the plan's run from its start
checkpoint, with re-tuning (`omnitune run --retune`) and without (the default), seed by seed
across the two (interleaved, so the machine's drift falls on both alike). A re-tuned run's time
is what the user waits for: its training to the target plus its pauses (probes and restarts).
A run that misses its target counts as its time limit. Rows: the median time and min-max of
each, their ratio, the pauses and what they cost, and the rates the pauses chose.

Workloads: teacher-mlp to 0.985 and shapes-resnet to 0.9 (minutes-long here), each run limited
to 240 s, 3 seeds; with --quick, lenet-digits to 0.97, 30 s, one seed (too short to pause: a
check of the glue). Writes benchmarks/results/retune.json (retune-quick.json with --quick).
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
from dataclasses import replace
from functools import partial
from datetime import datetime, timezone
from pathlib import Path

from benchmarks.common import print_rows, write_results
from benchmarks.plan_quality import WORKLOADS, describe_plan, planned_with
from omnitune.core import plan as plan_mod, profile as profile_mod
from omnitune.core.cluster import local_cluster
from omnitune.probing.probe import retune
from omnitune.profiling import profiler
from omnitune.runtime import job

FULL = ("teacher-mlp", "shapes-resnet")
QUICK = ("lenet-digits",)
COLUMNS = ["workload", "config", "median_s", "spread_s", "reached", "pauses", "pause_s", "lrs"]


def one_run(plan_path: Path, work: Path, tag: str, limit_s: float, retuned: bool) -> dict:
    options = job.RunOptions(max_time_s=limit_s, retune=retuned)
    s = job.run(str(plan_path), str(work / tag), options,
                replan=partial(retune, iters=options.replan_probe_iters) if retuned else None)
    pauses = work / tag / "replans.jsonl"
    chosen = [json.loads(line) for line in pauses.read_text().splitlines()] if pauses.is_file() else []
    return {"time_s": (s.time_to_target_s + s.replan_s) if s.reached_target else limit_s,
            "reached": s.reached_target, "pauses": s.replans, "pause_s": s.replan_s,
            "train_s": s.wall_s - s.eval_s, "stalled_at_s": s.stalled_at_s, "decisions": chosen}


def bench(name: str, limit_s: float, seeds: tuple[int, ...], work: Path, quick: bool) -> list[dict]:
    prof = profiler.profile(local_cluster(), name, None, profiler.Settings.make(quick), work / "logs")
    prof_path = work / f"{name}.profile.json"
    profile_mod.save(prof, prof_path)
    planned = planned_with(prof, prof_path, name, WORKLOADS[name], 0, work)
    runs: dict[str, list[dict]] = {"re-tuned": [], "pinned": []}
    for seed in seeds:                       # seed by seed across the two
        plan = plan_mod.load(planned["path"])          # beside it: its start checkpoint, shared
        path = work / f"{name}-plan-seed{seed}.json"
        plan_mod.save(replace(plan, spec=replace(plan.spec, seed=seed)), path)
        for config, retuned in (("re-tuned", True), ("pinned", False)):
            runs[config].append(one_run(path, work, f"{name}-{config}-s{seed}", limit_s, retuned))
            print(f"{name} {config} seed {seed}: {runs[config][-1]['time_s']:.1f}s", flush=True)
    rows = []
    for config, rs in runs.items():
        times = [r["time_s"] for r in rs]
        lrs = sorted({d["after"]["lr"] for r in rs for d in r["decisions"] if d["switched"]})
        rows.append({"workload": name, "config": config, "median_s": statistics.median(times),
                     "spread_s": [min(times), max(times)], "reached": f"{sum(r['reached'] for r in rs)} of {len(rs)}",
                     "pauses": statistics.median(r["pauses"] for r in rs),
                     "pause_s": statistics.median(r["pause_s"] for r in rs), "lrs": lrs, "runs": rs,
                     "plan": describe_plan(planned["plan"])})
    rows[0]["retuned_over_pinned"] = rows[0]["median_s"] / rows[1]["median_s"]
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="lenet-digits, one seed: a check of the glue")
    parser.add_argument("--only", action="append", help="a workload (repeatable)")
    parser.add_argument("--seeds", type=int, default=None, help="seeds per configuration (default 3; 1 with --quick)")
    args = parser.parse_args()
    workloads = [k for k in (QUICK if args.quick else FULL) if not args.only or k in args.only]
    seeds = tuple(range(1, 1 + (args.seeds or (1 if args.quick else 3))))
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for name in workloads:
            rows += bench(name, WORKLOADS[name].cap_s, seeds, Path(tmp), args.quick)
    print_rows("re-tuned against pinned (median s; a miss counts as the limit)", rows, COLUMNS)
    path = write_results("retune", {"quick": args.quick, "measured_at": datetime.now(timezone.utc).isoformat(
        timespec="seconds"), "seeds": list(seeds), "rows": rows})
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
