"""Measuring a device's training step, shared by `omnitune profile` and its worker processes.

A step is what the runtime's loop does once: draw a batch, forward, backward, optimizer step.
It is timed at batch sizes 1, 2, 4, … (median of repeats after warm-up) until a step grows too
slow or the batch no longer fits in memory, in one pass over the sizes or more (`measure_steps`).
A GPU measured alone keeps doubling its batch past max_batch while its throughput rises
(`grow_steps`).
"""

from __future__ import annotations

import math
import statistics
import time
from dataclasses import dataclass
from typing import Callable

import torch
from torch.utils.data import TensorDataset

from omnitune.core.cluster import Device
from omnitune.core.errors import UserError
from omnitune.core.profile import StepTiming
import omnitune.runtime.workload as workload_mod
from omnitune.runtime.context import emulate_slowdown
from omnitune.runtime.optim import optimizer


@dataclass(frozen=True)
class Settings:
    """How hard to measure. `quick` trades precision for a run of a few seconds (tests)."""
    # A Settings travels to the profile's worker processes, so it stays a plain frozen value.
    max_batch: int = 512
    max_step_s: float = 0.15    # stop growing the batch once one step takes longer
    repeats: int = 7            # at most, per pass; a size's repeats in a pass stop after size_s / passes
    size_s: float = 0.5         # (at least 3 in the first pass, 1 in the later ones)
    # Passes over the sizes, spread across the profile (measure_steps). More passes steady the step
    # times from one profile to the next, but not the planner's seconds per iteration, which the
    # calibration jobs set, and they make the profile longer: one, by default.
    passes: int = 1
    warmup: int = 1
    link_repeats: int = 20
    calibrate_s: float = 0.4                 # each calibration job runs this long, at most
    # All the calibration jobs together, at most (profile_worker.job_seconds): a machine whose
    # layouts call for many jobs runs each shorter, so that they stay a bounded part of its
    # profile. Half of it saves a second or two a profile, but a slow model's predictions then err
    # more (docs/decisions.md, measure.Settings).
    calibration_budget_s: float = 8.0
    # A calibration job stops once it has timed this many updates past its warm-up, if its seconds
    # are not up first; 0: it runs its seconds. Stopping at 40 updates predicts the planner's step
    # times slightly better than whole seconds and shortens a fast model's profile by about a
    # second; the slower models' jobs end on their seconds either way (docs/decisions.md,
    # measure.Settings).
    calibration_updates: int = 40
    # No protocol starts its calibration jobs once they have run this long (profile_worker.calibrate):
    # each job costs more than it trains (its model, optimizer, barriers and final evaluation), and
    # a many-rank machine's jobs would take about half its profile (docs/decisions.md,
    # measure.Settings). The jobs run in the order of `calibration_jobs`, so those left out are the
    # measured layout's last protocols and its groups formed by speed, which the planner models and
    # times by a real job before they may win. None with `quick` (tests), whose few short jobs then
    # all run.
    calibration_deadline_s: float = 10.0
    # The planner's batches run to 256. A middle batch (64) buys no accuracy over all: at batches no
    # job ran, the predictions err by the same median with it and without, neither reading faster,
    # and without it a fast model's profile is shorter (docs/decisions.md, measure.Settings).
    calibrate_batches: tuple[int, ...] = (16, 256)
    # A slow model's smaller calibration batch may halve, down to this, while its job would run past
    # its seconds for the updates it must time (profile_worker.sized_specs). Off: halved, the
    # predictions err more than with the smaller batch kept (docs/decisions.md, measure.Settings).
    calibrate_least_batch: int = 16

    @classmethod
    def make(cls, quick: bool, max_batch: int | None = None) -> "Settings":
        s = cls(max_batch=64, max_step_s=0.1, repeats=3, size_s=0.2, warmup=1, link_repeats=5, calibrate_s=0.2,
                calibrate_batches=(8, 32), calibration_deadline_s=math.inf) if quick else cls()
        if max_batch is not None:
            if max_batch < 1:
                raise UserError(f"--max-batch must be at least 1, got {max_batch}")
            s = cls(**{**s.__dict__, "max_batch": max_batch})
        return s


