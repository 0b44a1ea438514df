"""Probes: short real training of the workload in this process, by the protocol's own update
rule on virtual workers (emulator.py). The test set is evaluated every few iterations; the
curve gives iterations to target. Re-planning's probes start from a run's checkpoint.
"""

from __future__ import annotations

import math
import time
from pathlib import Path
from typing import Callable

import numpy as np
import torch

from omnitune import replan, statmodel, workload as workload_mod
from omnitune.emulator import emulator
from omnitune.runspec import RunSpec
from omnitune.runtime.flat import momentum_vector
from omnitune.statmodel import ProbeConfig, ProbeResult
from omnitune.workload import Workload, evaluate


def run_probe(wl: Workload, train, test, cfg: ProbeConfig, target: float, max_iters: int,
              max_seconds: float, seed: int, eval_every: int = 10,
              on_eval: Callable[[int, float], bool] = lambda it, acc: False) -> ProbeResult:
    """Train until the test metric reaches `target`, or `max_iters` / `max_seconds` run out.

    `on_eval(iteration, accuracy)` sees every evaluation; returning True stops the probe (pruned).
    """
    start = time.perf_counter()
    eval_every = math.lcm(eval_every, cfg.variant.eval_period)    # where the runtime evaluates too
    emu = emulator(wl, train, cfg, seed)
    curve: list[tuple[int, float]] = []
    note = ""
    while emu.it < max_iters:
        if not math.isfinite(emu.step()):
            note = "diverged"
            break
        if emu.it % eval_every == 0 or emu.it == max_iters:
            curve.append((emu.it, evaluate(wl, emu.current_model(), test, torch.device("cpu"))[1]))
            if curve[-1][1] >= target or time.perf_counter() - start > max_seconds:
                break
            if on_eval(*curve[-1]):
                note = "pruned"
                break
    return summarise(cfg, curve, target, note, emu.mean_staleness, time.perf_counter() - start)


def summarise(cfg: ProbeConfig, curve: list[tuple[int, float]], target: float, note: str,
              mean_staleness: float, seconds: float) -> ProbeResult:
    iters = np.array([c[0] for c in curve], float)
    acc = np.array([c[1] for c in curve], float)
    reached = statmodel.iters_to_target(iters, acc, target) if curve and note != "diverged" else None
    estimate = reached
    if reached is not None:
        note = "reached"
    elif note == "pruned":
        estimate = None
    elif note != "diverged" and curve:
        estimate = statmodel.extrapolate_iters(iters, acc, target)
        note = "extrapolated" if estimate is not None else f"not reached in {int(iters[-1])} iterations"
    interval = statmodel.iters_interval(iters, acc, target) if estimate is not None else None
    if interval is not None:      # the band always holds the estimate (a first crossing can come early)
        interval = (min(interval[0], estimate), max(interval[1], estimate))
    return ProbeResult(cfg, estimate, reached is not None, tuple(curve), mean_staleness, seconds, note, interval)


def make_prober(wl: Workload, data_dir: str | None, target: float, seed: int,
                max_seconds: float = 20.0):
    """A prober for the optimizer: (config, max_iters) -> ProbeResult on this workload."""
    train, test = wl.build_datasets(data_dir, seed)

    def prober(cfg: ProbeConfig, max_iters: int, on_eval=lambda it, acc: False) -> ProbeResult:
        every = max(1, min(10, max_iters // 20))
        return run_probe(wl, train, test, cfg, target, max_iters, max_seconds, seed, every, on_eval)
    return prober


def probe_config(spec: RunSpec, lr: float, momentum: float) -> ProbeConfig:
    """What a probe of this run spec trains, at another lr and momentum."""
    return ProbeConfig(spec.variant, tuple(tuple(spec.batch_size[d] for d in g) for g in spec.groups), lr, momentum)


def retune(spec: RunSpec, checkpoint: Path, iters: int) -> tuple[RunSpec, dict]:
    """Omnivore's steady state: from a run's checkpoint (weights and momentum buffer), train
    `iters` updates per (lr, momentum) of replan.retune_grid with the protocol's own emulation;
    score = mean of the last 10 training losses (lower is better). Returns the re-tuned spec
    (replan.retuned) and a record of what was tried."""
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
