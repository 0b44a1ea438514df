"""The runtime's training step against a plain PyTorch loop's, paired and repeated.

    python -m benchmarks.overhead [--quick] [--device cpu|cuda] [--batch B] [--pairs N] [--seconds S]
                                  [--rounds R] [--window-s W] [--only NAME] [--variants | --no-variants]

A small model's step is mostly overhead on a GPU, and the runtime's step should cost what plain
PyTorch's costs. For each workload (teacher-mlp, cnn1d-mnist1d, shapes-resnet; teacher-mlp
alone with --quick) on one device (cpu: one worker on every core, local_cluster's `one-worker`;
cuda: the first GPU), at batch 256, lr 0.01 and momentum 0.9, each pair runs back to back:
- the runtime: a one-device `sync` job (`job.run_spec`, no target) for S seconds; its training
  seconds per iteration (RunSummary.measured_sec_per_iter: past the first step, evaluation
  excluded; it evaluates only after the run);
- the plain loop (benchmarks.plain_steps): a fresh process with the runtime worker's threads,
  random indices into the workload's training tensors (on CUDA moved to the GPU once, the
  indices drawn there), torch.optim.SGD with momentum, the workload's loss, timed for S seconds
  after a warm-up. It leaves malloc as glibc sets it, as plain PyTorch does (the runtime's
  workers raise its thresholds: env.keep_freed_memory).
Pairs alternate which side goes first, so a drift in the machine's speed falls on both alike,
and record the load average they started at, where other programs' work shows. Rows give per
workload the median of runtime / plain over the pairs, with its min and max. Goal: a median of
at most 1.05.

On CUDA (on the CPU too with --variants; on neither with --no-variants) fresh processes then time the plain loop's variants
(plain_steps.VARIANTS: fused SGD, CUDA graphs, torch.compile, and the runtime's own ways) against
the plain loop in the same process, R rounds of W seconds each, taking turns, to learn what
pays. A variant that fails, or whose process dies, reports its error instead of a time.

With --device cuda and no CUDA device it prints one line saying so and exits with status 2,
writing nothing. Writes benchmarks/results/overhead.json (overhead-cuda.json on the GPU; with
--quick, -quick after either).
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import platform
import statistics
import sys
import tempfile
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from dataclasses import asdict, dataclass, replace
from datetime import datetime, timezone
from pathlib import Path

import torch

from benchmarks.common import print_rows, write_results
from benchmarks.plain_steps import BATCH, LR, MOMENTUM, Loop, time_variants, variant_groups
from omnitune.core.cluster import Device, local_cluster
from omnitune.core.protocols import Sync
from omnitune.core.runspec import RunSpec
from omnitune.runtime import job

NO_GPU = "benchmarks.overhead: no CUDA device here; run --device cuda on a machine with one"
WORKLOADS = ("teacher-mlp", "cnn1d-mnist1d", "shapes-resnet")
GOAL = 1.05                     # the runtime's step over the plain loop's, median of the pairs
NEVER = 1 << 40                 # evaluate every this many iterations: only after the run
SIDES = ("runtime", "plain")
PAIR_COLUMNS = ["workload", "device", "batch", "pairs", "runtime_ms", "plain_ms", "ratio", "ratio_min",
                "ratio_max", "goal_met"]
VARIANT_COLUMNS = ["workload", "device", "variant", "ms", "plain_ms", "over_plain", "over_plain_min",
                   "over_plain_max", "error"]


@dataclass(frozen=True)
class Settings:
    """How much to measure: `pairs` of `seconds` a side; the variants in `rounds` of `window_s`."""
    workloads: tuple[str, ...]
    pairs: int
    seconds: float
    rounds: int
    window_s: float

    def __post_init__(self):
        if not self.workloads:
            raise ValueError("at least one workload is needed")
        if self.pairs < 1 or self.rounds < 1:
            raise ValueError(f"pairs and rounds must be at least 1, got {self.pairs} and {self.rounds}")
        if not (self.seconds > 0 and self.window_s > 0):
            raise ValueError(f"seconds and window_s must be positive, got {self.seconds} and {self.window_s}")


# Each pair pays about 7 s beside its 2 x 3.5 s of training (both sides' processes and datasets,
# the job's last evaluation): 16 pairs of the three workloads take about 9 minutes on two cores.
# Two processes running the same loop here can differ by 10% or more in step time, and 8 pairs
# read cnn1d-mnist1d at 1.055 and 1.10 on two days: resampling the 40 pairs of two runs of
# 2026-11-30 (median 1.03), the median of 8 lies within 1.007-1.043 (5-95%), of 16 within
# 1.014-1.040.
FULL = Settings(WORKLOADS, pairs=16, seconds=3.5, rounds=4, window_s=1.0)
QUICK = Settings(("teacher-mlp",), pairs=3, seconds=3.0, rounds=3, window_s=0.5)


def order(pairs: int) -> list[tuple[str, str]]:
    """Which side runs first in each pair: the runtime in even pairs, the plain loop in odd ones,
    so that neither side always meets the machine as the other left it."""
    return [SIDES if i % 2 == 0 else SIDES[::-1] for i in range(pairs)]


def spread(values: list[float]) -> dict[str, float]:
    """The median of paired ratios and their extremes: the median resists one disturbed pair."""
    return {"median": statistics.median(values), "min": min(values), "max": max(values)}


def pair_row(workload: str, device: str, batch: int, pairs: list[dict]) -> dict:
    """A workload's pairs as a row: median seconds of each side and of runtime / plain."""
    ratios = spread([p["ratio"] for p in pairs])
    return {"workload": workload, "device": device, "batch": batch, "pairs": len(pairs),
            "runtime_ms": 1e3 * statistics.median(p["runtime"] for p in pairs),
            "plain_ms": 1e3 * statistics.median(p["plain"] for p in pairs),
            "ratio": ratios["median"], "ratio_min": ratios["min"], "ratio_max": ratios["max"],
            "goal_met": ratios["median"] <= GOAL}


