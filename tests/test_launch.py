"""The launcher's pure parts: ports handed out for later binding, and torch's rendezvous events."""

import socket

from omnitune.runtime import launch


def test_free_port_is_below_the_ephemeral_range_and_free():
    port = launch.free_port()
    assert port in launch.PORTS
    with socket.socket() as s:
        s.bind(("127.0.0.1", port))


def test_free_port_falls_back_to_an_ephemeral_one(monkeypatch):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        monkeypatch.setattr(launch, "PORTS", range(taken.getsockname()[1], taken.getsockname()[1] + 1))
        port = launch.free_port(tries=3)
    assert port not in launch.PORTS and port > 0


def test_rendezvous_events_keep_the_caller_name():
    from torch.distributed.elastic.rendezvous import dynamic_rendezvous

    def record():                    # as torch's _record names the method that called it
        return dynamic_rendezvous.get_method_name()

    def method():
        return record()
    expected = method()
    launch._cheap_event_names()
    assert method() == expected == "method"
