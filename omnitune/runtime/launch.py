"""Start one job's processes on this host through torch.distributed's elastic launcher.

The pure part, `launch_config`, decides everything (rendezvous, ports, restarts, logs);
`launch` only hands that to `elastic_launch`. Tests replace `launch` at this seam.
"""

from __future__ import annotations

import socket
import uuid
from pathlib import Path
from typing import Any, Callable

from omnitune.cluster import LOOPBACK, endpoint
from omnitune.errors import UserError


def free_port(host: str = LOOPBACK) -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def launch_config_kwargs(nprocs: int, log_dir: Path, rendezvous: str = f"{LOOPBACK}:0",
                         max_restarts: int = 0, run_id: str | None = None, nodes: int = 1,
                         local_addr: str = LOOPBACK, is_host: bool | None = None) -> dict[str, Any]:
    """Keyword arguments for torch's LaunchConfig: this node's part of a c10d rendezvous of `nodes`.

    With several nodes every node must pass the same `run_id` and a fixed port, and exactly one
    (`is_host`) serves the rendezvous store; the others wait up to 10 minutes for everyone to join.
    """
    host, port = endpoint(rendezvous)
    if not port:
        port = free_port(host)
    configs: dict[str, Any] = {"timeout": 120 if nodes == 1 else 600}
    if is_host is not None:
        configs["is_host"] = is_host
    return dict(
        min_nodes=nodes, max_nodes=nodes, nproc_per_node=nprocs,
        run_id=run_id or uuid.uuid4().hex[:12],
        rdzv_backend="c10d", rdzv_endpoint=f"{host}:{port}",
        rdzv_configs=configs, max_restarts=max_restarts,
        monitor_interval=0.1, start_method="spawn", local_addr=local_addr,
        # Workers blocked in a gloo wait do not see SIGTERM at once; after this, SIGKILL.
        shutdown_timeout=5,
        log_dir=str(log_dir),
    )


def launch(entrypoint: Callable, args: tuple, nprocs: int, log_dir: Path, **kw) -> dict[int, Any]:
    """Run `entrypoint(*args)` in `nprocs` processes; return each local rank's return value."""
    from torch.distributed.elastic.multiprocessing import DefaultLogsSpecs, SignalException, Std
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError
    from torch.distributed.launcher.api import LaunchConfig, elastic_launch

    kwargs = launch_config_kwargs(nprocs, log_dir, **kw)
    log_dir = Path(kwargs.pop("log_dir"))
    log_dir.mkdir(parents=True, exist_ok=True)
    config = LaunchConfig(logs_specs=DefaultLogsSpecs(log_dir=str(log_dir), redirects=Std.ALL, tee=Std.ERR), **kwargs)
    try:
        return elastic_launch(config, entrypoint)(*args)
    except ChildFailedError as e:
        line = _last_line(next(iter(e.failures.values())))
        if "timed out" in line.lower():
            raise UserError(f"a peer was silent for longer than --timeout-s, so the job stopped (logs in "
                            f"{log_dir}): {line}") from None
        raise UserError(f"a worker process failed (logs in {log_dir}): {line}") from None
    except (SignalException, KeyboardInterrupt):
        # The elastic agent has already stopped every worker it started.
        raise UserError(f"interrupted; workers stopped (logs in {log_dir})") from None


def _last_line(failure) -> str:
    msg = failure.message
    if isinstance(msg, dict):                    # torchelastic's error file: {"message": ..., ...}
        msg = msg.get("message", "")
    msg = str(msg)
    lines = [ln for ln in msg.strip().splitlines() if ln.strip()]
    return lines[-1] if lines else f"exit code {failure.exitcode}"
