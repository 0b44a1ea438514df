"""Start one node's processes of a job through torch.distributed's elastic launcher, and join
each of them to the job's process group.

The pure parts decide everything (which node this is, rendezvous, ports, restarts, logs);
`launch` only hands that to `elastic_launch`. Tests replace `launch` at this seam.

Each node of the cluster spec runs its own launcher (`--node-rank I`); the nodes meet through
c10d rendezvous. torchelastic numbers the processes its own way, so each process takes the rank
its node's place gives it (`topology.Node.ranks`) and joins the process group through the job's
own store, which the process of rank 0 serves anew at every (re)start: no restarted process can
read the keys of a dead one.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import logging
import math
import multiprocessing
import os
import random
import socket
import sys
import tempfile
import uuid
from datetime import timedelta
from multiprocessing import forkserver
from pathlib import Path
from typing import Any, Callable

from omnitune.core import env
from omnitune.core.cluster import LOOPBACK, endpoint
from omnitune.core.errors import UserError
from omnitune.runtime.topology import Node


# Ports handed out for a process to bind later. An ephemeral port (what bind(host, 0) gives) can
# be taken in between by any outgoing connection (gloo opens many), and rank 0's store then fails
# with "address already in use"; below the ephemeral range (Linux's starts at 32768) only another
# program's explicit choice can take it.
PORTS = range(20000, 32768)
# Ports this process has handed out: one not bound yet reads free, and a single-node launch hands
# out two (the job's store at `prepare`, the rendezvous at launch) before either is bound; the
# same port twice failed a test run with "address already in use".
_handed: set[int] = set()


class Interrupted(UserError):
    """A launch was interrupted (a signal); its workers are stopped."""


def free_port(host: str = LOOPBACK, tries: int = 64) -> int:
    """A port of `PORTS` free on `host` now and not handed out before by this process (an
    ephemeral one when none of `tries` was)."""
    pick = random.SystemRandom()
    for port in [pick.choice(PORTS) for _ in range(tries)] + [0]:
        if port in _handed:
            continue
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            try:
                s.bind((host, port))
            except OSError:
                continue
            port = s.getsockname()[1]
        _handed.add(port)
        return port
    raise UserError(f"no free port on {host}")


def pick_node(everyone: tuple[Node, ...], rendezvous: str, node_rank: int | None, where: str) -> Node:
    """The node `--node-rank` names (none needed when there is one), checked; `where` names the
    plan or cluster spec for errors."""
    if node_rank is None:
        if len(everyone) > 1:
            raise UserError(f"{where}: {len(everyone)} nodes: run the command on each with --node-rank I "
                            f"(I in {[n.index for n in everyone]})")
        return everyone[0]
    match = [n for n in everyone if n.index == node_rank]
    if not match:
        raise UserError(f"--node-rank {node_rank}: {where} has processes on nodes {[n.index for n in everyone]}")
    if len(everyone) > 1:
        host, port = endpoint(rendezvous)
        if not port:
            raise UserError(f"{where}: rendezvous {rendezvous!r}: several nodes need a fixed port")
        if host not in {n.host for n in everyone}:
            raise UserError(f"{where}: rendezvous host {host!r} runs none of the nodes")
    return match[0]


def store_port(everyone: tuple[Node, ...], rendezvous: str) -> int:
    """The job's own store listens on the port after the rendezvous's (a free one on a single
    node that lets the rendezvous pick its port)."""
    _, port = endpoint(rendezvous)
    return port + 1 if port else free_port(coordinator(everyone).host)


def coordinator(everyone: tuple[Node, ...]) -> Node:
    """The node of rank 0."""
    return next(n for n in everyone if 0 in n.ranks)


def launch_node(entrypoint: Callable, args: tuple, here: Node, everyone: tuple[Node, ...], rendezvous: str,
                log_dir: Path, run_id: str, max_restarts: int = 0, timeout_s: float = 60) -> dict[int, Any]:
    """Run this node's processes; with several nodes, the first node on the rendezvous host
    serves the rendezvous, and every node must pass the same `run_id`. The agents' store
    operations wait at most `timeout_s` (a silent peer's limit) once the node has joined."""
    rdzv_host, _ = endpoint(rendezvous)
    is_host = None if len(everyone) == 1 else here == next(n for n in everyone if n.host == rdzv_host)
    return launch(entrypoint, args, len(here.ranks), log_dir, rendezvous=rendezvous, max_restarts=max_restarts,
                  run_id=run_id, nodes=len(everyone), local_addr=here.host, is_host=is_host, read_timeout_s=timeout_s)


def launch_config_kwargs(nprocs: int, log_dir: Path, rendezvous: str = f"{LOOPBACK}:0",
                         max_restarts: int = 0, run_id: str | None = None, nodes: int = 1,
                         local_addr: str = LOOPBACK, is_host: bool | None = None,
                         read_timeout_s: float = 60) -> dict[str, Any]:
    """Keyword arguments for torch's LaunchConfig: this node's part of a c10d rendezvous of `nodes`.

    With several nodes every node must pass the same `run_id` and a fixed port, and exactly one
    (`is_host`) serves the rendezvous store; the others wait up to 10 minutes for everyone to join.
    """
    host, port = endpoint(rendezvous)
    if not port:
        port = free_port(host)
    wait = max(1, math.ceil(read_timeout_s))
    configs: dict[str, Any] = {"join_timeout": 120 if nodes == 1 else 600, "read_timeout": wait, "close_timeout": wait}
    if is_host is not None:
        configs["is_host"] = is_host
    return dict(
        min_nodes=nodes, max_nodes=nodes, nproc_per_node=nprocs,
        run_id=run_id or uuid.uuid4().hex[:12],
        rdzv_backend=RDZV_BACKEND, rdzv_endpoint=f"{host}:{port}",
        rdzv_configs=configs, max_restarts=max_restarts,
        monitor_interval=0.1, start_method=START_METHOD, local_addr=local_addr,
        # Workers blocked in a gloo wait do not see SIGTERM at once; after this, SIGKILL.
        shutdown_timeout=5,
        log_dir=str(log_dir),
    )


RDZV_BACKEND = "omnitune-c10d"

# Processes start from a fork server that has imported torch and the workers' modules once, not by
# spawning a fresh interpreter that imports them again for every process of every launch: on 2
# cores a forked launch takes well under half a spawned one's seconds, and a re-tuning pause
# relaunches (docs/decisions.md, launch.START_METHOD). The server is a fresh process
# (no CUDA, no threads), which CUDA allows where it forbids a plain fork.
START_METHOD = "forkserver" if "forkserver" in multiprocessing.get_all_start_methods() else "spawn"
PRELOAD = ["torch", "torch.distributed", "omnitune.runtime.process", "omnitune.runtime.profile_worker",
           "omnitune.runtime.quick_exit"]
CALLERS_ENV = "OMNITUNE_"      # a process sees the launching command's variables of this prefix as they are now


def start_server() -> None:
    """Start the fork server with PRELOAD imported, in the system's temporary folder (not a
    launch's scratch folder, which goes when the launch ends), once per command. It returns at
    once: the server imports in the background, and its first process waits for that, most of a
    first launch, little once it is warm (docs/decisions.md, launch.start_server)."""
    if START_METHOD == "forkserver":
        multiprocessing.set_forkserver_preload(PRELOAD)
        forkserver.ensure_running()


def server_ready() -> None:
    """Wait until a fork server started earlier has done its imports (by starting a process that
    does nothing from it), so that they burden no measurement that follows. Without a server
    running, nothing."""
    if START_METHOD == "forkserver" and getattr(forkserver._forkserver, "_forkserver_pid", None) is not None:
        nothing = multiprocessing.get_context("forkserver").Process(target=int)
        nothing.start()
        nothing.join()


def as_launched(cwd: str, variables: dict[str, str], entrypoint: Callable, *args):
    """Run `entrypoint(*args)` in the launching command's folder and with its OMNITUNE_ variables
    as they were at launch: a fork server's processes inherit the server's, from when it started."""
    os.chdir(cwd)
    for name in [k for k in os.environ if k.startswith(CALLERS_ENV)]:
        del os.environ[name]
    os.environ.update(variables)
    return entrypoint(*args)


def c10d_handler(params):
    """torch's c10d rendezvous, with its store bound to the rendezvous host alone: torch's own
    listens on every interface. (The agent's second, shared store is switched off in `launch`:
    omnitune's processes use the job's store.)"""
    from torch.distributed.elastic.rendezvous.c10d_rendezvous_backend import C10dRendezvousBackend
    from torch.distributed.elastic.rendezvous.dynamic_rendezvous import create_handler

    class Backend(C10dRendezvousBackend):
        name = RDZV_BACKEND                       # the registry checks the handler's backend name

    host, port = endpoint(params.endpoint)
    # Connecting waits as long as a node may take to join; after that each store operation waits
    # at most read_timeout, so that an agent whose link is cut gives up instead of hanging.
    serves = params.get_as_bool("is_host", True)
    store = job_store(host, port, serves, params.get_as_int("join_timeout", 600))
    store.set_timeout(timedelta(seconds=params.get_as_int("read_timeout", 60)))
    handler = create_handler(store, Backend(store, params.run_id), params)
    return handler if serves else _unblocked(handler, params.get_as_int("close_timeout", 30))


def _unblocked(handler, close_s: float):
    """The agent's calls into the rendezvous that must not hang when the link to its store is cut.

    While its workers run, the agent asks the store every monitor interval whether nodes wait to
    join (a node restarting after a failure), and at the end it closes the rendezvous there.
    Across a dead link torch's store client reconnects without end, and the agent would never
    see its workers fail. So a thread of its own asks instead (the agent reads its latest answer,
    or its error), and closing waits at most `close_s`.
    """
    import threading

    latest: dict[str, Any] = {"waiting": 0, "error": None}
    stop = threading.Event()
    ask, close = handler.num_nodes_waiting, handler.shutdown

    def poll() -> None:
        while not stop.wait(0.1):
            try:
                latest["waiting"] = ask()
            except Exception as e:              # the agent raises it on its next question
                latest["error"] = e
                return

    def num_nodes_waiting() -> int:
        if not poller.is_alive() and latest["error"] is None and not stop.is_set():
            poller.start()
        if latest["error"] is not None:
            raise latest["error"]
        return latest["waiting"]

    def shutdown() -> bool:
        stop.set()
        done: dict[str, bool] = {"ok": False}
        closer = threading.Thread(target=lambda: done.update(ok=close()), daemon=True)
        closer.start()
        closer.join(close_s)
        return done["ok"]

    poller = threading.Thread(target=poll, name="omnitune-rendezvous-poll", daemon=True)
    handler.num_nodes_waiting, handler.shutdown = num_nodes_waiting, shutdown
    return handler


def launch(entrypoint: Callable, args: tuple, nprocs: int, log_dir: Path, **kw) -> dict[int, Any]:
    """Run `entrypoint(*args)` in `nprocs` processes; return each local rank's return value."""
    from torch.distributed.elastic.multiprocessing import DefaultLogsSpecs, SignalException, Std
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError
    from torch.distributed.elastic.rendezvous import RendezvousError, rendezvous_handler_registry
    from torch.distributed.launcher.api import LaunchConfig, elastic_launch

    rendezvous_handler_registry.register(RDZV_BACKEND, c10d_handler)
    _cheap_event_names()
    os.environ["TORCH_DISABLE_SHARE_RDZV_TCP_STORE"] = "1"

    kwargs = launch_config_kwargs(nprocs, log_dir, **kw)
    if "shutdown_timeout" not in {f.name for f in dataclasses.fields(LaunchConfig)}:
        kwargs.pop("shutdown_timeout")          # older torch (2.11 has none): the agent waits its own 30 s
    log_dir = Path(kwargs.pop("log_dir"))
    log_dir.mkdir(parents=True, exist_ok=True)
    config = LaunchConfig(logs_specs=DefaultLogsSpecs(log_dir=str(log_dir), redirects=Std.ALL, tee=Std.ERR), **kwargs)
    # The agent logs a failed worker's traceback to the console; it is in the log folder, and the
    # command's error names the cause in one line.
    logging.getLogger("torch.distributed.elastic.multiprocessing.api").setLevel(logging.CRITICAL)
    start_server()
    callers = {k: v for k, v in os.environ.items() if k.startswith(CALLERS_ENV)}
    entry = functools.update_wrapper(functools.partial(as_launched, os.getcwd(), callers, entrypoint), entrypoint)
    try:
        with _errorfiles_in(log_dir):
            return elastic_launch(config, entry)(*args)
    except ChildFailedError as e:
        # A process that timed out waiting for a silent peer names the cause; the others' errors
        # ("connection closed by peer") are its consequences, and may be recorded first.
        lines = [_last_line(f) for f in e.failures.values()]
        line = next((ln for ln in lines if "timed out" in ln.lower()), lines[0])
        if "timed out" in line.lower():
            raise UserError(f"a peer was silent for longer than --timeout-s, so the job stopped (logs in "
                            f"{log_dir}): {line}") from None
        raise UserError(f"a worker process failed (logs in {log_dir}): {line}") from None
    except RendezvousError as e:
        first = str(e).strip().splitlines()[0] if str(e).strip() else e.__class__.__name__
        raise UserError(f"the rendezvous of {kwargs['min_nodes']} node(s) at {kwargs['rdzv_endpoint']} failed "
                        f"({first}): a node's command is not running, has stopped, or cannot reach it") from None
    except (SignalException, KeyboardInterrupt):
        # The elastic agent has already stopped every worker it started.
        raise Interrupted(f"interrupted; workers stopped (logs in {log_dir})") from None


@contextlib.contextmanager
def _errorfiles_in(log_dir: Path):
    """torch.multiprocessing names each worker a file for its traceback (pytorch-errorfile-*) in
    the system's temporary folder, and leaves it there when the worker fails. Those go to a
    folder in `log_dir` for the launch's length; torchelastic keeps its own copy of each error."""
    with tempfile.TemporaryDirectory(prefix="errorfiles-", dir=log_dir) as scratch:
        before, tempfile.tempdir = tempfile.tempdir, scratch
        try:
            yield
        finally:
            tempfile.tempdir = before


def _cheap_event_names() -> None:
    """torch's rendezvous names the method behind each event it logs through inspect.stack(),
    which reads the source of every frame and adds seconds to each launch. The same name, from
    the frame alone."""
    from torch.distributed.elastic.rendezvous import dynamic_rendezvous

    def get_method_name(depth: int = 2) -> str:
        try:
            return sys._getframe(depth).f_code.co_name
        except ValueError:
            return "no_method_name"
    if hasattr(dynamic_rendezvous, "get_method_name"):
        dynamic_rendezvous.get_method_name = get_method_name


def _last_line(failure) -> str:
    msg = failure.message
    if isinstance(msg, dict):                    # torchelastic's error file: {"message": ..., ...}
        msg = msg.get("message", "")
    msg = str(msg)
    lines = [ln for ln in msg.strip().splitlines() if ln.strip()]
    return lines[-1] if lines else f"exit code {failure.exitcode}"


# In each process:

def join(everyone: tuple[Node, ...], node: int, port: int, timeout_s: float, backend: str):
    """Join this process to the job's process group with the rank its node's place gives it;
    return the rank and the job's store."""
    import torch.distributed as dist

    here = next(n for n in everyone if n.index == node)
    rank = here.ranks[env.local_rank()]
    env.bind_gloo_to(here.host)
    store = job_store(coordinator(everyone).host, port, rank == 0, timeout_s)
    dist.init_process_group(backend, timeout=timedelta(seconds=timeout_s), store=store, rank=rank,
                            world_size=sum(len(n.ranks) for n in everyone))
    return rank, store


def job_store(host: str, port: int, serve: bool, timeout_s: float):
    """The job's key-value store: rank 0 serves it on `host` alone; the others connect to it."""
    import torch.distributed as dist

    timeout = timedelta(seconds=timeout_s)
    if not serve:
        return dist.TCPStore(host, port, is_master=False, timeout=timeout)
    family = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0][0]
    sock = socket.create_server((host, port), family=family, backlog=1024)     # SO_REUSEADDR: restarts rebind
    return dist.TCPStore(host, port, is_master=True, timeout=timeout, wait_for_workers=False,
                         master_listen_fd=sock.detach())                       # the store owns the socket now
