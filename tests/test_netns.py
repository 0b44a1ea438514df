"""Several hosts for real: each node's `omnitune` runs inside a network namespace of its own,
with its own address on a shared bridge (tests/netns.py). Skipped, with the reason, where
namespaces cannot be made (not root, no iproute2)."""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from omnitune.core.cluster import Device
from tests.conftest import ROOT, make_plan
from tests.netns import Hosts, ip, leftovers, unavailable

WHY = unavailable()
pytestmark = [pytest.mark.slow, pytest.mark.netns, pytest.mark.skipif(WHY is not None, reason=WHY or "")]
PORT = 29400                     # each namespace has every port free


def omnitune(args: list[str]) -> list[str]:
    return [sys.executable, "-m", "omnitune.cli", *args]


def start_nodes(hosts: Hosts, args) -> list[subprocess.Popen]:
    """`omnitune ARGS(n) --node-rank n` inside host n's namespace, for every host, at once."""
    return [h.popen(omnitune([*args(n), "--node-rank", str(n)]), cwd=ROOT, stdout=subprocess.PIPE,
                    stderr=subprocess.STDOUT, text=True) for n, h in enumerate(hosts.hosts)]


def wait_all(procs: list[subprocess.Popen], timeout: float = 240) -> list[tuple[int, str]]:
    return [(p.wait(timeout=timeout), p.stdout.read()) for p in procs]


def listening_while(hosts: Hosts, procs: list[subprocess.Popen]) -> list[set[str]]:
    """Every address each host had a TCP socket listening on, sampled until the processes end."""
    seen = [set() for _ in hosts.hosts]
    while any(p.poll() is None for p in procs):
        for i, h in enumerate(hosts.hosts):
            seen[i].update(addr.rpartition(":")[0] for addr in h.listening())
        time.sleep(0.05)
    return seen


def host_plan(tmp_path, hosts: Hosts, protocol: str, groups, **kw):
    """Device cpu0 on host 0 and cpu1 on host 1, the rendezvous on host 0."""
    devices = tuple(Device(f"cpu{i}", "cpu", host=h.address, node=i) for i, h in enumerate(hosts.hosts))
    return make_plan(tmp_path / "plan.json", protocol, groups, devices=devices,
                     rendezvous=f"{hosts[0].address}:{PORT}", server_host=hosts[0].address, **kw)


@pytest.fixture
def hosts():
    with Hosts(2) as h:
        yield h


@pytest.mark.parametrize("protocol, groups", [("sync", [["cpu0", "cpu1"]]), ("groups", [["cpu0"], ["cpu1"]])])
def test_a_run_across_two_hosts_reaches_its_target_on_their_own_addresses(tmp_path, hosts, protocol, groups):
    """sync (one all-reduce group across the hosts), and groups with the server on host 0; every
    socket a node listens on is on its own address."""
    plan = host_plan(tmp_path, hosts, protocol, groups, lr=0.02, momentum=0.4 if protocol == "groups" else 0.9,
                     target=0.95)
    procs = start_nodes(hosts, lambda n: ["run", str(plan), "--out-dir", str(tmp_path / f"node{n}"),
                                          "--max-time-s", "60"])
    seen = listening_while(hosts, procs)
    (rc0, out0), (rc1, out1) = wait_all(procs)
    assert rc0 == 0 and rc1 == 0, out0 + out1
    summary = json.loads((tmp_path / "node0" / "summary.json").read_text())
    assert summary["reached_target"] and all(u > 0 for u in summary["updates_per_group"])
    assert seen[0] and seen[1], "no listening socket was sampled"
    assert seen == [{hosts[0].address}, {hosts[1].address}]


def wait_for(path, procs, seconds: float = 120) -> None:
    deadline = time.time() + seconds
    while not path.exists() and time.time() < deadline and all(p.poll() is None for p in procs):
        time.sleep(0.05)
    assert path.exists(), f"no {path.name} within {seconds} s"


