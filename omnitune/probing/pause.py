"""A re-tuning pause's readings (Omnivore's steady state), from a run's checkpoint: each
candidate trains a few updates by its protocol's emulation (emulator.py) and is scored on a
fixed validation subset, raw and after a cool-down (side by side, in reader processes, where
they would take long one after another); where the hardware model prices batches,
the gradient noise scale and, on one CPU device, the step times of larger batches are measured
too. planning/retune.py decides from the readings; runtime/job.py pauses the run for them.
"""

from __future__ import annotations

import math
import multiprocessing
import os
import time
from dataclasses import dataclass, replace
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from pathlib import Path

import numpy as np
import torch

from omnitune.core import env
from omnitune.core.change import Why
from omnitune.core.runspec import RunSpec
from omnitune.efficiency import goodput
from omnitune.planning import retune as retune_mod
from omnitune.planning.hardware import StepTime
from omnitune.probing.emulator import emulator
from omnitune.probing.probe import probe_config
from omnitune.runtime import launch as launch_mod
from omnitune.runtime import workload as workload_mod
from omnitune.runtime.flat import get_grads, num_params
from omnitune.runtime.workload import Workload, batches, evaluate, first

RETUNE_VALIDATION = 512     # test samples a re-tuning candidate is scored on, the same for all
FORWARD_SHARE = 1 / 3       # an evaluation's forward pass costs about this share of a training step


def pause_reading(wl: Workload, train, held, spec: RunSpec, state: dict, setting: retune_mod.Setting,
                  batches: int, iters: int, cool: bool = True) -> retune_mod.Reading:
    """One candidate at a pause: `iters` updates at `setting` from the checkpoint `state` with the
    protocol's own emulation (data order `batches`), then its cool-down (retune.cooldown) at
    retune.Rules.cool_rate of its rate; the validation loss on `held` before and after the
    cool-down, and the target's score after it. Without `cool`, no cool-down: both losses are the raw one."""
    lr, momentum = setting[:2]
    emu = emulator(wl, train, probe_config(retune_mod.shaped(spec, setting), lr, momentum), batches, state["model"],
                   state["optimizer"], horizon=spec.horizon)
    diverged = retune_mod.Reading(math.inf, math.inf, -math.inf)
    for _ in range(iters):
        if not math.isfinite(emu.step()):
            return diverged
    raw, raw_accuracy = evaluate(wl, emu.current_model(), held, torch.device("cpu"))[:2]
    if not cool:
        return retune_mod.Reading(raw, raw, spec.target.score_of(raw, raw_accuracy) if spec.target else -math.inf)
    emu.set_rate(lr * retune_mod.RULES.cool_rate)
    for _ in range(retune_mod.cooldown(iters)):
        if not math.isfinite(emu.step()):
            return diverged
    loss, accuracy = evaluate(wl, emu.current_model(), held, torch.device("cpu"))[:2]
    return retune_mod.Reading(raw, loss, spec.target.score_of(loss, accuracy) if spec.target else -math.inf)


Task = tuple[retune_mod.Setting, int, int, bool]    # a reading's setting, data order, updates, cool-down


