"""omnitune's plan against what a user would try on devices of unequal speed, in real runs.

    python -m benchmarks.heterogeneous [--quick]

Clusters of single-thread CPU workers, EMULATED slower (cluster spec `emulated_slowdown`):
(a) [1, 4], (b) [1, 1, 6] (one nearly useless) and (c) [1, 1.5]. Workloads: cnn1d-mnist1d to
0.85 (as benchmarks.protocols) and teacher-mlp to 0.92, not its own 0.985 (minutes long): one
single-thread worker at batch 32 reaches 0.92 after about 20 s of training, 0.94 after about
40 s and not 0.95 within a minute (figures at TEACHER_TARGET).

On each cluster omnitune profiles, plans (as `omnitune plan`) and its plan runs. Beside it, on
the same profile's devices, four alternatives a user would try: all-sync-equal (sync on every
device, batch 32 each), fastest-alone (sync on the device the profile measured fastest, batch
32), sync-balanced (sync, nominal batch 32, per-device batches by measured speed) and
groups-balanced (one group per device, nominal batch 32, balanced; the momentum rule's momentum,
where sync takes 0.9). Each alternative is screened at its workload's base learning
rate × 1/3, 1, 3 with seed 0 (a screening run stops at 1.5× the best time so far, counting as a
miss), and its best rate runs again with seeds 1, 2; the plan runs with
seeds 0, 1, 2. A run that misses the target within 60 s (TIME_LIMIT_S) counts as 60 s; rows give
the median time to target and min–max.

Goals: on every cluster the plan within 1.1× of the best alternative (median against median);
at least 1.5× faster than all-sync-equal on (a) and (b); on (b) the plan leaves the 6× device out.
With --quick: cnn1d-mnist1d only, one rate (× 1), one seed, quick profiles. Writes
benchmarks/results/heterogeneous.json (heterogeneous-quick.json with --quick).
"""

from __future__ import annotations

import argparse
import tempfile
from dataclasses import replace
from pathlib import Path

from benchmarks.common import print_rows, write_results
from benchmarks.harness import fixed_spec
from benchmarks.protocols import cluster_profile, make_plan, repeated, summarise
from omnitune import planning
from omnitune.core.protocols import Groups, Sync
from omnitune.planning import Config
from omnitune.runtime import job

# teacher-mlp's accuracy jumps to 0.90 within seconds, then climbs slowly. One single-thread worker
# at batch 32, lr 0.03, momentum 0.9 crossed 0.90 at 4 s, 0.91 at 15 s, 0.92 at 21 s, 0.93 at 31 s
# and 0.94 at 39 s of training, and not 0.95 within 60 s (lr 0.01: 0.94 at 41 s; lr 0.1: stuck at
# 0.19). omnitune's plans on cluster a ran that worker alone at lr 0.01 (target 0.95) and 0.001
# (target 0.92: crossed it at 20 s). Base rate 0.01: the screen's 0.0033-0.03 holds the rates that learn.
TEACHER_TARGET = 0.92
WORKLOADS = {"teacher-mlp": (TEACHER_TARGET, 0.01), "cnn1d-mnist1d": (0.85, 0.1)}   # target, base lr
QUICK_WORKLOADS = ("cnn1d-mnist1d",)
CLUSTERS = {"a": [1.0, 4.0], "b": [1.0, 1.0, 6.0], "c": [1.0, 1.5]}
TIME_LIMIT_S = 60.0
BATCH = 32
SYNC_MOMENTUM = 0.9
RATES = (1 / 3, 1.0, 3.0)
SCREEN_CUTOFF = 1.5
GOAL_OVER_BEST, GOAL_OVER_SYNC, SYNC_GOAL_CLUSTERS, SLOW_CLUSTER = 1.1, 1.5, ("a", "b"), "b"
ALTERNATIVES = ("all-sync-equal", "fastest-alone", "sync-balanced", "groups-balanced")
COLUMNS = ["config", "protocol", "devices", "batches", "lr", "momentum", "time_to_target_s", "spread_s",
           "measured_sec_per_iter", "iterations", "mean_staleness"]


def alternatives(prof, lr: float) -> dict[str, Config]:
    ids = prof.cluster.layouts["cluster"]
    fastest = max(ids, key=lambda d: prof.device(d).best.samples_per_s)
    groups = Groups(g=len(ids), balanced=True)
    return {"all-sync-equal": Config("cluster", Sync(), (ids,), BATCH, lr, SYNC_MOMENTUM),
            "fastest-alone": Config("cluster", Sync(), ((fastest,),), BATCH, lr, SYNC_MOMENTUM),
            "sync-balanced": Config("cluster", Sync(balanced=True), (ids,), BATCH, lr, SYNC_MOMENTUM),
            "groups-balanced": Config("cluster", groups, groups.group(ids), BATCH, lr,
                                      groups.rule_momentum(planning.MU_STAR))}


def described(spec, **kw) -> dict:
    return {**kw, "protocol": spec.variant.label, "devices": list(spec.device_ids), "batches": spec.batch_size,
            "lr": spec.lr, "momentum": spec.momentum}