def workers_of(pid: int) -> list[int]:
    """The processes whose parent is `pid` (a node's command: its training processes)."""
    out = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rpartition(")")[2].split()
        except OSError:
            continue
        if int(fields[1]) == pid:
            out.append(int(stat.parent.name))
    return out


def test_a_host_whose_processes_all_die_restarts_and_the_run_reaches_its_target(tmp_path, hosts):
    """Every training process of host 1 killed (SIGKILL) mid-run; with --max-restarts 1 both hosts
    start again from the coordinator's checkpoint."""
    plan = host_plan(tmp_path, hosts, "sync", [["cpu0", "cpu1"]], lr=0.01, target=0.96)
    procs = start_nodes(hosts, lambda n: ["run", str(plan), "--out-dir", str(tmp_path / f"node{n}"),
                                          "--max-time-s", "90", "--checkpoint-every-s", "0.2", "--max-restarts", "1"])
    wait_for(tmp_path / "node0" / "checkpoint.pt", procs)
    victims = workers_of(procs[1].pid)
    assert victims, "host 1 has no training process"
    for pid in victims:
        os.kill(pid, signal.SIGKILL)
    (rc0, out0), (rc1, out1) = wait_all(procs)
    assert rc0 == 0 and rc1 == 0, out0 + out1
    summary = json.loads((tmp_path / "node0" / "summary.json").read_text())
    assert summary["reached_target"] and summary["restarts"] == 1


CUT_MARGIN_S = 30            # beyond --timeout-s: the agents' shutdown (5 s) and their rendezvous
                             # store, whose operations wait up to --timeout-s too


def test_a_cut_link_ends_every_host_with_one_line_and_resume_goes_on(tmp_path, hosts):
    """Host 1's interface goes down mid-run: each host's command ends within --timeout-s plus a
    margin, with a one-line error; the checkpoint survives, and once the link is back, --resume
    on both hosts reaches the target."""
    plan = host_plan(tmp_path, hosts, "sync", [["cpu0", "cpu1"]], lr=0.005, target=0.96)
    timeout_s = 10
    args = lambda n: ["run", str(plan), "--out-dir", str(tmp_path / f"node{n}"), "--max-time-s", "120",  # noqa: E731
                      "--checkpoint-every-s", "0.2", "--timeout-s", str(timeout_s)]
    procs = start_nodes(hosts, args)
    wait_for(tmp_path / "node0" / "checkpoint.pt", procs)
    hosts.cut(1)
    cut = time.time()
    ends = []
    for p in procs:
        p.wait(timeout=timeout_s + CUT_MARGIN_S + 30)
        ends.append(time.time() - cut)
    hosts.mend(1)
    outs = [p.stdout.read() for p in procs]
    assert [p.returncode for p in procs] == [2, 2], outs
    assert max(ends) <= timeout_s + CUT_MARGIN_S, ends
    for text in outs:
        errors = [ln for ln in text.splitlines() if ln.startswith("error:")]
        assert len(errors) == 1 and "Traceback" not in text, text
    import torch
    state = torch.load(tmp_path / "node0" / "checkpoint.pt", weights_only=True)
    assert state["iteration"] > 0
    procs = start_nodes(hosts, lambda n: [*args(n), "--resume"])
    (rc0, out0), (rc1, out1) = wait_all(procs)
    assert rc0 == 0 and rc1 == 0, out0 + out1
    summary = json.loads((tmp_path / "node0" / "summary.json").read_text())
    assert summary["reached_target"] and summary["iterations"] > state["iteration"]


def test_profile_across_two_hosts(tmp_path, hosts):
    """Each host's `omnitune profile --node-rank I`: host 0's writes a profile whose link is tcp."""
    from omnitune.core import profile as profile_mod

    spec = two_host_spec(tmp_path, hosts)
    procs = start_nodes(hosts, lambda n: ["profile", "--workload", "lenet-digits", "--cluster", str(spec), "--quick",
                                          "--out", str(tmp_path / f"profile{n}.json")])
    (rc0, out0), (rc1, out1) = wait_all(procs)
    assert rc0 == 0 and rc1 == 0, out0 + out1
    prof = profile_mod.load(tmp_path / "profile0.json")
    assert prof.network.link_kind == "tcp-gloo"
    assert [d.device_id for d in prof.devices] == ["n0-cpu0", "n1-cpu0"]


