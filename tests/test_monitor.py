import pytest

from omnitune.runtime import monitor
from omnitune.runtime.monitor import Monitor


def test_seconds_per_iteration_leave_out_the_warm_up_step(tmp_path):
    m = Monitor(workload=None, test=None, target=1.0, max_time_s=1e9, eval_every_s=1e9,
                metrics_path=tmp_path / "metrics.jsonl", next_eval=float("inf"))
    m.start -= 0.05                                  # the first step took 50 ms
    assert not m.check(None, 1)
    first_s = m.warm[1]
    assert m.warm[0] == 1 and first_s >= 0.05
    # Ten more steps of 10 ms each: 10 ms per iteration, not (first_s + 0.1) / 11.
    assert monitor.sec_per_iter(m, 11, first_s + 0.1, since=(0, 0.0)) == pytest.approx(0.01)
    # Nothing after the first check: counted from where this start of the job began.
    assert monitor.sec_per_iter(m, 1, first_s, since=(0, 0.0)) == pytest.approx(first_s)


def test_a_run_that_goes_on_past_its_judged_model_is_timed_to_the_stopping_check(tmp_path):
    m = Monitor(workload=None, test=None, target=1.0, max_time_s=0.0, eval_every_s=1e9,
                metrics_path=tmp_path / "metrics.jsonl", next_eval=float("inf"))
    m.warm = (0, 0.0)
    assert m.check(None, 8)                          # out of time at iteration 8
    stop_s = m.stop[1]
    assert m.stop[0] == 8
    # Gossip ends with the model judged at 8, but its workers ran on for 12 more steps (1 s).
    assert monitor.sec_per_iter(m, 8, stop_s + 1.0, since=(0, 0.0)) == pytest.approx(stop_s / 8)
    # Sync stops one iteration later: counted to the end.
    assert monitor.sec_per_iter(m, 9, stop_s + 0.01, since=(0, 0.0)) == pytest.approx((stop_s + 0.01) / 9)


def test_a_job_with_min_iters_runs_past_its_limit_until_it_has_timed_them(tmp_path):
    """The profile's calibration jobs time at least a few updates past the warm-up, however slow
    the model (charlm-stdlib's async groups once saw two in their 0.4 s, and the planner trusted
    the time between them), but never more than monitor.STRETCH times their limit."""
    from omnitune.runtime import monitor

    m = Monitor(workload=None, test=None, target=1.0, max_time_s=1.0, eval_every_s=1e9,
                metrics_path=tmp_path / "metrics.jsonl", next_eval=float("inf"), min_iters=4)
    m.start -= 0.5
    assert not m.check(None, 1)                      # the warm-up, within the limit
    m.start -= 1.0                                   # past the limit: 2 and then 4 timed
    assert not m.check(None, 3)
    assert m.check(None, 5)
    slow = Monitor(workload=None, test=None, target=1.0, max_time_s=1.0, eval_every_s=1e9,
                   metrics_path=tmp_path / "metrics.jsonl", next_eval=float("inf"), min_iters=4)
    slow.start -= 2.0
    assert not slow.check(None, 1)
    slow.start -= monitor.STRETCH * 1.0
    assert slow.check(None, 2)                       # at STRETCH times the limit, with one timed
    plain = Monitor(workload=None, test=None, target=1.0, max_time_s=1.0, eval_every_s=1e9,
                    metrics_path=tmp_path / "metrics.jsonl", next_eval=float("inf"))
    plain.start -= 1.5
    assert plain.check(None, 1)                      # a run's limit is its limit
