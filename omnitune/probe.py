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

import numpy as np
import torch

from omnitune import statmodel
from omnitune.statmodel import ProbeConfig, ProbeResult
from omnitune.runtime.flat import get_grads, get_params, num_params, set_params
from omnitune.workload import Workload, batches, evaluate


def run_probe(wl: Workload, train, test, cfg: ProbeConfig, target: float, max_iters: int,
              max_seconds: float, seed: int, eval_every: int = 10) -> ProbeResult:
    """Train until the test metric reaches `target`, or `max_iters` / `max_seconds` run out."""
    start = time.perf_counter()
    torch.manual_seed(seed)
    model = wl.build_model()
    P = num_params(model)
    w, v, g = get_params(model, torch.empty(P)), torch.zeros(P), torch.empty(P)
    rng = np.random.default_rng(seed)
    taus = statmodel.draw_staleness(rng, cfg.groups, max_iters)
    history: deque[torch.Tensor] = deque([w.clone()], maxlen=int(taus.max()) + 1)
    curve: list[tuple[int, float]] = []
    data = batches(train, cfg.batch, seed)
    it, note = 0, ""
    while it < max_iters:
        x, y = next(data)
        stale = history[-1 - min(int(taus[it]), len(history) - 1)]
        set_params(model, stale)
        model.zero_grad(set_to_none=False)
        loss = wl.loss_fn(model(x), y)
        loss.backward()
        if not math.isfinite(float(loss.detach())):
            note = "diverged"
            break
        v.mul_(cfg.momentum).add_(get_grads(model, g))      # torch SGD: v = mu v + grad
        w.sub_(cfg.lr * v)
        history.append(w.clone())
        it += 1
        if it % eval_every == 0 or it == max_iters:
            set_params(model, w)
            curve.append((it, evaluate(wl, model, test, torch.device("cpu"))[1]))
            if curve[-1][1] >= target or time.perf_counter() - start > max_seconds:
                break
    return summarise(cfg, curve, target, note, float(taus[:it].mean()) if it else 0.0,
                     time.perf_counter() - start)


def summarise(cfg: ProbeConfig, curve: list[tuple[int, float]], target: float, note: str,
              mean_staleness: float, seconds: float) -> ProbeResult:
    iters = np.array([c[0] for c in curve], float)
    acc = np.array([c[1] for c in curve], float)
    reached = statmodel.iters_to_target(iters, acc, target) if curve and note != "diverged" else None
    estimate = reached
    if reached is not None:
        note = "reached"
    elif note != "diverged" and curve:
        estimate = statmodel.extrapolate_iters(iters, acc, target)
        note = "extrapolated" if estimate is not None else f"not reached in {int(iters[-1])} iterations"
    return ProbeResult(cfg, estimate, reached is not None, tuple(curve), mean_staleness, seconds, note)


def make_prober(wl: Workload, data_dir: str | None, target: float, seed: int,
                max_seconds: float = 20.0):
    """A prober for the optimizer: (config, max_iters) -> ProbeResult on this workload."""
    train, test = wl.build_datasets(data_dir, seed)

    def prober(cfg: ProbeConfig, max_iters: int) -> ProbeResult:
        every = max(1, min(10, max_iters // 20))
        return run_probe(wl, train, test, cfg, target, max_iters, max_seconds, seed, every)
    return prober
