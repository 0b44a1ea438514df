"""Statistical efficiency: how many iterations a configuration needs to reach the target, read
off a probe's accuracy curve. Pure: numpy and scipy.

Notation:
    t        iterations: model updates, or with no server steps of every replica (the runtime's unit)
    a(t)     test accuracy after t iterations
A probe that stops short of the target is extrapolated from its curve's recent part (past its first
quarter) by two models that bracket what real curves do:
- the pessimistic end: a power law that levels off, 1 - a(t) = floor + A t^(-c) (the plateau
  1 - floor), whose progress slows for ever;
- the optimistic end: the recent pace, log(1 - a(t)) falling linearly in t, as when a curve leaves a
  plateau or a BatchNorm network's accuracy jumps (docs/decisions.md, statmodel.extrapolate).
The estimate lies between them on a log scale, nearer the one that forecast the curve's own last
third better.
"""

from __future__ import annotations

import enum
import math
from dataclasses import dataclass

import numpy as np

from omnitune.core.protocols import Variant


def iters_to_target(iters: np.ndarray, accuracy: np.ndarray, target: float) -> float | None:
    """First iteration at which the accuracy curve reaches `target`, linearly interpolated.

    Returns None if it never does within the curve.
    """
    iters, accuracy = np.asarray(iters, float), np.asarray(accuracy, float)
    hit = np.nonzero(accuracy >= target)[0]
    if len(hit) == 0:
        return None
    i = hit[0]
    if i == 0:
        return float(iters[0])
    a0, a1 = accuracy[i - 1], accuracy[i]
    frac = (target - a0) / (a1 - a0) if a1 > a0 else 1.0
    return float(iters[i - 1] + frac * (iters[i] - iters[i - 1]))


@dataclass(frozen=True)
class Plateau:
    """error(t) = floor + scale * t^(-c): a power law that levels off at `floor` (the accuracy
    plateau 1 - floor), fitted to a curve past its first quarter; sigma = the residual spread."""
    floor: float
    scale: float
    c: float
    sigma: float
    last: float           # the last iteration the fit saw

    @classmethod
    def fit(cls, iters, accuracy, floor: bool = True, start: "Plateau | None" = None) -> "Plateau | None":
        """Least squares in the error; `floor=False` fixes the floor at 0 (a plain power law).
        `start`: a fit to begin the search from (a refit of its own curve plus noise)."""
        from scipy.optimize import least_squares

        t, e = recent(iters, accuracy)
        if len(t) < 4 or np.ptp(e) <= 0:
            return None
        floor_hi = max(float(e.min()), 0.0) if floor else 0.0

        log_t = np.log(t)

        def resid(p):
            return p[0] + np.exp(p[1] - p[2] * log_t) - e

        def jac(p):           # analytic: the same fits as finite differences, in 0.6 of the time
            power = np.exp(p[1] - p[2] * log_t)
            return np.column_stack([np.ones_like(t), power, -power * log_t])
        x0 = ([start.floor, math.log(start.scale), start.c] if start is not None else
              [min(floor_hi, 0.5 * float(e.min())) if floor else 0.0,
               math.log(max(float(e[0]), 1e-3)) + 0.3 * math.log(t[0]), 0.3])
        lo, hi = [0.0, -30.0, 0.01], [max(floor_hi, 1e-12), 30.0, 3.0]
        r = least_squares(resid, np.clip(x0, lo, hi), jac=jac, bounds=(lo, hi))
        sigma = float(np.sqrt(np.sum(r.fun ** 2) / max(len(t) - 3, 1)))
        return cls(float(r.x[0]), float(np.exp(r.x[1])), float(r.x[2]), sigma, float(t.max()))

    def crossing(self, target: float, shift: float = 0.0) -> float | None:
        """Iteration where the fitted error (plus `shift`) falls to 1 - target; None when the
        plateau (or a flat fit) stays above it."""
        gap = (1.0 - target) - self.floor - shift
        if gap <= 0 or self.c <= 0.02:
            return None
        return float((gap / self.scale) ** (-1.0 / self.c))


def recent(iters, accuracy) -> tuple[np.ndarray, np.ndarray]:
    """The part of a curve the extrapolations fit, as (iterations, error): past its first quarter,
    where it shows its recent pace rather than its start's."""
    iters, err = np.asarray(iters, float), 1.0 - np.asarray(accuracy, float)
    keep = (iters >= iters.max() * RECENT) & (iters > 0)
    return iters[keep], err[keep]


def pace_line(t: np.ndarray, e: np.ndarray, test_size: int | None = None) -> tuple[float, float]:
    """log error against t, least squares: (slope, intercept). A zero error counts as half a test
    sample wrong."""
    slope, at0 = np.polyfit(t, np.log(np.maximum(e, 0.5 / (test_size or 10_000))), 1)
    return float(slope), float(at0)


