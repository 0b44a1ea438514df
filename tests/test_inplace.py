"""Changes in place: a running job takes a new rate, momentum and batch at a step boundary, in
every process at the same step, without ending one (real processes over gloo)."""

import json
import re

import pytest
import torch

from omnitune.core.change import Change, Knobs, Reason
from omnitune.runtime import job
from omnitune.runtime.checkpoint import Start
from omnitune.runtime.context import JobArgs
from omnitune.runtime.process import in_force
from tests.conftest import make_spec

TOOK = re.compile(r"omnitune: change (\d+) \((\S+)\) after iteration (\d+) in process (\d+): lr (\S+), "
                  r"momentum (\S+), batch (\{.*\})")


def took(run_dir, attempt: int = 0) -> dict[int, list[tuple]]:
    """Each rank's changes, as its log says: (change, iteration, pid, lr, batch) in order."""
    out = {}
    for log in sorted(run_dir.glob(f"logs/*/attempt_{attempt}/*/stdout.log")):
        rows = [TOOK.match(line) for line in log.read_text().splitlines()]
        out[int(log.parent.name)] = [(int(m[1]), int(m[3]), int(m[4]), float(m[5]), m[7]) for m in rows if m]
    return out


def change_rows(run_dir) -> list[dict]:
    lines = [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines()]
    return [r for r in lines if r.get("event") == "change"]


# --- the values in force (pure) ---

def test_a_change_sets_what_it_names_and_scales_every_batch():
    knobs = Knobs(0.1, 0.9, {"a": 32, "b": 24})
    assert knobs.after(Change(lr=0.05)) == Knobs(0.05, 0.9, {"a": 32, "b": 24})
    assert knobs.after(Change(momentum=0.5, batch_scale=2.0)) == Knobs(0.1, 0.5, {"a": 64, "b": 48})
    assert knobs.after(Change(batch_scale=0.01)).batch_size == {"a": 1, "b": 1}
    assert Change.from_dict(json.loads(json.dumps(Change(lr=0.2, why=Reason.UNSTABLE, at=7).to_dict()))) == \
        Change(lr=0.2, why=Reason.UNSTABLE, at=7)


@pytest.mark.parametrize("bad", [dict(lr=0.0), dict(lr=float("nan")), dict(momentum=1.0), dict(batch_scale=-1.0),
                                 dict(at=-1)])
def test_a_change_out_of_range_is_refused(bad):
    with pytest.raises(ValueError, match="a change's"):
        Change(**bad)


def test_a_restart_goes_on_with_the_values_its_checkpoint_holds_and_a_new_segment_with_its_own():
    spec = make_spec("sync", [["cpu0"]], batch=32, lr=0.1)
    args = JobArgs(spec=spec, run_dir="x", max_time_s=1, eval_every_s=1, timeout_s=1)
    now = Knobs(0.02, 0.9, {"cpu0": 64})
    record = {"base": Knobs.of(spec).to_dict(), "now": now.to_dict()}
    assert Knobs.of(in_force(args, Start(10, 1.0, None, record)).spec) == now            # the job it was
    other = JobArgs(spec=make_spec("sync", [["cpu0"]], batch=32, lr=0.3), run_dir="x", max_time_s=1,
                    eval_every_s=1, timeout_s=1)
    assert in_force(other, Start(10, 1.0, None, record)) == other                        # a re-tuned segment
    assert in_force(args, Start(10, 1.0, None, None)) == args


# --- real runs ---

SHAPES = {"sync": [["cpu0", "cpu1"]], "groups": [["cpu0"], ["cpu1"]], "softsync": [["cpu0"], ["cpu1"]],
          "hpsgd": [["cpu0", "cpu1"]], "gossip": [["cpu0", "cpu1"]]}


