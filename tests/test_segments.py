"""The re-tuner's thread and the main thread's OpenMP helpers (runtime/segments.py)."""

import os
import time

import pytest
import torch

from omnitune.runtime import segments


def threads_now() -> int:
    return len(os.listdir(f"/proc/{os.getpid()}/task"))


@pytest.mark.skipif(segments._libgomp() is None or (os.cpu_count() or 1) < 2,
                    reason="torch does not run on GNU OpenMP here, or one core")
def test_releasing_openmp_threads_ends_the_calling_threads_helpers():
    """A parallel region in this thread leaves OpenMP helper threads behind, which make a second
    thread's kernels wait (segments.release_openmp_threads). Released, they exit, and the next
    region runs as before. Fails if the release frees nothing (libgomp not found, or a call that
    does not free the pool)."""
    before = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        x = torch.ones(4_000_000)
        x.mul_(2.0)                                  # above the grain size: a parallel region
        with_helpers = threads_now()
        segments.release_openmp_threads()
        deadline = time.monotonic() + 5.0
        while threads_now() >= with_helpers and time.monotonic() < deadline:
            time.sleep(0.01)
        assert threads_now() < with_helpers
        x.mul_(0.5)
        assert torch.equal(x, torch.ones(4_000_000))
    finally:
        torch.set_num_threads(before)
