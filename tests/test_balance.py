import pytest

from omnitune.efficiency.balance import apportion, step_time_line


def test_apportion_keeps_the_total_and_at_least_one_each():
    assert sum(apportion([62.3, 5.9], 64)) == 64
    assert apportion([-3.0, 70.0], 64) == [1, 63]
    assert apportion([1, 1, 1], 64) in ([22, 21, 21], [21, 22, 21], [21, 21, 22])


def test_step_time_line():
    # One batch size seen: time proportional to batch.
    assert step_time_line({32: 0.032}, 32) == (0.0, pytest.approx(0.001))
    # Two: the line through them.
    alpha, beta = step_time_line({32: 0.005, 16: 0.003}, 16)
    assert beta == pytest.approx(0.002 / 16) and alpha == pytest.approx(0.001)


def test_equal_time_batches_even_out_step_times():
    from omnitune.efficiency.balance import equal_time_batches
    alpha, beta = [1e-3, 3e-3], [1e-4, 3e-4]          # the second device is 3× slower throughout
    b = equal_time_batches(alpha, beta, 64)
    assert sum(b) == 64 and b[0] > b[1]
    times = [a + s * x for a, s, x in zip(alpha, beta, b)]
    assert abs(times[0] - times[1]) < 3e-4               # within one sample's time of each other


def test_the_server_balances_asynchronous_groups_by_their_measured_pace():
    """Two groups sending gradients at 1 and 4 ms per sample: after one period at 32 each, the
    fast group gets four times the slow one's batch (total kept), and after a second period,
    timed at the new batches, it stays there."""
    from omnitune.efficiency.balance import GroupBalancer
    bal = GroupBalancer({1: 32, 2: 32}, period=10)
    per_sample = {1: 1e-3, 2: 4e-3}

    def run(updates):
        clock = {g: 0.0 for g in per_sample}
        for _ in range(updates):
            for g, s in per_sample.items():
                clock[g] += 1e-3 + s * bal.totals[g]          # 1 ms of exchange, then the step
                bal.heard(g, bal.totals[g], clock[g])
    assert bal.rebalance() == {1: 32, 2: 32}                 # not timed yet: unchanged
    run(10)
    first = bal.rebalance()
    assert sum(first.values()) == 64 and first[1] == pytest.approx(4 * first[2], rel=0.15)
    run(10)
    assert bal.rebalance() == pytest.approx(first, abs=2)
