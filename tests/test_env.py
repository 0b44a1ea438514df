"""The environment omnitune reads and sets: gloo's interface follows the node's address."""

import subprocess
import sys

import pytest

from omnitune.core import env


def test_loopback_hosts_use_a_loopback_interface():
    assert env.interface_of("127.0.0.1").startswith("lo")
    assert env.interface_of("localhost").startswith("lo")


def test_an_address_no_interface_holds_has_none():
    assert env.interface_of("198.51.100.254") is None       # TEST-NET-2: held by no interface here
    assert env.interface_of("no-such-host.invalid") is None


def test_gloo_is_bound_once_and_a_users_choice_stands(monkeypatch):
    monkeypatch.setenv("GLOO_SOCKET_IFNAME", "")        # so that monkeypatch restores what was there
    monkeypatch.delenv("GLOO_SOCKET_IFNAME")
    env.bind_gloo_to("127.0.0.1")
    import os
    assert os.environ["GLOO_SOCKET_IFNAME"].startswith("lo")
    monkeypatch.setenv("GLOO_SOCKET_IFNAME", "mine0")
    env.bind_gloo_to("127.0.0.1")
    assert os.environ["GLOO_SOCKET_IFNAME"] == "mine0"


@pytest.mark.parametrize("fault, expected", [("", None), ("2:30", ("kill", 2, 30))])
def test_fault_hook(monkeypatch, fault, expected):
    monkeypatch.delenv("OMNITUNE_FAULT_HANG", raising=False)
    monkeypatch.setenv("OMNITUNE_FAULT_KILL", fault)
    assert env.fault() == expected


FAULTS = """import resource, sys, torch
from omnitune.core import env
if sys.argv[1] == "keep":
    env.keep_freed_memory()
faults = []
for i in range(30):                     # 1 MiB blocks, each a page larger than the last one freed
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    torch.ones((1 << 18) + 1024 * i)
    faults.append(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
print(sum(faults[10:]))                 # once the heap has settled
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's malloc")
def test_freed_blocks_stay_in_the_heap_instead_of_faulting_in_fresh_pages():
    faults = {how: int(subprocess.run([sys.executable, "-c", FAULTS, how], capture_output=True, text=True,
                                      check=True).stdout) for how in ("default", "keep")}
    # By default each block is over the threshold glibc raised to the last one freed: mapped anew,
    # its 256 pages faulted in. Kept, the heap reuses the pages of the blocks before.
    assert faults["default"] > 20 * 200
    assert faults["keep"] < 20 * 10