class Readers:
    """A pause's readings (`pause_reading`), side by side in processes of their own: `processes`
    readers, each on its share of this process's threads, so that a wave of readings takes about
    its longest reading's time rather than their sum; with one, every reading is taken here, one
    after another, in the same order, as where the readers fail. The readers load the workload,
    the datasets (from the cache, or a copy the pause writes beside the checkpoint) and the
    checkpoint as they start. A model whose step gains little from more threads (a small
    recurrent one) reads faster so, the others about as fast: `reader_processes` says how many.
    Each reading is the same arithmetic wherever it is taken, up to the rounding of its threads."""

    def __init__(self, wl: Workload, datasets: tuple, held, spec: RunSpec, checkpoint: Path, validation: int,
                 processes: int):
        self.here = (wl, datasets[0], held, spec)
        self.pool, self.copy, self.broken, self.processes = None, None, "", max(1, processes)
        if processes < 2:
            return
        threads = max(1, torch.get_num_threads() // processes)
        try:
            if spec.data_dir is not None or wl.cache_path() is None:      # not in the cache: a copy
                copy = checkpoint.parent / "pause-datasets.pt"
                self.copy = copy if workload_mod.share(datasets, copy) else None
            launch_mod.start_server()       # its imports are the readers' (a no-op where the run started it)
            callers = {k: v for k, v in os.environ.items() if k.startswith(launch_mod.CALLERS_ENV)}
            self.pool = ProcessPoolExecutor(
                processes, mp_context=multiprocessing.get_context(launch_mod.START_METHOD),
                initializer=launch_mod.as_launched,
                initargs=(os.getcwd(), callers, _reader_start, spec, str(checkpoint),
                          str(self.copy) if self.copy else None, validation, threads))
        except (OSError, RuntimeError) as e:        # no room for the copy, no processes: read here
            self.broken = f"readers failed to start ({e}); read in the pause's own process"
            self.close()

    def read(self, state: dict, tasks: list[Task]) -> list[retune_mod.Reading]:
        """The readings of `tasks` from the checkpoint's `state`, in their order."""
        if self.pool is not None and len(tasks) > 1:
            try:
                return list(self.pool.map(_reader_read, tasks))
            except BrokenProcessPool as e:      # a reader died (out of memory, killed): the rest here
                self.broken = f"readers failed ({e}); read in the pause's own process"
                self.close()
        return [pause_reading(*self.here, state, *task) for task in tasks]

    def close(self) -> None:
        if self.pool is not None:
            self.pool.shutdown(cancel_futures=True)
            self.pool = None
        if self.copy is not None:
            self.copy.unlink(missing_ok=True)
            self.copy = None


_READER: dict = {}      # a reader process's workload, datasets, spec and checkpoint state (`_reader_start`)


def _reader_start(spec: RunSpec, checkpoint: str, copy: str | None, validation: int, threads: int) -> None:
    torch.set_num_threads(threads)
    env.keep_freed_memory()
    wl = workload_mod.load(spec.workload)
    train, test = workload_mod.shared(copy) if copy else wl.build_datasets(spec.data_dir, spec.seed)
    state = torch.load(checkpoint, map_location="cpu", weights_only=True)
    _READER.update(here=(wl, train, first(test, validation), spec), state=state)


def _reader_read(task: Task) -> retune_mod.Reading:
    return pause_reading(*_READER["here"], _READER["state"], *task)


READERS_FROM_S = 10.0    # a pause starts readers only where its readings left would take this long here


def reader_processes(readings: int, seconds: float) -> int:
    """How many readers a pause starts for `readings` readings left, which one after another
    here would take `seconds`: one per thread of this process, at most one per reading, where
    that is READERS_FROM_S or more; else none (1: it reads them itself), since readers pay for
    their start (their imports, the datasets, the checkpoint: about a second) and for waves of
    unequal readings. Readers gain where a model's step barely speeds up on a second thread
    (a small recurrent model's pause reads about 1.5x faster with two one-thread readers); a
    larger model's pause reads about as fast either way, and a short pause gains nothing
    (docs/decisions.md, pause.READERS_FROM_S)."""
    return min(torch.get_num_threads(), readings) if seconds >= READERS_FROM_S else 1


NOISE_DRAWS = 32            # minibatch gradients a pause's noise scale is measured on (goodput.noise_scale)


def gradient_noise(wl: Workload, train, model_state: dict, batch: int, seed: int,
                   draws: int = NOISE_DRAWS) -> tuple[float, float]:
    """The gradient noise scale phi (samples) and |G|^2 of the model in `model_state`, from
    `draws` gradients of `batch` samples each (goodput.noise_scale), in training mode, with no
    update: the weights stay as they are."""
    net = wl.build_model()
    net.load_state_dict(model_state)
    net.train()
    data, grads = batches(train, batch, seed), []
    for _ in range(draws):
        x, y = next(data)
        net.zero_grad(set_to_none=False)
        wl.loss_fn(net(x), y).backward()
        grads.append(get_grads(net, torch.empty(num_params(net))).numpy().astype(np.float64))
    return goodput.noise_scale(np.stack(grads), batch)


def grows(wl: Workload | None, spec: RunSpec, step_s: StepTime | None) -> bool:
    """Whether a pause weighs a larger batch by its goodput: the hardware model prices the run's
    batch and the recipe is SGD (AdaScale's rate is SGD's; no workload given: taken as SGD)."""
    return step_s is not None and retune_mod.throughput(spec, step_s) is not None \
        and (wl is None or wl.recipe.optimizer == "sgd")


TIMED_ROUNDS, TIMED_STEPS = 3, 3     # a timed batch scale: rounds, each this many steps after one to warm up


def timeable(spec: RunSpec) -> bool:
    """Whether this process's emulation steps as the run's worker does: one CPU device, unslowed
    (on several the emulation steps them one after another; a GPU is not this CPU)."""
    device = spec.devices[0]
    return len(spec.devices) == 1 and device.kind == "cpu" and device.emulated_slowdown == 1.0


def timed_scales(wl: Workload, train, spec: RunSpec, state: dict, step_s: StepTime) -> dict[float, float] | None:
    """Seconds a step of the run's batch (1.0) and of each of retune.Rules.growth's scales the model
    prices, timed at the pause from the checkpoint on this process's CPU, in interleaved rounds
    (the machine's drift falls on every scale alike), median of the rounds; None unless the run
    is one CPU device (`timeable`). Each round's timed steps follow an untimed one: the other
    scales' steps in between leave the first cold, and a cold first step puts the ratios of the
    larger batches under those of steady steps, which favours growth (docs/decisions.md,
    pause.timed_scales). The emulation's step is the runtime's update on the run's batches, less
    the worker's bookkeeping (its monitor, its step timer), which costs the same at every batch;
    so the growth is chosen by the run's loop at the run's moment, not by a profile's curve timed
    apart from it."""
    if not timeable(spec):
        return None
    scales = [1.0] + [f for f in retune_mod.RULES.growth if retune_mod.scaled(spec, f).batch_size != spec.batch_size
                      and step_s(retune_mod.scaled(spec, f))]
    if len(scales) == 1:
        return None
    emus = {f: emulator(wl, train, probe_config(retune_mod.scaled(spec, f), spec.lr, spec.momentum), spec.seed + 4,
                        state["model"], state["optimizer"], horizon=spec.horizon) for f in scales}
    threads, times = torch.get_num_threads(), {f: [] for f in scales}
    torch.set_num_threads(spec.devices[0].threads)
    try:
        for _ in range(TIMED_ROUNDS):
            for f, emu in emus.items():
                emu.step()
                began = time.perf_counter()
                for _ in range(TIMED_STEPS):
                    emu.step()
                times[f].append((time.perf_counter() - began) / TIMED_STEPS)
    finally:
        torch.set_num_threads(threads)
    return {f: float(np.median(t)) for f, t in times.items()}


def noise_and_growth(wl: Workload, train, spec: RunSpec, state: dict, step_s: StepTime | None) \
        -> tuple[float | None, tuple[retune_mod.Setting, float] | None]:
    """The gradient noise scale at the checkpoint, and the larger batch its goodput favours with
    its gain (retune.grown); (None, None) where it weighs none (`grows`). Measured on the largest
    group's batch."""
    if not grows(wl, spec, step_s):
        return None, None
    phi = gradient_noise(wl, train, state["model"], max(sum(g) for g in spec.group_batches), spec.seed + 3)[0]
    return phi, retune_mod.grown(spec, step_s, phi)


def pause_cost_s(spec: RunSpec, iters: int, step_s: StepTime | None, sec_per_iter: float,
                 wl: Workload | None = None, validation: int = RETUNE_VALIDATION) -> float:
    """What a pause's readings should cost before one was timed: each candidate a stalled run's
    pause reads (retune.spec_candidates: all of them; a pause on the schedule reads fewer, those
    of no lower rate per sample; neither reads ten times or a tenth of the rate unless three
    times or a third of it read better, counted here as not: retune.further) trains its
    updates, cools down and is evaluated twice, and two of them are read again, at the run's
    seconds per iteration for each device (the emulation steps every device's batch in this
    process), and on one CPU device the larger batches' timing (`timed_scales`). It counts a
    stalled pause's readings, not a schedule pause's fewer, since a stall is what pauses a run
    within its budget: estimated at the schedule's readings, stalled pauses cost up to a fifth of
    the training (docs/decisions.md, pause.pause_cost_s). The goodput's reads, its noise scale
    and its timing count only where the pause weighs them (`grows`), and the evaluations are
    of `validation` samples (`validation_size`). The readings are counted one after another:
    readers (`Readers`) side by side are not, which leaves the estimate high where they start."""
    tried = retune_mod.spec_candidates(spec, step_s)
    tried = [c for c in tried if retune_mod.further(c, tried[0], {})]     # the far rates: read where the near won
    updates = iters * (1 + retune_mod.RULES.cool_share)
    evaluations = 2 * min(validation, RETUNE_VALIDATION) / sum(spec.batch_size.values()) * FORWARD_SHARE
    # Where the pause weighs the goodput (the hardware model prices the batch of an SGD run): the
    # goodput's batch, read twice as a candidate of its own, and the noise scale's gradients (a
    # step each, with no update).
    priced = grows(wl, spec, step_s)
    reads = len(tried) + 2 + (2 if priced else 0)
    noise = NOISE_DRAWS if priced else 0
    # One CPU device: the run's batch and each larger one the goodput weighs are timed, each at
    # its multiple of the run's step.
    timing = TIMED_ROUNDS * (1 + TIMED_STEPS) * (1 + sum(retune_mod.RULES.growth)) if priced and timeable(spec) else 0
    return (reads * (updates + evaluations) + noise + timing) * sec_per_iter * len(spec.devices)


def validation_size(wl: Workload, data_dir: str | None) -> int:
    """How many test samples a pause scores its candidates on: RETUNE_VALIDATION, or the whole
    test set where it is smaller and omnitune's dataset cache holds it, its size read without
    loading the tensors (else building the datasets before the run, only to count them, could
    cost seconds: the estimate then takes the most)."""
    path = wl.cache_path() if data_dir is None else None
    if path is None or not path.is_file():
        return RETUNE_VALIDATION
    try:
        test = torch.load(path, mmap=True, weights_only=True)[1]     # share's [train, test] tensors
        return min(RETUNE_VALIDATION, int(test[0].shape[0]))
    except Exception:           # not a file `share` wrote whole: the most
        return RETUNE_VALIDATION


def retune(spec: RunSpec, checkpoint: Path, why: Why, iters: int,
           step_s: StepTime | None = None, lean: bool = False) -> tuple[RunSpec, dict]:
    """Omnivore's steady state, from a run's checkpoint (weights and optimizer state): the
    settings the pause may switch to (retune.spec_candidates, `read_candidates`) are read
    (`pause_reading`, on the same batches) and scored by their validation loss, raw and after a
    cool-down, on the first RETUNE_VALIDATION test samples; the current setting (its rate at
    three significant digits, as the candidates': retune.rate) and the challenger are read again
    on other batches, which measures the noise; the run switches only beyond it on both losses,
    to a lower rate only when stalled, and cools its rate where that reaches the target
    (retune.decide). `why` the run paused: "schedule", "stall", "off pace" (stalled, and at its
    pace it misses its target within its time limit: a challenger needs no margin),
    "divergence" (stalled at a setting that diverged: the best reading wins) or "plateau" (a
    stall while the recent pace still gets to the target, or off pace before half its way: read
    as on schedule). On a "plateau" or "off pace" pause where nothing but the goodput's batch is
    switched to, the current rate and a third of it are read long and compared
    (`plateau_check`, retune.plateau). With `step_s` (the hardware model), twice and half the
    batch and the protocols it predicts faster are candidates too, each read after the updates
    that fit in the time of `iters` of the current setting's (retune.pace); for SGD the gradient
    noise scale is measured here and the larger batch its goodput favours (retune.grown) is
    taken unless its readings refuse it; on one CPU device the batches' step times are timed
    first (`timed_scales`, retune.timed). `lean` (the run is tuned in place): `lean_read`.
    Returns the re-tuned spec and a record of what was tried and decided, for replans.jsonl."""
    env.keep_freed_memory()
    spec = replace(spec, lr=retune_mod.rate(spec.lr, 1.0))
    if lean and why in (Why.DIVERGENCE, Why.PLATEAU):
        return lean_read(spec, checkpoint, why, iters)
    wl = workload_mod.load(spec.workload)
    datasets = wl.build_datasets(spec.data_dir, spec.seed)
    state = torch.load(checkpoint, map_location="cpu", weights_only=True)
    diverged, off_pace = why == Why.DIVERGENCE, why == Why.OFF_PACE
    stalled = why in (Why.STALL, Why.OFF_PACE, Why.DIVERGENCE)
    # A diverged setting's pause takes the best reading (retune.decide): the goodput's growth,
    # which needs the step times and the noise scale, is no candidate there.
    seconds = timed_scales(wl, datasets[0], spec, state, step_s) if grows(wl, spec, step_s) and not diverged else None
    step_s = retune_mod.timed(step_s, spec, seconds) if seconds else step_s
    phi, growth = noise_and_growth(wl, datasets[0], spec, state, step_s) if not diverged else (None, None)
    bigger = [growth[0]] if growth else []             # the goodput's batch, which may be a candidate already
    every = retune_mod.spec_candidates(spec, step_s)
    updates = {s: max(1, round(iters * retune_mod.pace(spec, s, step_s))) for s in every + bigger}
    read = read_candidates(wl, datasets, spec, checkpoint, state, every, bigger, updates, stalled, diverged,
                           off_pace)
    try:
        target = spec.target.score if spec.target else math.inf
        decision = retune_mod.decide(retune_mod.Setting(spec.lr, spec.momentum), read.readings, target,
                                     read.stalled, diverged, off_pace, growth[0] if growth else None)
        # A plateau is checked where nothing was switched to but the goodput's batch, whose rate
        # keeps the run's noise where it levelled off, on a plateau pause and on one off pace (past
        # half its way): docs/decisions.md, retune.Rules.plateau_gain.
        grew = growth is not None and decision.setting == growth[0]
        checked = plateau_check(read.readers, spec, state, iters) \
            if why in (Why.PLATEAU, Why.OFF_PACE) and (not decision.switched or grew) else None
    finally:
        read.readers.close()
    if checked and checked[0].switched:
        decision = checked[0]
    new = retune_mod.retuned(spec, decision.setting) if decision.switched else spec
    return new, pause_record(spec, new, decision, read, updates, phi, growth, seconds, checked, iters)


def lean_read(spec: RunSpec, checkpoint: Path, why: Why, iters: int) -> tuple[RunSpec, dict]:
    """A pause of a run tuned in place reads only what its tuner cannot read in the run: a
    divergence reads nothing (the run goes on from its best checkpoint below the rate that
    diverged, the tuner's own rule: job.below_edge), and a plateau only the plateau check
    (`plateau_check`: the current rate against a third of it, read long), since the tuner takes
    no higher rate a candidate could offer. A stall or an off-pace pause past half the way reads
    every candidate (`retune`). docs/decisions.md, pause.lean_read."""
    current = retune_mod.Setting(spec.lr, spec.momentum)
    if why == Why.DIVERGENCE:
        decision = retune_mod.Decision(current, False, 0.0, "the run diverged, tuned in place: no readings; it goes "
                                       "on below the rate that diverged")
        return spec, pause_record(spec, spec, decision, Read({}, [], None, True), {}, None, None, None, None, iters)
    wl = workload_mod.load(spec.workload)
    datasets = wl.build_datasets(spec.data_dir, spec.seed)
    state = torch.load(checkpoint, map_location="cpu", weights_only=True)
    held = first(datasets[1], RETUNE_VALIDATION)
    # The check's two readings are long (ten times a pause's): side by side where there are threads.
    readers = Readers(wl, datasets, held, spec, checkpoint, RETUNE_VALIDATION, reader_processes(2, READERS_FROM_S))
    try:
        decision, long = plateau_check(readers, spec, state, iters)
    finally:
        readers.close()
    new = retune_mod.retuned(spec, decision.setting) if decision.switched else spec
    return new, pause_record(spec, new, decision, Read({}, [], readers, False), {}, None, None, None,
                             (decision, long), iters)


@dataclass
class Read:
    """What a pause read: each setting's readings, the settings it left unread, the readers (kept
    open for a plateau's check), and whether the run reads as stalled."""
    readings: dict
    skipped: list
    readers: Readers | None
    stalled: bool


def read_candidates(wl, datasets, spec: RunSpec, checkpoint: Path, state: dict, every: list, bigger: list,
                    updates: dict, stalled: bool, diverged: bool, off_pace: bool) -> Read:
    """Read the current setting, then the rest: the near settings at once, the far rates whose
    near step won (retune.further), and the current setting and the challenger again on other
    batches (the noise). A current setting that diverges from here makes the run read as
    stalled, and no larger rate is read (retune.below); off pace or diverged, the challenger needs
    no margin."""
    held = first(datasets[1], RETUNE_VALIDATION)
    current = retune_mod.Setting(spec.lr, spec.momentum)
    began = time.perf_counter()
    readings = {current: [pause_reading(wl, datasets[0], held, spec, state, current, spec.seed + 1, updates[current])]}
    one_s = time.perf_counter() - began
    diverges = diverged or not math.isfinite(readings[current][0].cooled)
    stalled = stalled or diverges
    rest = list(dict.fromkeys(retune_mod.readable(every, stalled)[1:] + bigger))
    if diverges:
        rest = retune_mod.below(rest, current)
    readers = Readers(wl, datasets, held, spec, checkpoint, RETUNE_VALIDATION,
                      reader_processes(len(rest), one_s * (len(rest) + 2)))
    try:
        def read(settings: list, batches: int) -> list:
            return readers.read(state, [(s, batches, updates[s], True) for s in settings])
        for _ in range(2):
            wave = [s for s in rest if s not in readings and retune_mod.further(s, current, readings)]
            readings.update((s, [r]) for s, r in zip(wave, read(wave, spec.seed + 1)))
        rival = retune_mod.challenger(current, readings, stalled, off_pace or diverged)
        again = list(dict.fromkeys([current, *([rival] if rival else []), *(b for b in bigger if b in readings)]))
        for setting, r in zip(again if len(again) > 1 else [], read(again if len(again) > 1 else [], spec.seed + 2)):
            readings[setting].append(r)
    except BaseException:
        readers.close()
        raise
    return Read(readings, [s for s in rest if s not in readings], readers, stalled)


def pause_record(spec: RunSpec, new: RunSpec, decision, read: Read, updates: dict, phi, growth, seconds,
                 checked, iters: int) -> dict:
    """A pause's line of replans.jsonl: the setting before and after, what was read and decided."""
    shape = lambda s: {"lr": s.lr, "momentum": s.momentum, "batch_size": dict(s.batch_size), "groups": len(s.groups),
                       "protocol": s.variant.label}
    readers = read.readers
    processes = readers.processes if readers else 0
    return {"before": shape(spec), "after": shape(new), "switched": decision.switched, "stalled": read.stalled,
            "margin": decision.margin, "reason": decision.reason,
            "noise_scale": phi if phi is None or math.isfinite(phi) else "inf",     # JSON has no inf
            "goodput_gain": growth[1] if growth else None,
            "timed_step_s": {str(f): t for f, t in seconds.items()} if seconds else None,
            "not_read": [{"lr": s.lr, "momentum": s.momentum} for s in read.skipped],
            "scores": [{"lr": s.lr, "momentum": s.momentum, "batch": s.batch,
                        "protocol": (s.variant or spec.variant).label, "updates": updates[s],
                        "loss": float(np.mean([r.cooled for r in v])),
                        "raw_loss": float(np.mean([r.raw for r in v])),
                        "repeats": [r.cooled for r in v]}
                       for s, v in read.readings.items()],
            "readers": processes, **({"readers_failed": readers.broken} if readers and readers.broken else {}),
            **({"plateau": {"updates": iters * retune_mod.RULES.plateau_updates,
                            "readings": [{"lr": s.lr, "raw_loss": [r.raw for r in v]} for s, v in checked[1].items()],
                            "reason": checked[0].reason}}
               if checked else {})}


def plateau_check(readers: Readers, spec: RunSpec, state: dict, iters: int) \
        -> tuple[retune_mod.Decision, dict[retune_mod.Setting, list[retune_mod.Reading]]]:
    """A "plateau" or "off pace" pause's long readings (retune.plateau): the current rate and a third of it,
    retune.Rules.plateau_updates times `iters` updates each with no cool-down, on the pause's batches;
    on other batches again only where the first pair's gap passes retune.Rules.plateau_gain (the noise).
    The decision and the readings."""
    current = retune_mod.Setting(spec.lr, spec.momentum)
    pair, n = (current, retune_mod.step_down(current)), iters * retune_mod.RULES.plateau_updates

    def read(batches: int) -> list[retune_mod.Reading]:
        return readers.read(state, [(s, batches, n, False) for s in pair])
    long = {s: [r] for s, r in zip(pair, read(spec.seed + 1))}
    decision = retune_mod.plateau(current, long)
    if decision.switched:
        for s, r in zip(pair, read(spec.seed + 2)):
            long[s].append(r)
        decision = retune_mod.plateau(current, long)
    return decision, long
