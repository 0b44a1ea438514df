"""Every environment variable omnitune reads, in one place."""

from __future__ import annotations

import os


def rank() -> int:
    """This process's global rank, set by torch's elastic launcher."""
    return int(os.environ["RANK"])


def world_size() -> int:
    return int(os.environ["WORLD_SIZE"])


def restart_count() -> int:
    """How many times torchelastic has restarted this job's processes."""
    return int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0"))


def fault_kill() -> tuple[int, int] | None:
    """A TESTING hook: OMNITUNE_FAULT_KILL="RANK:ITERATION" makes that rank kill itself (SIGKILL)
    at that iteration, on the first attempt only, so tests can break a run on purpose."""
    value = os.environ.get("OMNITUNE_FAULT_KILL")
    if not value:
        return None
    rank, _, iteration = value.partition(":")
    return int(rank), int(iteration)


def rendezvous_store(timeout_s: float = 120.0):
    """A client of the job's key-value store (torchelastic's, at MASTER_ADDR:MASTER_PORT), its keys
    prefixed by the restart count: the store outlives a failed attempt, and a restarted process
    must not read the dead processes' addresses."""
    from datetime import timedelta

    import torch.distributed as dist
    store = dist.TCPStore(os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"]), is_master=False,
                          timeout=timedelta(seconds=timeout_s))
    return dist.PrefixStore(f"omnitune/attempt{restart_count()}/", store)
