"""Breaking runs on purpose: a killed worker or server, with and without restarts (real processes)."""

import json

import pytest
import torch

from omnitune.core.errors import UserError
from omnitune.runtime import job
from omnitune.runtime.job import RunOptions
from tests.conftest import make_plan

pytestmark = pytest.mark.slow


def metrics(run_dir):
    return [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]


def test_killed_worker_restarts_from_the_last_checkpoint(tmp_path, monkeypatch):
    monkeypatch.setenv("OMNITUNE_FAULT_KILL", "1:120")          # rank 1 dies at iteration 120
    plan = make_plan(tmp_path / "plan.json", "sync", [["cpu0", "cpu1"]], lr=0.02, target=0.95)
    run_dir = tmp_path / "run"
    s = job.run(str(plan), str(run_dir), RunOptions(max_time_s=60, checkpoint_every_s=0.1, max_restarts=1))
    assert s.reached_target and s.restarts == 1
    restart, = [json.loads(line) for line in (run_dir / "restarts.jsonl").read_text().splitlines()]
    assert restart["attempt"] == 1
    lost = 120 - restart["iteration"]       # the run dir records where the restart went on from
    assert 0 <= lost * s.measured_sec_per_iter <= 0.1 + 0.05     # at most one checkpoint interval of work
    lines = metrics(run_dir)
    resumed = next(m for m in lines if m["attempt"] == 1)      # the restarted attempt's first evaluation
    assert lines[0]["iteration"] < restart["iteration"] <= resumed["iteration"]   # not from scratch


def test_killed_server_restarts_too(tmp_path, monkeypatch):
    monkeypatch.setenv("OMNITUNE_FAULT_KILL", "0:150")          # the parameter server dies
    plan = make_plan(tmp_path / "plan.json", "groups", [["cpu0"], ["cpu1"]], lr=0.02, momentum=0.4, target=0.95)
    s = job.run(str(plan), str(tmp_path / "run"), RunOptions(max_time_s=60, checkpoint_every_s=0.1, max_restarts=1))
    assert s.reached_target and s.restarts == 1


def test_without_restarts_a_failure_stops_cleanly_with_a_usable_checkpoint(tmp_path, monkeypatch):
    monkeypatch.setenv("OMNITUNE_FAULT_KILL", "1:150")
    plan = make_plan(tmp_path / "plan.json", "sync", [["cpu0", "cpu1"]], lr=0.02, target=0.999)
    run_dir = tmp_path / "run"
    with pytest.raises(UserError, match="a worker process failed .* is intact: the same command with --resume"):
        job.run(str(plan), str(run_dir), RunOptions(max_time_s=60, checkpoint_every_s=0.1))
    state = torch.load(run_dir / "checkpoint.pt", weights_only=True)
    assert 0 < state["iteration"] <= 150
    monkeypatch.delenv("OMNITUNE_FAULT_KILL")
    s = job.run(str(plan), str(run_dir), RunOptions(max_time_s=2, resume=True))     # and the run goes on from it
    assert s.iterations > state["iteration"]


@pytest.mark.parametrize("protocol, groups, hang", [
    ("sync", [["cpu0", "cpu1"]], "1:100"),         # its peer waits in the all-reduce
    ("groups", [["cpu0"], ["cpu1"]], "2:100"),     # the server hears from the other group only
])
def test_a_stuck_peer_ends_the_job_with_a_clear_message(tmp_path, monkeypatch, protocol, groups, hang):
    """A worker alive but silent: the others give up after --timeout-s and the job stops, no hang."""
    import time
    monkeypatch.setenv("OMNITUNE_FAULT_HANG", hang)
    plan = make_plan(tmp_path / "plan.json", protocol, groups, lr=0.02, momentum=0.4, target=0.999)
    started = time.perf_counter()
    with pytest.raises(UserError, match="a peer was silent for longer than --timeout-s"):
        job.run(str(plan), str(tmp_path / "run"), RunOptions(max_time_s=60, timeout_s=3))
    assert time.perf_counter() - started < 60


def test_a_worker_killed_after_a_pause_stops_the_resident_run_cleanly(tmp_path, monkeypatch):
    """A re-tuned run keeps its processes through its pauses (runtime/segments.py). One that dies
    in a later segment ends the job with the one-line error, as in a plain run, not a hang."""
    from functools import partial

    from omnitune.probing.pause import retune

    monkeypatch.setenv("OMNITUNE_FAULT_KILL", "1:400")
    plan = make_plan(tmp_path / "plan.json", "sync", [["cpu0", "cpu1"]], lr=0.02, target=0.999)
    run_dir = tmp_path / "run"
    with pytest.raises(UserError, match="a worker process failed .* is intact"):
        job.run(str(plan), str(run_dir), RunOptions(max_time_s=60, replan_every_s=0.3),
                replan=partial(retune, iters=10))
    replans = (run_dir / "replans.jsonl").read_text().splitlines()
    assert replans and json.loads(replans[-1])["iteration"] < 400


