"""Re-tuning during a run (runtime/job.py, planning/retune.py): when the run pauses, what it compares, and when it
switches."""

import math

import pytest

from omnitune.planning import retune
from omnitune.planning.retune import candidates, decide
from omnitune.runtime.job import FIRST_COST_S, RETUNE_SHARE as SHARE, next_stop


def test_pauses_double_and_all_retuning_fits_in_its_share():
    """A fake clock of measured costs, one small, one large: every pause comes at least twice as
    late as the last, and the re-tuning spent by then, the pause's own included, is at most SHARE
    of the training time. Fails if next_stop ignores what was spent, the pause's own cost, or
    the doubling."""
    stop, spent, stops = 0.0, 0.0, []
    for cost in (3.0, 3.0, 40.0, 1.0, 1.0):
        new = next_stop(stop, spent, cost)
        assert new >= 2 * stop
        spent += cost
        assert spent <= SHARE * new + 1e-9
        stop = new
        stops.append(stop)
    assert stops[:2] == [30.0, 60.0]                 # 3 s of re-tuning waits for 30 s of training
    assert stops[2] == pytest.approx((6.0 + 40.0) / SHARE)    # a costly one waits longer
    assert stops[3] == 2 * stops[2]


def test_a_short_run_is_never_paused():
    """Before any re-tuning was measured, the first pause waits for FIRST_COST_S / SHARE of training."""
    first = next_stop(0.0, 0.0, FIRST_COST_S)
    assert first == pytest.approx(FIRST_COST_S / SHARE) and first >= 20


def test_the_candidates_are_the_rate_up_and_down_and_with_asynchrony_the_momenta():
    assert candidates(0.1, 0.9, False) == [(0.1, 0.9), (0.3, 0.9), (0.0333, 0.9), (1.0, 0.9), (0.01, 0.9)]
    more = candidates(0.1, 0.6, True)
    assert more[0] == (0.1, 0.6) and {m for lr, m in more if lr == 0.1} == {0.0, 0.3, 0.6, 0.9}


@pytest.mark.parametrize("challenger, switches", [(0.995, False), (0.97, True)])
def test_no_switch_within_the_noise_of_repeats(challenger, switches):
    """The current setting scored 1.00 and 1.02 on two sets of batches: noise 0.02. A challenger
    at 0.995 is within it (and would win on the first repeat alone); one at 0.97 is not. Fails if
    decide switches to any lower mean, or ignores the repeats' spread."""
    d = decide((0.1, 0.9), {(0.1, 0.9): [1.00, 1.02], (0.3, 0.9): [challenger], (0.01, 0.9): [1.5]})
    assert d.switched is switches and d.setting == ((0.3, 0.9) if switches else (0.1, 0.9))
    assert d.margin == pytest.approx(0.02)


def test_with_one_repeat_the_floor_is_the_noise():
    d = decide((0.1, 0.9), {(0.1, 0.9): [1.0], (0.3, 0.9): [0.995]})
    assert not d.switched and d.margin == pytest.approx(retune.NOISE_FLOOR)
    assert decide((0.1, 0.9), {(0.1, 0.9): [1.0], (0.3, 0.9): [0.98]}).switched


def test_a_diverging_current_setting_gives_way_and_a_diverging_candidate_never_wins():
    d = decide((1.0, 0.9), {(1.0, 0.9): [math.nan], (0.3, 0.9): [0.8], (0.1, 0.9): [0.9]})
    assert d.switched and d.setting == (0.3, 0.9)
    assert not decide((0.1, 0.9), {(0.1, 0.9): [1.0], (1.0, 0.9): [-math.inf]}).switched