def two_host_spec(tmp_path, hosts: Hosts):
    spec = tmp_path / "cluster.yaml"
    spec.write_text(f"nodes:\n  - host: {hosts[0].address}\n  - host: {hosts[1].address}\n"
                    f"rendezvous: {hosts[0].address}:{PORT}\n")
    return spec


SHAPED_MBIT = 50


def test_profile_measures_a_shaped_link(tmp_path, hosts):
    """The link shaped to 50 Mbit/s: for a message of the model's size, all-reduce between the two
    hosts (each sends the message once, both ways at once) and a round trip (the message there,
    then back) take at least 80% of what the rate allows (a token bucket's burst can beat it by a
    little, nothing more) and at most 40% more: gloo's and the profile's own overhead, on a 2-core
    machine busy with both hosts' processes (here 1.07-1.09 of it for the all-reduce, once 1.25 in
    a clean-clone run). Fails if the timings miss the link (loopback speeds) or time something else."""
    from omnitune.core import profile as profile_mod

    hosts.shape(SHAPED_MBIT)
    procs = start_nodes(hosts, lambda n: ["profile", "--workload", "lenet-digits", "--cluster",
                                          str(two_host_spec(tmp_path, hosts)), "--quick",
                                          "--out", str(tmp_path / f"profile{n}.json")])
    (rc0, out0), (rc1, out1) = wait_all(procs)
    assert rc0 == 0 and rc1 == 0, out0 + out1
    prof = profile_mod.load(tmp_path / "profile0.json")
    size = prof.model_bytes // 4 * 4
    allreduce = next(a for a in prof.network.allreduce if a.bytes == size and a.group_size == 2)
    round_trip = next(p for p in prof.network.p2p if p.bytes == size)
    rate = SHAPED_MBIT * 1e6 / 8
    assert 0.8 * size / rate <= allreduce.seconds <= 1.4 * size / rate
    assert 0.8 * 2 * size / rate <= round_trip.round_trip_s <= 1.4 * 2 * size / rate


def test_gloo_finds_the_interface_of_the_hosts_address(hosts):
    code = f"from omnitune.core.env import interface_of; print(interface_of({hosts[1].address!r}))"
    assert hosts[1].run([sys.executable, "-c", code], cwd=ROOT, check=True).stdout.strip() == hosts[1].interface


def test_the_harness_removes_what_it_made_even_on_failure():
    before = set(leftovers())
    with pytest.raises(RuntimeError):
        with Hosts(3) as h:
            assert set(leftovers()) - before == {x.namespace for x in h.hosts} | {h.switch}
            raise RuntimeError("a test failing inside")
    assert set(leftovers()) == before


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_the_harness_removes_what_it_made_when_interrupted(sig):
    """Ctrl-C (SIGINT) or a kill (SIGTERM) of the process that made the hosts."""
    before = set(leftovers())
    code = ("import time; from tests.netns import Hosts\n"
            "with Hosts(2):\n    print('ready', flush=True)\n    time.sleep(60)\n")
    proc = subprocess.Popen([sys.executable, "-c", code], cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)
    assert proc.stdout.readline().strip() == "ready"
    assert len(set(leftovers()) - before) == 3
    proc.send_signal(sig)
    proc.wait(timeout=30)
    assert set(leftovers()) == before


def test_nothing_is_left_behind():
    """Runs last in this file: no namespace of the harness remains, and the machine's own network
    has no veth or bridge of ours (the harness never makes one there)."""
    assert leftovers() == []
    links = ip("-o", "link").stdout
    assert "port" not in links and "br0" not in links
