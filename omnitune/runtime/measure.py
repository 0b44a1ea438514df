"""Measuring a device's training step, shared by `omnitune profile` and its worker processes.

A step is what the runtime's loop does once: draw a batch, forward, backward, optimizer step.
It is timed at batch sizes 1, 2, 4, … (median of repeats after warm-up) until a step grows too
slow or the batch no longer fits in memory, in one pass over the sizes or more (`measure_steps`).
"""

from __future__ import annotations

import math
import statistics
import time
from dataclasses import dataclass
from typing import Callable

import torch

from omnitune import workload as workload_mod
from omnitune.cluster import Device
from omnitune.errors import UserError
from omnitune.profile import StepTiming
from omnitune.runtime.context import emulate_slowdown
from omnitune.runtime.optim import HeavyBall


@dataclass(frozen=True)
class Settings:
    """How hard to measure. `quick` trades precision for a run of a few seconds (tests)."""
    # A Settings travels to the profile's worker processes, so it stays a plain frozen value.
    max_batch: int = 512
    max_step_s: float = 0.15    # stop growing the batch once one step takes longer
    repeats: int = 7            # at most, per pass; a size's repeats in a pass stop after size_s / passes
    size_s: float = 0.5         # (at least 3 in the first pass, 1 in the later ones)
    # Passes over the sizes, spread across the profile (measure_steps). Three passes cut the
    # profile-to-profile spread of step times (largest over smallest of 5 profiles, median over
    # sizes: teacher-mlp 1.72 to 1.48, cnn1d-mnist1d 1.42 to 1.13) but not of the planner's seconds
    # per iteration, which the calibration jobs set (1.29 to 1.33, 1.34 to 1.30), and they took
    # teacher-mlp's profile from 17.9 to 20.9 s (benchmarks/profile_noise.py): one, by default.
    passes: int = 1
    warmup: int = 1
    link_repeats: int = 20
    calibrate_s: float = 0.4                 # each calibration job runs this long
    calibrate_batches: tuple[int, ...] = (16, 64, 256)   # the planner's batches run to 256 (optimizer)

    @classmethod
    def make(cls, quick: bool, max_batch: int | None = None) -> "Settings":
        s = cls(max_batch=64, max_step_s=0.1, repeats=3, size_s=0.2, warmup=1, link_repeats=5, calibrate_s=0.2,
                calibrate_batches=(8, 32)) if quick else cls()
        if max_batch is not None:
            if max_batch < 1:
                raise UserError(f"--max-batch must be at least 1, got {max_batch}")
            s = cls(**{**s.__dict__, "max_batch": max_batch})
        return s


def batch_sizes(max_batch: int) -> list[int]:
    """1, 2, 4, … up to max_batch (included even if not a power of two)."""
    sizes = [1 << k for k in range(max_batch.bit_length()) if 1 << k <= max_batch]
    return sizes + ([max_batch] if sizes[-1] != max_batch else [])


def timed(fn: Callable[[], None], repeats: int, warmup: int, sync: Callable[[], None],
          budget_s: float = float("inf"), least: int = 3) -> list[float]:
    """Seconds of up to `repeats` timed calls, fewer once they have taken `budget_s` (at least
    `least`)."""
    for _ in range(warmup):
        fn()
    sync()
    times = []
    for _ in range(repeats):
        t = time.perf_counter()
        fn()
        sync()
        times.append(time.perf_counter() - t)
        if len(times) >= least and sum(times) >= budget_s:
            break
    return times


def log_spread(times: list[float]) -> float:
    """The standard deviation of the logs: the spread the simulator draws steps from."""
    return statistics.stdev(math.log(max(t, 1e-9)) for t in times) if len(times) > 1 else 0.0


class StepTimer:
    """Times one training step on one device: draw a batch, forward, backward, SGD step."""

    def __init__(self, wl: workload_mod.Workload, train, device: torch.device, emulated: Device | None = None):
        self.wl, self.train, self.device, self.emulated = wl, train, device, emulated
        torch.manual_seed(0)
        self.model = wl.build_model().to(device)
        self.opt = HeavyBall(self.model.parameters(), lr=1e-3, momentum=0.9)
        self.sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)

    def time(self, batch: int, s: Settings, first: bool = True) -> list[float] | None:
        """Seconds of steps at `batch` for one pass (size_s / passes; at least 3 in the first pass,
        after warm-up, and 1 in a later one), or None when it does not fit in memory."""
        stream = workload_mod.batches(self.train, batch, seed=0)

        def step():
            # The batch is drawn inside the timed step, as the runtime's loop draws it.
            started = time.perf_counter()
            x, y = next(stream)
            self.opt.zero_grad()
            self.wl.loss_fn(self.model(x.to(self.device)), y.to(self.device)).backward()
            self.opt.step()
            emulate_slowdown(self.emulated, started)
        try:
            return timed(step, s.repeats, s.warmup if first else 0, self.sync, s.size_s / s.passes, 3 if first else 1)
        except torch.OutOfMemoryError:
            torch.cuda.empty_cache()
            return None


def measure_steps(timer: StepTimer, s: Settings, barrier: Callable[[], None] = lambda: None,
                  on_batch: Callable[[int], None] = lambda b: None) -> list[StepTiming]:
    """Step timings at batch 1, 2, 4, …: the first pass finds the sizes (up to the first whose
    step exceeds max_step_s, or that does not fit in memory), later passes time them again, and a
    size's step is the median of its passes' medians. A slow spell of the host (here they last a
    second or more; one profile's step at batch 64 read 1.34 to 2.21 ms) then moves one pass of a
    size, not every repeat of it. `barrier` keeps concurrent devices in step (`barriers` of them)."""
    passes: dict[int, list[list[float]]] = {}
    for k in range(s.passes):
        done = False
        for b in batch_sizes(s.max_batch):
            barrier()
            if done or (k and b not in passes):
                continue
            measured = timer.time(b, s, first=not k)
            if measured is None:
                done = True
                continue
            passes.setdefault(b, []).append(measured)
            if not k:
                on_batch(b)
                done = statistics.median(measured) > s.max_step_s
    if not passes:
        raise UserError("profile: not even batch size 1 fits on the device")
    return [timing(b, runs) for b, runs in passes.items()]


def timing(batch: int, runs: list[list[float]]) -> StepTiming:
    """A size's step from its passes: the median of their medians, and the median of their
    spreads within a pass (a slow spell is a shift between passes, not a step's noise)."""
    sec = statistics.median(statistics.median(r) for r in runs)
    spreads = [log_spread(r) for r in runs if len(r) > 1]
    return StepTiming(batch_size=batch, sec_per_step=sec, samples_per_s=batch / sec,
                      spread=statistics.median(spreads) if spreads else 0.0)


def barriers(s: Settings) -> int:
    """How many times measure_steps meets its barrier: a rank that times no device meets it as often."""
    return s.passes * len(batch_sizes(s.max_batch))
