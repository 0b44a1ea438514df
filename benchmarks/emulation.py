"""Do the probes train the way the runtime does? Emulated against real iterations to target.

    python -m benchmarks.emulation [--quick]

For every protocol, on lenet-digits and cnn1d-mnist1d, on two one-thread CPU workers (and four
learners for softsync), one configuration is trained twice per seed: by the probe's emulation
(omnitune/probing/emulator.py, what `plan` runs, with the staleness histogram the profile's calibration
measured) and by a real run of the runtime, evaluated every K iterations. Iterations to target
are read off both curves alike (first crossing, interpolated). A run that misses the target
counts as its last iteration. Writes benchmarks/results/emulation.json: `rows` (workload,
protocol, variant, emulated_iters, real_iters, ratio_median) and `worst_ratio`. Goal: every
ratio_median (emulated median / real median) within [0.8, 1.25].
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import statistics
import tempfile
from pathlib import Path

import numpy as np

from benchmarks.common import print_rows, write_results
from omnitune import planning
from omnitune.core.cluster import load_cluster
from omnitune.core.protocols import HPSGD, Gossip, Groups, SoftSync, Sync
from omnitune.core.runspec import RunSpec
from omnitune.efficiency import statmodel
from omnitune.probing.probe import run_probe
from omnitune.profiling import profiler
from omnitune.runtime import workload
from omnitune.runtime import job

# workload: (target, effective lr, evaluate every K iterations, most iterations)
WORKLOADS = {"lenet-digits": (0.95, 0.05, 5, 3000), "cnn1d-mnist1d": (0.85, 0.1, 10, 6000)}
BATCH = 32
CLUSTERS = {
    2: [Sync(), Groups(g=2), SoftSync(learners=2, n=1), SoftSync(learners=2, n=2), HPSGD(), Gossip(every=1),
        Gossip(every=4)],
    4: [SoftSync(learners=4, n=2), SoftSync(learners=4, n=4), SoftSync(learners=4, n=4, scale_lr_by_staleness=False)],
}
QUICK = {2: [Sync(), Groups(g=2), HPSGD(), Gossip(every=4)], 4: [SoftSync(learners=4, n=4)]}
GOAL = (0.8, 1.25)


def cluster_profile(workers: int, wl_name: str, work: Path):
    spec = work / f"c{workers}.yaml"
    spec.write_text(f"nodes:\n  - host: 127.0.0.1\n    cpu_workers: {[1] * workers}\n")
    return profiler.profile(load_cluster(spec), wl_name, None, profiler.Settings.make(True), work / "logs")


def setup_of(prof, variant) -> planning.Setup:
    """The planner's setup of this variant at BATCH (one the planner does not try, such as
    softsync without Rudra's scaling, as its planned twin's)."""
    space = planning.Space(protocols=(variant.protocol,), batch_sizes=(BATCH,))
    twin = next(s for s in planning.enumerate_setups(prof, space)
                if (s.variant.key, s.variant.groups) == (variant.key, variant.groups) and not s.variant.balanced)
    return dataclasses.replace(twin, variant=variant)


def real_iters(spec: RunSpec, out: Path, every: int, target: float) -> tuple[float, dict]:
    s = job.run_spec(spec, str(out), max_time_s=120, eval_every_iters=every)
    lines = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines()]
    it = np.array([m["iteration"] for m in lines], float)
    acc = np.array([m["test_accuracy"] for m in lines], float)
    hit = statmodel.iters_to_target(it, acc, target)
    return (hit if hit is not None else float(it[-1])), {"staleness": list(s.staleness), "reached": hit is not None}


def bench(wl_name: str, workers: int, variants, seeds: list[int], work: Path) -> list[dict]:
    target, lr, every, max_iters = WORKLOADS[wl_name]
    prof = cluster_profile(workers, wl_name, work)
    wl = workload.load(wl_name)
    rows = []
    for v in variants:
        setup = setup_of(prof, v)
        base_lr, mu = lr * v.lr_gain, v.rule_momentum(planning.MU_STAR)
        cfg = setup.probe(base_lr, mu)
        emulated, real, real_staleness, emu_staleness = [], [], [], []
        for seed in seeds:
            train, test = wl.build_datasets(None, seed)
            r, _ = run_probe(wl, train, test, cfg, target, max_iters, 600, seed, every)
            emulated.append(r.iters_to_target if r.reached else float(r.curve[-1][0]))
            emu_staleness.append(r.mean_staleness)
            spec = RunSpec(workload=wl_name, data_dir=None, variant=v, devices=prof.cluster.devices,
                           groups=setup.groups, batch_size={d.id: BATCH for d in prof.cluster.devices}, lr=base_lr,
                           momentum=mu, seed=seed, target_accuracy=target)
            it, info = real_iters(spec, work / f"{wl_name}-{v.key}-{workers}-{seed}", every, target)
            real.append(it)
            real_staleness.append(info["staleness"])
        row = {"workload": wl_name, "protocol": v.protocol, "variant": v.label, "learners": workers,
               "lr_scaled_by_staleness": v.scales_lr_by_staleness,
               "lr": base_lr, "momentum": mu, "calibration_staleness": list(cfg.staleness),
               "emulated_iters": emulated, "real_iters": real,
               "ratio_median": statistics.median(emulated) / statistics.median(real),
               "emulated_mean_staleness": emu_staleness, "real_staleness": real_staleness}
        rows.append(row)
        print_rows(f"{wl_name}, {workers} workers", [row], ["variant", "emulated_iters", "real_iters", "ratio_median"])
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer protocols, 3 seeds")
    args = parser.parse_args()
    seeds = [0, 1, 2] if args.quick else [0, 1, 2, 3, 4]
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for wl_name in WORKLOADS:
            for workers, variants in (QUICK if args.quick else CLUSTERS).items():
                rows += bench(wl_name, workers, variants, seeds, Path(tmp))
    print_rows(f"emulated / real iterations to target (goal: every ratio in {list(GOAL)})", rows,
               ["workload", "variant", "learners", "ratio_median"])
    worst = max(rows, key=lambda r: max(r["ratio_median"] / GOAL[1], GOAL[0] / r["ratio_median"]))
    path = write_results("emulation", {"quick": args.quick, "seeds": seeds, "goal": list(GOAL), "rows": rows,
                                       "worst_ratio": worst["ratio_median"], "worst_row": worst["variant"]})
    print(f"worst ratio {worst['ratio_median']:.2f} ({worst['workload']}, {worst['variant']}); wrote {path}")


if __name__ == "__main__":
    main()
