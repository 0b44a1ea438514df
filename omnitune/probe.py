"""Probes: short real training of the workload in this process, with emulated asynchrony.

A probe trains with one configuration's update batch, learning rate and explicit momentum.
For g > 1 groups each gradient is computed on weights `tau` updates old, with tau drawn from the
queueing model's geometric distribution (statmodel.staleness_probs), as the parameter server
would see it. The test set is evaluated every few iterations; the curve gives iterations to target.
"""

from __future__ import annotations

import math
import time
from collections import deque
from pathlib import Path
from typing import Callable

import numpy as np
import torch

from omnitune import replan, statmodel, workload as workload_mod
from omnitune.runspec import RunSpec
from omnitune.runtime.flat import get_grads, get_params, momentum_vector, num_params, set_params
from omnitune.statmodel import ProbeConfig, ProbeResult
from omnitune.workload import Workload, batches, collate, evaluate


class Emulator:
    """SGD with explicit momentum where each gradient is computed on weights `tau` updates old.

    tau is drawn per update from the queueing model of `cfg.groups` asynchronous groups, as
    the parameter server would see it. Weights start from `init_seed`; minibatch order and
    staleness draws come from `noise_seed`. A probe may start from a run's checkpoint: its model
    state and its momentum buffer `init_velocity` (flat, in parameter order).
    """

    def __init__(self, wl: Workload, train, cfg: ProbeConfig, init_seed: int, noise_seed: int, max_iters: int,
                 init_state: dict | None = None, init_velocity: torch.Tensor | None = None):
        torch.manual_seed(init_seed)
        self.wl, self.cfg, self.model = wl, cfg, wl.build_model()
        if init_state is not None:
            self.model.load_state_dict(init_state)
        P = num_params(self.model)
        self.w, self.g = get_params(self.model, torch.empty(P)), torch.empty(P)
        self.v = init_velocity.clone() if init_velocity is not None else torch.zeros(P)
        self.taus = statmodel.draw_staleness(np.random.default_rng(noise_seed), cfg.groups, max_iters)
        self.history: deque[torch.Tensor] = deque([self.w.clone()], maxlen=int(self.taus.max()) + 1)
        self.data = batches(train, cfg.batch, noise_seed)
        self.it = 0

    def step(self) -> float:
        """One update; returns the minibatch loss (NaN or inf when training diverged)."""
        x, y = next(self.data)
        stale = self.history[-1 - min(int(self.taus[self.it]), len(self.history) - 1)]   # tau updates old
        set_params(self.model, stale)
        self.model.zero_grad(set_to_none=False)
        loss = self.wl.loss_fn(self.model(x), y)
        loss.backward()
        tau = int(self.taus[self.it])
        scale = 1.0 / max(tau, 1) if self.cfg.scale_by_staleness else 1.0
        self.v.mul_(self.cfg.momentum).add_(get_grads(self.model, self.g), alpha=scale)   # v = mu v + grad
        self.w.sub_(self.cfg.lr * self.v)
        self.history.append(self.w.clone())
        self.it += 1
        return float(loss.detach())

    def current_model(self) -> torch.nn.Module:
        set_params(self.model, self.w)
        return self.model

    @property
    def mean_staleness(self) -> float:
        return float(self.taus[:self.it].mean()) if self.it else 0.0


def run_probe(wl: Workload, train, test, cfg: ProbeConfig, target: float, max_iters: int,
              max_seconds: float, seed: int, eval_every: int = 10,
              on_eval: Callable[[int, float], bool] = lambda it, acc: False) -> ProbeResult:
    """Train until the test metric reaches `target`, or `max_iters` / `max_seconds` run out.

    `on_eval(iteration, accuracy)` sees every evaluation; returning True stops the probe (pruned).
    """
    start = time.perf_counter()
    emu = Emulator(wl, train, cfg, seed, seed, max_iters)
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


def sense_momentum(wl: Workload, train, cfg: ProbeConfig, steps: int, replicas: int, seed: int,
                   grad_samples: int = 4096) -> statmodel.MomentumReading:
    """The total momentum the emulated run has, measured from its trajectory.

    Asynchrony's momentum lives in the expected update, so `replicas` runs start from the same
    weights with independent minibatches and staleness draws; their average trajectory w_t is
    fitted to the heavy-ball form (statmodel.fit_momentum), with grad f from a fixed subset of
    `grad_samples` training samples.
    """
    total = None
    for r in range(replicas):
        emu = Emulator(wl, train, cfg, init_seed=seed, noise_seed=seed * 1000 + r + 1, max_iters=steps)
        path = [emu.w.clone()]
        for _ in range(steps):
            emu.step()
            path.append(emu.w.clone())
        stacked = torch.stack(path)
        total = stacked if total is None else total + stacked
    mean_path = total / replicas
    x, y = collate(train, range(min(grad_samples, len(train))))
    model, P = emu.model, mean_path.shape[1]
    grads = torch.empty(steps, P)
    for t in range(steps):
        set_params(model, mean_path[t])
        model.zero_grad(set_to_none=False)
        wl.loss_fn(model(x), y).backward()
        get_grads(model, grads[t])
    steps_taken = (mean_path[1:] - mean_path[:-1]).double().numpy()
    return statmodel.fit_momentum(steps_taken, grads.double().numpy(), lr=cfg.lr, explicit=cfg.momentum)


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


def sense_implicit(wl: Workload, data_dir: str | None, groups: list[int], lr: float, seed: int,
                   steps: int = 40, replicas: int = 16) -> dict[int, float]:
    """Measured implicit momentum of g emulated groups, for each g (full-batch, plain SGD)."""
    train, _ = wl.build_datasets(data_dir, seed)
    full = min(len(train), 2048)
    return {g: sense_momentum(wl, train, ProbeConfig(full, lr, 0.0, g), steps, replicas, seed).implicit
            for g in groups}


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
    update_batch = sum(spec.batch_size[d] for d in spec.groups[0])
    scores = []
    for lr, mu in replan.retune_grid(spec.lr, spec.momentum):
        cfg = spec.variant.emulation(update_batch, lr, mu)
        emu = Emulator(wl, train, cfg, spec.seed, spec.seed, iters, init_state=state["model"], init_velocity=velocity)
        losses = [emu.step() for _ in range(iters)]
        score = float(np.mean(losses[-10:]))
        scores.append((lr, mu, score if math.isfinite(score) else math.inf))
    new = replan.retuned(spec, scores)
    shape = lambda s: {"lr": s.lr, "momentum": s.momentum, "groups": len(s.groups), "protocol": s.variant.label}
    return new, {"before": shape(spec), "after": shape(new),
                 "scores": [{"lr": lr, "momentum": m, "loss": v} for lr, m, v in scores]}
