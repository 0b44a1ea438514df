"""A workload trained as people train language models, through omnitune's whole path.

    python -m benchmarks.recipes [--quick] [--protocols sync,groups,hpsgd] [--max-time-s S]
    python -m benchmarks.recipes --decays N [--quick] [--max-time-s S]

charlm-stdlib (a character-level transformer on the standard library's source, AdamW with a
warm-up and cosine decay, gradient clipping; target: a test loss) is profiled once, then planned
with the protocol pinned to each of sync, groups and hpsgd (`plan --protocol P --target-loss T`),
and each plan is run as `omnitune run` runs it. Reports, per protocol, what the plan chose, its
predicted and measured time to the target loss, and whether the run got there. `--quick`: the
quick profile and a target loss 0.3 nats above the workload's (a shorter run). Writes
benchmarks/results/recipes.json (recipes-quick.json with --quick).

`--decays N`: does the weight decay the planner picks from its coarse grid matter over a whole
run? The sync plan (seed 0) is run from scratch, pinned (no re-tuning, so that only the decay
differs), at each decay of the grid (the recipe's, a tenth, ten times), with seeds 1 to N, seed
by seed across the decays. Rows: per decay, the median time to the target loss and its
min-max (a miss counts as the time limit), how many reached it, and the median final loss.
Writes benchmarks/results/recipes-decays.json (recipes-decays-quick.json).
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from dataclasses import replace
from pathlib import Path

from benchmarks.common import print_rows, write_results
from omnitune import api
from omnitune.core import plan as plan_mod
from omnitune.planning.request import PlanRequest
from omnitune.runtime import workload
from omnitune.runtime.job import RunOptions

WORKLOAD = "charlm-stdlib"
QUICK_EASIER = 0.3          # --quick: this much above the workload's target loss


def one(protocol: str, profile_path: Path, target: float, max_time_s: float, work: Path) -> dict:
    started = time.perf_counter()
    plan_path = work / f"{protocol}.plan.json"
    plan = api.plan(PlanRequest(WORKLOAD, None, profile_path, out=plan_path, protocol=protocol, target_loss=target))
    planning_s = time.perf_counter() - started
    s = api.run(plan_path, work / protocol, RunOptions(max_time_s=max_time_s))
    spec = plan.spec
    row = {"protocol": spec.variant.label, "layout": plan.layout, "groups": len(spec.groups),
           "batch": spec.batch_size[spec.devices[0].id], "lr": spec.lr, "beta1": spec.momentum,
           "horizon": spec.horizon, "planning_s": planning_s,
           "predicted_time_to_target_s": plan.prediction.time_to_target_s,
           "time_to_target_s": s.time_to_target_s, "reached": s.reached_target, "final_loss": s.final_loss,
           "iterations": s.iterations, "predicted_sec_per_iter": s.predicted_sec_per_iter,
           "measured_sec_per_iter": s.measured_sec_per_iter, "started_at_s": s.started_at_s}
    print_rows(f"{WORKLOAD}, {protocol}", [row], ["protocol", "groups", "batch", "lr", "beta1", "planning_s",
                                                  "predicted_time_to_target_s", "time_to_target_s", "final_loss"])
    return row


def decays(profile_path: Path, target: float, max_time_s: float, seeds: int, work: Path) -> list[dict]:
    """The sync plan run from scratch and pinned at each decay of the recipe's grid, seed by seed
    across the decays."""
    plan_path = work / "decays.plan.json"
    plan = api.plan(PlanRequest(WORKLOAD, None, profile_path, out=plan_path, protocol="sync", target_loss=target))
    grid = workload.load(WORKLOAD).recipe.decays()
    runs: dict[float, list] = {wd: [] for wd in grid}
    for seed in range(1, seeds + 1):
        for wd in grid:
            path = work / f"decay-{wd:g}-s{seed}.plan.json"
            plan_mod.save(replace(plan, spec=replace(plan.spec, weight_decay=wd, seed=seed)), path)
            s = api.run(path, work / path.stem, RunOptions(max_time_s=max_time_s, retune=False, from_scratch=True))
            runs[wd].append(s)
            print(f"weight decay {wd:g} seed {seed}: {'reached' if s.reached_target else 'missed'} "
                  f"in {s.time_to_target_s or max_time_s:.1f}s, final loss {s.final_loss:.3f}", flush=True)
    rows = []
    for wd, ss in runs.items():
        times = [s.time_to_target_s if s.reached_target else max_time_s for s in ss]
        rows.append({"weight_decay": wd, "recipes": wd == grid[0], "chosen": wd == (plan.spec.weight_decay or grid[0]),
                     "median_s": statistics.median(times), "spread_s": [min(times), max(times)],
                     "reached": f"{sum(s.reached_target for s in ss)} of {len(ss)}",
                     "final_loss": statistics.median(s.final_loss for s in ss),
                     "lr": plan.spec.lr, "batch": plan.spec.batch_size[plan.spec.devices[0].id],
                     "times_s": times})
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="quick profile, an easier target")
    parser.add_argument("--protocols", default="sync,groups,hpsgd", help="comma-separated")
    parser.add_argument("--max-time-s", type=float, default=400.0, help="each run's time limit")
    parser.add_argument("--decays", type=int, metavar="N", help="instead: the sync plan pinned at each weight decay "
                        "of the planner's grid, N seeds each")
    args = parser.parse_args()
    target = workload.load(WORKLOAD).module.TARGET_LOSS + (QUICK_EASIER if args.quick else 0.0)
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        started = time.perf_counter()
        api.profile(WORKLOAD, work / "profile.json", quick=args.quick)
        profile_s = time.perf_counter() - started
        print(f"profiled in {profile_s:.1f}s", flush=True)
        if args.decays:
            rows = decays(work / "profile.json", target, args.max_time_s, args.decays, work)
        else:
            rows = [one(p, work / "profile.json", target, args.max_time_s, work) for p in args.protocols.split(",")]
    if args.decays:
        print_rows(f"{WORKLOAD}: the sync plan at each weight decay, to test loss {target:g} (median s; a miss "
                   "counts as the limit)", rows, ["weight_decay", "chosen", "median_s", "spread_s", "reached",
                                                  "final_loss"])
        path = write_results("recipes-decays", {"quick": args.quick, "workload": WORKLOAD, "target_loss": target,
                                                "seeds": args.decays, "max_time_s": args.max_time_s, "rows": rows})
        print(f"wrote {path}")
        return
    print_rows(f"{WORKLOAD}: profile, plan and run to test loss {target:g}", rows,
               ["protocol", "layout", "groups", "batch", "lr", "beta1", "horizon", "planning_s",
                "predicted_time_to_target_s", "time_to_target_s", "reached", "final_loss"])
    path = write_results("recipes", {"quick": args.quick, "workload": WORKLOAD, "target_loss": target,
                                     "profile_s": profile_s, "max_time_s": args.max_time_s, "rows": rows})
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
