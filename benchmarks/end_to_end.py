"""profile → plan → run on this machine, for each workload: batching gain and predicted vs measured.

    python -m benchmarks.end_to_end [--quick]

Writes benchmarks/results/end_to_end.json with, per workload: each device's batch-1 and best
throughput (samples/s) and their ratio, the plan's choice and predicted time to target, and the
measured time to target of a real `omnitune run` of that plan.
"""

from __future__ import annotations

import argparse
import tempfile
from datetime import datetime, timezone
from pathlib import Path

from benchmarks.common import print_rows, write_results
from omnitune import planning
from omnitune.core import plan as plan_mod, profile as profile_mod
from omnitune.core.cluster import local_cluster
from omnitune.probing.probe import make_prober
from omnitune.profiling import profiler
from omnitune.runtime import workload
from omnitune.runtime import job

WORKLOADS = {"lenet-digits": 0.97, "cnn1d-mnist1d": 0.85}


def bench(name: str, target: float, quick: bool, work: Path) -> dict:
    prof = profiler.profile(local_cluster(), name, None, profiler.Settings.make(quick), work / "logs")
    profile_mod.save(prof, work / f"{name}.profile.json")
    wl = workload.load(name)
    found = planning.search(prof, planning.Space(), make_prober(wl, None, target, seed=0),
                              budget_s=30 if quick else 120)
    plan = planning.build_plan(found, prof, str(work / f"{name}.profile.json"), name, None, target, 0,
                                datetime.now(timezone.utc).isoformat())
    plan_path = work / f"{name}.plan.json"
    plan_mod.save(plan, plan_path)
    summary = job.run(str(plan_path), str(work / name), max_time_s=120)
    devices = [{"device": d.device_id, "batch1_samples_per_s": d.steps[0].samples_per_s,
                "best_samples_per_s": d.best.samples_per_s, "best_batch": d.best.batch_size,
                "batching_gain": d.best.samples_per_s / d.steps[0].samples_per_s} for d in prof.devices]
    return {
        "workload": name, "target_accuracy": target, "devices": devices,
        "plan": {"protocol": plan.spec.variant.label, "layout": plan.layout, "groups": len(plan.spec.groups),
                 "batch_per_device": plan.spec.batch_size[plan.spec.devices[0].id], "lr": plan.spec.lr,
                 "momentum": plan.spec.momentum},
        "predicted_sec_per_iter": plan.prediction.sec_per_iter,
        "measured_sec_per_iter": summary.measured_sec_per_iter,
        "predicted_iters": plan.prediction.iters_to_target, "measured_iters": summary.iterations,
        "predicted_time_to_target_s": plan.prediction.time_to_target_s,
        "measured_time_to_target_s": summary.time_to_target_s, "reached_target": summary.reached_target,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="quick profiles and a short probe budget")
    args = parser.parse_args()
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for name, target in WORKLOADS.items():
            rows.append(bench(name, target, args.quick, Path(tmp)))
    print_rows("batching gain (best / batch-1 throughput)",
               [{"workload": r["workload"], **d} for r in rows for d in r["devices"]],
               ["workload", "device", "batch1_samples_per_s", "best_samples_per_s", "best_batch", "batching_gain"])
    print_rows("predicted vs measured", rows,
               ["workload", "target_accuracy", "predicted_sec_per_iter", "measured_sec_per_iter", "predicted_iters",
                "measured_iters", "predicted_time_to_target_s", "measured_time_to_target_s", "reached_target"])
    path = write_results("end_to_end", {"quick": args.quick, "workloads": rows})
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
