"""Learning curves: where a run's error crosses its target, from an ensemble of curve families.

Pure numpy. A curve is readings (t, e): iterations and the error the target is judged by (1 -
accuracy, or the loss: core/target.py), each with a weight (a reading before the run's last
change weighs less: efficiency/eta.py). Three families, each fitted by weighted least squares
on log e:

    exponential   log e = a + b t             the recent pace: a constant factor per iteration
    power         log e = a + b log t         a power law in the iterations (straight in log-log)
    floor         e = c + exp(a) t^b          a power law down to a floor c >= 0 (pow3, Domhan
                                              et al. 2015), c on a grid below the lowest reading

Each family weighs the likelihood of its errors forecasting the curve's last `HELD_BACK` from the
readings before it (a backtest: how a family extrapolates, not how it fits), Gaussian with the
best whole fit's residual variance; the ensemble's crossing is the weighted mean of the
families' log crossings. A family whose curve levels off above the target, or rises, has no
crossing; where those families hold half the weight or more the curve says "not reached".
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

HELD_BACK = 1 / 3          # of the span of the curve's iterations, the last part each family must forecast
MIN_POINTS = 4             # per fit
FLOORS = 24                # the floor family's grid of floors, from 0 to just under the lowest error
FAMILIES = ("exponential", "power", "floor")


@dataclass(frozen=True)
class Fit:
    family: str
    a: float
    b: float
    c: float = 0.0          # the floor (floor family)

    def log_error(self, t: np.ndarray) -> np.ndarray:
        t = np.asarray(t, float)
        if self.family == "exponential":
            return self.a + self.b * t
        power = self.a + self.b * np.log(t)
        return power if self.family == "power" else np.log(self.c + np.exp(power))

    def crossing(self, level: float) -> float | None:
        """The iteration where the error falls to `level`; None where it never does."""
        if self.b >= 0 or level <= self.c:
            return None
        lv = math.log(level - self.c) if self.family == "floor" else math.log(level)
        x = (lv - self.a) / self.b
        if self.family == "exponential":
            return x
        return math.exp(x) if x < 700 else math.inf


@dataclass(frozen=True)
class Forecast:
    crossing: float | None       # the ensemble's iteration at the target; None: not reached
    weights: dict[str, float]    # each family's weight
    crossings: dict[str, float | None]
    never: float                 # the weight of the families that never get there


def fit(family: str, t, e, w=None) -> Fit | None:
    """One family fitted to readings (t > 0, e > 0); None with fewer than MIN_POINTS."""
    t, e = np.asarray(t, float), np.asarray(e, float)
    w = np.ones_like(t) if w is None else np.asarray(w, float)
    if len(t) < MIN_POINTS or len(set(t.tolist())) < 2:
        return None
    y = np.log(e)
    if family == "exponential":
        return Fit(family, *_line(t, y, w)[::-1])
    if family == "power":
        return Fit(family, *_line(np.log(t), y, w)[::-1])
    best = None
    for c in np.linspace(0.0, e.min(), FLOORS, endpoint=False):
        b, a = _line(np.log(t), np.log(e - c), w)
        sse = float(np.sum(w * (np.log(c + np.exp(a + b * np.log(t))) - y) ** 2))
        if best is None or sse < best[0]:
            best = (sse, Fit(family, a, b, float(c)))
    return best[1]


def _line(x: np.ndarray, y: np.ndarray, w: np.ndarray) -> tuple[float, float]:
    """Weighted least squares y = slope x + intercept: (slope, intercept)."""
    slope, intercept = np.polyfit(x, y, 1, w=np.sqrt(w))
    return float(slope), float(intercept)


def likelihoods(scores: dict[str, float], noise: float, n: int) -> dict[str, float]:
    """Each family's weight: the likelihood of its forecast errors over the `n` held-back
    readings, as Gaussian with the variance `noise` (the best fit's own residuals), normalised."""
    best = min(scores.values())
    raw = {f: math.exp(-0.5 * n * (s - best) / noise) for f, s in scores.items()}
    total = sum(raw.values())
    return {f: x / total for f, x in raw.items()}


def forecast(t, e, level: float, w=None) -> Forecast | None:
    """The ensemble's crossing of `level` by readings (t, e) with weights w; None where a family
    cannot be backtested (too few readings before or in the held-back part)."""
    t, e = np.asarray(t, float), np.maximum(np.asarray(e, float), 1e-12)
    w = np.ones_like(t) if w is None else np.asarray(w, float)
    keep = t > 0
    t, e, w = t[keep], e[keep], w[keep]
    if len(t) < 2 * MIN_POINTS:
        return None
    before = t <= t.min() + (t.max() - t.min()) * (1 - HELD_BACK)
    if before.sum() < MIN_POINTS or (~before).sum() < 2:
        return None
    scores, crossings, noise = {}, {}, math.inf
    for family in FAMILIES:
        early = fit(family, t[before], e[before], w[before])
        whole = fit(family, t, e, w)
        if early is None or whole is None:
            continue
        miss = early.log_error(t[~before]) - np.log(e[~before])
        scores[family] = float(np.average(miss ** 2, weights=w[~before]))
        crossings[family] = whole.crossing(level)
        noise = min(noise, float(np.average((whole.log_error(t) - np.log(e)) ** 2, weights=w)))
    if not scores:
        return None
    weights = likelihoods(scores, max(noise, 1e-6), int((~before).sum()))
    never = sum(weights[f] for f, x in crossings.items() if x is None or not math.isfinite(x))
    if never >= 0.5:
        return Forecast(None, weights, crossings, never)
    reached = {f: x for f, x in crossings.items() if x is not None and math.isfinite(x)}
    mass = sum(weights[f] for f in reached)
    log_x = sum(weights[f] * math.log(max(x, t.max())) for f, x in reached.items()) / mass
    return Forecast(math.exp(log_x), weights, crossings, never)