@pytest.mark.slow
@pytest.mark.parametrize("protocol", list(SHAPES))
def test_a_running_job_takes_a_rate_and_a_batch_in_place_in_the_same_processes(tmp_path, protocol):
    spec = make_spec(protocol, SHAPES[protocol], batch=16, lr=0.05, target=None,
                     momentum=0.4 if protocol in ("groups", "softsync") else 0.9)
    run_dir = tmp_path / "run"
    s = job.run_spec(spec, str(run_dir), max_time_s=60, max_iters=160, eval_every_iters=20,
                     changes=(Change(lr=0.01, momentum=0.3, at=40), Change(batch_scale=2.0, at=80)))
    assert s.restarts == 0 and s.changes == 2
    assert s.knobs == Knobs(0.01, 0.3, {"cpu0": 32, "cpu1": 32})
    rows = change_rows(run_dir)
    assert [(r["lr"], r["momentum"], r["batch_size"]["cpu0"]) for r in rows] == [(0.01, 0.3, 16), (0.01, 0.3, 32)]
    assert 40 <= rows[0]["iteration"] < rows[1]["iteration"] < 160
    state = torch.load(run_dir / "checkpoint.pt", weights_only=True)
    assert state["optimizer"]["param_groups"][0]["lr"] == 0.01 and state["knobs"]["now"]["batch_size"]["cpu0"] == 32
    logs = took(run_dir)
    # Every process that steps took both changes, after the same iteration each, in one process.
    steppers = logs if protocol in ("sync", "hpsgd", "gossip") else {0: logs[0]}
    assert len(steppers) >= 1 and all(len(t) == 2 for t in steppers.values())
    for k in (0, 1):
        assert len({t[k][1] for t in steppers.values()}) == 1                # the same iteration everywhere
    assert all(t[0][2] == t[1][2] for t in steppers.values())               # the same process id
    if protocol in ("groups", "softsync"):      # the workers' batches follow the server's reply
        assert all(not t for r, t in logs.items() if r > 0)


@pytest.mark.slow
def test_a_worker_killed_during_a_change_restarts_with_it_applied_once(tmp_path, monkeypatch):
    """Rank 1 dies after the coordinator published a doubling of the batch and before any process
    applied it: the job goes on from its checkpoint, where the change is in force nowhere, and
    takes it once more: once, not twice."""
    monkeypatch.setenv("OMNITUNE_FAULT_KILL", "1:101")      # the change travels with iteration 101's all-reduce
    spec = make_spec("sync", [["cpu0", "cpu1"]], batch=16, lr=0.05, target=None)
    run_dir = tmp_path / "run"
    s = job.run_spec(spec, str(run_dir), max_time_s=60, max_iters=200, eval_every_iters=20,
                     changes=(Change(batch_scale=2.0, at=100),), checkpoint_every_s=0.05, max_restarts=1)
    assert s.restarts == 1
    assert s.knobs == Knobs(0.05, 0.9, {"cpu0": 32, "cpu1": 32})
    assert all(not t for t in took(run_dir, 0).values())                    # applied nowhere before the kill
    after = took(run_dir, 1)
    assert sorted(after) == [0, 1] and all(len(t) == 1 for t in after.values())
    assert len({t[0][1] for t in after.values()}) == 1


@pytest.mark.slow
def test_a_worker_killed_after_a_change_restarts_with_it_in_force_from_the_checkpoint(tmp_path, monkeypatch):
    monkeypatch.setenv("OMNITUNE_FAULT_KILL", "1:150")
    spec = make_spec("sync", [["cpu0", "cpu1"]], batch=16, lr=0.05, target=None)
    run_dir = tmp_path / "run"
    s = job.run_spec(spec, str(run_dir), max_time_s=60, max_iters=200, eval_every_iters=20,
                     changes=(Change(batch_scale=2.0, lr=0.02, at=60),), checkpoint_every_s=0.05, max_restarts=1)
    assert s.restarts == 1
    restart, = [json.loads(x) for x in (run_dir / "restarts.jsonl").read_text().splitlines()]
    assert 60 < restart["iteration"] <= 150
    assert s.knobs == Knobs(0.02, 0.9, {"cpu0": 32, "cpu1": 32})
    assert all(len(t) == 1 for t in took(run_dir, 0).values())
    assert all(not t for t in took(run_dir, 1).values())       # in force from the checkpoint, not taken again


@pytest.mark.slow
def test_the_replicas_gradients_give_the_noise_scale_and_the_batch_follows_goodput_in_place(tmp_path):
    """Two replicas of sync: the coordinator reads the noise scale from their own gradients at
    every step and, where a larger total batch is (by the speeds given) far more goodput, doubles
    the batch in place with AdaScale's rate."""
    from omnitune.efficiency.tuner import Policy

    spec = make_spec("sync", [["cpu0", "cpu1"]], batch=16, lr=0.05, target=None)
    run_dir = tmp_path / "run"
    s = job.run_spec(spec, str(run_dir), max_time_s=60, max_iters=300, eval_every_iters=50,
                     tuner=Policy(speeds=((32, 1.0), (64, 1000.0)), goodput_every=50))
    rows = change_rows(run_dir)
    assert rows and rows[0]["why"] == "noise scale" and rows[0]["batch_size"] == {"cpu0": 32, "cpu1": 32}
    assert 0.05 < rows[0]["lr"] <= 0.1                 # AdaScale: between no gain and linear scaling
    assert s.knobs.batch_size == {"cpu0": 32, "cpu1": 32} and s.restarts == 0
