"""The launcher's pure parts: ports handed out for later binding, and torch's rendezvous events."""

import os
import socket

import pytest

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


def test_free_port_never_hands_out_one_port_twice(monkeypatch):
    """A single-node launch takes two ports (the job's store, then the rendezvous) before it binds
    either, so the second pick must not be the first, which still reads free. Fails if free_port
    forgets what it handed out."""
    monkeypatch.setattr(launch, "_handed", set())
    first = launch.free_port()
    monkeypatch.setattr(launch, "PORTS", range(first, first + 1))     # the only port it may pick
    second = launch.free_port(tries=3)
    assert second != first and second > 0


def test_rendezvous_events_keep_the_caller_name():
    from torch.distributed.elastic.rendezvous import dynamic_rendezvous

    def record():                    # as torch's _record names the method that called it
        return dynamic_rendezvous.get_method_name()

    def method():
        return record()
    expected = method()
    launch._cheap_event_names()
    assert method() == expected == "method"


def test_a_process_sees_the_launching_commands_folder_and_omnitune_variables(tmp_path, monkeypatch):
    """A fork server's processes inherit its folder and environment from when it started; each
    process takes the launching command's as they are at launch: a variable set since is seen, one
    removed since is gone, other variables are left alone. Fails if as_launched keeps the server's."""
    from omnitune.runtime.launch import as_launched

    monkeypatch.setenv("OMNITUNE_FAULT_KILL", "1:5")           # stale: the server's, since removed
    monkeypatch.setenv("OMNITUNE_CACHE_DIR", "the server's")   # (and both restored after the test)
    monkeypatch.setenv("OTHER_VARIABLE", "kept")
    monkeypatch.chdir(tmp_path.parent)
    seen = as_launched(str(tmp_path), {"OMNITUNE_CACHE_DIR": "off"},
                       lambda x: (x, os.getcwd(), {k: v for k, v in os.environ.items() if k.startswith("OMNITUNE_")},
                                  os.environ["OTHER_VARIABLE"]), 7)
    assert seen == (7, str(tmp_path), {"OMNITUNE_CACHE_DIR": "off"}, "kept")


def _preloaded(queue) -> None:
    import sys
    queue.put(all(name in sys.modules for name in launch.PRELOAD))


def test_a_process_of_the_ready_fork_server_holds_its_preloaded_modules():
    """`profile` starts the fork server as the command starts and waits for it (server_ready)
    before any timing; a process forked from it then holds PRELOAD, quick_exit among them, without
    importing it. (That the wait lasts until the imports end is the server's own order: it imports
    before it serves any process.)"""
    import multiprocessing
    if launch.START_METHOD != "forkserver":
        pytest.skip("no fork server on this platform")
    launch.start_server()
    launch.server_ready()
    ctx = multiprocessing.get_context("forkserver")
    queue = ctx.Queue()
    child = ctx.Process(target=_preloaded, args=(queue,))
    child.start()
    assert queue.get(timeout=60)
    child.join()
