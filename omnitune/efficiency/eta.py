"""A run's live ETA: its time to target re-fitted from the accuracy readings so far. Pure: it
reads metrics lines as dicts. The estimate's model is the recent pace; the curve ensemble
(efficiency/curves.py) is the candidate `benchmarks.eta` replays beside it.

The estimate is the recent pace (statmodel.pace_crossing: log error falling linearly in the
iterations, over the readings past the first quarter of them), times the seconds per iteration
of the last quarter of the training so far. Of the curve models it errs least a quarter of the
way into a run: the power laws that fit a probe's curve (the plateau, statmodel.extrapolate)
read a run's early rise as a curve that levels off, and put the target far too late, or nowhere.
Its band is the estimate of the training left, times BAND: the 10th and 90th percentiles of the
training actually left over the estimated, read from finished runs of the develop workloads. It
says how wrong the pace has been, not a model's own uncertainty (docs/decisions.md, eta.BAND).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from omnitune.core.change import changes
from omnitune.core.target import Target, of
import omnitune.efficiency.curves as curves
import omnitune.efficiency.statmodel as statmodel

MIN_READINGS = 4         # fewer readings fit no curve worth showing
PACE_FROM = 0.75         # seconds per iteration over the training since this share of it
BAND = (0.46, 4.8)       # the training left, actual over estimated: 10th and 90th percentiles (docs/decisions.md)
DRIFT_POINTS = 8         # the pace-drift model's earlier estimates
DRIFT_MOST = 0.8         # the most slope of their finish times that it extrapolates
DISCOUNT = 0.25          # a reading's weight before the run's last change, while too few readings follow it


@dataclass(frozen=True)
class Eta:
    train_s: float                            # the run's training time at the last reading
    iteration: int
    accuracy: float
    eta_s: float | None                       # training seconds left to the target; None: no estimate
    band_s: tuple[float, float] | None        # training seconds left: low and high
    note: str
    iters_to_target: float | None = None      # the pace's whole run, in iterations

    def to_dict(self) -> dict:
        return {"train_s": self.train_s, "iteration": self.iteration, "accuracy": self.accuracy,
                "eta_s": self.eta_s, "band_s": list(self.band_s) if self.band_s else None, "note": self.note}


def estimate(lines: list[dict], target: Target | float, test_size: int | None = None, model: str = "pace",
             band: tuple[float, float] = BAND) -> Eta | None:
    """The ETA from the readings of the run's current attempt (its last restart on); None before
    MIN_READINGS of them. Reached: zero. `accuracy` is the readings' score (core/target.py).
    `lines` may hold the run's changes in place (metrics.jsonl's "event": "change" rows): the
    models read the readings since the last of them where there are 2 * curves.MIN_POINTS or
    more, else all (the curves weighing those before it DISCOUNT); the seconds per iteration are
    read since it. `model`: "pace" (the recent pace, statmodel.pace_crossing: of the models
    replayed, the one that erred least out of sample, docs/decisions.md, eta), "curves" (the
    ensemble of efficiency/curves.py) or "curves-recent" (the ensemble on the readings past the
    first statmodel.RECENT of the iterations); `band`: the factors of the training left."""
    target = of(target)
    if model == "pace-drift":
        return _drifted(lines, target, test_size, band)
    mine = attempt_readings(lines, target)
    if len(mine) < MIN_READINGS:
        return None
    last = mine[-1]
    now, it, acc = float(last["train_s"]), int(last["iteration"]), _score(target, last)
    if acc >= target.score:
        return Eta(now, it, acc, 0.0, (0.0, 0.0), "reached")
    since = last_change(lines, mine)
    per_iter = _sec_per_iter(mine, since)
    if per_iter is None:
        return Eta(now, it, acc, None, None, "no iterations between the readings")
    iters, scores = _curve(mine, target)
    crossing, why = _crossing(model, iters, scores, target, since, test_size)
    if crossing is None:
        return Eta(now, it, acc, None, None, why)
    if crossing > statmodel.TOO_FAR * it:
        return Eta(now, it, acc, None, None, f"the curve gets there past {statmodel.TOO_FAR:g} times the "
                   "iterations so far")
    left = max(0.0, (crossing - it) * per_iter)
    return Eta(now, it, acc, left, (left * band[0], left * band[1]), why, crossing)


def _drifted(lines: list[dict], target: Target, test_size: int | None, band: tuple[float, float]) -> Eta | None:
    """The pace's estimate, corrected by its own drift: the finish times it said at up to
    DRIFT_POINTS readings of the latest half of the training so far (since the last change),
    fitted as a line in the time they were said, a + b t; where the estimates are unbiased the
    line is flat, where they keep moving later (a curve slowing past the pace) or earlier it
    slopes, and the finish is where the line meets the clock, t = a / (1 - b), b at most
    DRIFT_MOST. Too few estimates: the pace's own."""
    e = estimate(lines, target, test_size, "pace", band)
    if e is None or e.eta_s is None or e.eta_s == 0:
        return e
    mine = attempt_readings(lines, target)
    since = last_change(lines, mine)
    times = [float(x["train_s"]) for x in mine if x["iteration"] >= since and float(x["train_s"]) >= e.train_s / 2]
    step = max(1, len(times) // DRIFT_POINTS)
    said = []
    for t in times[::-1][::step][:DRIFT_POINTS]:
        x = estimate([y for y in lines if float(y.get("train_s", 0.0)) <= t], target, test_size, "pace", band)
        if x is not None and x.eta_s is not None and x.eta_s > 0:
            said.append((x.train_s, x.train_s + x.eta_s))
    if len(said) < MIN_READINGS or len({t for t, _ in said}) < 2:
        return e
    slope, at0 = _line(said)
    slope = max(-1.0, min(slope, DRIFT_MOST))
    finish = max(at0 / (1 - slope), e.train_s)
    left = finish - e.train_s
    return Eta(e.train_s, e.iteration, e.accuracy, left, (left * band[0], left * band[1]),
               "at the recent pace, corrected by its drift", e.iters_to_target)


def _line(points: list[tuple[float, float]]) -> tuple[float, float]:
    """Least squares y = a + b x through the points: (b, a)."""
    n = len(points)
    mx, my = sum(x for x, _ in points) / n, sum(y for _, y in points) / n
    sxx = sum((x - mx) ** 2 for x, _ in points)
    b = sum((x - mx) * (y - my) for x, y in points) / sxx
    return b, my - b * mx


def _crossing(model: str, iters: list[int], scores: list[float], target: Target, since: int,
              test_size: int | None) -> tuple[float | None, str]:
    """The iteration where the model puts the target, and what the estimate says of it."""
    segment = [k for k, t in enumerate(iters) if t >= since]
    if since and len(segment) >= 2 * curves.MIN_POINTS:      # enough since the change: the segment alone
        iters, scores = [iters[k] for k in segment], [scores[k] for k in segment]
    if model == "backtested":       # the one of the two that forecast the curve's own last third better
        model = statmodel.pace_or_power(iters, scores, None if target.on_loss else test_size) or "pace"
    if model in ("pace", "power", "between"):
        if len(statmodel.recent(iters, scores)[0]) < MIN_READINGS:
            return None, f"fewer than {MIN_READINGS} readings past the first {statmodel.RECENT:.0%} of the iterations"
        size = None if target.on_loss else test_size
        pace = statmodel.pace_crossing(iters, scores, target.score, size) if model != "power" else None
        power = statmodel.power_crossing(iters, scores, target.score, size) if model != "pace" else None
        if model == "between" and pace is not None and power is not None:   # iterations left: their geometric mean
            last = max(iters)
            x = last + math.sqrt(max(pace - last, 0.0) * max(power - last, 0.0))
        else:
            x = pace if model == "pace" else power
        return x, "at the recent pace" if x is not None else "no progress in the recent readings"
    floor = 0.5 / test_size if test_size and not target.on_loss else 1e-12
    errors = [max(1.0 - s, floor) for s in scores]
    if model == "curves-recent":             # past the first RECENT of the iterations, as the pace reads
        recent = [k for k, t in enumerate(iters) if t >= statmodel.RECENT * max(iters)]
        iters, errors = [iters[k] for k in recent], [errors[k] for k in recent]
    f = curves.forecast(iters, errors, 1.0 - target.score, [1.0 if t >= since else DISCOUNT for t in iters])
    if f is None:
        return None, f"fewer than {2 * curves.MIN_POINTS} readings to fit and backtest"
    if f.crossing is None:
        return None, "not reached: the curve levels off short of the target"
    return f.crossing, "on the curves' forecast"


def last_change(lines: list[dict], mine: list[dict]) -> int:
    """The iteration of the run's last change in place within its current attempt's readings
    (0: none)."""
    first, end = mine[0]["iteration"], mine[-1]["iteration"]
    return max((int(c["iteration"]) for c in changes(lines) if first <= c.get("iteration", -1) <= end), default=0)


def at_a_quarter(etas: list[dict], time_to_target_s: float) -> dict | None:
    """Of a finished run's ETA lines (eta.jsonl: Eta.to_dict), its last estimate by a quarter of
    its time to target, else its first; None where none estimated it. An estimate has numbers for
    its training time and its ETA (not 0: reached); a band without two numbers reads as none."""
    def number(x) -> bool:
        return isinstance(x, (int, float)) and math.isfinite(x)
    estimates = [e for e in etas if isinstance(e, dict) and number(e.get("train_s"))
                 and number(e.get("eta_s")) and e["eta_s"] > 0]
    if not estimates:
        return None
    e = max((x for x in estimates if x["train_s"] <= 0.25 * time_to_target_s), key=lambda x: x["train_s"],
            default=estimates[0])
    band = e.get("band_s")
    return {**e, "band_s": band if isinstance(band, list) and len(band) == 2 and all(map(number, band)) else None}


def horizon(lines: list[dict], target: Target | float, test_size: int | None = None) -> float | None:
    """The iterations to target a recipe's schedule spans, re-fitted at a pause (job.refit_horizon):
    statmodel.extrapolate's estimate, between the plateau and the recent pace, not the ETA's pace
    alone. A schedule that decays before the run gets there leaves it short of the target, so
    this errs long. None: no estimate (too few readings, or a curve that levels off below)."""
    target = of(target)
    mine = attempt_readings(lines, target)
    if len(mine) < MIN_READINGS:
        return None
    return statmodel.extrapolate(*_curve(mine, target), target.score, None if target.on_loss else test_size).iters


def way(lines: list[dict], target: Target | float, test_size: int | None = None) -> float | None:
    """How much of its way to the target the run has come at its recent pace, in iterations
    (statmodel.pace_share, over its current attempt's readings); None before MIN_READINGS of
    them, or where the pace never gets there."""
    target = of(target)
    mine = attempt_readings(lines, target)
    if len(mine) < MIN_READINGS:
        return None
    return statmodel.pace_share(*_curve(mine, target), target.score, None if target.on_loss else test_size)


def attempt_readings(lines: list[dict], target: Target) -> list[dict]:
    """The test readings of the run's current attempt (its last restart on). A diverged reading's
    loss is None (not finite): no reading of a loss target."""
    if not lines:
        return []
    attempt = lines[-1].get("attempt", 0)
    return [x for x in lines if x.get("attempt", 0) == attempt and x.get("test_accuracy") is not None
            and (x.get("test_loss") is not None or not target.on_loss)]


def _score(target: Target, line: dict) -> float:
    return target.score_of(line.get("test_loss") or 0.0, line["test_accuracy"])


def _curve(mine: list[dict], target: Target) -> tuple[list[int], list[float]]:
    """The readings as a curve: iterations and scores."""
    return [x["iteration"] for x in mine], [_score(target, x) for x in mine]


def _sec_per_iter(mine: list[dict], change: int = 0) -> float | None:
    """Seconds per iteration since PACE_FROM of the training so far, or since the last change
    where that is later (at least the last two readings); None where no iteration passed."""
    now = float(mine[-1]["train_s"])
    since = [x for x in mine if float(x["train_s"]) >= PACE_FROM * now and x["iteration"] >= change]
    first = since[0] if len(since) >= 2 else mine[-2]
    span = mine[-1]["iteration"] - first["iteration"]
    return (now - float(first["train_s"])) / span if span > 0 else None
