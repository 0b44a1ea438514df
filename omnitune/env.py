"""Every environment variable omnitune reads, in one place."""

from __future__ import annotations

import os


def rank() -> int:
    """This process's global rank, set by torch's elastic launcher."""
    return int(os.environ["RANK"])


def world_size() -> int:
    return int(os.environ["WORLD_SIZE"])


def in_ci() -> bool:
    return os.environ.get("CI", "").lower() in ("1", "true", "yes")


def rendezvous_store():
    """A client of the job's rendezvous key-value store (torchelastic's, at MASTER_ADDR:MASTER_PORT)."""
    from datetime import timedelta

    import torch.distributed as dist
    return dist.TCPStore(os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"]), is_master=False,
                         timeout=timedelta(seconds=120))