# A GPU measured alone doubles its batch past max_batch (grow_steps) while all of these hold:
GROW_GAIN = 1.05        # the last size beat the best samples/s so far by more than 5%
GROW_CAP = 1 << 16      # the doubled batch is at most this
GROW_STEP_S = 0.25      # the last size's step took at most this (max_step_s holds up to max_batch)
GROW_S = 4.0            # the growth has run less than this, so that it adds little to the profile


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
        # The runtime's worker gathers a GPU's batches on the GPU (workload.on_device): so does its step here.
        self.wl, self.train, self.device, self.emulated = wl, workload_mod.on_device(train, device), device, emulated
        self.name = emulated.id if emulated is not None else str(device)
        torch.manual_seed(0)
        try:
            self.model = wl.build_model().to(device)
        except torch.OutOfMemoryError:
            raise UserError(f"profile: the model does not fit on {self.name}") from None
        self.opt = optimizer(self.model.parameters(), 1e-3, 0.9, wl.recipe)      # the run's update, as it costs
        self.sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)

    def stream(self, batch: int, steps: int = 16):
        """Batches of random samples with no epoch order: the run's, a shuffle of the shard, costs
        its stream's start, not a step, and a profile times ten sizes. Indices for `steps` steps are
        drawn at once where the tensors are, and each step's batch gathers a slice of them, as
        the runtime's gathers a slice of its epoch's order."""
        n = len(self.train)
        if n == 0:
            raise UserError(f"profile: the workload's training set is empty ({self.name})")
        tensors = isinstance(self.train, TensorDataset)
        where = self.train.tensors[0].device if tensors else torch.device("cpu")
        rng = torch.Generator(device=where).manual_seed(batch)
        while True:
            drawn = torch.randint(n, (steps * batch,), generator=rng, device=where)
            drawn = drawn if tensors else drawn.numpy()         # as `batches` hands a dataset's indices
            for k in range(steps):
                yield workload_mod.collate(self.train, drawn[k * batch:(k + 1) * batch])

    def time(self, batch: int, s: Settings, first: bool = True) -> list[float] | None:
        """Seconds of steps at `batch` for one pass (size_s / passes; at least 3 in the first pass,
        after warm-up, and 1 in a later one), or None when it does not fit in memory.

        A step's batch, activations and loss are locals of `step`, gone when it returns, so no
        size keeps a tensor of the one before it: only the gradients and the optimizer's state,
        the model's size, stay between sizes."""
        stream = self.stream(batch)

        def step():
            # The batch is drawn inside the timed step, as the runtime's loop draws it.
            started = time.perf_counter()
            x, y = next(stream)
            self.opt.zero_grad()
            with workload_mod.autocast(self.wl, self.device):      # as the runtime's step
                loss = self.wl.loss_fn(self.model(x.to(self.device)), y.to(self.device))
            loss.backward()
            self.opt.step()
            emulate_slowdown(self.emulated, started)
        try:
            return timed(step, s.repeats, s.warmup if first else 0, self.sync, s.size_s / s.passes, 3 if first else 1)
        except torch.OutOfMemoryError:
            pass
        # Freed after the handler: until it ends, the error's traceback holds the failed step's tensors.
        self.free()
        return None

    def free(self) -> None:
        """Drop the gradients, the optimizer's state and the allocator's cached blocks: a step
        that ran out of memory leaves them half-built, and the next size starts as the first did."""
        self.opt.zero_grad()
        self.opt.state.clear()
        torch.cuda.empty_cache()            # a no-op where CUDA was never initialised


def measure_steps(timer: StepTimer, s: Settings, barrier: Callable[[], None] = lambda: None,
                  on_batch: Callable[[int], None] = lambda b: None,
                  on_full: Callable[[int, int], None] = lambda b, last: None) -> list[StepTiming]:
    """Step timings at batch 1, 2, 4, …: the first pass finds the sizes (up to the first whose
    step exceeds max_step_s, or that does not fit in memory), later passes time them again, and a
    size's step is the median of its passes' medians. A slow spell of the host (one can last a
    second or more) then moves one pass of a size, not every repeat of it. `barrier` keeps
    concurrent devices in step (`barriers` of them).
    `on_full(batch, last)` hears of the first pass's first size that does not fit, after `last`."""
    passes: dict[int, list[list[float]]] = {}
    for k in range(s.passes):
        done = False
        for b in batch_sizes(s.max_batch):
            barrier()
            if done or (k and b not in passes):
                continue
            measured = timer.time(b, s, first=not k)
            if measured is None:
                if not k and passes:
                    on_full(b, max(passes))
                done = True
                continue
            passes.setdefault(b, []).append(measured)
            if not k:
                on_batch(b)
                done = statistics.median(measured) > s.max_step_s
    if not passes:
        raise UserError(f"profile: not even batch size 1 fits on {timer.name}")
    return [timing(b, runs) for b, runs in passes.items()]


def grow_steps(timer: StepTimer, s: Settings, steps: list[StepTiming],
               on_full: Callable[[int, int], None] = lambda b, last: None,
               clock: Callable[[], float] = time.perf_counter) -> list[StepTiming]:
    """Step timings past max_batch, for a GPU measured alone: the batch doubles while the GROW_*
    rules hold, and the size that ends the growth is kept, being real data. A GPU's throughput
    can still rise at max_batch, and the planner chooses among the profile's sizes. Only a range
    that reached max_batch grows: one that ended below it ended at memory or at max_step_s. A
    grown size is timed in one pass."""
    if not steps or steps[-1].batch_size != s.max_batch:
        return []
    grown, last = [], steps[-1]
    best = max(x.samples_per_s for x in steps)
    started = clock()
    while last.batch_size * 2 <= GROW_CAP and last.sec_per_step <= GROW_STEP_S and clock() - started < GROW_S:
        batch = last.batch_size * 2
        measured = timer.time(batch, s)
        if measured is None:
            on_full(batch, last.batch_size)
            break
        last = timing(batch, [measured])
        grown.append(last)
        if last.samples_per_s <= GROW_GAIN * best:
            break
        best = last.samples_per_s
    return grown


def alone_steps(timer: StepTimer, device: Device, s: Settings,
                progress: Callable[[str], None] = lambda msg: None) -> list[StepTiming]:
    """Step timings of a device measured alone: measure_steps, and for a GPU grow_steps past
    max_batch, since with no CPU workers beside it its throughput can still rise there. A size
    that does not fit ends the range with one line to `progress` (does_not_fit)."""
    def full(batch: int, last: int) -> None:
        progress(does_not_fit(device, batch, last))
    steps = measure_steps(timer, s, on_full=full)
    return steps + (grow_steps(timer, s, steps, full) if device.kind == "cuda" else [])


def does_not_fit(device: Device, batch: int, last: int) -> str:
    """The line that ends a device's range at its memory."""
    memory = "GPU memory" if device.kind == "cuda" else "memory"
    return f"{device.id}: batch {batch} does not fit in {memory}; its range ends at {last}"


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
