"""The simulator against real runs of the runtime on this machine.

    python -m benchmarks.simulator [--quick]

The clusters are the protocols benchmark's: two single-thread CPU workers alike, the same with
the second EMULATED 3x slower, and four single-thread learners on the two cores. Each is profiled
as `omnitune profile` profiles it. Then every configuration below runs for real (`job.run_spec`,
RUN_S seconds of training, seeds 0, 1, 2) and is simulated from the profile alone: the profile's
step times and their spread, its link and all-reduce, its server update, and per protocol one
constant o, the runtime's own work per iteration, fitted to the profile's calibration jobs
(batches 16 and 256; 64 too from 2026-11-25 to 2026-11-29, 128 before; the rows below use other batches, so none was used to fit). Beside it, the rows give the analytic
hardware model (perfmodel), raw and calibrated, which is what `plan` uses on such clusters.

Mean staleness is compared where it is not fixed by construction: the server protocols and
gossip with `every` > 1 are compared; sync (0) and hpsgd (1) are not.
Writes benchmarks/results/simulator.json: rows, sec_per_iter_median_abs_pct_err,
staleness_median_abs_pct_err, and the same for the analytic model.
"""

from __future__ import annotations

import argparse
import dataclasses
import statistics
import tempfile
from pathlib import Path

from benchmarks.common import print_rows, write_results
from benchmarks.harness import fixed_spec
from benchmarks.protocols import cluster_profile
from omnitune import planning
from omnitune.core import protocols
from omnitune.efficiency import simulator
from omnitune.efficiency.perfmodel import PerfModel, Shape
from omnitune.planning import Config
from omnitune.runtime import job

RUN_S = 4.0
WORKLOADS = {"lenet-digits": 0.05, "cnn1d-mnist1d": 0.1}        # learning rate (the protocols benchmark's)
GOAL_SEC_PCT, GOAL_STALENESS_PCT = 10.0, 10.0

# (name, protocol, groups or learners (None: every device), softsync n, gossip every, balanced, batch)
# Batches other than the profile's calibration batches (16 and 256, or the cut below it; 64 too until
# 2026-11-29, 128 before 2026-11-25): every row is out of sample.
HOMOGENEOUS = [("sync", "sync", 1, 1, 1, False, 24), ("sync", "sync", 1, 1, 1, False, 96),
               ("groups", "groups", None, 1, 1, False, 24), ("groups", "groups", None, 1, 1, False, 48),
               ("softsync-n1", "softsync", None, 1, 1, False, 32), ("softsync-n2", "softsync", None, 2, 1, False, 32),
               ("hpsgd", "hpsgd", 1, 1, 1, False, 32), ("hpsgd", "hpsgd", 1, 1, 1, False, 192),
               ("gossip", "gossip", 1, 1, 1, False, 32), ("gossip-every4", "gossip", 1, 1, 4, False, 32)]
HETEROGENEOUS = [("sync", "sync", 1, 1, 1, False, 32), ("sync-balanced", "sync", 1, 1, 1, True, 32),
                 ("groups", "groups", None, 1, 1, False, 32), ("softsync-n2", "softsync", None, 2, 1, False, 32),
                 ("hpsgd", "hpsgd", 1, 1, 1, False, 32), ("gossip-every4", "gossip", 1, 1, 4, False, 32)]
FOUR = [("groups-g2", "groups", 2, 1, 1, False, 32), ("groups-g4", "groups", None, 1, 1, False, 32),
        ("softsync-n2", "softsync", None, 2, 1, False, 32), ("softsync-n4", "softsync", None, 4, 1, False, 32)]
CLUSTERS = {"homogeneous": ([1.0, 1.0], HOMOGENEOUS), "heterogeneous": ([1.0, 3.0], HETEROGENEOUS),
            "four-learners": ([1.0, 1.0, 1.0, 1.0], FOUR)}
QUICK = {"homogeneous": ([1.0, 1.0], [HOMOGENEOUS[i] for i in (0, 2, 5, 6, 9)]),
         "heterogeneous": ([1.0, 3.0], [HETEROGENEOUS[i] for i in (2, 3)])}


def config(prof, row, lr: float) -> Config:
    _, protocol, groups, n, every, balanced, batch = row
    ids = prof.cluster.layouts["cluster"]
    variant = protocols.from_fields(protocol, groups or len(ids), n, every, balanced)
    return Config("cluster", variant, variant.group(ids), batch, lr * variant.lr_gain,
                  variant.rule_momentum(planning.MU_STAR))


def pct(predicted: float, measured: float) -> float:
    return 100.0 * abs(predicted - measured) / measured


