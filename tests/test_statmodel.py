import numpy as np
import pytest

from omnitune.efficiency import statmodel


def test_iters_to_target_interpolates():
    assert statmodel.iters_to_target([10, 20, 30], [0.5, 0.7, 0.9], 0.8) == pytest.approx(25)
    assert statmodel.iters_to_target([10, 20], [0.5, 0.7], 0.8) is None
    assert statmodel.iters_to_target([10, 20], [0.9, 0.95], 0.8) == 10


def test_extrapolation_brackets_a_power_law_that_levels_off():
    t = np.arange(10, 410, 10.0)
    acc = 1 - (0.05 + 2.0 * t ** -0.5)                    # plateau 0.95; truth at 0.9: (2 / 0.05) ** 2 = 1600
    fit = statmodel.extrapolate(t, acc, 0.9)
    # The plateau fit recovers the law: the band's top. The recent pace, its optimistic bottom.
    assert fit.band[1] == pytest.approx(1600, rel=0.05) and fit.band[0] < fit.iters < fit.band[1]
    assert fit.band[0] == pytest.approx(statmodel.pace_crossing(t, acc, 0.9))
    # The curve is the plateau law itself, which forecasts its own last third exactly: the estimate is its crossing.
    assert fit.iters == pytest.approx(1600, rel=0.05)
    assert fit.note == "extrapolated" and fit.beyond == pytest.approx(4, rel=0.05)
    below = statmodel.extrapolate(t, acc, 0.97)           # above the plateau: no estimate
    assert below.iters is None and "levels off at 0.95" in below.note
    assert statmodel.extrapolate(t, np.full_like(t, 0.5), 0.9).iters is None
    far = statmodel.extrapolate(t[:5], acc[:5], 0.9)       # 50 iterations seen, 1600 to go: 32×, flagged
    assert far.iters is not None and "beyond its evidence" in far.note
    slow = 1 - (0.05 + 2.0 * t ** -0.05)                  # crosses 0.9 only after ~1e28 iterations
    assert statmodel.extrapolate(t, slow, 0.9).iters is None


def test_a_plain_power_law_is_not_mistaken_for_a_plateau():
    t = np.arange(10, 210, 10.0)
    fit = statmodel.extrapolate(t, 1 - 2.0 * t ** -0.5, 0.9)     # truth: (2 / 0.1) ** 2 = 400
    assert fit.band[1] == pytest.approx(400, rel=0.05) and fit.band[0] <= fit.iters <= fit.band[1]


def test_a_curve_that_leaves_a_plateau_lies_inside_the_band_nearer_the_estimate_than_the_plateau_fit():
    """Like teacher-mlp's: flat at first, then falling and slowing again. A power law fitted to it
    is dragged flat by the start; the recent pace is not."""
    t = np.arange(100, 4100, 100.0)
    acc = 1 - (0.01 + 0.09 / (1 + (t / 3000) ** 2))
    truth = 3000 * (0.09 / 0.015 - 1) ** 0.5                    # error 0.025 at about 6,700
    fit = statmodel.extrapolate(t, acc, 0.975)
    plateau_only = statmodel.Plateau.fit(t, acc).crossing(0.975)
    assert fit.band[0] <= truth <= fit.band[1]
    assert abs(np.log(fit.iters / truth)) < abs(np.log(plateau_only / truth)) and plateau_only > 1.5 * truth


def test_the_estimate_leans_to_the_model_that_forecast_the_curves_last_third():
    """A curve that keeps its pace (error falling by a fixed factor per iteration): the pace's
    forecast of the held-out third is exact, the power law's is not, so the estimate is the pace's
    crossing, not the band's middle."""
    t = np.arange(100, 4100, 100.0)
    acc = 1 - 0.2 * np.exp(-t / 2000)
    truth = 2000 * np.log(0.2 / 0.01)                            # error 0.01 at about 6,000
    plateau_err, pace_err = statmodel.backtest(t, acc)
    assert pace_err < 0.01 < plateau_err
    fit = statmodel.extrapolate(t, acc, 0.99)
    assert fit.iters == pytest.approx(truth, rel=0.05) and fit.band[1] > 1.2 * truth


