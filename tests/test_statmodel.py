import numpy as np
import pytest

from omnitune import statmodel


def test_iters_to_target_interpolates():
    assert statmodel.iters_to_target([10, 20, 30], [0.5, 0.7, 0.9], 0.8) == pytest.approx(25)
    assert statmodel.iters_to_target([10, 20], [0.5, 0.7], 0.8) is None
    assert statmodel.iters_to_target([10, 20], [0.9, 0.95], 0.8) == 10


def test_extrapolation_recovers_a_power_law_and_refuses_flat_curves():
    t = np.arange(10, 210, 10.0)
    acc = 1 - 2.0 * t ** -0.5
    est = statmodel.extrapolate_iters(t, acc, 0.9)       # truth: (2 / 0.1) ** 2 = 400
    assert est == pytest.approx(400, rel=0.05)
    assert statmodel.extrapolate_iters(t, np.full_like(t, 0.5), 0.9) is None
    assert statmodel.extrapolate_iters(t, acc, 0.999) is None              # too far beyond the probe


def test_interval_brackets_the_estimate_and_widens_with_noise():
    t = np.arange(10, 210, 10.0)
    clean = 1 - 2.0 * t ** -0.5
    noisy = 1 - 2.0 * t ** -0.5 * np.exp(np.random.default_rng(0).normal(0, 0.1, len(t)))
    lo0, hi0 = statmodel.iters_interval(t, clean, 0.9)
    lo1, hi1 = statmodel.iters_interval(t, noisy, 0.9)
    assert lo0 == pytest.approx(hi0) == pytest.approx(400, rel=0.01)
    estimate = statmodel.extrapolate_iters(t, noisy, 0.9)
    assert lo1 < estimate < hi1 and hi1 - lo1 > hi0 - lo0


def test_fit_momentum_recovers_heavy_ball_on_a_quadratic():
    rng = np.random.default_rng(0)
    h = rng.uniform(0.1, 5.0, size=20)                     # curvatures of a diagonal quadratic
    lr, mu = 0.05, 0.6
    w, v, steps, grads = rng.normal(size=20), np.zeros(20), [], []
    for _ in range(80):
        g = h * w
        v = mu * v + g
        grads.append(g)
        steps.append(-lr * v)
        w = w - lr * v
    reading = statmodel.fit_momentum(np.array(steps), np.array(grads), lr=lr, explicit=mu)
    assert reading.total == pytest.approx(mu, abs=1e-6) and reading.implicit == pytest.approx(0, abs=1e-6)
    assert reading.r2 > 0.99
