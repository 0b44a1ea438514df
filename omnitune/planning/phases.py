"""The search's phases and what it spends. A phase says how long a probe trains, whether the
pruner may stop it, how often it evaluates, and whether probes rank by loss:

- `ByTime`: from the start, probes share the budget (budget.py), are capped to beat the best
  time so far, and are pruned when they lag;
- `ByLoss`: when none of the cold start's decades could predict a time to target, every probe
  trains for as long (in predicted training time) as those did (so faster setups train more
  iterations) and ranks by its training loss at the end.

`Spending` tracks the planning budget (budget.plan_budget) against the clock."""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from typing import Callable, ClassVar

import omnitune.planning.budget as budget_mod
from omnitune.planning.budget import Budget


@dataclass(frozen=True)
class ByTime:
    # fewer say nothing (more where scouts had not learned)
    least_iters: int = field(default_factory=lambda: budget_mod.RULES.min_probe_iters)
    by_loss: ClassVar[bool] = False
    prunes: ClassVar[bool] = True

    @property
    def evals(self) -> int:
        return budget_mod.RULES.evals

    def iterations(self, sec: float, probe_sec: float, probe_s: float) -> int:
        """The budget's probe time's worth of iterations, at least `least_iters`."""
        return max(self.least_iters, int(probe_s / max(probe_sec, 1e-9)))

    def too_short(self, sec: float) -> str:
        return ""


@dataclass(frozen=True)
class ByLoss:
    train_s: float                  # each probe's predicted training time
    by_loss: ClassVar[bool] = True
    prunes: ClassVar[bool] = False

    @property
    def evals(self) -> int:
        return budget_mod.RULES.ranking_evals

    def iterations(self, sec: float, probe_sec: float, probe_s: float) -> int:
        """The training time's worth of iterations at the setup's own speed."""
        return max(budget_mod.RULES.min_probe_iters, round(self.train_s / sec))

    def too_short(self, sec: float) -> str:
        """Why a setup this slow gets no fair comparison by loss ("" if it does): floored at
        budget.RULES.min_probe_iters it would train longer than the others and could win on loss for that alone."""
        iters = self.train_s / sec
        if iters >= budget_mod.RULES.min_probe_iters:
            return ""
        return (f"not probed: in the probes' training time of {self.train_s:.1f}s it would train {iters:.0f} "
                f"iterations, under {budget_mod.RULES.min_probe_iters}: no fair comparison by loss")


Phase = ByTime | ByLoss


class Spending:
    """Planning's clock against its budget: the one no prediction gives (or `override_s`; at
    least `least_s`, budget.least_probing) at first, then after every probe the one the best
    predicted training time so far gives (`reset`)."""

    def __init__(self, override_s: float | None, start: float | None = None,
                 log: Callable[[str], None] = lambda m: None, least_s: float = 0.0):
        self.override_s, self.log, self.least_s = override_s, log, least_s
        self.budget: Budget = budget_mod.plan_budget(None, 0.0, override_s, least_s)
        self.start = time.perf_counter() if start is None else start

    def elapsed(self) -> float:
        return time.perf_counter() - self.start

    def fits(self, iters: int, probe_sec: float, reserve_s: float = 0.0) -> bool:
        """Whether a probe of `iters` iterations at `probe_sec` each ends within the budget, with
        `reserve_s` left after it: one that would overrun it is not started (on a large simulated
        fleet one probe takes seconds)."""
        return self.elapsed() + iters * probe_sec + reserve_s <= self.budget.seconds

    def left(self) -> float:
        return self.budget.seconds - self.elapsed()

    def at_least(self, least_s: float, predicted: float) -> None:
        """A larger floor for the budget with no prediction (longer scouts: Trials.lengthen)."""
        self.least_s = max(self.least_s, least_s)
        self.reset(predicted)

    def reset(self, predicted: float) -> None:
        """The budget from the best predicted training time so far (inf: none): it shrinks as the
        search finds faster configurations."""
        new = budget_mod.plan_budget(None if math.isinf(predicted) else predicted, self.elapsed(), self.override_s,
                                     self.least_s)
        if new != self.budget and new.reason != self.budget.reason:
            self.log(f"budget: {new.seconds:.1f}s ({new.reason}); probes of up to {new.probe_s:.1f}s")
        self.budget = new

