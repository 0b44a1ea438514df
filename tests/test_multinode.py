"""Two nodes on this machine: `omnitune run --node-rank 0` and `--node-rank 1` as two real
commands, meeting through torchrun's c10d rendezvous on loopback."""

import json
import os
import socket
import subprocess
import sys

import pytest

from omnitune.runtime.launch import free_port
from tests.conftest import ROOT, make_plan

pytestmark = pytest.mark.slow


def two_free_ports() -> int:
    """A port P with P + 1 free too (the rendezvous and the job's store), below the ephemeral range."""
    for _ in range(100):
        port = free_port()
        with socket.socket() as b:
            try:
                b.bind(("127.0.0.1", port + 1))
                return port
            except OSError:
                continue
    raise RuntimeError("no two consecutive free ports")


def run_nodes(tmp_path, plan, extra=(), env=None) -> list[subprocess.CompletedProcess]:
    """Start every node's `omnitune run` at once, as a user would on each host; wait for all."""
    return on_each_node(lambda n: ["run", str(plan), "--out-dir", str(tmp_path / f"node{n}"), "--max-time-s", "60",
                                   *extra], env)


def on_each_node(args, env=None) -> list[subprocess.CompletedProcess]:
    """Run `omnitune ARGS(n) --node-rank n` for nodes 0 and 1 at once; wait for both."""
    procs = []
    for n in (0, 1):
        cmd = [sys.executable, "-m", "omnitune.cli", *args(n), "--node-rank", str(n)]
        procs.append(subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                      env={**os.environ, **(env or {})}))
    return [subprocess.CompletedProcess(p.args, p.wait(timeout=240), p.stdout.read()) for p in procs]


def summary(tmp_path) -> dict:
    return json.loads((tmp_path / "node0" / "summary.json").read_text())


def test_two_nodes_profile_together(tmp_path):
    """`omnitune profile --node-rank I` on each node: node 0 (the server's) writes the profile."""
    from omnitune.core import profile as profile_mod

    spec = tmp_path / "cluster.yaml"
    spec.write_text(f"nodes:\n  - host: 127.0.0.1\n  - host: 127.0.0.1\nrendezvous: 127.0.0.1:{two_free_ports()}\n")
    node0, node1 = on_each_node(lambda n: ["profile", "--workload", "lenet-digits", "--cluster", str(spec), "--quick",
                                           "--out", str(tmp_path / f"profile{n}.json")])
    assert node0.returncode == 0 and node1.returncode == 0, node0.stdout + node1.stdout
    assert "node 0, the server's, writes the profile" in node1.stdout
    assert not (tmp_path / "profile1.json").exists()
    prof = profile_mod.load(tmp_path / "profile0.json")
    assert [d.device_id for d in prof.devices] == ["n0-cpu0", "n1-cpu0"] and all(d.concurrent for d in prof.devices)
    assert prof.network.allreduce and prof.network.p2p
    # Only parameter-server jobs are calibrated across nodes (their ranks sit on their devices' nodes).
    assert {c.protocol.split("/")[0] for c in prof.calibration} == {"groups", "softsync"}


def test_two_node_ranks_on_loopback_complete_a_run(tmp_path):
    """groups with g = 2: the server and one worker on node 0, the other worker on node 1."""
    plan = make_plan(tmp_path / "plan.json", "groups", [["cpu0"], ["cpu1"]], lr=0.02, momentum=0.4, target=0.95,
                     nodes={"cpu1": 1}, rendezvous=f"127.0.0.1:{two_free_ports()}")
    node0, node1 = run_nodes(tmp_path, plan)
    assert node0.returncode == 0 and node1.returncode == 0, node0.stdout + node1.stdout
    s = summary(tmp_path)
    assert s["reached_target"] and s["processes"] == 3
    assert all(u > 0 for u in s["updates_per_group"])           # the worker on node 1 did train
    assert "reached 0.95" in node0.stdout
    assert "summary and checkpoint are in the run dir of node 0" in node1.stdout
    assert not (tmp_path / "node1" / "summary.json").exists()