def pace_crossing(iters, accuracy, target: float, test_size: int | None = None) -> float | None:
    """Where the error reaches 1 - target if it keeps falling by the same factor per iteration as
    over the curve's recent part (log error linear in t): the band's optimistic end. None when the
    recent error does not fall, or the target is a perfect score (no pace reaches an error of 0)."""
    t, e = recent(iters, accuracy)
    if len(t) < 4 or target >= 1.0:
        return None
    slope, at0 = pace_line(t, e, test_size)
    if slope >= 0:
        return None
    return float(max((math.log(1.0 - target) - at0) / slope, t.max()))


def power_crossing(iters, accuracy, target: float, test_size: int | None = None) -> float | None:
    """Where the error reaches 1 - target if it keeps falling as the power of the iterations it
    fell by over the curve's recent part (log error linear in log t, no floor): a curve that
    slows as it goes, between the pace (which never slows) and the plateau (which stops). None
    when the recent error does not fall, or the target is a perfect score."""
    t, e = recent(iters, accuracy)
    if len(t) < 4 or target >= 1.0:
        return None
    slope, at0 = np.polyfit(np.log(t), np.log(np.maximum(e, 0.5 / (test_size or 10_000))), 1)
    if slope >= 0:
        return None
    return float(max(math.exp(min((math.log(1.0 - target) - at0) / slope, 700.0)), t.max()))


def pace_or_power(iters, accuracy, test_size: int | None = None) -> str | None:
    """Which of `pace_crossing`'s line and `power_crossing`'s power law forecast the curve's own
    last HELD_OUT better, each fitted to the recent part of the curve before it: "pace" or
    "power" (the lower mean |log error| over it); None when either part has too few points."""
    iters, accuracy = np.asarray(iters, float), np.asarray(accuracy, float)
    before = iters <= iters.max() * (1.0 - HELD_OUT)
    if before.sum() < 4 or (~before).sum() < 3:
        return None
    t, e = recent(iters[before], accuracy[before])
    if len(t) < 4:
        return None
    floor = 0.5 / (test_size or 10_000)
    held, seen = iters[~before], np.log(np.maximum(1.0 - accuracy[~before], floor))
    slope, at0 = pace_line(t, e, test_size)
    p_slope, p_at0 = np.polyfit(np.log(t), np.log(np.maximum(e, floor)), 1)
    pace = np.mean(np.abs(at0 + slope * held - seen))
    power = np.mean(np.abs(p_at0 + p_slope * np.log(held) - seen))
    return "pace" if pace <= power else "power"


def pace_share(iters, accuracy, target: float, test_size: int | None = None) -> float | None:
    """How much of its way to `target` a curve has come: its last iteration over the one where its
    recent pace crosses the target (`pace_crossing`). None where the pace never gets there, or
    only past TOO_FAR times the iterations so far."""
    crossing = pace_crossing(iters, accuracy, target, test_size)
    last = float(np.max(np.asarray(iters, float)))
    if crossing is None or crossing > TOO_FAR * last:
        return None
    return last / crossing


def backtest(iters, accuracy, test_size: int | None = None) -> tuple[float, float] | None:
    """How well each end of the band forecast the curve's own last HELD_OUT: both models fitted to
    the curve before it, their mean |log error ratio| over it, as (plateau, pace). None when
    either part has too few points."""
    iters, accuracy = np.asarray(iters, float), np.asarray(accuracy, float)
    before = iters <= iters.max() * (1.0 - HELD_OUT)
    t, e = recent(iters[before], accuracy[before])
    fit = Plateau.fit(iters[before], accuracy[before])
    if fit is None or len(t) < 4 or (~before).sum() < 3:
        return None
    held, floor = iters[~before], 0.5 / (test_size or 10_000)
    seen = np.log(np.maximum(1.0 - accuracy[~before], floor))
    slope, at0 = pace_line(t, e, test_size)
    plateau = np.log(np.maximum(fit.floor + fit.scale * held ** -fit.c, floor))
    return float(np.mean(np.abs(plateau - seen))), float(np.mean(np.abs(at0 + slope * held - seen)))


@dataclass(frozen=True)
class Extrapolation:
    """Iterations to target from a curve that has not reached it, and a band on them."""
    iters: float | None           # None: the plateau lies below the target, or the curve is flat
    band: tuple[float, float] | None
    beyond: float                 # how many times the probe's length the estimate lies
    note: str


RECENT = 0.25      # the extrapolations fit the curve past this fraction of its length
HELD_OUT = 1 / 3   # the estimate weighs them by how well they forecast this last part of it
EVIDENCE = 10.0    # an estimate further than this many probe lengths is flagged as beyond the evidence
TOO_FAR = 100.0    # and one further than this is no estimate


