"""Goodput: samples a second times what a sample is worth at a batch size (Pollux, Qiao et al.
2021; the gradient noise scale of McCandlish et al. 2018). Pure: numpy only.

Notation (one checkpoint, SGD):
    G          the full gradient;  Sigma  the covariance of one sample's gradient
    g_b        a minibatch gradient at batch b:  E|g_b|^2 = |G|^2 + tr(Sigma) / b
    phi        the gradient noise scale tr(Sigma) / |G|^2, in samples (McCandlish's B_simple)
    M0, M      the current samples per update and a candidate's
    E(M)       progress a sample makes at M, relative to M0:  E(M) = (phi + M0) / (phi + M)
    X(M)       samples a second at M (the hardware model)
    goodput    X(M) * E(M)
    r          the learning rate's gain at M = S * M0 (AdaScale):  r = S * E(M), between 1 and S

A batch far below phi wastes nothing by growing (the gradient is mostly noise, E near 1); one far
above it wastes samples (E near M0 / M). phi grows as a run's loss falls (McCandlish et al.), so
the batch that trains fastest grows with it: a short probe at the start of a run reads a small
phi and favours small batches, which the run's end does not (docs/decisions.md,
retune.Rules.growth).
"""

from __future__ import annotations

import math

import numpy as np


def noise_scale(grads: np.ndarray, batch: int) -> tuple[float, float]:
    """phi and |G|^2 from K minibatch gradients of `batch` samples each, rows of `grads` (K, P):
    the mean of their squared norms estimates E|g_b|^2, the squared norm of their mean
    E|g_{Kb}|^2, and the two equations above give tr(Sigma) and |G|^2 (unbiased each; their ratio
    is not). phi is inf where the estimate of |G|^2 is not above zero: the gradient is lost in the
    noise at every batch measured."""
    k = grads.shape[0]
    if k < 2:
        raise ValueError(f"noise_scale needs at least 2 minibatch gradients, got {k}")
    small = float(np.mean(np.sum(grads * grads, axis=1)))
    mean = grads.mean(axis=0)
    big = float(mean @ mean)
    b, B = batch, k * batch
    trace = (small - big) / (1.0 / b - 1.0 / B)
    g2 = (B * big - b * small) / (B - b)
    return (max(trace, 0.0) / g2 if g2 > 0 else math.inf), g2


def efficiency(phi: float, m0: float, m: float) -> float:
    """E(M): a sample's progress at `m` samples per update relative to one at `m0`."""
    if math.isinf(phi):
        return 1.0
    return (phi + m0) / (phi + m)


def gain(phi: float, m0: float, m: float) -> float:
    """AdaScale's learning-rate gain r at `m` against `m0`: S * E(M), from 1 (phi far below the
    batch) to S (phi far above it: linear scaling, Goyal et al. 2017)."""
    return m / m0 * efficiency(phi, m0, m)


def best_scale(phi: float, m0: float, throughputs: dict[float, float]) -> tuple[float, float]:
    """The batch scale (of `throughputs`: scale -> samples a second, 1.0 the current batch's)
    with the most goodput, and its goodput over the current one's."""
    if 1.0 not in throughputs:
        raise ValueError("best_scale needs the current batch's throughput (scale 1.0)")
    scales = np.array(list(throughputs))
    good = np.array([throughputs[s] * efficiency(phi, m0, s * m0) for s in scales])
    i = int(np.argmax(good))
    return float(scales[i]), float(good[i] / good[scales == 1.0][0])
