"""Probes: short real training of the workload in this process, by the protocol's own update
rule on virtual workers (emulator.py). The test set is evaluated every few iterations; the
curve gives iterations to target. Re-planning's probes start from a run's checkpoint.
"""

from __future__ import annotations

import math
import time
from dataclasses import replace
from pathlib import Path
from typing import Callable

import numpy as np
import torch

from omnitune import env, replan, statmodel, workload as workload_mod
from omnitune.budget import EVALS, probe_test_size
from omnitune.emulator import emulator
from omnitune.runspec import RunSpec
from omnitune.runtime.flat import momentum_vector
from omnitune.statmodel import ProbeConfig, ProbeResult
from omnitune.workload import Workload, evaluate, first


def run_probe(wl: Workload, train, test, cfg: ProbeConfig, target: float, max_iters: int,
              max_seconds: float, seed: int, eval_every: int = 10,
              on_eval: Callable[[int, float], bool] = lambda it, acc: False,
              schedule: list[int] | None = None) -> ProbeResult:
    """Train until the test metric reaches `target`, or `max_iters` / `max_seconds` run out.

    Evaluates at the iterations of `schedule` (default: every `eval_every`), moved up to where the
    runtime evaluates too, and at the last. `on_eval(iteration, accuracy)` sees every evaluation;
    returning True stops the probe (pruned).
    """
    start = time.perf_counter()
    period = cfg.variant.eval_period
    if schedule is None:
        every = math.lcm(eval_every, period)
        schedule = list(range(every, max_iters + 1, every))
    points = sorted({period * math.ceil(p / period) for p in schedule})
    emu = emulator(wl, train, cfg, seed)
    curve: list[tuple[int, float]] = []
    losses: list[float] = []
    note, k = "", 0
    while emu.it < max_iters:
        losses.append(emu.step())
        if not math.isfinite(losses[-1]):
            note = "diverged"
            break
        last = emu.it >= max_iters or time.perf_counter() - start > max_seconds
        if (k < len(points) and emu.it >= points[k]) or last:
            while k < len(points) and points[k] <= emu.it:
                k += 1
            curve.append((emu.it, evaluate(wl, emu.current_model(), test, torch.device("cpu"))[1]))
            if curve[-1][1] >= target or last:
                break
            if on_eval(*curve[-1]):
                note = "pruned"
                break
    r = summarise(cfg, curve, target, note, emu.mean_staleness, time.perf_counter() - start, len(test))
    return replace(r, train_loss=tail_loss(losses) if note != "diverged" else None, iters=emu.it,
                   start_loss=losses[0] if losses and math.isfinite(losses[0]) else None)


def tail_loss(losses: list[float]) -> float | None:
    """Mean training loss over the last quarter of a probe: Omnivore's score for comparing
    configurations after equal training time (free, unlike a test evaluation)."""
    return float(np.mean(losses[-max(1, len(losses) // 4):])) if losses else None


def summarise(cfg: ProbeConfig, curve: list[tuple[int, float]], target: float, note: str,
              mean_staleness: float, seconds: float, test_size: int | None = None) -> ProbeResult:
    iters = np.array([c[0] for c in curve], float)
    acc = np.array([c[1] for c in curve], float)
    reached = statmodel.iters_to_target(iters, acc, target) if curve and note != "diverged" else None
    estimate, interval, beyond = reached, None, 0.0
    if reached is not None:
        note = "reached"
        fit = statmodel.extrapolate(iters, acc, target, test_size)
        interval = (min(reached, fit.band[0]), max(reached, fit.band[1])) if fit.band else None
    elif note == "pruned":
        estimate = None
    elif note != "diverged" and curve:
        fit = statmodel.extrapolate(iters, acc, target, test_size)
        estimate, interval, beyond = fit.iters, fit.band, fit.beyond
        note = fit.note if estimate is not None else f"not reached in {int(iters[-1])} iterations ({fit.note})"
    return ProbeResult(cfg, estimate, reached is not None, tuple(curve), mean_staleness, seconds, note, interval,
                       beyond=beyond if estimate is not None else 0.0)


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


def make_prober(wl: Workload, data_dir: str | None, target: float, seed: int):
    """A prober for the optimizer: (config, max_iters, max_seconds, on_eval, evals) -> ProbeResult
    on this workload. It evaluates on the test set's first probe_test_size samples (its
    `test_size`), at most `evals` times (eval_schedule; the optimizer picks `evals` so evaluating
    stays cheap)."""
    env.keep_freed_memory()            # probes step as fast as the runtime's processes
    train, test = wl.build_datasets(data_dir, seed)
    test = first(test, probe_test_size(target, len(test)))

    def prober(cfg: ProbeConfig, max_iters: int, max_seconds: float, on_eval=lambda it, acc: False,
               evals: int = EVALS) -> ProbeResult:
        return run_probe(wl, train, test, cfg, target, max_iters, max_seconds, seed, on_eval=on_eval,
                         schedule=eval_schedule(max_iters, evals))
    prober.test_size = len(test)
    return prober


def probe_config(spec: RunSpec, lr: float, momentum: float) -> ProbeConfig:
    """What a probe of this run spec trains, at another lr and momentum."""
    return ProbeConfig(spec.variant, tuple(tuple(spec.batch_size[d] for d in g) for g in spec.groups), lr, momentum)


def retune(spec: RunSpec, checkpoint: Path, iters: int) -> tuple[RunSpec, dict]:
    """Omnivore's steady state: from a run's checkpoint (weights and momentum buffer), train
    `iters` updates per (lr, momentum) of replan.retune_grid with the protocol's own emulation;
    score = mean of the last 10 training losses (lower is better). Returns the re-tuned spec
    (replan.retuned) and a record of what was tried."""
    env.keep_freed_memory()
    wl = workload_mod.load(spec.workload)
    train, _ = wl.build_datasets(spec.data_dir, spec.seed)
    state = torch.load(checkpoint, map_location="cpu", weights_only=True)
    model = wl.build_model()
    model.load_state_dict(state["model"])
    velocity = momentum_vector(state["optimizer"], model)
    scores = []
    for lr, mu in replan.retune_grid(spec.lr, spec.momentum):
        emu = emulator(wl, train, probe_config(spec, lr, mu), spec.seed, state["model"], velocity)
        losses = [emu.step() for _ in range(iters)]
        score = float(np.mean(losses[-10:]))
        scores.append((lr, mu, score if math.isfinite(score) else math.inf))
    new = replan.retuned(spec, scores)
    shape = lambda s: {"lr": s.lr, "momentum": s.momentum, "groups": len(s.groups), "protocol": s.variant.label}
    return new, {"before": shape(spec), "after": shape(new),
                 "scores": [{"lr": lr, "momentum": m, "loss": v} for lr, m, v in scores]}
