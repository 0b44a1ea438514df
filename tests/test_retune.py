"""Re-tuning during a run (runtime/job.py, planning/retune.py): when the run pauses, what it compares, and when it
switches."""

import math

import pytest

from omnitune.planning import retune
from omnitune.planning.retune import Reading, candidates, decide
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


def readings(*pairs, score: float = 0.0) -> list[Reading]:
    """Readings of one setting from (raw, cooled) pairs, one per set of batches."""
    return [Reading(raw, cooled, score) for raw, cooled in pairs]


@pytest.mark.parametrize("challenger, switches", [(0.995, False), (0.97, True)])
def test_no_switch_within_the_noise_of_repeats(challenger, switches):
    """The current setting scored 1.00 and 1.02 on two sets of batches (raw and cooled alike):
    noise 0.02. A challenger at 0.995 is within it (and would win on the first repeat alone); one
    at 0.97 is not. Fails if decide switches to any lower mean, or ignores the repeats' spread."""
    d = decide((0.1, 0.9), {(0.1, 0.9): readings((1.00, 1.00), (1.02, 1.02)),
                            (0.3, 0.9): readings((challenger, challenger)), (0.01, 0.9): readings((1.5, 1.5))})
    assert d.switched is switches and d.setting == ((0.3, 0.9) if switches else (0.1, 0.9))
    assert d.margin == pytest.approx(0.02)


def test_the_challengers_spread_is_noise_too():
    """The current setting's two readings agree; the challenger's spread by 0.1: a 0.05 lead is noise."""
    d = decide((0.1, 0.9), {(0.1, 0.9): readings((1.0, 1.0), (1.0, 1.0)),
                            (0.3, 0.9): readings((0.9, 0.9), (1.0, 1.0))})
    assert not d.switched and d.margin == pytest.approx(0.1)


def test_with_one_repeat_the_floor_is_the_noise():
    d = decide((0.1, 0.9), {(0.1, 0.9): readings((1.0, 1.0)), (0.3, 0.9): readings((0.995, 0.995))})
    assert not d.switched and d.margin == pytest.approx(retune.NOISE_FLOOR)
    assert decide((0.1, 0.9), {(0.1, 0.9): readings((1.0, 1.0)), (0.3, 0.9): readings((0.98, 0.98))}).switched


def test_a_switch_needs_both_the_raw_and_the_cooled_loss():
    """Short-horizon bias: a lower rate that wins only on the raw loss (teacher-mlp's down-switch)
    is not taken; nor a higher one that wins only cooled (lenet-digits at 3x: never reaches the
    target at a constant rate); one that wins both is. Fails if either reading alone decides."""
    current = readings((0.17, 0.15))
    assert not decide((0.04, 0.9), {(0.04, 0.9): current, (0.0133, 0.9): readings((0.15, 0.16))}).switched
    assert not decide((0.04, 0.9), {(0.04, 0.9): current, (0.12, 0.9): readings((0.30, 0.12))}).switched
    both = decide((0.04, 0.9), {(0.04, 0.9): current, (0.12, 0.9): readings((0.16, 0.13)),
                                (0.0133, 0.9): readings((0.15, 0.12))})
    assert both.switched and both.setting == (0.12, 0.9)


def test_a_lower_rate_only_for_a_stalled_run():
    """Short-horizon bias runs towards lower rates: a lower rate that wins both readings is taken
    only when the run's own readings are stalled. Fails if decide lowers a healthy run's rate."""
    scores = {(0.04, 0.9): readings((0.17, 0.15)), (0.0133, 0.9): readings((0.15, 0.13))}
    assert not decide((0.04, 0.9), scores).switched
    d = decide((0.04, 0.9), scores, stalled=True)
    assert d.switched and d.setting == (0.0133, 0.9)


def test_where_cooling_reaches_the_target_the_run_goes_on_cooled():
    """The kept setting's cool-down reaches the target score (0.95) on both repeats: the run goes
    on at a tenth of its rate. One repeat short of it: the rate is kept."""
    d = decide((0.1, 0.9), {(0.1, 0.9): readings((0.3, 0.2), (0.3, 0.2), score=0.96)}, target=0.95)
    assert d.switched and d.setting == (0.01, 0.9) and "reaches the target" in d.reason
    mixed = [Reading(0.3, 0.2, 0.96), Reading(0.3, 0.2, 0.94)]
    assert not decide((0.1, 0.9), {(0.1, 0.9): mixed}, target=0.95).switched


def test_a_diverging_current_setting_gives_way_and_a_diverging_candidate_never_wins():
    d = decide((1.0, 0.9), {(1.0, 0.9): readings((math.nan, math.nan)), (0.3, 0.9): readings((0.8, 0.8)),
                            (0.1, 0.9): readings((0.9, 0.9))})
    assert d.switched and d.setting == (0.3, 0.9)
    assert not decide((0.1, 0.9), {(0.1, 0.9): readings((1.0, 1.0)),
                                   (1.0, 0.9): readings((-math.inf, -math.inf))}).switched

def test_a_run_paused_on_a_fake_clock_keeps_its_retuning_within_its_share(tmp_path, monkeypatch):
    """run_with_replans with the launcher and the probes faked on one clock: every launch costs
    RESTART_S and every pause's probes 2.4 s (together more than the first estimate, FIRST_COST_S),
    and the run trains 200 s. Once a pause's probes have been measured, every later pause comes
    only where all re-tuning by then, the restart it owes included, fits in SHARE of the training.
    Fails if the schedule leaves out the restart a pause still owes (once: 11.4 s of 80 s, 14%)."""
    from dataclasses import replace

    from omnitune.core import plan as plan_mod
    from omnitune.runtime import job
    from omnitune.runtime.summary import RunSummary
    from tests.conftest import make_plan

    clock = {"t": 0.0, "train": 0.0}
    monkeypatch.setattr(job.time, "perf_counter", lambda: clock["t"])
    pauses = []

    def run_job(args):
        clock["t"] += job.RESTART_S                            # every launch, the restart after a pause too
        end = min(args.stop_at_s, 200.0)
        clock["t"] += end - clock["train"]
        clock["train"] = end
        return RunSummary(1, end >= 200.0, 200.0 if end >= 200.0 else None, None, int(end), 0.5, 0.99, None, 0.0,
                          0.01, end, 0.0, "", "sync", 1, (int(end),), 0.0, 1)

    def replan(spec, checkpoint, stalled):
        clock["t"] += 2.4
        pauses.append(clock["train"])
        return spec, {"before": {}, "after": {}, "switched": False}

    monkeypatch.setattr(job, "run_job", run_job)
    monkeypatch.setattr(job, "refit_horizon", lambda spec, run_dir, iteration: spec)
    plan = plan_mod.load(make_plan(tmp_path / "plan.json", "sync", [["cpu0"]]))
    args = job.prepare(plan.spec, str(tmp_path / "run"), job.RunOptions(max_time_s=1000))
    s = job.run_with_replans(plan, replace(args, max_time_s=1000), None, replan)
    assert s.replans == len(pauses) >= 2 and pauses[0] == pytest.approx(FIRST_COST_S / SHARE)
    for k, at in enumerate(pauses[1:], start=2):
        assert k * (2.4 + job.RESTART_S) <= SHARE * at + 1e-9, (k, at, pauses)