def variant_rows(workload: str, device: str, timed: list[dict]) -> list[dict]:
    """Each variant's median milliseconds a step and its ratio to the plain loop's in the same
    process, round by round; a variant that failed, or whose process died, with its error."""
    rows = []
    for process in timed:
        secs = process["sec_per_iter"]
        for name, mine in secs.items():
            if name == "plain":
                continue
            over = spread([s / p for s, p in zip(mine, secs["plain"])])
            rows.append({"workload": workload, "device": device, "variant": name, "ms": 1e3 * statistics.median(mine),
                         "plain_ms": 1e3 * statistics.median(secs["plain"]), "over_plain": over["median"],
                         "over_plain_min": over["min"], "over_plain_max": over["max"]})
        rows += [{"workload": workload, "device": device, "variant": name, "error": error}
                 for name, error in process["errors"].items()]
    return rows


def runtime_device(kind: str) -> Device:
    """The device a user's one-device job gets: every core as one worker, or the first GPU."""
    if kind == "cuda":
        return Device("cuda0", "cuda", cuda_index=0)
    cluster = local_cluster(cuda_count=0)
    return cluster.layout("one-worker")[0] if "one-worker" in cluster.layouts else cluster.devices[0]


def run_spec(loop: Loop) -> RunSpec:
    d = loop.device
    return RunSpec(workload=loop.workload, data_dir=None, variant=Sync(), devices=(d,), groups=((d.id,),),
                   batch_size={d.id: loop.batch}, lr=loop.lr, momentum=loop.momentum, seed=loop.seed)


def runtime_side(loop: Loop, seconds: float, work: Path) -> float:
    """Seconds per iteration of the runtime's own loop, in a real job of `seconds`."""
    summary = job.run_spec(run_spec(loop), str(work), max_time_s=seconds, eval_every_iters=NEVER)
    return summary.measured_sec_per_iter


def plain_side(loop: Loop, seconds: float, work: Path) -> float:
    """Seconds per iteration of the plain loop, in a fresh process of its own."""
    return in_fresh_process(loop, ("plain",), seconds, 1)["sec_per_iter"]["plain"][0]


def in_fresh_process(loop: Loop, names: tuple[str, ...], window_s: float, rounds: int) -> dict:
    """timed_process in a spawned process: it pays its own start, threads and CUDA context."""
    with ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn")) as pool:
        return pool.submit(timed_process, loop, names, window_s, rounds).result()


def timed_process(loop: Loop, names: tuple[str, ...], window_s: float, rounds: int) -> dict:
    """Take the device as the runtime's worker does (its GPU and one thread, or its threads),
    then time the variants."""
    if loop.device.kind == "cuda":
        torch.cuda.set_device(loop.device.cuda_index)
        torch.set_num_threads(1)
    else:
        torch.set_num_threads(loop.device.threads)
    return time_variants(loop, names, window_s, rounds)


def measure_variants(loop: Loop, s: Settings) -> list[dict]:
    """Each group of variants that apply on the device, with the plain loop beside it, in a
    process of its own: a CUDA error that ends a process costs that group alone."""
    timed = []
    for group in variant_groups(loop.device.kind):
        try:
            timed.append(in_fresh_process(loop, ("plain", *group), s.window_s, s.rounds))
        except BrokenProcessPool as e:
            timed.append({"sec_per_iter": {}, "errors": {name: f"the process died: {e}"[:300] for name in group}})
    return timed


