"""Statistical efficiency: how many iterations a configuration needs to reach the target, read
off a probe's accuracy curve. Pure: numpy only.

Notation:
    t        iterations: model updates, or with no server steps of every replica (the runtime's unit)
    a(t)     test accuracy after t iterations
A probe that stops short of the target is extrapolated with a power law in the error,
1 - a(t) = A t^(-c), fitted to the curve's second half and trusted up to 10× the probe's length.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from omnitune.protocols import Variant


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
class PowerLaw:
    """log(1 - accuracy) = intercept - c * log(t), fitted to a curve's second half; sigma = residual std."""
    intercept: float
    c: float
    sigma: float
    last: float           # the last iteration the fit saw

    @classmethod
    def fit(cls, iters, accuracy) -> "PowerLaw | None":
        iters, err = np.asarray(iters, float), 1.0 - np.asarray(accuracy, float)
        keep = (iters >= iters.max() / 2) & (err > 0)
        if keep.sum() < 3:
            return None
        x, y = np.log(iters[keep]), np.log(err[keep])
        slope, intercept = np.polyfit(x, y, 1)
        sigma = float(np.std(y - (intercept + slope * x), ddof=2)) if keep.sum() > 3 else 0.0
        return cls(float(intercept), float(-slope), sigma, float(iters.max()))

    def crossing(self, target: float, shift: float = 0.0) -> float | None:
        """Iteration where the fitted error (times e^shift) falls to 1 - target; None if flat."""
        if self.c <= 1e-3:
            return None
        return math.exp((self.intercept + shift - math.log(1.0 - target)) / self.c)


def extrapolate_iters(iters: np.ndarray, accuracy: np.ndarray, target: float) -> float | None:
    """Iterations to target by the power law fitted to a curve that has not reached it.

    Returns None when the curve is flat or the fit does not reach the target within 10× the
    probe's length: the probe cannot support a prediction.
    """
    fit = PowerLaw.fit(iters, accuracy)
    t = fit.crossing(target) if fit else None
    return t if t is not None and t <= 10 * fit.last else None


def iters_interval(iters: np.ndarray, accuracy: np.ndarray, target: float) -> tuple[float, float] | None:
    """A ±1σ band for iterations to target: where the fit, shifted by its residual spread, crosses."""
    fit = PowerLaw.fit(iters, accuracy)
    if fit is None or fit.crossing(target) is None:
        return None
    return fit.crossing(target, -fit.sigma), fit.crossing(target, fit.sigma)


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

    def __post_init__(self):
        if not self.batches or any(not g or min(g) < 1 for g in self.batches):
            raise ValueError(f"probe: every group needs devices with batch >= 1, got {self.batches}")
        self.variant.validate(tuple(len(g) for g in self.batches))

    @property
    def samples_per_update(self) -> float:
        return self.variant.samples_per_update(self.batches)


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