def test_the_processes_of_a_killed_re_tuned_run_do_not_outlive_it(tmp_path):
    """`omnitune run` killed outright (SIGKILL: nothing of it can clean up) while it re-tunes
    every half second: its processes finish their segment, see it gone, and exit, instead of
    waiting for a next segment no one will send."""
    import os
    import signal
    import subprocess
    import sys
    import time
    import uuid

    plan = make_plan(tmp_path / "plan.json", "sync", [["cpu0", "cpu1"]], lr=0.001, target=0.999)
    run_dir = tmp_path / "run"
    tag = f"omnitune-test-{uuid.uuid4().hex}"
    proc = subprocess.Popen([sys.executable, "-m", "omnitune.cli", "run", str(plan), "--out-dir", str(run_dir),
                             "--replan-every-s", "0.5", "--max-time-s", "120"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            env={**os.environ, "OMNITUNE_TEST_TAG": tag})
    deadline = time.time() + 90
    while not (run_dir / "replans.jsonl").exists() and time.time() < deadline and proc.poll() is None:
        time.sleep(0.2)
    assert (run_dir / "replans.jsonl").exists() and len(processes_mentioning(tag)) >= 3
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=10)
    deadline = time.time() + 20
    while processes_mentioning(tag) and time.time() < deadline:
        time.sleep(0.2)
    assert processes_mentioning(tag) == []


def processes_mentioning(text: str) -> list[int]:
    """PIDs whose initial environment mentions `text` (children inherit it from the command)."""
    import os
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/environ", "rb") as f:
                if text.encode() in f.read():
                    found.append(int(pid))
        except OSError:
            continue
    return found


def listening_addresses(pids: list[int]) -> set[str]:
    """The local addresses these processes listen on (TCP), as /proc/net writes them."""
    import os
    inodes = set()
    for pid in pids:
        try:
            links = [os.readlink(f"/proc/{pid}/fd/{fd}") for fd in os.listdir(f"/proc/{pid}/fd")]
        except OSError:
            continue
        inodes |= {link[8:-1] for link in links if link.startswith("socket:[")}
    found = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for line in open(table).read().splitlines()[1:]:
            fields = line.split()
            if fields[3] == "0A" and fields[9] in inodes:          # 0A: LISTEN
                found.add(fields[1].rsplit(":", 1)[0])
    return found


def test_ctrl_c_stops_every_process_and_leaves_a_checkpoint(tmp_path):
    import os
    import signal
    import subprocess
    import sys
    import time
    import uuid

    plan = make_plan(tmp_path / "plan.json", "groups", [["cpu0"], ["cpu1"]], lr=0.001, target=0.999)
    run_dir, scratch = tmp_path / "run", tmp_path / "tmp"
    scratch.mkdir()
    tag = f"omnitune-test-{uuid.uuid4().hex}"
    proc = subprocess.Popen([sys.executable, "-m", "omnitune.cli", "run", str(plan), "--out-dir", str(run_dir),
                             "--checkpoint-every-s", "0.3", "--max-time-s", "120"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, "OMNITUNE_TEST_TAG": tag, "TMPDIR": str(scratch)})
    deadline = time.time() + 90
    while not (run_dir / "checkpoint.pt").exists() and time.time() < deadline and proc.poll() is None:
        time.sleep(0.2)
    assert (run_dir / "checkpoint.pt").exists()
    assert len(processes_mentioning(tag)) >= 4                  # the command and its three workers
    # Stores, rendezvous and gloo all listen on loopback only (127.0.0.1, as /proc/net writes it).
    assert listening_addresses(processes_mentioning(tag)) == {"0100007F"}
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 2 and "interrupted" in err and "--resume" in err and "Traceback" not in err
    time.sleep(1)
    assert processes_mentioning(tag) == []                      # no process left behind
    assert torch.load(run_dir / "checkpoint.pt", weights_only=True)["iteration"] > 0
    assert list(scratch.iterdir()) == []                        # nothing left in the temporary folder


def test_profile_and_a_failed_run_leave_nothing_in_the_temporary_folder(tmp_path):
    """A profile that succeeds, and a run whose workers fail on a broken checkpoint (torch writes
    each traceback to a temporary file): afterwards the temporary folder is as empty as before."""
    import os
    import subprocess
    import sys

    scratch = tmp_path / "tmp"
    scratch.mkdir()
    env = {**os.environ, "TMPDIR": str(scratch)}
    cli = [sys.executable, "-m", "omnitune.cli"]
    done = subprocess.run([*cli, "profile", "--workload", "logreg-digits", "--quick", "--out",
                           str(tmp_path / "p.json")], capture_output=True, text=True, env=env)
    assert done.returncode == 0, done.stdout + done.stderr
    assert not (tmp_path / "p.json.logs").exists()
    plan = make_plan(tmp_path / "plan.json", "sync", [["cpu0", "cpu1"]], target=0.999)
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "checkpoint.pt").write_bytes(b"not a checkpoint")
    failed = subprocess.run([*cli, "run", str(plan), "--out-dir", str(tmp_path / "run"), "--resume"],
                            capture_output=True, text=True, env=env)
    assert failed.returncode == 2 and "not a checkpoint of this model" in failed.stderr, failed.stderr
    assert list(scratch.iterdir()) == []
