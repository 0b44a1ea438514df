"""Probes: short real training of the workload in this process, by the protocol's own update
rule on virtual workers (emulator.py). The test set is evaluated every few iterations; the
curve gives iterations to target. A re-tuning pause's readings start from a run's checkpoint
(pause.py).

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
from omnitune.efficiency import statmodel
from omnitune.efficiency.statmodel import ProbeConfig, ProbeResult, ProbeStatus
import omnitune.planning.budget as budget_mod
from omnitune.planning.budget import probe_test_size
from omnitune.planning.probes import HandsOn, Prober
from omnitune.probing.emulator import emulator
from omnitune.runtime import checkpoint
from omnitune.runtime import workload as workload_mod
from omnitune.runtime.workload import Workload, evaluate, first


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
               evals: int | None = None, start: Handoff | None = None) -> ProbeResult:
        evals = budget_mod.RULES.evals if evals is None else evals
        r, prober.handoffs[cfg] = run_probe(wl, train, test, cfg, target, max_iters, max_seconds, seed,
                                            on_eval=on_eval, schedule=eval_schedule(max_iters, evals), start=start)
        return r
    prober.test_size = len(test)
    prober.label_loss = workload_mod.label_loss(wl, train)     # what ranking by loss compares with
    prober.handoffs = {}             # each configuration's latest probe: where it stopped
    return prober


def hand_on(plan: Plan, prober: Prober, plan_path: Path) -> Plan:
    """Write where the latest probe of the plan's configuration stopped beside the plan, as the
    checkpoint its run starts from, and record it in the plan (its training counted as handed on,
    not spent). The plan as it was when this prober ran no probe of that configuration (all of
    them reused from an earlier search's study), or where the recipe warms up (`warms_up`).

    The run's clock counts the probe's iterations at the plan's predicted seconds per iteration,
    at most the probe's own training time; the rest stays planning's cost. A probe emulates the
    plan on this machine's CPU, which may step far slower than the plan's devices: counted at the
    probe's own time, a GPU plan's handed-on iterations would weigh several times what the GPU
    takes for them (docs/decisions.md, probe.hand_on)."""
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
    A warmed-up run that goes on from a probe's iterations at the full rate learns worse than one
    from scratch (docs/decisions.md, probe.warms_up)."""
    return workload_mod.load(spec.workload).recipe.warms_up


def probe_config(spec: RunSpec, lr: float, momentum: float) -> ProbeConfig:
    """What a probe of this run spec trains, at another lr and momentum."""
    return ProbeConfig(spec.variant, spec.group_batches, lr, momentum,
                       weight_decay=spec.weight_decay)
