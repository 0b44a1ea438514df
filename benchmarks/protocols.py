"""The protocols side by side, on a homogeneous and a heterogeneous cluster, in real runs.

    python -m benchmarks.protocols [--quick]

Clusters: two single-thread CPU workers, alike; and the same with the second one EMULATED 3×
slower (cluster spec `emulated_slowdown: [1, 3]`). For lenet-digits and cnn1d-mnist1d, each
protocol runs for real (`omnitune run`): sync, sync with throughput-balanced batches, groups
(g = 2), softsync n = 1 and n = 2 (with Rudra's staleness-scaled learning rate, and without it:
plain asynchrony at the same staleness), hpsgd and gossip, at one learning rate per workload
(Rudra's scaled step with its base rate raised by the staleness it divides by) and the rule's
momentum. Four learners compare Rudra's rule with plain asynchrony at staleness 3, each at its
best of three base rates. Then omnitune plans each cluster and runs its choice. Every run is
repeated with seeds 0, 1, 2 (one seed with --quick); rows give the median time to target and the
spread. Writes benchmarks/results/protocols.json.
"""

from __future__ import annotations

import argparse
import dataclasses
import statistics
import tempfile
from datetime import datetime, timezone
from pathlib import Path

from benchmarks.common import print_rows, write_results
from benchmarks.harness import fixed_spec
from omnitune import planning
from omnitune.core import plan as plan_mod, profile as profile_mod, protocols
from omnitune.core.cluster import load_cluster
from omnitune.planning import Config
from omnitune.probing.probe import make_prober
from omnitune.profiling import profiler
from omnitune.runtime import workload
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
RUDRA_RATES = (1 / 3, 1.0, 3.0)     # times each variant's step (its lr_gain applied), to re-tune the base rate


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
    return Config("cluster", variant, variant.group(ids), BATCH, lr * variant.lr_gain,
                  variant.rule_momentum(planning.MU_STAR))


def repeated(spec, work: Path, tag: str, seeds, limit_s: float = TIME_LIMIT_S, **kw) -> dict:
    """The spec run once per seed: median time to target (a miss counts as the time limit) and
    the spread, with each run's figures."""
    runs = [job.run_spec(dataclasses.replace(spec, seed=seed), str(work / f"{tag}-s{seed}"), max_time_s=limit_s)
            for seed in seeds]
    return summarise(runs, limit_s, **kw)


def summarise(runs, limit_s: float, **kw) -> dict:
    """Run summaries of one configuration as a row: `kw`, then the median time to target (a miss
    counts as `limit_s`), the spread and the other figures' medians."""
    times = [s.time_to_target_s if s.reached_target else limit_s for s in runs]
    return {**kw, "time_to_target_s": statistics.median(times), "times_s": times,
            "spread_s": [min(times), max(times)], "reached_target": [s.reached_target for s in runs],
            "final_accuracy": statistics.median(s.final_accuracy for s in runs),
            "mean_staleness": statistics.median(s.mean_staleness for s in runs),
            "measured_sec_per_iter": statistics.median(s.measured_sec_per_iter for s in runs),
            "iterations": statistics.median(s.iterations for s in runs),
            "protocol_stats": [s.protocol_stats for s in runs]}


def make_plan(prof, prof_path: Path, wl_name: str, target: float, quick: bool, work: Path, tag: str):
    """omnitune's plan for the profiled cluster, as `omnitune plan` makes it (saved in `work`)."""
    found = planning.search(prof, planning.Space(batch_sizes=(16, 32, 64)),
                             make_prober(workload.load(wl_name), None, target, 0), budget_s=60 if quick else 120)
    plan = planning.build_plan(found, prof, str(prof_path), wl_name, None, target, 0,
                                datetime.now(timezone.utc).isoformat())
    plan_mod.save(plan, work / f"{tag}-plan.json")
    return plan


def bench(wl_name: str, cluster: str, quick: bool, work: Path, slowdown=None, names=None,
          with_plan: bool = True) -> list[dict]:
    seeds = (0,) if quick else (0, 1, 2)
    target, lr = WORKLOADS[wl_name]
    prof, prof_path = cluster_profile(cluster, slowdown or CLUSTERS[cluster], wl_name, quick, work)
    rows = []
    names = names or [n for n in (QUICK if quick else PROTOCOLS) if n not in STALENESS_CLUSTER[2]]
    for name in names:
        tried = []
        # Rudra's rule against plain asynchrony: each at its own best base rate (the rule divides
        # each step by its staleness), from a third to three times the step the others take.
        for f in RUDRA_RATES if name in STALENESS_CLUSTER[2] else (1.0,):
            c = protocol_config(prof, name, lr * f)
            tag = f"{wl_name}-{cluster}-{name}-{f:g}"
            tried.append(repeated(fixed_spec(prof, wl_name, target, c), work, tag, seeds, protocol=name,
                                  cluster=cluster, workload=wl_name, momentum=c.momentum, lr=c.lr))
        rows.append(min(tried, key=lambda r: r["time_to_target_s"]) | {"lrs_tried": [r["lr"] for r in tried]})
        print_rows(f"{wl_name} on {cluster}", rows[-1:], ["protocol", "time_to_target_s", "spread_s",
                                                           "final_accuracy", "mean_staleness"])
    if not with_plan:
        return rows
    plan = make_plan(prof, prof_path, wl_name, target, quick, work, f"{wl_name}-{cluster}")
    rows.append(repeated(plan.spec, work, f"{wl_name}-{cluster}-omnitune", seeds,
                         protocol=f"omnitune plan: {plan.spec.variant.label}", cluster=cluster, workload=wl_name,
                         momentum=plan.spec.momentum, lr=plan.spec.lr,
                         predicted_time_to_target_s=plan.prediction.time_to_target_s))
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="six protocols, quick profiles, one seed")
    args = parser.parse_args()
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for wl_name in WORKLOADS:
            for cluster in CLUSTERS:
                rows += bench(wl_name, cluster, args.quick, Path(tmp))
            name, slowdown, names = STALENESS_CLUSTER
            rows += bench(wl_name, name, args.quick, Path(tmp), slowdown, names, with_plan=False)
    cols = ["workload", "cluster", "protocol", "time_to_target_s", "spread_s", "final_accuracy", "mean_staleness",
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