def screened(prof, wl: str, cluster: str, name: str, rates, seeds, work: Path) -> dict:
    """An alternative at each rate with the first seed; its best rate then with the other seeds."""
    target, lr = WORKLOADS[wl]
    tried, best = [], TIME_LIMIT_S
    for f in rates:
        spec = fixed_spec(prof, wl, target, alternatives(prof, lr * f)[name])
        tag = f"{wl}-{cluster}-{name}-{f:g}"
        # A screening run stops once it passes SCREEN_CUTOFF × the best so far: it cannot win.
        run = job.run_spec(replace(spec, seed=seeds[0]), str(work / f"{tag}-s{seeds[0]}"),
                           max_time_s=min(TIME_LIMIT_S, SCREEN_CUTOFF * best))
        best = min(best, run.time_to_target_s if run.reached_target else best)
        tried.append((spec, tag, run))

    def time(s) -> float:
        return s.time_to_target_s if s.reached_target else TIME_LIMIT_S
    spec, tag, first = min(tried, key=lambda t: (time(t[2]), -t[2].final_accuracy))
    rest = [job.run_spec(replace(spec, seed=seed), str(work / f"{tag}-s{seed}"), max_time_s=TIME_LIMIT_S)
            for seed in seeds[1:]]
    return summarise([first, *rest], TIME_LIMIT_S, **described(spec, cluster=cluster, workload=wl, config=name),
                     screening={f"{s.lr:.4g}": time(r) for s, _, r in tried})


def bench(cluster: str, wl: str, quick: bool, work: Path) -> list[dict]:
    seeds, rates = ((0,), (1.0,)) if quick else ((0, 1, 2), RATES)
    prof, prof_path = cluster_profile(cluster, CLUSTERS[cluster], wl, quick, work)
    rows = []
    for name in ALTERNATIVES:
        rows.append(screened(prof, wl, cluster, name, rates, seeds, work))
        print_rows(f"{wl} on {cluster} {CLUSTERS[cluster]}", [shown(rows[-1])], COLUMNS)
    plan = make_plan(prof, prof_path, wl, WORKLOADS[wl][0], quick, work, f"{wl}-{cluster}")
    rows.append(repeated(plan.spec, work, f"{wl}-{cluster}-plan", seeds, TIME_LIMIT_S,
                         **described(plan.spec, cluster=cluster, workload=wl, config="plan"), layout=plan.layout,
                         left_out=[d.id for d in prof.cluster.devices if d.id not in plan.spec.device_ids],
                         idle=plan.idle, plan_note=plan.candidates[0].note,
                         slowest_device=max(prof.cluster.devices, key=lambda d: d.emulated_slowdown).id,
                         predicted_time_to_target_s=plan.prediction.time_to_target_s))
    print_rows(f"{wl} on {cluster} {CLUSTERS[cluster]}", [shown(rows[-1])], COLUMNS)
    return rows


def shown(row: dict) -> dict:
    return row | {"spread_s": "–".join(f"{t:.3g}" for t in row["spread_s"])}


def summary(rows: list[dict]) -> dict:
    """One cluster × workload: the plan's median against each alternative's."""
    plan = next(r for r in rows if r["config"] == "plan")
    alt = {r["config"]: r["time_to_target_s"] for r in rows if r["config"] != "plan"}
    best = min(alt, key=alt.get)
    return {"cluster": plan["cluster"], "workload": plan["workload"], "plan_s": plan["time_to_target_s"],
            **{f"{name}_s": t for name, t in alt.items()}, "best_alternative": best,
            "plan_over_best_alternative": plan["time_to_target_s"] / alt[best],
            "all_sync_equal_over_plan": alt["all-sync-equal"] / plan["time_to_target_s"],
            "plan_protocol": plan["protocol"], "plan_layout": plan["layout"], "plan_devices": plan["devices"],
            "plan_left_out": plan["left_out"], "plan_idle": plan["idle"], "slowest_device": plan["slowest_device"],
            "plan_note": plan["plan_note"]}


def goals(summaries: list[dict]) -> dict:
    """Each goal's result per cluster × workload ("a/cnn1d-mnist1d")."""
    def where(clusters=tuple(CLUSTERS)):
        return [(f"{s['cluster']}/{s['workload']}", s) for s in summaries if s["cluster"] in clusters]
    return {f"plan_within_{GOAL_OVER_BEST}x_of_best_alternative":
            {k: s["plan_over_best_alternative"] <= GOAL_OVER_BEST for k, s in where()},
            f"plan_{GOAL_OVER_SYNC}x_faster_than_all_sync_equal":
            {k: s["all_sync_equal_over_plan"] >= GOAL_OVER_SYNC for k, s in where(SYNC_GOAL_CLUSTERS)},
            "plan_leaves_the_slowest_device_out":
            {k: s["slowest_device"] in s["plan_left_out"] for k, s in where((SLOW_CLUSTER,))}}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="cnn1d-mnist1d, one rate, one seed, quick profiles")
    args = parser.parse_args()
    rows, summaries = [], []
    with tempfile.TemporaryDirectory() as tmp:
        for wl in QUICK_WORKLOADS if args.quick else WORKLOADS:
            for cluster in CLUSTERS:
                rows += bench(cluster, wl, args.quick, Path(tmp))
                summaries.append(summary([r for r in rows if (r["cluster"], r["workload"]) == (cluster, wl)]))
    met = goals(summaries)
    print_rows(f"the plan against the alternatives (median s; a miss counts as {TIME_LIMIT_S:g} s)", summaries,
               ["cluster", "workload", "plan_s", *(f"{name}_s" for name in ALTERNATIVES), "plan_over_best_alternative",
                "all_sync_equal_over_plan", "plan_protocol", "plan_left_out"])
    out = {"quick": args.quick, "time_limit_s": TIME_LIMIT_S, "workloads": WORKLOADS, "clusters": CLUSTERS,
           "rows": rows, "summary": summaries, "goals": met,
           "goals_met": all(ok for per in met.values() for ok in per.values())}
    path = write_results("heterogeneous" + ("-quick" if args.quick else ""), out)
    print(f"wrote {path}; goals met: {out['goals_met']}")


if __name__ == "__main__":
    main()