def test_a_worker_killed_on_the_other_node_restarts_both_nodes(tmp_path):
    """torchelastic counts the restart only on the failed node; the job agrees on it anyway, and the
    restarted processes on both nodes go on from the coordinator's checkpoint."""
    plan = make_plan(tmp_path / "plan.json", "sync", [["cpu0", "cpu1"]], lr=0.02, target=0.95,
                     nodes={"cpu1": 1}, rendezvous=f"127.0.0.1:{two_free_ports()}")
    node0, node1 = run_nodes(tmp_path, plan, ["--checkpoint-every-s", "0.1", "--max-restarts", "1"],
                             env={"OMNITUNE_FAULT_KILL": "1:120"})     # rank 1 (node 1) dies at iteration 120
    assert node0.returncode == 0 and node1.returncode == 0, node0.stdout + node1.stdout
    s = summary(tmp_path)
    assert s["reached_target"] and s["restarts"] == 1
    lines = [json.loads(x) for x in (tmp_path / "node0" / "metrics.jsonl").read_text().splitlines()]
    resumed = next(m for m in lines if m["attempt"] == 1)
    assert lines[0]["iteration"] < resumed["iteration"] <= 120       # from the checkpoint, not from scratch


def test_a_change_in_place_reaches_the_processes_of_both_nodes_without_a_restart(tmp_path):
    """sync over two nodes, a change in place after iteration 50 (the OMNITUNE_CHANGE hook, as the
    tuner would publish one): lr 0.02 to 0.01 and twice the batch. Each node's worker takes it
    after the same iteration, in the process that started the run (the id its log names), and
    the coordinator's metrics.jsonl has its row. Fails if a node misses the change, applies it
    at another step, or restarts a process for it."""
    import re

    plan = make_plan(tmp_path / "plan.json", "sync", [["cpu0", "cpu1"]], lr=0.02, target=0.95,
                     nodes={"cpu1": 1}, rendezvous=f"127.0.0.1:{two_free_ports()}")
    node0, node1 = run_nodes(tmp_path, plan, ["--no-retune", "--no-in-place"], env={"OMNITUNE_CHANGE": "50:0.01:2"})
    assert node0.returncode == 0 and node1.returncode == 0, node0.stdout + node1.stdout
    s = summary(tmp_path)
    assert s["restarts"] == 0 and s["changes"] == 1
    rows = [json.loads(x) for x in (tmp_path / "node0" / "metrics.jsonl").read_text().splitlines()]
    change = next(r for r in rows if r.get("event") == "change")
    assert change["iteration"] == 50 and change["lr"] == 0.01 and change["why"] == "scheduled"
    taken = []
    for n in (0, 1):
        for log in (tmp_path / f"node{n}").rglob("*.log"):
            taken += re.findall(r"omnitune: change 1 \(scheduled\) after iteration (\d+) in process (\d+): lr 0.01",
                                log.read_text())
    assert len(taken) == 2 and {it for it, _ in taken} == {"50"}        # one worker on each node, the same step
    assert len({pid for _, pid in taken}) == 2


def test_a_node_alone_gives_up_with_a_clear_message(tmp_path, monkeypatch):
    """Node 1 never starts: node 0 stops when the rendezvous's join timeout (10 min; 3 s here) ends."""
    from omnitune.core.errors import UserError
    from omnitune.runtime import job, launch

    config = launch.launch_config_kwargs
    monkeypatch.setattr(launch, "launch_config_kwargs",
                        lambda *a, **kw: {**config(*a, **kw), "rdzv_configs": {"join_timeout": 3, "is_host": True}})
    plan = make_plan(tmp_path / "plan.json", "sync", [["cpu0", "cpu1"]], nodes={"cpu1": 1},
                     rendezvous=f"127.0.0.1:{two_free_ports()}")
    with pytest.raises(UserError, match=r"the rendezvous of 2 node\(s\) at 127\.0\.0\.1:\d+ failed .* a node's command is not running"):
        job.run(str(plan), str(tmp_path / "run"), job.RunOptions(node_rank=0))
