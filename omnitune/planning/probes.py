"""Running probes: the prober's contract, and the runner that caps each probe to what could still
beat the best time so far and records it as an optuna trial whose pruner stops it when it lags
the others at the same predicted training time (study.py)."""

from __future__ import annotations

import math
from dataclasses import replace
from typing import Callable, Protocol, runtime_checkable

from omnitune.efficiency.statmodel import ProbeConfig, ProbeResult, ProbeStatus
import omnitune.planning.budget as budget_mod
import omnitune.planning.study as study_mod
from omnitune.planning.phases import Phase, Spending


class Prober(Protocol):
    """Trains a probe of `config` for at most `max_iters` iterations and `max_seconds`, evaluating
    at most `evals` times; `on_eval(iteration, accuracy)` returns True to stop it (prune)."""
    def __call__(self, config: ProbeConfig, max_iters: int, max_seconds: float,
                 on_eval: Callable[[int, float], bool], evals: int) -> ProbeResult: ...


@runtime_checkable
class HandsOn(Protocol):
    """A prober that keeps where each configuration's latest probe stopped (`handoffs`: config ->
    hand-off, with its `iterations`) and, called with `start=` one of them, goes on from there, so
    that a longer probe, or the run, does not train it again."""
    handoffs: dict


@runtime_checkable
class TestSized(Protocol):
    """A prober that says how many test samples an evaluation reads (its cost)."""
    test_size: int


def test_size(prober: Prober) -> int:
    return prober.test_size if isinstance(prober, TestSized) else budget_mod.RULES.probe_test


@runtime_checkable
class Labelled(Protocol):
    """A prober that knows the loss of predicting its training labels' frequencies
    (workload.label_loss; None where that means nothing for the workload's loss)."""
    label_loss: float | None


def label_loss(prober: Prober) -> float | None:
    return prober.label_loss if isinstance(prober, Labelled) else None


def never(iteration: int, accuracy: float) -> bool:
    return False


class ProbeRunner:
    """Runs probes and keeps their results, the best time to target so far (later probes are
    capped to beat it), the best predicted one (which sets the budget) and the settings that
    diverged."""

    def __init__(self, prober: Prober, study, max_iters: int, tick_s: float, eval_s: float,
                 log: Callable[[str], None]):
        self.prober, self.study, self.max_iters, self.log = prober, study, max_iters, log
        self.tick_s, self.eval_s = tick_s, eval_s      # the pruner's clock of predicted training time; an eval's cost
        self.results: dict[ProbeConfig, ProbeResult] = study_mod.stored_results(study)
        self.best = math.inf
        self.predicted = math.inf
        self.diverged: list[ProbeConfig] = []
        self.probes_run = 0

    def beat(self, sec: float) -> int:
        """The most iterations a probe may train: those that could still beat the best time."""
        return self.max_iters if math.isinf(self.best) else int(min(self.max_iters, self.best / sec))

    def iterations(self, sec: float, probe_sec: float, phase: Phase, spending: Spending) -> int:
        return min(self.beat(sec), phase.iterations(sec, probe_sec, spending.budget.probe_s))

    def blocked(self, pc: ProbeConfig) -> bool:
        """At least as large (rate and momentum) as a setting of its variant that diverged."""
        return any(d.variant == pc.variant and d.lr <= pc.lr and d.momentum <= pc.momentum for d in self.diverged)

    def run(self, pc: ProbeConfig, sec: float, probe_sec: float, phase: Phase, spending: Spending) \
            -> ProbeResult | None:
        """A probe of `pc` (a setup at `sec` per iteration, `probe_sec` per probe iteration here);
        None when no probe could beat the best time."""
        beat = self.beat(sec)
        if beat < 1:
            return None
        cap = self.iterations(sec, probe_sec, phase, spending)
        probe_s = cap * probe_sec
        # The iteration cap sets the probe's length; the time limit only guards a bad estimate.
        limit_s = budget_mod.RULES.guard * max(probe_s, spending.budget.probe_s)
        trial = study_mod.ask(self.study, pc)
        reported = {"step": -1}

        def on_eval(iteration: int, accuracy: float) -> bool:
            if not phase.prunes:          # compared at their end, not on early accuracy
                return False
            step = int(iteration * sec / self.tick_s)
            if step <= reported["step"]:
                return False
            for t in range(reported["step"] + 1, step + 1):        # carry forward over skipped ticks
                trial.report(1.0 - accuracy, t)
            reported["step"] = step
            return trial.should_prune()
        self.probes_run += 1
        evals = budget_mod.evaluations(probe_s, self.eval_s, phase.evals)
        # A longer probe of a configuration probed before (a scout that has not learned) goes on
        # where that one stopped, rather than training its first iterations again
        # (docs/decisions.md, probes.ProbeRunner.run).
        start = self.handoff(pc)
        if start is not None and start.iterations < cap:
            r = self.prober(pc, cap, limit_s, on_eval, evals, start=start)
        else:
            r = self.prober(pc, cap, limit_s, on_eval, evals)
        if r.status == ProbeStatus.PRUNED:
            r = replace(r, iters_to_target=None, note="pruned: lagging the median")
        elif beat < self.max_iters and not r.reached and r.status != ProbeStatus.DIVERGED \
                and (r.iters_to_target is None or r.iters_to_target > beat):
            r = replace(r, iters_to_target=None, note=f"cannot beat {self.best:.2f}s in {beat} iterations",
                        status=ProbeStatus.CUT)
        study_mod.tell(self.study, trial, r, sec)
        self.results[pc] = r
        self.log(f"probe {pc.variant.label} batches={pc.batches} lr={pc.lr:.3g} momentum={pc.momentum}: {r.note}")
        return r

    def handoff(self, pc: ProbeConfig):
        """Where the latest probe of `pc` stopped, where the prober keeps hand-offs; else None."""
        return self.prober.handoffs.get(pc) if isinstance(self.prober, HandsOn) else None

    def record(self, pc: ProbeConfig, r: ProbeResult, sec: float, by_loss: bool) -> None:
        """What a probe's result says for the search: a setting that diverged, and the best
        (predicted) time so far."""
        if r.status == ProbeStatus.DIVERGED and pc not in self.diverged:
            self.diverged.append(pc)
        if r.ranks_by_time:
            self.predicted = min(self.predicted, r.iters_to_target * sec)
            if r.reached or not by_loss:
                self.best = min(self.best, r.iters_to_target * sec)

    def go_on(self, pc: ProbeConfig, total: int, limit_s: float, evals: int, start=None) -> ProbeResult:
        """A probe outside the search's order (a final round, a retrain): to `total` iterations,
        from `start` (a hand-off) where given."""
        self.probes_run += 1
        if start is None:
            return self.prober(pc, total, limit_s, never, evals)
        return self.prober(pc, total, limit_s, never, evals, start=start)
