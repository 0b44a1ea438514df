"""Each protocol's training loop, in real runs over gloo on digits: what it does, measured."""

import json

import pytest
import torch

from omnitune.runtime import job
from omnitune.runtime.job import RunOptions
from tests.conftest import make_plan

pytestmark = pytest.mark.slow


def run(tmp_path, protocol, groups, reach=True, max_time_s=60, **kw):
    plan = make_plan(tmp_path / "plan.json", protocol, groups, **kw)
    s = job.run(str(plan), str(tmp_path / "run"), RunOptions(max_time_s=max_time_s))
    if reach:
        # The final model, a few steps past the evaluation that reached the target, may sit just below it.
        assert s.reached_target and s.final_accuracy >= kw.get("target", 0.9) - 0.05, s
    return s


def test_softsync_updates_after_learners_over_n_gradients(tmp_path):
    s = run(tmp_path / "n1", "softsync", [["cpu0"], ["cpu1"]], momentum=0.5, softsync_n=1)
    assert s.protocol_stats["gradients_per_update"] == 2          # n = 1: wait for both learners
    assert sum(s.updates_per_group) == 2 * s.iterations
    # Both gradients of an update were computed on the weights it replaces.
    assert s.staleness == (sum(s.updates_per_group),) and s.mean_staleness == 0
    s = run(tmp_path / "n2", "softsync", [["cpu0"], ["cpu1"]], momentum=0.5, softsync_n=2)
    assert s.protocol_stats["gradients_per_update"] == 1          # n = learners: asynchronous
    assert sum(s.staleness) == sum(s.updates_per_group) == s.iterations
    assert 0.5 < s.mean_staleness < 1.5                           # the other learner's update came between
    # Each gradient's step is divided by its staleness (at least 1), as the histogram says.
    scale = sum(n / max(t, 1) for t, n in enumerate(s.staleness)) / sum(s.staleness)
    assert s.protocol_stats["mean_lr_scale"] == pytest.approx(scale)


def test_gossip_averaging_brings_the_workers_together(tmp_path):
    """Three workers, the same run averaging every 2 steps and every 64: the workers end a round
    of drift apart, and more averaging keeps them closer."""
    kw = dict(momentum=0.5, target=0.99, reach=False, max_time_s=3)
    often = run(tmp_path / "often", "gossip", [["cpu0", "cpu1", "cpu2"]], gossip_every=2, **kw)
    rarely = run(tmp_path / "rarely", "gossip", [["cpu0", "cpu1", "cpu2"]], gossip_every=64, **kw)
    assert often.protocol_stats["exchanges"] > 10 and rarely.protocol_stats["exchanges"] >= 1
    # Where the rare run's last round came just before its end, its workers sit close too: a
    # clean-clone CI read 0.0103 against 0.0194 (0.53) on a fast VM (2026-11-30).
    assert often.protocol_stats["disagreement"] < 0.75 * rarely.protocol_stats["disagreement"]
    # Each averaging follows 2 local steps, or a multiple when the worker sat out rounds before.
    drift = [t for t, n in enumerate(often.staleness) if n]
    assert drift[0] == 2 and all(t % 2 == 0 for t in drift)
    # The coordinator is evaluated only right after a round, as the probes evaluate it.
    for name, every in (("often", 2), ("rarely", 64)):
        lines = (tmp_path / name / "run" / "metrics.jsonl").read_text().splitlines()
        assert lines and all(json.loads(x)["iteration"] % every == 0 for x in lines), name


def test_batches_follow_throughput(tmp_path):
    s = run(tmp_path, "sync", [["cpu0", "cpu1"]], slowdown={"cpu1": 3.0}, rebalance=True, target=0.9)
    fast, slow = s.protocol_stats["batch_rank0"], s.protocol_stats["batch_rank1"]
    assert slow < fast and fast + slow == pytest.approx(64, abs=2)


def test_hpsgd_overlaps_communication_with_compute(tmp_path):
    s = run(tmp_path, "hpsgd", [["cpu0", "cpu1"]], momentum=0.5)
    # The run's model is the merged one that reached the target, not the next merge past it
    # (which once scored 0.83 against 0.9).
    assert s.final_accuracy >= 0.9
    # Some all-reduces finished while the next forward/backward ran: they were in flight together.
    assert s.protocol_stats["overlapped_fraction"] > 0
    # Every merged change was taken one local step before it was merged.
    assert s.processes == 2 and s.staleness[0] == 0 and sum(s.staleness) == s.staleness[1] > 0


def test_batchnorm_statistics_reach_the_evaluated_and_checkpointed_model(tmp_path):
    """Inputs far from BatchNorm's initial statistics: a model evaluated with statistics that
    never moved scores near chance (groups ended at 0.29 before they travelled). Every protocol
    reaches the target sync reaches (runs stop at the target, so final accuracies, taken a few
    steps past the evaluation that found it, are not compared with each other); the checkpoint must evaluate as the run's last
    evaluation did."""
    kw = dict(workload="bncnn-digits", momentum=0.5, target=0.9, max_time_s=30)
    for protocol, groups in (("sync", [["cpu0", "cpu1"]]), ("groups", [["cpu0"], ["cpu1"]]),
                             ("hpsgd", [["cpu0", "cpu1"]]), ("gossip", [["cpu0", "cpu1"]])):
        s = run(tmp_path / protocol, protocol, groups, **kw)
        assert s.reached_target and s.final_accuracy >= kw["target"] - 0.05, protocol    # not ~0.1-0.3
        assert checkpoint_accuracy(tmp_path / protocol / "run") == pytest.approx(s.final_accuracy), protocol


def checkpoint_accuracy(run_dir) -> float:
    from omnitune.runtime import workload
    wl = workload.load("bncnn-digits")
    model = wl.build_model()
    model.load_state_dict(torch.load(run_dir / "checkpoint.pt", weights_only=True)["model"])
    return workload.evaluate(wl, model, wl.build_datasets(None, 0)[1], torch.device("cpu"))[1]
