"""Measuring a device's training step, shared by `omnitune profile` and its worker processes.

A step is what the runtime's loop does once: draw a batch, forward, backward, optimizer step.
It is timed at batch sizes 1, 2, 4, … (median of repeats after warm-up) until a step grows too
slow or the batch no longer fits in memory.
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
    repeats: int = 7            # at most; a batch size's repeats stop after size_s (at least 3)
    size_s: float = 0.5
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
          budget_s: float = float("inf")) -> tuple[float, float]:
    """Median of up to `repeats` timed calls (fewer once they have taken `budget_s`, but at least
    3), and the standard deviation of their logs: the spread the simulator draws steps from."""
    for _ in range(warmup):
        fn()
    sync()
    times = []
    for _ in range(repeats):
        t = time.perf_counter()
        fn()
        sync()
        times.append(time.perf_counter() - t)
        if len(times) >= 3 and sum(times) >= budget_s:
            break
    logs = [math.log(max(t, 1e-9)) for t in times]
    return statistics.median(times), statistics.stdev(logs) if len(logs) > 1 else 0.0


class StepTimer:
    """Times one training step on one device: draw a batch, forward, backward, SGD step."""

    def __init__(self, wl: workload_mod.Workload, train, device: torch.device, emulated: Device | None = None):
        self.wl, self.train, self.device, self.emulated = wl, train, device, emulated
        torch.manual_seed(0)
        self.model = wl.build_model().to(device)
        self.opt = HeavyBall(self.model.parameters(), lr=1e-3, momentum=0.9)
        self.sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)

    def time(self, batch: int, s: Settings) -> tuple[float, float] | None:
        """Median seconds per step at `batch` and their log-spread, or None when it does not fit
        in memory."""
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
            return timed(step, s.repeats, s.warmup, self.sync, s.size_s)
        except torch.OutOfMemoryError:
            torch.cuda.empty_cache()
            return None


def measure_steps(timer: StepTimer, s: Settings, barrier: Callable[[], None] = lambda: None,
                  on_batch: Callable[[int], None] = lambda b: None) -> list[StepTiming]:
    """Step timings at batch 1, 2, 4, …; `barrier` keeps concurrent devices in step."""
    out: list[StepTiming] = []
    done = False
    for b in batch_sizes(s.max_batch):
        barrier()
        if done:
            continue
        measured = timer.time(b, s)
        if measured is None:
            done = True
            continue
        sec, spread = measured
        out.append(StepTiming(batch_size=b, sec_per_step=sec, samples_per_s=b / sec, spread=spread))
        on_batch(b)
        done = sec > s.max_step_s
    if not out:
        raise UserError("profile: not even batch size 1 fits on the device")
    return out
