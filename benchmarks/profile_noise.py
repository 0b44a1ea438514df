"""How far one `omnitune profile` moves from the next on this machine, and what the passes buy.

    python -m benchmarks.profile_noise [--quick]

Each workload is profiled REPEATS times on this machine with one pass over the batch sizes (the
default) and with PASSES (each size timed in passes spread across the profile, its step the
median of their medians), the two alternating in one session. For every
quantity a plan reads from a profile, the ratio of its largest to its smallest value over the
profiles of one setting: the devices' step times (per batch size), the calibration jobs' seconds
per iteration, and the hardware model's seconds per iteration of every setup the planner scores.
The table gives each ratio's median and maximum over the quantities, and each setting's median
profile time. The calibration jobs are the same in both settings: their ratio is the noise that
passes do not touch.

Writes benchmarks/results/profile_noise.json (profile_noise-quick.json with --quick).
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from dataclasses import replace
from pathlib import Path

from benchmarks.common import print_rows, write_results
from omnitune import planning
from omnitune.core.cluster import local_cluster
from omnitune.profiling import profiler
from omnitune.runtime.measure import Settings

WORKLOADS = ("teacher-mlp", "cnn1d-mnist1d")
REPEATS, QUICK_REPEATS = 5, 2
PASSES = 3


def measured(name: str, passes: int, logs: Path) -> dict:
    """One profile's quantities, by name, and its wall time."""
    started = time.perf_counter()
    prof = profiler.profile(local_cluster(), name, None, replace(Settings(), passes=passes), logs)
    wall = time.perf_counter() - started
    steps = {f"{d.device_id} b{s.batch_size}": s.sec_per_step for d in prof.devices for s in d.steps}
    calibration = {f"{c.layout} {c.protocol} g{c.groups} b{c.batch_size}": c.sec_per_iter for c in prof.calibration}
    setups = {f"{s.layout} {s.variant.label} b{s.batch}": s.sec_per_iter
              for s in planning.enumerate_setups(prof, planning.Space())}
    return {"wall_s": wall, "steps": steps, "calibration": calibration, "setups": setups}


def ratios(profiles: list[dict], kind: str) -> dict[str, float]:
    """Largest over smallest of each quantity of `kind` measured in every profile."""
    names = set.intersection(*(set(p[kind]) for p in profiles))
    return {n: max(p[kind][n] for p in profiles) / min(p[kind][n] for p in profiles) for n in sorted(names)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help=f"teacher-mlp only, {QUICK_REPEATS} profiles a setting")
    args = parser.parse_args()
    workloads = WORKLOADS[:1] if args.quick else WORKLOADS
    repeats = QUICK_REPEATS if args.quick else REPEATS
    settings = {"one pass": 1, f"{PASSES} passes": PASSES}
    rows = []
    with tempfile.TemporaryDirectory(prefix="profile-noise-") as tmp:
        for name in workloads:
            got: dict[str, list[dict]] = {label: [] for label in settings}
            for r in range(repeats):
                for label, passes in settings.items():          # alternating: a slow spell hits both
                    got[label].append(measured(name, passes, Path(tmp) / f"{name}-{r}-{passes}"))
                    print(f"{name} {label} #{r + 1}: {got[label][-1]['wall_s']:.1f}s", flush=True)
            for label, profiles in got.items():
                row = {"workload": name, "setting": label, "profiles": len(profiles),
                       "profile_s": statistics.median(p["wall_s"] for p in profiles)}
                for kind in ("steps", "calibration", "setups"):
                    spread = ratios(profiles, kind)
                    row[f"{kind}_median_ratio"] = statistics.median(spread.values()) if spread else None
                    row[f"{kind}_max_ratio"] = max(spread.values()) if spread else None
                    row[f"{kind}_ratios"] = spread
                row["runs"] = profiles
                rows.append(row)
    columns = ["workload", "setting", "profiles", "profile_s", "steps_median_ratio", "steps_max_ratio",
               "calibration_median_ratio", "calibration_max_ratio", "setups_median_ratio", "setups_max_ratio"]
    print_rows("profile to profile: largest over smallest, per quantity", rows, columns)
    path = write_results("profile_noise", {"quick": args.quick, "repeats": repeats, "rows": rows})
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
