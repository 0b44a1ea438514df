"""A run's live ETA: its time to target re-fitted from the accuracy readings so far
(statmodel.extrapolate on iterations, times the recent seconds per iteration). Pure: it reads
metrics lines as dicts."""

from __future__ import annotations

import math
from dataclasses import dataclass

from omnitune.core.target import Target, of
from omnitune.efficiency import statmodel

MIN_READINGS = 4         # fewer readings fit no curve worth showing
RECENT_READINGS = 5      # seconds per iteration from the last this many readings


@dataclass(frozen=True)
class Eta:
    train_s: float                            # the run's training time at the last reading
    iteration: int
    accuracy: float
    eta_s: float | None                       # training seconds left to the target; None: no estimate
    band_s: tuple[float, float | None] | None  # low and high (None: no top)
    note: str
    iters_to_target: float | None = None      # the fit's whole run, in iterations (the schedule's horizon)

    def to_dict(self) -> dict:
        return {"train_s": self.train_s, "iteration": self.iteration, "accuracy": self.accuracy,
                "eta_s": self.eta_s, "band_s": list(self.band_s) if self.band_s else None, "note": self.note}


def estimate(lines: list[dict], target: Target | float, test_size: int | None = None) -> Eta | None:
    """The ETA from the readings of the run's current attempt (its last restart on); None before
    MIN_READINGS of them. Reached: zero. `accuracy` is the readings' score (core/target.py)."""
    target = of(target)
    score = lambda x: target.score_of(x.get("test_loss") or 0.0, x["test_accuracy"])     # noqa: E731
    if not lines:
        return None
    attempt = lines[-1].get("attempt", 0)
    # A diverged reading's loss is None (not finite): no reading of a loss target.
    mine = [x for x in lines if x.get("attempt", 0) == attempt and x.get("test_accuracy") is not None
            and (x.get("test_loss") is not None or not target.on_loss)]
    if len(mine) < MIN_READINGS:
        return None
    last = mine[-1]
    now, it, acc = float(last["train_s"]), int(last["iteration"]), score(last)
    if acc >= target.score:
        return Eta(now, it, acc, 0.0, (0.0, 0.0), "reached")
    recent = mine[-RECENT_READINGS:]
    span = recent[-1]["iteration"] - recent[0]["iteration"]
    if span <= 0:
        return Eta(now, it, acc, None, None, "no iterations between the readings")
    per_iter = (recent[-1]["train_s"] - recent[0]["train_s"]) / span
    fit = statmodel.extrapolate([x["iteration"] for x in mine], [score(x) for x in mine], target.score,
                                None if target.on_loss else test_size)
    if fit.iters is None:
        return Eta(now, it, acc, None, None, fit.note)
    left = lambda iters: max(0.0, (iters - it) * per_iter)            # noqa: E731
    band = None
    if fit.band is not None:
        band = (left(fit.band[0]), left(fit.band[1]) if math.isfinite(fit.band[1]) else None)
    return Eta(now, it, acc, left(fit.iters), band, fit.note, fit.iters)
