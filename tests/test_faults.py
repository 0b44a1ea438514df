"""Breaking runs on purpose: a killed worker or server, with and without restarts (real processes)."""

import json

import pytest
import torch

from omnitune.errors import UserError
from omnitune.runtime import job
from tests.conftest import make_plan

pytestmark = pytest.mark.slow


def metrics(run_dir):
    return [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]


def test_killed_worker_restarts_from_the_last_checkpoint(tmp_path, monkeypatch):
    monkeypatch.setenv("OMNITUNE_FAULT_KILL", "1:120")          # rank 1 dies at iteration 120
    plan = make_plan(tmp_path / "plan.json", "sync", [["cpu0", "cpu1"]], lr=0.02, target=0.95)
    run_dir = tmp_path / "run"
    s = job.run(str(plan), str(run_dir), max_time_s=60, checkpoint_every_s=0.1, max_restarts=1)
    assert s.reached_target and s.restarts == 1
    lines = metrics(run_dir)
    # The restarted attempt's clock goes on from its checkpoint, so its first line steps back in time.
    resumed = next(b for a, b in zip(lines, lines[1:]) if b["wall_s"] < a["wall_s"])
    lost = 120 - resumed["iteration"]
    assert 0 <= lost < 60                   # at most about one checkpoint interval (0.1 s) of work


def test_killed_server_restarts_too(tmp_path, monkeypatch):
    monkeypatch.setenv("OMNITUNE_FAULT_KILL", "0:150")          # the parameter server dies
    plan = make_plan(tmp_path / "plan.json", "groups", [["cpu0"], ["cpu1"]], lr=0.02, momentum=0.4, target=0.95)
    s = job.run(str(plan), str(tmp_path / "run"), max_time_s=60, checkpoint_every_s=0.1, max_restarts=1)
    assert s.reached_target and s.restarts == 1


def test_without_restarts_a_failure_stops_cleanly_with_a_usable_checkpoint(tmp_path, monkeypatch):
    monkeypatch.setenv("OMNITUNE_FAULT_KILL", "1:150")
    plan = make_plan(tmp_path / "plan.json", "sync", [["cpu0", "cpu1"]], lr=0.02, target=0.999)
    run_dir = tmp_path / "run"
    with pytest.raises(UserError, match="a worker process failed"):
        job.run(str(plan), str(run_dir), max_time_s=60, checkpoint_every_s=0.1)
    state = torch.load(run_dir / "checkpoint.pt", weights_only=True)
    assert 0 < state["iteration"] <= 150
    monkeypatch.delenv("OMNITUNE_FAULT_KILL")
    s = job.run(str(plan), str(run_dir), max_time_s=2, resume=True)     # and the run goes on from it
    assert s.iterations > state["iteration"]
