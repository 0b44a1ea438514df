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
