"""Start one job's processes on this host through torch.distributed's elastic launcher.

The pure part, `launch_config`, decides everything (rendezvous, ports, restarts, logs);
`launch` only hands that to `elastic_launch`. Tests replace `launch` at this seam.
"""

from __future__ import annotations

import socket
import uuid
from pathlib import Path
from typing import Any, Callable

from omnitune.cluster import LOOPBACK
from omnitune.errors import UserError


def free_port(host: str = LOOPBACK) -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def launch_config_kwargs(nprocs: int, log_dir: Path, rendezvous: str = f"{LOOPBACK}:0",
                         max_restarts: int = 0, run_id: str | None = None) -> dict[str, Any]:
    """Keyword arguments for torch's LaunchConfig: a single node, c10d rendezvous on loopback."""
    host, _, port = rendezvous.rpartition(":")
    host = host or LOOPBACK
    if not port or port == "0":
        port = str(free_port(host))
    return dict(
        min_nodes=1, max_nodes=1, nproc_per_node=nprocs,
        run_id=run_id or uuid.uuid4().hex[:12],
        rdzv_backend="c10d", rdzv_endpoint=f"{host}:{port}",
        rdzv_configs={"timeout": 120}, max_restarts=max_restarts,
        monitor_interval=0.1, start_method="spawn", local_addr=host,
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
        first = next(iter(e.failures.values()))
        raise UserError(f"a worker process failed (logs in {log_dir}): {_last_line(first)}") from None
    except (SignalException, KeyboardInterrupt):
        # The elastic agent has already stopped every worker it started.
        raise UserError(f"interrupted; workers stopped (logs in {log_dir}); `omnitune run --resume` "
                        "goes on from the run dir's last checkpoint") from None


def _last_line(failure) -> str:
    msg = failure.message
    if isinstance(msg, dict):                    # torchelastic's error file: {"message": ..., ...}
        msg = msg.get("message", "")
    msg = str(msg)
    lines = [ln for ln in msg.strip().splitlines() if ln.strip()]
    return lines[-1] if lines else f"exit code {failure.exitcode}"
