"""Every environment variable omnitune reads, in one place."""

from __future__ import annotations

import os


def local_rank() -> int:
    """This process's index among the processes its node's launcher started."""
    return int(os.environ["LOCAL_RANK"])


def restart_count() -> int:
    """How many times torchelastic has restarted this node's processes (after a failure here)."""
    return int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0"))


def fault() -> tuple[str, int, int] | None:
    """TESTING hooks, to break a run on purpose, on its first attempt only:
    OMNITUNE_FAULT_KILL="RANK:ITERATION" makes that rank kill itself (SIGKILL) at that iteration;
    OMNITUNE_FAULT_HANG="RANK:ITERATION" makes it sleep for good: a stuck peer, alive but silent.
    Returns (action, rank, iteration)."""
    for action in ("kill", "hang"):
        value = os.environ.get(f"OMNITUNE_FAULT_{action.upper()}")
        if value:
            rank, _, iteration = value.partition(":")
            return action, int(rank), int(iteration)
    return None


def keep_gloo_on_loopback() -> None:
    """Make gloo listen on the loopback interface (unless GLOO_SOCKET_IFNAME names one): gloo
    otherwise binds the address the hostname resolves to, which may face the network."""
    import socket

    names = [name for _, name in socket.if_nameindex() if name.startswith("lo")]
    if names:
        os.environ.setdefault("GLOO_SOCKET_IFNAME", names[0])
