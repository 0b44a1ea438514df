"""The protocols side by side, on a homogeneous and a heterogeneous cluster, in real runs.

    python -m benchmarks.protocols [--quick]

Clusters: two single-thread CPU workers, alike; and the same with the second one EMULATED 3×
slower (cluster spec `emulated_slowdown: [1, 3]`). For lenet-digits and cnn1d-mnist1d, each
protocol runs for real (`omnitune run`): sync, sync with throughput-balanced batches, groups
(g = 2), softsync n = 1 and n = 2 (with Rudra's staleness-scaled learning rate, and without it:
plain asynchrony at the same staleness), hpsgd and gossip. Then omnitune plans each cluster and
runs its choice. Writes benchmarks/results/protocols.json.
"""

from __future__ import annotations

import argparse
import tempfile
from datetime import datetime, timezone
from pathlib import Path

from benchmarks.common import print_rows, write_results
from benchmarks.plan_quality import fixed_spec
from omnitune import optimizer, plan as plan_mod, profile as profile_mod, profiler, protocols, statmodel, workload
from omnitune.cluster import load_cluster
from omnitune.optimizer import Config
from omnitune.probe import make_prober
from omnitune.runtime import job

WORKLOADS = {"lenet-digits": (0.95, 0.05), "cnn1d-mnist1d": (0.85, 0.1)}   # target, lr
CLUSTERS = {"homogeneous": [1.0, 1.0], "heterogeneous": [1.0, 3.0]}
TIME_LIMIT_S = 30.0
BATCH = 32

# name: (protocol, softsync_n, gossip_every, balanced, scale_lr_by_staleness)
PROTOCOLS = {
    "sync": ("sync", 1, 1, False, True),
    "sync-balanced": ("sync", 1, 1, True, True),
    "groups": ("groups", 1, 1, False, True),
    "softsync-n1": ("softsync", 1, 1, False, True),
    "softsync-n2": ("softsync", 2, 1, False, True),
    "softsync-n2-unscaled": ("softsync", 2, 1, False, False),
    "hpsgd": ("hpsgd", 1, 1, False, True),
    "gossip": ("gossip", 1, 1, False, True),
    "softsync-n4": ("softsync", 4, 1, False, True),
    "softsync-n4-unscaled": ("softsync", 4, 1, False, False),
}
# Staleness above 1 needs more learners than two: four single-thread learners (on two cores)
# compare Rudra's staleness-scaled learning rate with plain asynchrony at the same staleness.
STALENESS_CLUSTER = ("four-learners", [1.0, 1.0, 1.0, 1.0], ("softsync-n4", "softsync-n4-unscaled"))
QUICK = ("sync", "sync-balanced", "softsync-n2", "softsync-n2-unscaled", "hpsgd", "gossip")


def cluster_profile(name: str, slowdown: list[float], wl: str, quick: bool, work: Path):
    spec = work / f"{name}.yaml"
    workers = [1] * len(slowdown)
    spec.write_text(f"nodes:\n  - host: 127.0.0.1\n    cpu_workers: {workers}\n    emulated_slowdown: {slowdown}\n")
    prof = profiler.profile(load_cluster(spec), wl, None, profiler.Settings.make(quick), work / "logs")
    path = work / f"{name}-{wl}.profile.json"
    profile_mod.save(prof, path)
    return prof, path


def protocol_config(prof, name: str, lr: float) -> Config:
    """The named protocol on every device of the cluster (one learner per device where it has a
    server), with the momentum rule's explicit momentum."""
    protocol, n, every, balanced, scaled = PROTOCOLS[name]
    ids = prof.cluster.layouts["cluster"]
    variant = protocols.from_fields(protocol, len(ids) if protocols.Variant.kinds()[protocol].has_server else 1,
                                    n, every, balanced, scaled)
    mu = round(statmodel.explicit_momentum(optimizer.MU_STAR, variant.asynchrony), 4)
    return Config("cluster", variant, variant.group(ids), BATCH, lr, mu)


