"""Probes: short real training of the workload in this process, by the protocol's own update
rule on virtual workers (emulator.py). The test set is evaluated every few iterations; the
curve gives iterations to target. Re-planning's probes start from a run's checkpoint.

Where a probe stops is kept (`Handoff`): a longer probe of the same configuration goes on from
there, and `omnitune run` starts from the chosen configuration's (Omnivore's optimizer hands its
model on too), so that training is not done twice.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Callable

import numpy as np
import torch

from omnitune.core.target import Target, of
from omnitune.core import env
from omnitune.core.plan import Plan
from omnitune.core.runspec import RunSpec
from omnitune.efficiency import goodput, statmodel
from omnitune.efficiency.statmodel import ProbeConfig, ProbeResult, ProbeStatus
from omnitune.planning import retune as retune_mod
from omnitune.planning.budget import EVALS, probe_test_size
from omnitune.planning.hardware import StepTime
from omnitune.planning.probes import HandsOn, Prober
from omnitune.probing.emulator import emulator
from omnitune.runtime import workload as workload_mod
from omnitune.runtime import checkpoint
from omnitune.runtime.flat import get_grads, num_params
from omnitune.runtime.workload import Workload, batches, evaluate, first


@dataclass(frozen=True)
class Handoff:
    """Where a probe stopped: what a longer probe, or the run, goes on from."""
    config: ProbeConfig
    state: dict             # a checkpoint's "model" and "optimizer" entries (Emulator.checkpoint_state)
    iterations: int
    train_s: float          # seconds it trained, its evaluations left out (as a run's clock counts)
    curve: tuple[tuple[int, float], ...] = ()    # its test accuracy so far, for a probe that goes on
    losses: tuple[float, ...] = ()     # its training losses so far: one that goes on reads them as its own
    seconds: float = 0.0               # its wall time so far, evaluations included


def run_probe(wl: Workload, train, test, cfg: ProbeConfig, target: Target | float, max_iters: int,
              max_seconds: float, seed: int, eval_every: int = 10,
              on_eval: Callable[[int, float], bool] = lambda it, acc: False,
              schedule: list[int] | None = None, start: Handoff | None = None) -> tuple[ProbeResult, Handoff]:
    """Train until the test metric reaches `target` (a plain number: an accuracy), or `max_iters` /
    `max_seconds` run out. The curve holds the readings' scores (core/target.py);
    from `start` when given (its iterations count toward `max_iters`; its curve, training losses
    and seconds lead this one's, so the result reads as one probe of all its iterations would).
    Returns the result and where it stopped.

    Evaluates at the iterations of `schedule` (default: every `eval_every`), moved up to where the
    runtime evaluates too, and at the last. `on_eval(iteration, accuracy)` sees every evaluation;
    returning True stops the probe (pruned).
    """
    began = time.perf_counter()
    target = of(target)
    period = cfg.variant.eval_period
    if schedule is None:
        every = math.lcm(eval_every, period)
        schedule = list(range(every, max_iters + 1, every))
    points = sorted({period * math.ceil(p / period) for p in schedule})
    if start is None:
        emu = emulator(wl, train, cfg, seed)
    else:
        emu = emulator(wl, train, cfg, seed, start.state["model"], start.state["optimizer"], start.iterations)
    curve: list[tuple[int, float]] = list(start.curve) if start else []
    losses: list[float] = list(start.losses) if start else []
    status, k, eval_s = ProbeStatus.TRAINED, 0, 0.0
    while k < len(points) and points[k] <= emu.it:
        k += 1
    while emu.it < max_iters:
        losses.append(emu.step())
        if not math.isfinite(losses[-1]):
            status = ProbeStatus.DIVERGED
            break
        last = emu.it >= max_iters or time.perf_counter() - began > max_seconds
        if (k < len(points) and emu.it >= points[k]) or last:
            while k < len(points) and points[k] <= emu.it:
                k += 1
            evaluated = time.perf_counter()
            curve.append((emu.it, target.score_of(*evaluate(wl, emu.current_model(), test, torch.device("cpu")))))
            eval_s += time.perf_counter() - evaluated
            if curve[-1][1] >= target.score or last:
                break
            if on_eval(*curve[-1]):
                status = ProbeStatus.PRUNED
                break
    leg_s = time.perf_counter() - began
    seconds = (start.seconds if start else 0.0) + leg_s
    r = summarise(cfg, curve, target.score, status, emu.mean_staleness, seconds,
                  None if target.on_loss else len(test))      # a loss reading's noise is not binomial
    r = replace(r, train_loss=tail_loss(losses) if status != ProbeStatus.DIVERGED else None, iters=emu.it,
                start_loss=losses[0] if losses and math.isfinite(losses[0]) else None)
    trained = (start.train_s if start else 0.0) + leg_s - eval_s
    return r, Handoff(cfg, emu.checkpoint_state(), emu.it, trained, tuple(curve), tuple(losses), seconds)


def tail_loss(losses: list[float]) -> float | None:
    """Mean training loss over the last quarter of a probe: Omnivore's score for comparing
    configurations after equal training time (free, unlike a test evaluation)."""
    return float(np.mean(losses[-max(1, len(losses) // 4):])) if losses else None


def summarise(cfg: ProbeConfig, curve: list[tuple[int, float]], target: float, status: ProbeStatus,
              mean_staleness: float, seconds: float, test_size: int | None = None) -> ProbeResult:
    iters = np.array([c[0] for c in curve], float)
    acc = np.array([c[1] for c in curve], float)
    reached = statmodel.iters_to_target(iters, acc, target) if curve and status != ProbeStatus.DIVERGED else None
    estimate, interval, beyond, note = reached, None, 0.0, status.value
    if reached is not None:
        status, note = ProbeStatus.TRAINED, "reached"
        fit = statmodel.extrapolate(iters, acc, target, test_size)
        interval = statmodel.reached_band(iters, acc, target, reached, fit, test_size)
    elif status == ProbeStatus.PRUNED:
        estimate = None
    elif status == ProbeStatus.TRAINED and curve:
        fit = statmodel.extrapolate(iters, acc, target, test_size)
        estimate, interval, beyond = fit.iters, fit.band, fit.beyond
        note = fit.note if estimate is not None else f"not reached in {int(iters[-1])} iterations ({fit.note})"
    return ProbeResult(cfg, estimate, reached is not None, tuple(curve), mean_staleness, seconds, note, interval,
                       beyond=beyond if estimate is not None else 0.0, status=status)


def eval_schedule(max_iters: int, evals: int) -> list[int]:
    """Iterations at which a probe of `max_iters` evaluates, at most `evals` times, the last at
    its end: every few iterations at first, then 10% apart (so the crossing of a short job's
    target is read off closely), spaced wider when that would take more than `evals`."""
    step = max(1, min(10, max_iters // 20))
    growth = 1.1
    while True:
        points, it = [], step
        while it < max_iters:
            points.append(it)
            it = max(it + step, math.ceil(it * growth))
        if len(points) < max(evals, 1):
            return points + [max_iters]
        growth *= 1.1
        step *= 2


def make_prober(wl: Workload, data_dir: str | None, target: Target | float, seed: int):
    """A prober for the search (planning.probes: a Prober that HandsOn and is TestSized):
    (config, max_iters, max_seconds, on_eval, evals, start) -> ProbeResult on this workload;
    `handoffs` keeps where each configuration's latest probe stopped. It evaluates on the test
    set's first probe_test_size samples (its `test_size`), at most `evals` times (eval_schedule;
    the search picks `evals` so evaluating stays cheap)."""
    env.keep_freed_memory()            # probes step as fast as the runtime's processes
    train, test = wl.build_datasets(data_dir, seed)
    target = of(target)
    test = first(test, probe_test_size(target.score, len(test)))

    def prober(cfg: ProbeConfig, max_iters: int, max_seconds: float, on_eval=lambda it, acc: False,
               evals: int = EVALS, start: Handoff | None = None) -> ProbeResult:
        r, prober.handoffs[cfg] = run_probe(wl, train, test, cfg, target, max_iters, max_seconds, seed,
                                            on_eval=on_eval, schedule=eval_schedule(max_iters, evals), start=start)
        return r
    prober.test_size = len(test)
    prober.handoffs = {}             # each configuration's latest probe: where it stopped
    return prober


def hand_on(plan: Plan, prober: Prober, plan_path: Path) -> Plan:
    """Write where the latest probe of the plan's configuration stopped beside the plan, as the
    checkpoint its run starts from, and record it in the plan (its training counted as handed on,
    not spent). The plan as it was when this prober ran no probe of that configuration (all of
    them reused from an earlier search's study), or where the recipe warms up (`warms_up`).

    The run's clock counts the probe's iterations at the plan's predicted seconds per iteration,
    at most the probe's own training time; the rest stays planning's cost. A probe emulates the
    plan on this machine's CPU: on an H200 machine its 144 iterations of the GPU's plan took 2.9 s,
    which the GPU runs in 0.9, and the run's clock counted all 2.9."""
    if warms_up(plan.spec):
        return plan
    want = probe_config(plan.spec, plan.spec.lr, plan.spec.momentum)
    handoffs = prober.handoffs if isinstance(prober, HandsOn) else {}
    start = next((h for c, h in handoffs.items() if replace(c, staleness=()) == want), None)
    if start is None or plan.planning is None or any(score >= plan.spec.target.score for _, score in start.curve):
        # A probe that reached the target hands nothing on: past its crossing the run would have to
        # cross again (a curve may swing on past the target, as far as chance), where from scratch it
        # replays it.
        return plan
    name = f"{plan_path.stem}.start.pt"
    handed = min(start.train_s, start.iterations * plan.prediction.sec_per_iter, plan.planning.seconds)
    checkpoint.save_state(plan_path.parent / name, start.state, start.iterations, handed)
    return replace(plan, start=name, planning=replace(plan.planning, handed_on_s=handed,
                                                      handed_on_iters=start.iterations))


def warms_up(spec: RunSpec) -> bool:
    """Whether the spec's recipe starts with a warm-up, which a probe (at a constant rate) does
    not: its state is then none the run could have reached, and the run starts from scratch.
    charlm-stdlib's plan at lr 3e-3 (AdamW, warm-up over 5%) went on from 20 probe iterations at
    the full rate and read test loss 2.43 at iteration 604 and 1.84 at its 240-s limit; the same
    setting from scratch read 2.26 at 526 and reached 1.70 at 159 s."""
    return workload_mod.load(spec.workload).recipe.warms_up


RETUNE_VALIDATION = 512     # test samples a re-tuning candidate is scored on, the same for all
FORWARD_SHARE = 1 / 3       # an evaluation's forward pass costs about this share of a training step


def probe_config(spec: RunSpec, lr: float, momentum: float) -> ProbeConfig:
    """What a probe of this run spec trains, at another lr and momentum."""
    return ProbeConfig(spec.variant, spec.group_batches, lr, momentum,
                       weight_decay=spec.weight_decay)


def pause_reading(wl: Workload, train, held, spec: RunSpec, state: dict, setting: retune_mod.Setting,
                  batches: int, iters: int) -> retune_mod.Reading:
    """One candidate at a pause: `iters` updates at `setting` from the checkpoint `state` with the
    protocol's own emulation (data order `batches`), then its cool-down (retune.cooldown) at
    COOL_RATE of its rate; the validation loss on `held` before and after the cool-down, and the
    target's score after it."""
    lr, momentum = setting[:2]
    emu = emulator(wl, train, probe_config(retune_mod.shaped(spec, setting), lr, momentum), batches, state["model"],
                   state["optimizer"], horizon=spec.horizon)
    diverged = retune_mod.Reading(math.inf, math.inf, -math.inf)
    for _ in range(iters):
        if not math.isfinite(emu.step()):
            return diverged
    raw = evaluate(wl, emu.current_model(), held, torch.device("cpu"))[0]
    emu.set_rate(lr * retune_mod.COOL_RATE)
    for _ in range(retune_mod.cooldown(iters)):
        if not math.isfinite(emu.step()):
            return diverged
    loss, accuracy = evaluate(wl, emu.current_model(), held, torch.device("cpu"))[:2]
    return retune_mod.Reading(raw, loss, spec.target.score_of(loss, accuracy) if spec.target else -math.inf)


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


def grows(wl: Workload, spec: RunSpec, step_s: StepTime | None) -> bool:
    """Whether a pause weighs a larger batch by its goodput: the hardware model prices the run's
    batch and the recipe is SGD (AdaScale's rate is SGD's)."""
    return step_s is not None and retune_mod.throughput(spec, step_s) is not None and wl.recipe.optimizer == "sgd"


TIMED_ROUNDS, TIMED_STEPS = 3, 3     # a timed batch scale: rounds, each this many steps (after one to warm up)


def timed_scales(wl: Workload, train, spec: RunSpec, state: dict, step_s: StepTime) -> dict[float, float] | None:
    """Seconds a step of the run's batch (1.0) and of each of retune.GROWTH's scales the model
    prices, timed at the pause from the checkpoint on this process's CPU, in interleaved rounds
    (the machine's drift falls on every scale alike), median of the rounds; None unless the run
    is one CPU device (unslowed), whose loop this process's emulation is: on several devices the
    emulation steps them one after another, and a GPU is not this CPU. The growth is then chosen
    by the run's own loop at the run's own moment, not by a profile's curve taken apart from it."""
    device = spec.devices[0]
    if len(spec.devices) != 1 or device.kind != "cpu" or device.emulated_slowdown != 1.0:
        return None
    scales = [1.0] + [f for f in retune_mod.GROWTH if retune_mod.scaled(spec, f).batch_size != spec.batch_size
                      and step_s(retune_mod.scaled(spec, f))]
    if len(scales) == 1:
        return None
    emus = {f: emulator(wl, train, probe_config(retune_mod.scaled(spec, f), spec.lr, spec.momentum), spec.seed + 4,
                        state["model"], state["optimizer"], horizon=spec.horizon) for f in scales}
    threads, times = torch.get_num_threads(), {f: [] for f in scales}
    torch.set_num_threads(device.threads)
    try:
        for emu in emus.values():
            emu.step()
        for _ in range(TIMED_ROUNDS):
            for f, emu in emus.items():
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


def pause_cost_s(spec: RunSpec, iters: int, step_s: StepTime | None, sec_per_iter: float) -> float:
    """What a pause's readings should cost before one was timed: each candidate a stalled run's
    pause reads (retune.spec_candidates: all of them; a pause on the schedule reads fewer, those
    of no lower rate per sample; neither reads ten times or a tenth of the rate unless three
    times or a third of it read better, counted here as not: retune.further) trains its
    updates, cools down and is evaluated twice, and two of them are read again, at the run's
    seconds per iteration for each device (the emulation steps every device's batch in this
    process), and on one CPU device the larger batches' timing (`timed_scales`). A stall is
    what pauses a run within its budget: taken
    at a schedule pause's 7 readings, shapes-resnet's stall pauses (9 readings) came at 113 s
    and cost 20-24 s, a fifth of the training (plan_quality, 2026-11-27). shapes-resnet at batch
    16 and 31 ms a step (2026-11-28): 18.7 s; its readings took 15.4 s stalled, 13.0 s on the
    schedule. teacher-mlp, 5 ms a step: about 1.4 s (its pauses' probes took 2.0-2.5 s), before the
    goodput's reads were counted."""
    tried = retune_mod.spec_candidates(spec, step_s)
    tried = [c for c in tried if retune_mod.further(c, tried[0], {})]     # the far rates: read where the near won
    updates = iters * (1 + retune_mod.COOL_SHARE)
    evaluations = 2 * RETUNE_VALIDATION / sum(spec.batch_size.values()) * FORWARD_SHARE
    # Where the hardware model prices the batch, the goodput's batch, read twice as a candidate of
    # its own, and the noise scale's gradients (a step each, with no update).
    priced = step_s is not None and retune_mod.throughput(spec, step_s) is not None
    reads = len(tried) + 2 + (2 if priced else 0)
    noise = NOISE_DRAWS if priced else 0
    # One CPU device: each larger batch the goodput weighs is timed, at its multiple of the step.
    timing = (1 + TIMED_ROUNDS * TIMED_STEPS) * (1 + sum(retune_mod.GROWTH)) \
        if priced and len(spec.devices) == 1 and spec.devices[0].kind == "cpu" else 0
    return (reads * (updates + evaluations) + noise + timing) * sec_per_iter * len(spec.devices)


def retune(spec: RunSpec, checkpoint: Path, why: str, iters: int,
           step_s: StepTime | None = None) -> tuple[RunSpec, dict]:
    """Omnivore's steady state, from a run's checkpoint (weights and optimizer state): the
    settings the pause may switch to (retune.spec_candidates: all of them for a `stalled` run, or
    one whose current setting diverges from here; else none of a lower rate per sample; ten times
    or a tenth of the rate only where three times or a third read better: retune.further)
    are read at the pause (`pause_reading`, on the same batches) and
    scored by its validation loss, raw and after its cool-down, on the first RETUNE_VALIDATION test
    samples; the current setting and the challenger (retune.challenger) are read again on other
    batches, which measures the noise; the run switches only beyond it on both losses, to a lower
    rate only when `stalled`, and cools its rate where that reaches the target (retune.decide).
    `why` the run paused: "schedule", "stall" (stalled), "off pace" (stalled, and at its pace
    the run misses its target within its time limit, so a challenger needs no margin) or
    "divergence" (stalled, and the run's loss diverged at its current setting, so the best
    reading wins, no margin asked).
    With `step_s` (the hardware model), twice and half the batch are candidates too, and the
    protocols it predicts faster, each read after the updates that fit in the time of `iters` of
    the current setting's (retune.pace); and, for SGD, the gradient noise scale is measured at
    the checkpoint and the larger batch its goodput favours (retune.grown) is read and taken
    unless its readings refuse it (retune.decide); on one CPU device, the step times of the
    run's batch and of the larger ones are timed here first (`timed_scales`) and replace the
    model's ratios (retune.timed).
    Returns the re-tuned spec and a record of what was tried and decided, for replans.jsonl."""
    env.keep_freed_memory()
    wl = workload_mod.load(spec.workload)
    train, test = wl.build_datasets(spec.data_dir, spec.seed)
    held = first(test, RETUNE_VALIDATION)
    state = torch.load(checkpoint, map_location="cpu", weights_only=True)
    current = retune_mod.Setting(spec.lr, spec.momentum)
    stalled, diverged, off_pace = why in ("stall", "off pace", "divergence"), why == "divergence", why == "off pace"
    seconds = timed_scales(wl, train, spec, state, step_s) if grows(wl, spec, step_s) else None
    step_s = retune_mod.timed(step_s, spec, seconds) if seconds else step_s
    every = retune_mod.spec_candidates(spec, step_s)
    phi, growth = noise_and_growth(wl, train, spec, state, step_s)
    bigger = [growth[0]] if growth else []             # the goodput's batch, which may be a candidate already
    updates = {s: max(1, round(iters * retune_mod.pace(spec, s, step_s))) for s in every + bigger}

    def read(setting: retune_mod.Setting, batches: int) -> retune_mod.Reading:
        return pause_reading(wl, train, held, spec, state, setting, batches, updates[setting])
    # The current setting first: where it diverges from here, the pause reads as a stalled run's.
    readings = {current: [read(current, spec.seed + 1)]}
    stalled = stalled or not math.isfinite(readings[current][0].cooled)
    skipped = []
    for setting in dict.fromkeys(retune_mod.readable(every, stalled)[1:] + bigger):
        if retune_mod.further(setting, current, readings):     # a far rate only where the near one won
            readings[setting] = [read(setting, spec.seed + 1)]
        else:
            skipped.append(setting)
    rival = retune_mod.challenger(current, readings, stalled, off_pace or diverged)
    again = list(dict.fromkeys([current, *([rival] if rival else []), *bigger]))
    for setting in again if len(again) > 1 else ():     # again, on other batches: the noise
        readings[setting].append(read(setting, spec.seed + 2))
    target = spec.target.score if spec.target else math.inf
    decision = retune_mod.decide(current, readings, target, stalled, diverged, off_pace,
                                 growth[0] if growth else None)
    new = retune_mod.retuned(spec, decision.setting) if decision.switched else spec
    shape = lambda s: {"lr": s.lr, "momentum": s.momentum, "batch_size": dict(s.batch_size), "groups": len(s.groups),
                       "protocol": s.variant.label}
    return new, {"before": shape(spec), "after": shape(new), "switched": decision.switched, "stalled": stalled,
                 "margin": decision.margin, "reason": decision.reason,
                 "noise_scale": phi if phi is None or math.isfinite(phi) else "inf",     # JSON has no inf
                 "goodput_gain": growth[1] if growth else None,
                 "timed_step_s": {str(f): t for f, t in seconds.items()} if seconds else None,
                 "not_read": [{"lr": s.lr, "momentum": s.momentum} for s in skipped],
                 "scores": [{"lr": s.lr, "momentum": s.momentum, "batch": s.batch,
                             "protocol": (s.variant or spec.variant).label, "updates": updates[s],
                             "loss": float(np.mean([r.cooled for r in v])),
                             "raw_loss": float(np.mean([r.raw for r in v])),
                             "repeats": [r.cooled for r in v]}
                            for s, v in readings.items()]}