def test_band_widens_with_noise_and_past_the_evidence():
    t = np.arange(10, 410, 10.0)
    clean = 1 - (0.05 + 2.0 * t ** -0.5)
    noisy = clean + np.random.default_rng(0).normal(0, 0.01, len(t))
    a, b = statmodel.extrapolate(t, clean, 0.9), statmodel.extrapolate(t, noisy, 0.9)
    assert b.band[0] <= b.iters <= b.band[1] and b.band[1] - b.band[0] > a.band[1] - a.band[0]
    short = statmodel.extrapolate(t[:8], clean[:8], 0.9)        # 80 iterations seen, 1600 to go
    assert short.beyond > statmodel.EVIDENCE and "beyond its evidence" in short.note
    assert short.band[1] >= short.iters * short.beyond / statmodel.EVIDENCE
    sampled = statmodel.extrapolate(t, clean, 0.9, test_size=100)   # a small test set: a wide band anyway
    assert sampled.band[1] - sampled.band[0] > a.band[1] - a.band[0]


def test_the_band_reaches_down_to_the_crossing_one_readings_noise_below_the_target():
    """A run stops at its first noisy reading at the target, which tends to come while its true
    accuracy is still about one reading's noise below: the band's optimistic end is there."""
    t = np.arange(100, 4100, 100.0)
    acc = 1 - 0.2 * np.exp(-t / 2000)
    exact, sampled = statmodel.extrapolate(t, acc, 0.99), statmodel.extrapolate(t, acc, 0.99, test_size=2000)
    noise = statmodel.reading_noise(0.99, 2000)
    assert noise == pytest.approx((0.99 * 0.01 / 2000) ** 0.5)
    assert exact.band[0] == pytest.approx(2000 * np.log(0.2 / 0.01), rel=0.02)
    assert sampled.band[0] == pytest.approx(2000 * np.log(0.2 / (0.01 + noise)), rel=0.02)
    assert sampled.iters == pytest.approx(exact.iters)            # the estimate itself does not move


def test_a_reached_curves_band_starts_at_the_last_reading_below_or_its_noise_crossing():
    t = np.array([100, 200, 300, 400, 500, 600, 700, 800.0])
    acc = np.array([0.50, 0.70, 0.80, 0.86, 0.88, 0.895, 0.905, 0.93])
    reached = statmodel.iters_to_target(t, acc, 0.9)              # 650, between the readings at 600 and 700
    fit = statmodel.extrapolate(t, acc, 0.9)
    assert statmodel.reached_band(t, acc, 0.9, reached, fit)[0] == min(600, fit.band[0])
    noisy = statmodel.reached_band(t, acc, 0.9, reached, fit, test_size=500)   # noise 0.0134: 0.8866 at 544
    assert noisy[0] == pytest.approx(500 + 100 * (0.9 - 0.0134 - 0.88) / 0.015, rel=0.01) and noisy[0] < fit.band[0]
    assert noisy[1] == statmodel.reached_band(t, acc, 0.9, reached, fit)[1] >= reached


def test_a_refit_from_the_fit_finds_what_one_from_scratch_finds():
    """The band's refits start from the fit they refit (start=): on noisy power laws with and
    without a plateau, each lands where a fit from scratch lands: starting there saves time and
    changes no band. Fails if it changes where a refit lands (least squares converges from a
    wrong start too, so this cannot tell a start mapped wrongly: it checks the outcome only)."""
    rng = np.random.default_rng(5)
    t = np.arange(10, 600, 10, dtype=float)
    for c, floor in ((0.4, 0.0), (0.8, 0.03), (1.2, 0.08)):
        acc = 1 - floor - 0.8 * (t / 10) ** -c + rng.normal(0, 0.005, len(t))
        fit = statmodel.Plateau.fit(t, acc)
        noisy = acc + rng.normal(0, 0.005, len(t))
        cold, warm = statmodel.Plateau.fit(t, noisy), statmodel.Plateau.fit(t, noisy, start=fit)
        assert warm.c == pytest.approx(cold.c, rel=1e-3) and warm.floor == pytest.approx(cold.floor, abs=1e-4)
        assert warm.crossing(0.9) == pytest.approx(cold.crossing(0.9), rel=1e-3)


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


def test_no_pace_reaches_a_perfect_score():
    """A target accuracy of 1 (allowed: (0, 1]) is an error of 0, which a log-linear pace never
    reaches: no crossing, where it raised a math domain error in the run's ETA thread."""
    iters = [10, 20, 30, 40, 50, 60, 70, 80]
    accuracy = [0.5, 0.7, 0.8, 0.85, 0.9, 0.93, 0.95, 0.96]
    assert statmodel.pace_crossing(iters, accuracy, 1.0) is None
    assert statmodel.pace_crossing(iters, accuracy, 0.99) > 80