def run_plan(plan, work: Path, tag: str):
    path = work / f"{tag}.json"
    plan_mod.save(plan, path)
    return job.run(str(path), str(work / tag), max_time_s=TIME_LIMIT_S)


def row(s, **kw) -> dict:
    return {**kw, "time_to_target_s": s.time_to_target_s if s.reached_target else TIME_LIMIT_S,
            "reached_target": s.reached_target, "final_accuracy": s.final_accuracy,
            "mean_staleness": s.mean_staleness, "measured_sec_per_iter": s.measured_sec_per_iter,
            "iterations": s.iterations, "protocol_stats": s.protocol_stats}


def bench(wl_name: str, cluster: str, quick: bool, work: Path, slowdown=None, names=None,
          with_plan: bool = True) -> list[dict]:
    target, lr = WORKLOADS[wl_name]
    prof, prof_path = cluster_profile(cluster, slowdown or CLUSTERS[cluster], wl_name, quick, work)
    rows = []
    names = names or [n for n in (QUICK if quick else PROTOCOLS) if n not in STALENESS_CLUSTER[2]]
    for name in names:
        c = protocol_config(prof, name, lr)
        tag = f"{wl_name}-{cluster}-{name}"
        s = job.run_spec(fixed_spec(prof, wl_name, target, c), str(work / tag), max_time_s=TIME_LIMIT_S)
        rows.append(row(s, protocol=name, cluster=cluster, workload=wl_name, momentum=c.momentum))
        print_rows(f"{wl_name} on {cluster}", rows[-1:], ["protocol", "time_to_target_s", "final_accuracy",
                                                           "mean_staleness"])
    if not with_plan:
        return rows
    wl = workload.load(wl_name)
    scored = optimizer.search(prof, optimizer.Space(batch_sizes=(16, 32, 64)), make_prober(wl, None, target, 0),
                              budget_s=60 if quick else 120)
    plan = optimizer.build_plan(scored, prof, str(prof_path), wl_name, None, target, 0,
                                datetime.now(timezone.utc).isoformat())
    s = run_plan(plan, work, f"{wl_name}-{cluster}-omnitune")
    rows.append(row(s, protocol=f"omnitune plan: {plan.spec.variant.label}", cluster=cluster, workload=wl_name,
                    momentum=plan.spec.momentum, predicted_time_to_target_s=plan.prediction.time_to_target_s))
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="six protocols, quick profiles")
    args = parser.parse_args()
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for wl_name in WORKLOADS:
            for cluster in CLUSTERS:
                rows += bench(wl_name, cluster, args.quick, Path(tmp))
            name, slowdown, names = STALENESS_CLUSTER
            rows += bench(wl_name, name, args.quick, Path(tmp), slowdown, names, with_plan=False)
    cols = ["workload", "cluster", "protocol", "time_to_target_s", "final_accuracy", "mean_staleness",
            "measured_sec_per_iter", "iterations"]
    print_rows("protocols (a run that misses the target counts as its time limit)", rows, cols)
    summary = []
    for wl_name in WORKLOADS:
        for cluster in CLUSTERS:
            mine = [r for r in rows if r["workload"] == wl_name and r["cluster"] == cluster]
            best = min((r for r in mine if not r["protocol"].startswith("omnitune")), key=lambda r: r["time_to_target_s"])
            plan = next(r for r in mine if r["protocol"].startswith("omnitune"))
            summary.append({"workload": wl_name, "cluster": cluster, "best_protocol": best["protocol"],
                            "best_time_to_target_s": best["time_to_target_s"], "plan_choice": plan["protocol"],
                            "plan_time_to_target_s": plan["time_to_target_s"],
                            "plan_over_best": plan["time_to_target_s"] / best["time_to_target_s"]})
    print_rows("omnitune's choice against the best protocol measured (goal on heterogeneous: <= 1.2)", summary,
               list(summary[0]))
    path = write_results("protocols", {"quick": args.quick, "time_limit_s": TIME_LIMIT_S, "rows": rows,
                                       "plan_vs_best": summary})
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
