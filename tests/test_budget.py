"""The planning budget: pure, tested without training."""

import pytest

from omnitune.planning import budget


def test_a_tiny_job_gets_a_quick_search_within_its_floor():
    b = budget.plan_budget(predicted_train_s=0.4, scouts_s=1.0)
    assert not b.full and "too small for a full search" in b.reason
    assert b.seconds == budget.RULES.small_budget_s and b.seconds + 5 <= 15     # plan within 15 s, loading included
    assert b.probes >= 1 and b.probe_s >= budget.RULES.min_probe_s


def test_planning_is_a_tenth_of_a_long_job_and_buys_more_and_longer_probes():
    short, long = budget.plan_budget(60.0, scouts_s=4.0), budget.plan_budget(600.0, scouts_s=4.0)
    assert short.full and long.full
    assert short.seconds == pytest.approx(6.0) and long.seconds == pytest.approx(60.0)
    assert long.probes >= short.probes and long.probe_s > short.probe_s
    assert long.probes * long.probe_s <= long.seconds - 4.0 + 1e-9          # the scouts' time is counted


def test_probes_never_exceed_what_is_left():
    for train_s in (10.0, 30.0, 100.0, 1_000.0, 100_000.0):
        b = budget.plan_budget(train_s, scouts_s=3.0)
        assert b.probes * b.probe_s <= max(b.seconds - 3.0, 0.0) + budget.RULES.min_probe_s
        assert budget.RULES.min_probe_s <= b.probe_s <= budget.RULES.max_probe_s


def test_budget_override_wins_and_spent_scouts_leave_no_probes():
    b = budget.plan_budget(0.4, scouts_s=1.0, override_s=50.0)
    assert b.full and b.seconds == 50.0 and "--budget-s" in b.reason
    spent = budget.plan_budget(20.0, scouts_s=5.0)         # a 2 s budget, already spent by the scouts
    assert spent.probes == 0


def test_unknown_training_time_gets_a_fixed_budget_of_a_full_search():
    """A long job's pre-run search stays small (the run re-tunes), but it is a full search, not
    the quick one of a job too small for one."""
    b = budget.plan_budget(None, scouts_s=2.0)
    assert b.seconds == budget.RULES.unknown_budget_s <= 6.0 and b.full and "could predict" in b.reason
    assert b.probes == 8 and b.probe_s == budget.RULES.min_probe_s


def test_evaluations_stay_a_small_share_of_a_probe():
    assert budget.evaluations(10.0, eval_s=0.001) == budget.RULES.evals            # cheap: as many as wanted
    assert budget.evaluations(2.0, eval_s=0.25) == 2                          # dear: the middle and the end
    few = budget.evaluations(8.0, eval_s=0.1)
    assert 2 < few < budget.RULES.evals and few * 0.1 <= budget.RULES.eval_share * 8.0
    assert budget.evaluations(10.0, 0.001, most=budget.RULES.ranking_evals) == budget.RULES.ranking_evals


def test_a_high_target_is_probed_on_more_of_the_test_set():
    assert budget.probe_test_size(0.8, 1000) == budget.RULES.probe_test
    assert budget.probe_test_size(0.95, 5000) == 1000                 # 50 errors at 5%
    assert budget.probe_test_size(0.985, 2000) == 2000                # teacher-mlp: its whole test set
    assert budget.probe_test_size(0.9, 300) == 300                    # never more than there is


def test_where_a_step_is_slow_the_budget_with_no_prediction_buys_a_few_probes():
    """charlm-stdlib steps in 73 ms: 6 s bought three 20-iteration probes. The budget with no
    prediction buys budget.RULES.unknown_probes of them; a fast step leaves it at 6 s, and a prediction or an
    override ignores the floor."""
    slow = budget.plan_budget(None, 0.0, least_s=budget.least_probing(0.0735))
    assert slow.seconds == pytest.approx(budget.RULES.unknown_probes * 20 * 0.0735)
    assert slow.probes >= budget.RULES.unknown_probes
    assert budget.plan_budget(None, 0.0, least_s=budget.least_probing(0.001)).seconds == budget.RULES.unknown_budget_s
    assert budget.plan_budget(100.0, 0.0, least_s=50.0).seconds == pytest.approx(10.0)
    assert budget.plan_budget(None, 0.0, override_s=3.0, least_s=50.0).seconds == 3.0
