"""What the profile's calibration jobs buy: predicted seconds per iteration against real runs, by
the calibration settings the profile runs.

    python -m benchmarks.calibration [--quick] [--compare batches|halving|budget|updates] [--only NAME ...]
                                     [--rounds N]

The profile's calibration jobs are most of its time, and what they buy is the accuracy of the
planner's seconds per iteration. Four comparisons (COMPARISONS): `batches`, calibration batches
16, 64 and 256 against 16 and 256; `halving`, on charlm-stdlib, a slow model's smaller batch
kept at 16 against halved to 8 (profile_worker.sized_specs); `budget`, the calibration jobs'
seconds in all (Settings.calibration_budget_s) at 8 against 4, each job then a quarter
second, not 0.4 (profile_worker.job_seconds); `updates`, jobs that run their seconds against
jobs that stop once they have timed 40 updates (Settings.calibration_updates). For each
workload (lenet-digits, teacher-mlp, shapes-resnet, charlm-stdlib; the first alone with --quick)
each arm profiles this machine N times (3; 1 with --quick), the arms taking turns round by round,
the first going last every other round, so that the machine's drift falls on both. Then each
configuration (`configs`: sync on one worker and on one worker per core and two groups at each
batch, hpsgd and gossip at the middle one) at batches no
calibration job of either arm runs is timed by real jobs of the runtime (3 runs, one with
--quick), and every profile's prediction (planning.profiled: the calibrated analytic model, or
the simulator where no job ran the shape) is set against the runs' median. Rows give per
workload and arm the profile's seconds (median, min-max) and the median and 90th percentile of
|predicted - measured| / measured over configurations and profiles; the summary, per arm against
the first, how many configurations its predictions came nearer and the median ratio of its
predictions to the first's. Goal: no arm's median error above the first's by more than 2
points. Writes benchmarks/results/calibration.json (calibration-halving.json for `halving`,
calibration-budget.json for `budget`, calibration-updates.json for `updates`; -quick after any
with --quick).
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from dataclasses import asdict, replace
from pathlib import Path

from benchmarks.common import print_rows, write_results
from benchmarks.prediction import pct_err
from omnitune import planning
from omnitune.core.cluster import local_cluster
from omnitune.core.protocols import Groups, Sync, from_key
from omnitune.efficiency.perfmodel import Shape
from omnitune.planning.space import Config
from omnitune.profiling import profiler
from omnitune.runtime import job

WORKLOADS = ("lenet-digits", "teacher-mlp", "shapes-resnet", "charlm-stdlib")
BATCHES = {"lenet-digits": (24, 48, 96), "teacher-mlp": (48, 96, 192), "shapes-resnet": (12, 24, 48),
           "charlm-stdlib": (8, 12, 24)}        # per device; no calibration job of either arm runs them
# name -> (arms, the first being the one the others are compared with; workloads; batches)
COMPARISONS = {
    "batches": ({"16-64-256": profiler.Settings(calibrate_batches=(16, 64, 256)), "16-256": profiler.Settings()},
                WORKLOADS, BATCHES),
    "halving": ({"16, kept": profiler.Settings(), "halved to 8": profiler.Settings(calibrate_least_batch=8)},
                ("charlm-stdlib",), {"charlm-stdlib": (6, 12, 24)}),
    "budget": ({"8 s": profiler.Settings(), "4 s": profiler.Settings(calibration_budget_s=4.0)}, WORKLOADS, BATCHES),
    "updates": ({"by seconds": profiler.Settings(calibration_updates=0),
                 "40 updates": profiler.Settings(calibration_updates=40)}, WORKLOADS, BATCHES),
}
RUN_S = {"shapes-resnet": 5.0, "charlm-stdlib": 6.0}    # each timing run (3 s otherwise)
RUNS = 3
GOAL_POINTS = 2.0


def configs(prof, name: str, quick: bool, batches: dict) -> list[Config]:
    """Sync on one worker and on one per core and two groups at each of the workload's batches,
    then hpsgd and gossip at the middle one (with --quick: the first batch's three)."""
    per_core = prof.cluster.layouts["one-per-core"]
    one = prof.cluster.layouts.get("one-worker", per_core[:1])
    two = Groups(g=2)
    mine = batches[name][:1] if quick else batches[name]
    out = [c for b in mine for c in (Config("one-worker", Sync(), (one,), b, 0.01, 0.9),
                                       Config("one-per-core", Sync(), (per_core,), b, 0.01, 0.9),
                                       Config("one-per-core", two, two.group(per_core), b, 0.01, 0.3))]
    if not quick:
        out += [Config("one-per-core", from_key(key, 1), (per_core,), batches[name][1], 0.01, 0.9)
                for key in ("hpsgd", "gossip/every=1")]
    return out


def profiles(name: str, rounds: int, arms: dict) -> tuple[dict[str, list], list[dict]]:
    """Each arm's profiles, the arms taking turns, the first going last every other round (a
    process's first profile is its slowest: lenet-digits' took 15.7 s, then 9.3-10.9); and their
    wall times."""
    profs, walls = {arm: [] for arm in arms}, []
    for r in range(rounds):
        for arm, settings in list(arms.items())[::-1 if r % 2 else 1]:
            with tempfile.TemporaryDirectory() as tmp:
                began = time.perf_counter()
                prof = profiler.profile(local_cluster(), name, None, settings, Path(tmp) / "logs")
                wall = time.perf_counter() - began
            profs[arm].append(prof)
            walls.append({"workload": name, "arm": arm, "round": r, "profile_s": wall, "jobs": len(prof.calibration)})
            print(f"{name} {arm} round {r + 1}: profile {wall:.1f}s, {len(prof.calibration)} calibration jobs", flush=True)
    return profs, walls


def measure(name: str, c: Config, prof, runs: int) -> dict:
    """The configuration's seconds per iteration in `runs` real jobs (median), and each profile's
    prediction of it."""
    spec = planning.spec_of(c, prof, name, None, None, 0)
    measured = []
    for seed in range(runs):
        with tempfile.TemporaryDirectory() as tmp:
            s = job.run_spec(replace(spec, seed=seed), tmp, max_time_s=RUN_S.get(name, 3.0), eval_every_s=1e9)
        measured.append(s.measured_sec_per_iter)
    return {"workload": name, "layout": c.layout, "protocol": c.variant.key, "batch": c.batch,
            "measured_sec_per_iter": statistics.median(measured), "measured_all": measured,
            "shape": Shape(c.groups, dict(spec.batch_size), c.variant, c.layout)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="lenet-digits, one round, three configurations, one run each")
    parser.add_argument("--compare", choices=sorted(COMPARISONS), default="batches", help="which settings to compare")
    parser.add_argument("--only", action="append", choices=WORKLOADS, help="this workload (repeatable)")
    parser.add_argument("--rounds", type=int, default=None, help="profiles per arm (3; 1 with --quick)")
    args = parser.parse_args()
    arms, workloads, batches = COMPARISONS[args.compare]
    names = args.only or (workloads[:1] if args.quick else workloads)
    rounds = args.rounds or (1 if args.quick else 3)
    runs = 1 if args.quick else RUNS
    configs_out, walls, rows = [], [], []
    for name in names:
        profs, w = profiles(name, rounds, arms)
        walls += w
        mine = []
        base = profs[next(iter(arms))][0]
        for c in configs(base, name, args.quick, batches):
            m = measure(name, c, base, runs)
            shape = m.pop("shape")
            m["predicted"] = {arm: [planning.profiled(p)(shape, c.batch)[0] for p in ps] for arm, ps in profs.items()}
            m["abs_err_pct"] = {arm: [pct_err(p, m["measured_sec_per_iter"]) for p in ps]
                                for arm, ps in m["predicted"].items()}
            mine.append(m)
            print(f"{name} {c.layout} {c.variant.key} batch {c.batch}: measured {m['measured_sec_per_iter'] * 1e3:.2f} ms; "
                  + ", ".join(f"{a} {statistics.median(v) * 1e3:.2f}" for a, v in m["predicted"].items()), flush=True)
        configs_out += mine
        for arm in arms:
            errs = sorted(e for m in mine for e in m["abs_err_pct"][arm])
            secs = [x["profile_s"] for x in w if x["arm"] == arm]
            rows.append({"workload": name, "arm": arm, "profile_s": statistics.median(secs),
                         "profile_s_spread": [min(secs), max(secs)], "configurations": len(mine),
                         "median_abs_err_pct": statistics.median(errs),
                         "p90_abs_err_pct": errs[min(len(errs) - 1, int(0.9 * len(errs)))]})
    first = next(iter(arms))
    median_err = {arm: statistics.median(e for m in configs_out for e in m["abs_err_pct"][arm]) for arm in arms}

    def per_config(m: dict, arm: str) -> float:
        return statistics.median(m["abs_err_pct"][arm])
    against = {arm: {"nearer": sum(per_config(m, arm) < per_config(m, first) for m in configs_out),
                     "of": len(configs_out),
                     "median_ratio_to_first": statistics.median(
                         statistics.median(m["predicted"][arm]) / statistics.median(m["predicted"][first])
                         for m in configs_out)}
               for arm in arms if arm != first}
    result = {"quick": args.quick, "compare": args.compare,
              "arms": {a: asdict(s) for a, s in arms.items()},       # every setting, whichever the arms differ in
              "rounds": rounds, "runs": runs, "rows": rows, "configurations": configs_out, "profiles": walls,
              "median_abs_err_pct": median_err, "against_first": against, "goal_points": GOAL_POINTS,
              "goals_met": {arm: median_err[arm] <= median_err[first] + GOAL_POINTS for arm in arms}}
    print_rows("calibration batches: predicted seconds per iteration against real runs", rows,
               ["workload", "arm", "profile_s", "configurations", "median_abs_err_pct", "p90_abs_err_pct"])
    for arm, a in against.items():
        print(f"{arm}: median |error| {median_err[arm]:.1f}% against {median_err[first]:.1f}% for {first}; nearer the "
              f"runs in {a['nearer']} of {a['of']}; its predictions / {first}'s: {a['median_ratio_to_first']:.3f}")
    name = "calibration" + ("" if args.compare == "batches" else f"-{args.compare}")
    print(f"wrote {write_results(name, result)}")


if __name__ == "__main__":
    main()
