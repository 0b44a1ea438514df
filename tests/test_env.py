"""The environment omnitune reads and sets: gloo's interface follows the node's address."""

import pytest

from omnitune import env


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
