"""A tiny job, as a user runs it: `omnitune plan` and `omnitune run`, wall time from the shell.

    python -m benchmarks.tiny_job [--quick] [--repeats N]

Goal (issue 37): `plan` and `run` of lenet-digits to test accuracy 0.95 together within 15 s of
wall time, and a job predicted under 10 s starting within 10 s of `plan`. The profile is
taken once, before (its time reported apart: a user profiles a machine once). Each repeat is the
two commands as subprocesses, Python's start-up and imports in them, with its own seed, then the
same seed as one command, `omnitune train --profile` (`one_command_*`); the repeats' median and
min-max are reported. --quick: one repeat.
Writes benchmarks/results/tiny_job.json (tiny_job-quick.json with --quick).
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from benchmarks.common import print_rows, write_results

WORKLOAD, TARGET = "lenet-digits", 0.95
GOAL_S = 15.0
PLAN_GOAL_S = 10.0
REPEATS = 3


def omnitune(*args: str) -> float:
    """One `omnitune` command in its own process: its wall time. A failure ends the benchmark."""
    start = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "omnitune.cli", *args], capture_output=True, text=True)
    if done.returncode != 0:
        sys.exit(f"error: omnitune {' '.join(args)} failed: {(done.stderr or done.stdout).strip().splitlines()[-1:]}")
    return time.perf_counter() - start


def repeat(work: Path, profile: Path, seed: int) -> dict:
    plan, out = work / f"plan-{seed}.json", work / f"run-{seed}"
    plan_s = omnitune("plan", "--profile", str(profile), "--workload", WORKLOAD, "--target-accuracy", str(TARGET),
                      "--seed", str(seed), "--out", str(plan))
    run_s = omnitune("run", str(plan), "--out-dir", str(out))
    summary = json.loads((out / "summary.json").read_text())
    predicted = json.loads(plan.read_text())["prediction"].get("time_to_target_s")
    one = work / f"train-{seed}"
    one_s = omnitune("train", "--profile", str(profile), "--workload", WORKLOAD, "--target-accuracy", str(TARGET),
                     "--seed", str(seed), "--out-dir", str(one))
    return {"seed": seed, "plan_s": plan_s, "run_s": run_s, "total_s": plan_s + run_s,
            "predicted_s": predicted, "reached": summary["reached_target"],
            "time_to_target_s": summary["time_to_target_s"], "one_command_s": one_s,
            "one_command_reached": json.loads((one / "summary.json").read_text())["reached_target"]}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="one repeat")
    parser.add_argument("--repeats", type=int, default=REPEATS, help=f"plan and run this many times (default {REPEATS})")
    args = parser.parse_args(argv)
    repeats = 1 if args.quick else args.repeats
    if repeats < 1:
        parser.error(f"--repeats must be at least 1, got {repeats}")
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        profile = work / "profile.json"
        profile_s = omnitune("profile", "--workload", WORKLOAD, "--out", str(profile))
        rows = [repeat(work, profile, seed) for seed in range(1, repeats + 1)]
    print_rows(f"{WORKLOAD} to {TARGET}: plan + run, wall time", rows,
               ["seed", "plan_s", "run_s", "total_s", "predicted_s", "time_to_target_s", "reached", "one_command_s",
                "one_command_reached"])
    totals, ones = [r["total_s"] for r in rows], [r["one_command_s"] for r in rows]
    total_s, plan_s = statistics.median(totals), statistics.median(r["plan_s"] for r in rows)
    result = {"quick": args.quick, "workload": WORKLOAD, "target_accuracy": TARGET, "profile_s": profile_s,
              "rows": rows, "median_total_s": total_s, "spread_total_s": [min(totals), max(totals)],
              "median_plan_s": plan_s, "median_one_command_s": statistics.median(ones),
              "spread_one_command_s": [min(ones), max(ones)], "goal_s": GOAL_S,
              "goals_met": {"plan_and_run_within_15s": total_s <= GOAL_S and all(r["reached"] for r in rows),
                            "plan_within_10s": plan_s <= PLAN_GOAL_S,
                            "one_command_within_15s": statistics.median(ones) <= GOAL_S
                            and all(r["one_command_reached"] for r in rows)}}
    print(f"profile {profile_s:.1f} s (once); plan + run median {result['median_total_s']:.1f} s "
          f"({min(totals):.1f}-{max(totals):.1f}), as one command {result['median_one_command_s']:.1f} s "
          f"({min(ones):.1f}-{max(ones):.1f}); goal {GOAL_S:g} s")
    print(f"wrote {write_results('tiny_job', result)}")


if __name__ == "__main__":
    main()
