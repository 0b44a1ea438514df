"""The in-run tuner's decisions on readings (efficiency/tuner.py): pure, no processes."""

import math

import pytest

from omnitune.core.change import Change, Knobs, Reason
from omnitune.efficiency.tuner import COOL_STEPS, Evaluation, Policy, TrainLoss

KNOBS = Knobs(0.1, 0.9, {"cpu0": 64})


def replay(tuner, readings, knobs=KNOBS):
    """Feed `readings` in order, applying each change as the runtime would; returns the changes."""
    made = []
    for r in readings:
        change = tuner.observe(r, knobs)
        if change is not None:
            made.append((r.iteration, change))
            knobs = knobs.after(change)
    return made, knobs


def falling_then(rise_at: int, until: int, factor: float = 3.0):
    """A loss average that falls as 1/sqrt(t), then climbs `factor`-fold from `rise_at` on."""
    out = []
    for t in range(64, until, 64):
        base = 2.0 / math.sqrt(t)
        out.append(TrainLoss(t, base * (1 + (factor - 1) * min(1.0, (t - rise_at) / 640)) if t > rise_at else base))
    return out


def test_a_falling_loss_changes_nothing():
    made, _ = replay(Policy().start(KNOBS, 0.9), falling_then(10**9, 6400))
    assert made == []


def test_a_loss_that_climbs_cuts_the_rate_and_caps_it_below_the_edge():
    tuner = Policy().start(KNOBS, 0.9)
    made, knobs = replay(tuner, falling_then(3200, 6400))
    assert made and made[0][1] == Change(lr=0.05, why=Reason.UNSTABLE)
    assert 3200 < made[0][0] < 3200 + 640           # before the loss doubles (the monitor's divergence)
    assert tuner.ceiling <= 0.05 and knobs.lr <= tuner.ceiling     # (the loss here goes on climbing: cut again)


def test_a_loss_that_is_not_finite_is_left_to_the_divergence_pause():
    made, _ = replay(Policy().start(KNOBS, 0.9), [TrainLoss(64, 1.0), TrainLoss(128, math.inf),
                                                  TrainLoss(192, math.nan)])
    assert made == []


def accuracy_curve(until: int, every: int = 50, rate: float = 1e-3):
    """An accuracy whose error falls by a constant factor per iteration, as the ETA's pace reads it."""
    return [Evaluation(t, 1 - 0.9 * math.exp(-rate * t)) for t in range(every, until, every)]


def test_near_its_target_the_run_cools_down_in_steps_to_the_floor():
    policy = Policy(cool_down=True)
    tuner = policy.start(KNOBS, 0.95)
    made, knobs = replay(tuner, accuracy_curve(2900))         # the pace reaches 0.95 at about 2,800
    assert made, "no cool-down"
    first = made[0][0]
    assert first >= (1 - policy.cool_share) * 2800 * 0.9
    rates = [c.lr for _, c in made]
    assert all(c.why == Reason.COOL_DOWN for _, c in made) and rates == sorted(rates, reverse=True)
    assert len(made) <= COOL_STEPS


def test_a_cool_down_that_ends_short_of_the_target_goes_back_to_the_stable_rate_and_waits():
    policy = Policy(cool_down=True)
    tuner = policy.start(KNOBS, 0.95)
    stuck = accuracy_curve(2900) + [Evaluation(t, 0.93) for t in range(2900, 6000, 50)]
    made, knobs = replay(tuner, stuck)
    back = [(t, c) for t, c in made if c.lr == KNOBS.lr]
    assert back, "never went back to the stable rate"
    assert knobs.lr == KNOBS.lr
    assert tuner.cool_from >= 2 * made[0][0]


def test_without_a_target_or_with_cool_down_off_nothing_cools():
    assert replay(Policy().start(KNOBS, 0.95), accuracy_curve(2900))[0] == []
    assert replay(Policy(cool_down=True).start(KNOBS, None), accuracy_curve(2900))[0] == []


@pytest.mark.parametrize("bad", [dict(unstable=1.0), dict(cut=1.0), dict(ceiling=0.0), dict(cool_floor=1.5)])
def test_a_policy_out_of_range_is_refused(bad):
    with pytest.raises(ValueError):
        Policy(**bad)
