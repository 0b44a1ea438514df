"""The learning-curve ensemble (efficiency/curves.py) and the ETA it gives (efficiency/eta.py), on
curves with known answers."""

import math
import time

import numpy as np
import pytest

from omnitune.efficiency import curves
from omnitune.efficiency.eta import estimate


def lines(t, acc, sec_per_iter=0.01, changes=()):
    """metrics.jsonl lines: readings (iteration, accuracy) and change rows at the given iterations."""
    rows = [{"attempt": 0, "iteration": int(i), "train_s": i * sec_per_iter, "time": 1e9 + i, "test_accuracy": a}
            for i, a in zip(t, acc)]
    rows += [{"event": "change", "why": "climb", "attempt": 0, "iteration": c, "train_s": c * sec_per_iter, "lr": 0.2}
             for c in changes]
    return sorted(rows, key=lambda r: (r["iteration"], "event" in r))


def test_a_power_law_to_a_floor_is_extrapolated_to_its_crossing():
    """error = 0.05 + 2 t^-0.5 reaches 0.08 at t = 4,444. From its readings to t = 1,300 (a
    quarter of the way and some), the ensemble puts it within 10%, where the recent pace alone
    (the exponential) puts it at a third of that. Fails if the weights ignore the backtest."""
    t = np.arange(100, 1301, 100.0)
    f = curves.forecast(t, 0.05 + 2 * t ** -0.5, 0.08)
    assert f.crossing == pytest.approx(4444, rel=0.10)
    assert f.weights["floor"] > 0.9 and f.crossings["exponential"] < 0.5 * 4444


def test_a_curve_that_levels_off_above_its_target_is_not_reached():
    """error = 0.1 + 1/t never reaches 0.05: the estimate says so, with no ETA."""
    t = np.arange(100, 2001, 100.0)
    assert curves.forecast(t, 0.1 + 1 / t, 0.05).crossing is None
    e = estimate(lines(t, 1 - (0.1 + 1 / t)), 0.95, model="curves")
    assert e.eta_s is None and e.note.startswith("not reached")


def test_after_a_change_of_rate_the_curve_since_it_decides():
    """Until iteration 2,000 the error falls as exp(-t/4000); from there, at twice the rate, twice
    as fast (exp(-t/2000)), reaching 0.05 at 2,000 + 2,000 ln(0.61/0.05 ... ), about 6,000. With the
    change row, the readings since it decide (the pace's and the ensemble's ETA land within 15%);
    read as one curve, it is later. Fails if the change rows are not read."""
    before = np.arange(100, 2001, 100.0)
    after = np.arange(2100, 3001, 100.0)
    e0 = np.exp(-before / 4000)
    e1 = np.exp(-2000 / 4000) * np.exp(-(after - 2000) / 2000)
    t, err = np.concatenate([before, after]), np.concatenate([e0, e1])
    truth = 2000 + 2000 * math.log(math.exp(-0.5) / 0.05)
    for model in ("pace", "curves"):
        with_change = estimate(lines(t, 1 - err, changes=(2000,)), 0.95, model=model)
        as_one = estimate(lines(t, 1 - err), 0.95, model=model)
        assert with_change.iters_to_target == pytest.approx(truth, rel=0.15)
        assert abs(as_one.iters_to_target / truth - 1) > abs(with_change.iters_to_target / truth - 1)


def test_a_fit_of_a_long_run_costs_under_a_percent_of_the_live_threads_interval():
    """The live thread fits at most every 2 s (cli/commands.py ETA_EVERY_S): a fit of the
    ensemble (the costlier model) on 400 noisy readings must take under 20 ms of CPU."""
    rng = np.random.default_rng(0)
    t = np.arange(50, 20_001, 50.0)
    acc = 1 - (0.02 + 0.5 * t ** -0.4) * np.exp(rng.normal(0, 0.05, len(t)))
    rows = lines(t, acc)
    estimate(rows, 0.99, model="curves")
    began = time.process_time()
    for _ in range(10):
        estimate(rows, 0.99, model="curves")
    assert (time.process_time() - began) / 10 < 0.020
