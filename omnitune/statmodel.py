"""Statistical efficiency: how many iterations a configuration needs to reach the target.

Notation:
    g        number of compute groups updating one model asynchronously
    tau      staleness of a gradient: server updates between the read of the weights it was
             computed on and its application
    mu       explicit momentum;  mu_implicit = 1 - 1/g  (Mitliagkas et al. 2016)
Under the queueing model of asynchrony with g groups, P(tau = l) = (1/g)(1 - 1/g)^l, so the
expected update carries momentum 1 - 1/g. To keep total momentum at the synchronous optimum
mu*, the explicit momentum is about mu* - (1 - 1/g). Pure: numpy and scipy only.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np


def implicit_momentum(groups: int) -> float:
    return 1.0 - 1.0 / groups


def explicit_momentum(mu_star: float, groups: int, measured_implicit: float | None = None) -> float:
    """Explicit momentum that keeps total momentum at `mu_star`; may be zero or negative."""
    implicit = measured_implicit if measured_implicit is not None else implicit_momentum(groups)
    return mu_star - implicit


def staleness_probs(groups: int, max_tau: int) -> np.ndarray:
    """P(tau = l) for l = 0..max_tau, geometric, renormalised after truncation."""
    if groups <= 1:
        p = np.zeros(max_tau + 1)
        p[0] = 1.0
        return p
    q = 1.0 - 1.0 / groups
    p = (1.0 / groups) * q ** np.arange(max_tau + 1)
    return p / p.sum()


def draw_staleness(rng: np.random.Generator, groups: int, n: int) -> np.ndarray:
    """n staleness draws for g groups (mean about g - 1)."""
    max_tau = 1 if groups <= 1 else int(math.ceil(10 * groups))
    return rng.choice(max_tau + 1, size=n, p=staleness_probs(groups, max_tau))


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


def extrapolate_iters(iters: np.ndarray, accuracy: np.ndarray, target: float) -> float | None:
    """Fit error(t) = a * t^(-c) (t = iteration) to the curve's second half and solve for target.

    Returns None when the curve is flat or the fit does not reach the target within 10× the
    probe's length: the probe cannot support a prediction.
    """
    iters, err = np.asarray(iters, float), 1.0 - np.asarray(accuracy, float)
    keep = (iters >= iters.max() / 2) & (err > 0)
    if keep.sum() < 3:
        return None
    slope, intercept = np.polyfit(np.log(iters[keep]), np.log(err[keep]), 1)
    c = -slope
    if c <= 1e-3:
        return None
    t = math.exp((intercept - math.log(1.0 - target)) / c)
    return t if t <= 10 * iters.max() else None


@dataclass(frozen=True)
class ProbeConfig:
    batch: int          # samples per update (the whole group's minibatch)
    lr: float
    momentum: float     # explicit
    groups: int         # emulated asynchrony


@dataclass(frozen=True)
class ProbeResult:
    config: ProbeConfig
    iters_to_target: float | None    # None: not reached and no trustworthy extrapolation
    reached: bool                    # the target was reached inside the probe
    curve: tuple[tuple[int, float], ...]
    mean_staleness: float
    seconds: float
    note: str                        # "reached", "extrapolated", "diverged", "stopped at N", ...
