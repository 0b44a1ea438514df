"""Do omnitune's plans win? The plan against an oracle grid and a user's default, in real runs.

    python -m benchmarks.plan_quality [--quick]

For lenet-digits (target 0.97) and cnn1d-mnist1d (target 0.85) on this machine:
(a) omnitune's plan (planning time counted separately), (b) the oracle: the fastest of a grid of
at least 16 configurations (layout/g × momentum × learning rate × batch size), (c) what a user
would pick by default: sync on every device, lr 0.01, momentum 0.9, batch 32 per device. Every
time to target is measured with a real `omnitune run`; a run that misses the target counts as
its time limit. Writes benchmarks/results/plan_quality.json.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path

from benchmarks.common import print_rows, write_results
from omnitune import optimizer, profile as profile_mod, profiler, workload
from omnitune.cluster import local_cluster
from omnitune.optimizer import Config
from omnitune.perfmodel import PerfModel
from omnitune.probe import make_prober
from omnitune.protocols import Groups, Sync
from omnitune.runspec import RunSpec
from omnitune.runtime import job

WORKLOADS = {"lenet-digits": 0.97, "cnn1d-mnist1d": 0.85}
TIME_LIMIT_S = 30.0


def grid(prof, quick: bool) -> list[Config]:
    """Layout and g × batch × lr × momentum: 16 configurations (8 with --quick)."""
    per_core = prof.cluster.layouts["one-per-core"]
    one = prof.cluster.layouts.get("one-worker", per_core[:1])
    two = Groups(g=2)
    shapes = [("one-worker", Sync(), (one,), 0.9), ("one-per-core", Sync(), (per_core,), 0.9)]
    shapes += [("one-per-core", two, two.group(per_core), mu) for mu in (0.4, 0.0)]
    batches, lrs = ((32,), (0.1, 0.05)) if quick else ((32, 64), (0.1, 0.05))
    return [Config(layout, variant, groups, b, lr, mu) for layout, variant, groups, mu in shapes
            for b in batches for lr in lrs]


def default_config(prof) -> Config:
    per_core = prof.cluster.layouts["one-per-core"]
    return Config("one-per-core", Sync(), (per_core,), 32, 0.01, 0.9)


def fixed_spec(prof, name: str, target: float, c: Config) -> RunSpec:
    """What a configuration runs: its devices and groups, with batches as the planner would set them."""
    cluster = prof.cluster
    return RunSpec(workload=name, data_dir=None, variant=c.variant,
                   devices=tuple(cluster.device(d) for g in c.groups for d in g), groups=c.groups,
                   batch_size=optimizer.device_batches(PerfModel.from_profile(prof), c.variant, c.groups, c.batch),
                   lr=c.lr,
                   momentum=c.momentum, target_accuracy=target, rendezvous=cluster.rendezvous,
                   server_host=cluster.server_host, server_node=cluster.server_node)


def measure(spec: RunSpec, work: Path, tag: str) -> float:
    s = job.run_spec(spec, str(work / tag), max_time_s=TIME_LIMIT_S)
    return s.time_to_target_s if s.reached_target else TIME_LIMIT_S


def bench(name: str, target: float, quick: bool, work: Path) -> dict:
    prof = profiler.profile(local_cluster(), name, None, profiler.Settings.make(quick), work / "logs")
    prof_path = work / f"{name}.profile.json"
    profile_mod.save(prof, prof_path)
    start = time.perf_counter()
    wl = workload.load(name)
    scored = optimizer.search(prof, optimizer.Space(), make_prober(wl, None, target, seed=0), budget_s=120)
    plan = optimizer.build_plan(scored, prof, str(prof_path), name, None, target, 0,
                                datetime.now(timezone.utc).isoformat())
    planning_s = time.perf_counter() - start
    plan_t = measure(plan.spec, work, f"{name}-plan")
    oracle = []
    for i, c in enumerate(grid(prof, quick)):
        t = measure(fixed_spec(prof, name, target, c), work, f"{name}-grid{i}")
        oracle.append({"layout": c.layout, "protocol": c.variant.label, "groups": c.g, "batch": c.batch,
                       "lr": c.lr, "momentum": c.momentum, "time_to_target_s": t})
        print(f"{name} grid {i}: {oracle[-1]}", flush=True)
    default_t = measure(fixed_spec(prof, name, target, default_config(prof)), work, f"{name}-default")
    oracle_t = min(o["time_to_target_s"] for o in oracle)
    return {"name": name, "target_accuracy": target, "time_limit_s": TIME_LIMIT_S,
            "plan": {"layout": plan.layout, "protocol": plan.spec.variant.label, "groups": len(plan.spec.groups),
                     "batch": plan.spec.batch_size[plan.spec.devices[0].id], "lr": plan.spec.lr,
                     "momentum": plan.spec.momentum,
                     "predicted_time_to_target_s": plan.prediction.time_to_target_s},
            "plan_time_to_target_s": plan_t, "oracle_time_to_target_s": oracle_t,
            "default_time_to_target_s": default_t, "planning_s": planning_s,
            "plan_over_oracle": plan_t / oracle_t, "planning_overhead_frac": planning_s / plan_t,
            "default_over_plan": default_t / plan_t, "oracle_grid": oracle}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="quick profiles and an 8-configuration grid")
    args = parser.parse_args()
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for name, target in WORKLOADS.items():
            rows.append(bench(name, target, args.quick, Path(tmp)))
    cols = ["name", "target_accuracy", "plan_time_to_target_s", "oracle_time_to_target_s", "default_time_to_target_s",
            "planning_s", "plan_over_oracle", "planning_overhead_frac", "default_over_plan"]
    print_rows("plan quality (goals: plan/oracle <= 1.2, overhead <= 0.15, default/plan >= 1)", rows, cols)
    path = write_results("plan_quality", {"quick": args.quick, "workloads": rows,
                                          "goals": {"plan_over_oracle": 1.2, "planning_overhead_frac": 0.15,
                                                    "default_over_plan": 1.0}})
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