BOOTSTRAP = 40     # refits on resampled curves, for the band


def extrapolate(iters, accuracy, target: float, test_size: int | None = None) -> Extrapolation:
    """Iterations to target past the end of a probe's curve.

    The pessimistic end is the plateau fit's crossing. Its uncertainty is the 10th to 90th
    percentile of the crossings of refits to the fitted curve plus noise as large as the residuals
    (or the test set's sampling spread, if larger); a refit whose plateau misses the target puts
    the band's top at infinity. The optimistic end is the recent pace's crossing (pace_crossing)
    of the target less one reading's noise (reading_noise).
    The band runs from the lower of the two to the refits' top. The estimate is a weighted
    geometric mean of the two crossings, each weighted by the inverse square of its model's
    forecast error on the curve's last third (backtest; equal weights without one): a curve may
    keep its recent pace where its power law bends too soon. Trust is judged by the
    pessimistic end: past EVIDENCE probe lengths the top grows with the distance, since nothing
    the probe saw bears on it; past TOO_FAR, or when the plateau lies below the target, there is
    no estimate.
    """
    iters, accuracy = np.asarray(iters, float), np.asarray(accuracy, float)
    fit = Plateau.fit(iters, accuracy)
    if fit is None:
        return Extrapolation(None, None, math.inf, "too few points to fit")
    slow = fit.crossing(target)
    if slow is None:
        why = f"levels off at {1 - fit.floor:.3f}, below the target" if 1 - fit.floor <= target else "too flat"
        return Extrapolation(None, None, math.inf, why)
    spread = max(fit.sigma, reading_noise(target, test_size))
    curve = 1.0 - (fit.floor + fit.scale * np.maximum(iters, 1.0) ** -fit.c)
    rng = np.random.default_rng(0)
    crossings = []
    for _ in range(BOOTSTRAP):    # each from the fit: it refits that curve (0.7 of the time from scratch)
        refit = Plateau.fit(iters, curve + rng.normal(0.0, spread, len(iters)), start=fit)
        crossings.append((refit.crossing(target) if refit else None) or math.inf)
    lo, hi = ((float(np.percentile(crossings, 10, method="lower")), float(np.percentile(crossings, 90, method="higher")))
              if spread > 0 else (slow, slow))
    beyond = slow / fit.last
    if beyond > TOO_FAR:
        return Extrapolation(None, None, beyond, f"extrapolates {beyond:.0f}× past the probe: too far to trust")
    if beyond > EVIDENCE:
        hi = max(hi, slow * beyond / EVIDENCE)
    fast = min(pace_crossing(iters, accuracy, target, test_size) or slow, slow)
    # A run's first reading at the target tends to come while its true accuracy is still about
    # one reading's noise below it: the band's optimistic end is the pace's crossing of that.
    early = pace_crossing(iters, accuracy, target - reading_noise(target, test_size), test_size) or fast
    w_slow, w_fast = (1.0 / max(err, 1e-3) ** 2 for err in (backtest(iters, accuracy, test_size) or (1.0, 1.0)))
    estimate = math.exp((w_slow * math.log(slow) + w_fast * math.log(fast)) / (w_slow + w_fast))
    note = "extrapolated" if beyond <= EVIDENCE else f"extrapolated {beyond:.0f}× past the probe: beyond its evidence"
    return Extrapolation(estimate, (float(min(lo, fast, early)), float(max(hi, slow))), beyond, note)


def reading_noise(target: float, test_size: int | None) -> float:
    """The sampling spread of one test accuracy reading near the target on `test_size` samples
    (0 when unknown). The run's stopping check reads the same kind of noisy accuracy, so its first
    reading at the target falls early or late by the iterations the curve takes to climb this much."""
    return math.sqrt(target * (1 - target) / test_size) if test_size and 0 < target < 1 else 0.0


def reached_band(iters, accuracy, target: float, reached: float, fit: "Extrapolation",
                 test_size: int | None = None) -> tuple[float, float] | None:
    """The band on iterations to target of a curve that reached it at `reached` (interpolated
    between two readings): down to the last reading below the target (the crossing lies between
    them) or, lower still, the curve's crossing of one reading's noise below the target (a run's
    noisy readings can cross that early); up to the refits' top."""
    if fit.band is None:
        return None
    iters, accuracy = np.asarray(iters, float), np.asarray(accuracy, float)
    first = int(np.nonzero(accuracy >= target)[0][0])
    before = float(iters[first - 1]) if first > 0 else reached
    early = iters_to_target(iters, accuracy, target - reading_noise(target, test_size)) or reached
    return float(min(before, fit.band[0], early)), float(max(reached, fit.band[1]))


