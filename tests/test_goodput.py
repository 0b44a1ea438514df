import math

import numpy as np
import pytest

from omnitune.efficiency import goodput


def test_the_noise_scale_is_recovered_from_minibatch_gradients():
    """Minibatch gradients G + noise of covariance Sigma / b, with |G|^2 = 1 and tr(Sigma) = 200:
    phi = 200. Fails if the estimator mixes up the batch sizes (a factor of b or K off)."""
    rng = np.random.default_rng(0)
    p, b, k = 50, 16, 4000
    g = np.zeros(p)
    g[0] = 1.0
    per_sample_sd = math.sqrt(200.0 / p)             # tr(Sigma) = p * sd^2 = 200
    grads = g + rng.normal(0.0, per_sample_sd / math.sqrt(b), size=(k, p))
    phi, g2 = goodput.noise_scale(grads, b)
    assert phi == pytest.approx(200.0, rel=0.1) and g2 == pytest.approx(1.0, rel=0.1)


def test_pure_noise_has_an_infinite_noise_scale_and_one_gradient_is_refused():
    rng = np.random.default_rng(1)
    grads = rng.normal(size=(64, 20))
    grads -= grads.mean(axis=0)                       # no signal at all: |G|^2 estimates below zero
    assert goodput.noise_scale(grads, 8)[0] == math.inf
    with pytest.raises(ValueError, match="at least 2"):
        goodput.noise_scale(grads[:1], 8)


def test_the_rate_scales_linearly_only_while_the_batch_is_far_below_the_noise_scale():
    """AdaScale's gain at 4x the batch: about 4 where phi dwarfs it, about 1 where phi is tiny."""
    assert goodput.gain(1e9, 64, 256) == pytest.approx(4.0, rel=1e-6)
    assert goodput.gain(1e-9, 64, 256) == pytest.approx(1.0, rel=1e-6)
    assert goodput.gain(math.inf, 64, 256) == 4.0
    assert goodput.efficiency(128, 64, 256) == pytest.approx(0.5)


def test_the_best_batch_follows_the_noise_scale():
    """teacher-mlp's profile (one worker: 47.4k samples/s at batch 64, 62.1k at 128, 74.4k at 256)
    against the noise scales measured on its run at batch 64, lr 0.03: at phi about 100
    (untrained) batch 64 stays; at about 2,000 (6,000-10,000 iterations) 256 wins by more than
    the current batch's goodput."""
    speeds = {1.0: 47.4e3, 2.0: 62.1e3, 4.0: 74.4e3}
    assert goodput.best_scale(100.0, 64, speeds)[0] == 1.0
    scale, ratio = goodput.best_scale(2000.0, 64, speeds)
    assert scale == 4.0 and ratio == pytest.approx(74.4 / 47.4 * 2064 / 2256, rel=1e-6)
    with pytest.raises(ValueError, match="current"):
        goodput.best_scale(100.0, 64, {2.0: 1.0})
