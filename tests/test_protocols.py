"""Each protocol's defining behaviour, in real runs over gloo on digits."""

import pytest

from omnitune.runtime import job
from tests.conftest import make_plan

pytestmark = pytest.mark.slow


def run(tmp_path, protocol, groups, **kw):
    plan = make_plan(tmp_path / "plan.json", protocol, groups, **kw)
    s = job.run(str(plan), str(tmp_path / "run"), max_time_s=60)
    assert s.reached_target and s.final_accuracy >= 0.9, s
    return s


def test_softsync_updates_after_learners_over_n_gradients(tmp_path):
    s = run(tmp_path / "n1", "softsync", [["cpu0"], ["cpu1"]], momentum=0.5, softsync_n=1)
    assert s.protocol_stats["gradients_per_update"] == 2          # n = 1: wait for both learners
    assert sum(s.updates_per_group) == 2 * s.iterations and s.mean_staleness == 0
    s = run(tmp_path / "n2", "softsync", [["cpu0"], ["cpu1"]], momentum=0.5, softsync_n=2)
    assert s.protocol_stats["gradients_per_update"] == 1          # n = learners: asynchronous
    assert s.mean_staleness > 0.3
    # Each gradient's step is divided by its staleness (at least 1): the mean scale is below 1
    # exactly when some gradient was more than one update old.
    assert 0 < s.protocol_stats["mean_lr_scale"] <= 1


def test_gossip_exchanges_only_between_pairs(tmp_path):
    s = run(tmp_path, "gossip", [["cpu0", "cpu1", "cpu2"]], momentum=0.5, gossip_every=2)
    stats = s.protocol_stats
    # Three workers: each round one pair talks and one worker sits out, so the coordinator
    # exchanges in at most every round, each time with a single peer.
    assert 0 < stats["exchanges"] <= stats["rounds"] and stats["peers"] <= 2
    assert s.processes == 3 and 0 <= stats["disagreement"] < 0.5


def test_batches_follow_throughput(tmp_path):
    s = run(tmp_path, "sync", [["cpu0", "cpu1"]], slowdown={"cpu1": 3.0}, rebalance=True, target=0.9)
    fast, slow = s.protocol_stats["batch_rank0"], s.protocol_stats["batch_rank1"]
    assert slow < fast and fast + slow == pytest.approx(64, abs=2)


def test_hpsgd_overlaps_communication_with_compute(tmp_path):
    s = run(tmp_path, "hpsgd", [["cpu0", "cpu1"]], momentum=0.5)
    # Some all-reduces finished while the next forward/backward ran: they were in flight together.
    assert s.protocol_stats["overlapped_fraction"] > 0
    assert s.mean_staleness == 1 and s.processes == 2