def measure(prof, wl: str, cluster: str, row, lr: float, seeds, work: Path) -> dict:
    """The configuration run for real once per seed, and simulated as many times."""
    c = config(prof, row, lr)
    spec = dataclasses.replace(fixed_spec(prof, wl, 1.0, c), target_accuracy=None)
    runs = [job.run_spec(dataclasses.replace(spec, seed=s), str(work / f"{wl}-{cluster}-{row[0]}-{row[6]}-s{s}"),
                         max_time_s=RUN_S, eval_every_s=1e9) for s in seeds]
    shape = Shape(c.groups, spec.batch_size, c.variant, "cluster")
    sims = [simulator.simulate(simulator.from_profile(prof, shape), max(r.iterations, 1), seed=s)
            for r, s in zip(runs, seeds)]
    perf = PerfModel.from_profile(prof)
    real_sec = statistics.median(r.measured_sec_per_iter for r in runs)
    sim_sec = statistics.median(o.sec_per_iter for o in sims)
    real_stale = statistics.median(r.mean_staleness for r in runs)
    sim_stale = statistics.median(o.mean_staleness for o in sims)
    compared = c.variant.has_server or getattr(c.variant, "every", 1) > 1
    return {"workload": wl, "cluster": cluster, "config": row[0], "variant": c.variant.label, "batch": row[6],
            "measured_sec_per_iter": real_sec, "simulated_sec_per_iter": sim_sec,
            "analytic_sec_per_iter": perf.analytic_s(shape), "calibrated_sec_per_iter": perf.sec_per_iter(shape),
            "sim_pct_err": pct(sim_sec, real_sec), "analytic_pct_err": pct(perf.analytic_s(shape), real_sec),
            "calibrated_pct_err": pct(perf.sec_per_iter(shape), real_sec),
            "measured_mean_staleness": real_stale, "simulated_mean_staleness": sim_stale,
            "staleness_compared": compared,
            "staleness_pct_err": pct(sim_stale, real_stale) if compared and real_stale > 0 else None,
            "measured_staleness": [list(r.staleness) for r in runs],
            "simulated_staleness": [list(o.staleness) for o in sims],
            "measured_updates_per_group": [list(r.updates_per_group) for r in runs],
            "simulated_updates_per_group": [list(o.updates_per_group) for o in sims],
            "iterations": [r.iterations for r in runs]}


def median_err(rows: list[dict], key: str) -> float | None:
    errs = [r[key] for r in rows if r[key] is not None]
    return statistics.median(errs) if errs else None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="seven configurations, one seed")
    parser.add_argument("--workloads", nargs="+", default=["lenet-digits"], choices=list(WORKLOADS))
    args = parser.parse_args()
    seeds = (0,) if args.quick else (0, 1, 2)
    workloads = args.workloads
    rows = []
    cols = ["workload", "cluster", "config", "batch", "measured_sec_per_iter", "simulated_sec_per_iter",
            "sim_pct_err", "calibrated_pct_err", "measured_mean_staleness", "simulated_mean_staleness"]
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        for wl in workloads:
            for cluster, (slowdown, configs) in (QUICK if args.quick else CLUSTERS).items():
                prof, _ = cluster_profile(cluster, slowdown, wl, args.quick, work)
                for row in configs:
                    rows.append(measure(prof, wl, cluster, row, WORKLOADS[wl], seeds, work))
                    print_rows(f"{wl} on {cluster}", rows[-1:], cols)
    summary = {key: median_err(rows, key) for key in ("sim_pct_err", "analytic_pct_err", "calibrated_pct_err",
                                                       "staleness_pct_err")}
    out = {"quick": args.quick, "run_s": RUN_S, "seeds": list(seeds), "rows": rows,
           "sec_per_iter_median_abs_pct_err": summary["sim_pct_err"],
           "staleness_median_abs_pct_err": summary["staleness_pct_err"],
           "analytic_sec_per_iter_median_abs_pct_err": summary["analytic_pct_err"],
           "calibrated_sec_per_iter_median_abs_pct_err": summary["calibrated_pct_err"],
           "goals": {"sec_per_iter_pct": GOAL_SEC_PCT, "staleness_pct": GOAL_STALENESS_PCT},
           "goals_met": summary["sim_pct_err"] is not None and summary["sim_pct_err"] <= GOAL_SEC_PCT
           and summary["staleness_pct_err"] is not None and summary["staleness_pct_err"] <= GOAL_STALENESS_PCT}
    print_rows("simulator against real runs (median absolute % error)", [summary], list(summary))
    path = write_results("simulator" + ("-quick" if args.quick else ""), out)
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