@dataclass(frozen=True)
class ProbeConfig:
    """What a probe trains: the protocol's own update rule on virtual workers, one per device."""
    variant: Variant
    batches: tuple[tuple[int, ...], ...]     # per compute group, each device's batch
    lr: float
    momentum: float                          # explicit
    # Server protocols: the measured staleness histogram to sample (staleness[t] gradients t
    # updates old), from the profile's calibration job; empty: the schedule of equal speeds.
    staleness: tuple[int, ...] = ()
    weight_decay: float | None = None        # over the workload recipe's (None: the recipe's)

    def __post_init__(self):
        if not self.batches or any(not g or min(g) < 1 for g in self.batches):
            raise ValueError(f"probe: every group needs devices with batch >= 1, got {self.batches}")
        self.variant.validate(tuple(len(g) for g in self.batches))

    @property
    def samples_per_update(self) -> float:
        return self.variant.samples_per_update(self.batches)


class ProbeStatus(enum.Enum):
    """How a probe ended. Its `note` says it in words, for people; code reads this."""
    TRAINED = "trained"          # it trained to its cap or reached the target: its curve is read
    DIVERGED = "diverged"        # its loss went non-finite
    PRUNED = "pruned"            # the pruner stopped it, lagging the others at equal training time
    CUT = "cut"                  # it could no longer beat the best time so far within its cap


@dataclass(frozen=True)
class ProbeResult:
    config: ProbeConfig
    iters_to_target: float | None    # None: not reached and no trustworthy extrapolation
    reached: bool                    # the target was reached inside the probe
    curve: tuple[tuple[int, float], ...]
    mean_staleness: float
    seconds: float
    note: str                        # "reached", "extrapolated", "diverged", "not reached in N …"
    interval: tuple[float, float] | None = None    # ±1σ band of iters_to_target from the fitted curve
    train_loss: float | None = None  # mean training loss over the probe's last quarter (None: diverged)
    iters: int = 0                   # iterations the probe trained
    start_loss: float | None = None  # training loss at the first iteration: the untrained model's
    beyond: float = 0.0              # how many probe lengths past its end the estimate lies (0: reached)
    status: ProbeStatus = ProbeStatus.TRAINED

    @property
    def rankable(self) -> bool:
        """Whether it may rank at all: neither diverged nor pruned."""
        return self.status not in (ProbeStatus.DIVERGED, ProbeStatus.PRUNED)

    @property
    def ranks_by_time(self) -> bool:
        """Whether its time to target may rank it: reached, or extrapolated within EVIDENCE probe
        lengths with a band that has a top. Another estimate stays in the plan, with its band, but
        ranks nothing: one probe's guess, which refits of its own curve say may never come true,
        must not beat another's lower training loss."""
        if self.iters_to_target is None or self.reached:
            return self.iters_to_target is not None
        return self.beyond <= EVIDENCE and self.interval is not None and math.isfinite(self.interval[1])


@dataclass(frozen=True)
class MomentumReading:
    total: float          # momentum the trajectory shows
    implicit: float       # total - explicit: what asynchrony added
    alpha: float          # effective step on the gradient
    r2: float             # how much of the step the regression explains


def fit_momentum(steps: np.ndarray, grads: np.ndarray, lr: float, explicit: float) -> MomentumReading:
    """Momentum sensing: the total momentum mu of the heavy-ball form that the trajectory follows,

        steps[t] = mu * steps[t-1] - kappa * (1 - mu) * grads[t]      steps: (T, P) = w_{t+1} - w_t
                                                                      grads: (T, P) = grad f(w_t)
    with the long-run step kappa = lr / (1 - explicit) held fixed: asynchrony changes how fast
    a gradient is applied, not how much of it (each gradient is applied once). Rearranged,
        steps[t] + kappa * grads[t] = mu * (steps[t-1] + kappa * grads[t]),
    a one-parameter least squares over steps and coordinates. Under the queueing model this
    holds in expectation with mu = 1 - 1/g for plain SGD (Mitliagkas et al. 2016), and with
    mu = explicit for synchronous momentum SGD. Fitting mu and the step freely instead is
    ill-posed: along a smooth path the previous step and the gradient are nearly parallel.
    """
    kappa = lr / (1.0 - explicit)
    y = (steps[1:] + kappa * grads[1:]).ravel()
    x = (steps[:-1] + kappa * grads[1:]).ravel()
    mu = float(x @ y) / max(float(x @ x), 1e-300)
    resid = y - mu * x
    r2 = 1.0 - float(resid @ resid) / max(float(y @ y), 1e-300)
    return MomentumReading(mu, mu - explicit, kappa * (1.0 - mu), r2)