def measure_pairs(loop: Loop, s: Settings, work: Path) -> list[dict]:
    """Runtime and plain loop back to back, `s.pairs` times, the first side alternating; pair i
    trains with seed i on both sides."""
    side_of = {"runtime": runtime_side, "plain": plain_side}
    pairs = []
    for i, sides in enumerate(order(s.pairs)):
        seeded, load = replace(loop, seed=i), os.getloadavg()[0]
        secs = {side: side_of[side](seeded, s.seconds, work / f"{loop.workload}-{i}-{side}") for side in sides}
        pairs.append({"first": sides[0], **secs, "ratio": secs["runtime"] / secs["plain"], "load_1min": load})
        print(f"{loop.workload} pair {i + 1}/{s.pairs}: runtime {1e3 * secs['runtime']:.3f} ms, "
              f"plain {1e3 * secs['plain']:.3f} ms, ratio {pairs[-1]['ratio']:.3f}, load {load:.2f}", flush=True)
    return pairs


def bench(kind: str, s: Settings, batch: int, variants: bool, work: Path) -> dict:
    rows, variant_table, raw = [], [], {}
    device = runtime_device(kind)
    for name in s.workloads:
        loop = Loop(name, device, batch)
        raw[name] = {"pairs": measure_pairs(loop, s, work)}
        rows.append(pair_row(name, kind, batch, raw[name]["pairs"]))
        print_rows(f"{name}: the runtime's step over the plain loop's", rows[-1:], PAIR_COLUMNS)
        if variants:
            raw[name]["variants"] = measure_variants(loop, s)
            mine = variant_rows(name, kind, raw[name]["variants"])
            variant_table += mine
            print_rows(f"{name}: variants of the plain loop", mine, VARIANT_COLUMNS)
    return {"rows": rows, "variants": variant_table, "raw": raw, "device": device.id, "threads": device.threads}


def machine(kind: str) -> dict:
    return {"cpu_count": os.cpu_count(), "cpus_usable": len(os.sched_getaffinity(0)), "torch": torch.__version__,
            "python": platform.python_version(), "platform": platform.platform(),
            "cuda_device": torch.cuda.get_device_name(0) if kind == "cuda" else None}


def settings_from(args: argparse.Namespace) -> Settings:
    """--quick's settings or the full run's, with those the command line gives instead."""
    given = {k: getattr(args, k) for k in ("pairs", "seconds", "rounds", "window_s") if getattr(args, k) is not None}
    if args.only:
        given["workloads"] = tuple(args.only)
    return replace(QUICK if args.quick else FULL, **given)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="teacher-mlp alone, 3 pairs of 3 s")
    parser.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    parser.add_argument("--batch", type=int, default=BATCH)
    parser.add_argument("--pairs", type=int, help="pairs per workload (16; 3 with --quick)")
    parser.add_argument("--seconds", type=float, help="seconds of training a side (4; 3 with --quick)")
    parser.add_argument("--rounds", type=int, help="rounds of the variants (4; 3 with --quick)")
    parser.add_argument("--window-s", type=float, help="seconds a variant runs each round (1; 0.5 with --quick)")
    parser.add_argument("--only", action="append", metavar="NAME", help="this workload (repeatable)")
    parser.add_argument("--variants", action="store_true", help="time the plain loop's variants on the CPU too")
    parser.add_argument("--no-variants", action="store_true", help="time only the pairs, on CUDA too")
    args = parser.parse_args()
    if args.device == "cuda" and not torch.cuda.is_available():
        print(NO_GPU, file=sys.stderr)
        sys.exit(2)
    if args.batch < 1:
        parser.error(f"--batch must be at least 1, got {args.batch}")
    try:
        s = settings_from(args)
    except ValueError as e:
        parser.error(str(e))
    with tempfile.TemporaryDirectory() as tmp:
        out = bench(args.device, s, args.batch, (args.variants or args.device == "cuda") and not args.no_variants,
                    Path(tmp))
    print_rows(f"the runtime's step over a plain PyTorch loop's on {args.device} (goal: median <= {GOAL})",
               out["rows"], PAIR_COLUMNS)
    if out["variants"]:
        print_rows("variants of the plain loop, over the plain loop in the same process", out["variants"],
                   VARIANT_COLUMNS)
    data = {"quick": args.quick, "date": datetime.now(timezone.utc).isoformat(), "machine": machine(args.device),
            "settings": {**asdict(s), "batch": args.batch, "lr": LR, "momentum": MOMENTUM}, "goal": GOAL, **out}
    path = write_results("overhead" + ("-cuda" if args.device == "cuda" else ""), data)
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
