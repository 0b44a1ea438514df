"""Every environment variable omnitune reads, in one place."""

from __future__ import annotations

import os
from pathlib import Path


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


def forced_change() -> tuple[int, float, float | None] | None:
    """A TESTING hook, to change a run in place on purpose (as the coordinator's tuner would):
    OMNITUNE_CHANGE="ITERATION:LR" or "ITERATION:LR:BATCH_SCALE" publishes that change after that
    iteration. Returns (iteration, lr, batch scale or None)."""
    value = os.environ.get("OMNITUNE_CHANGE")
    if not value:
        return None
    iteration, lr, *scale = value.split(":")
    return int(iteration), float(lr), float(scale[0]) if scale else None


def bind_gloo_to(host: str) -> None:
    """Make gloo listen on the interface that holds `host`'s address (unless GLOO_SOCKET_IFNAME
    already names one): gloo otherwise binds the address the hostname resolves to, which may face
    another network, or not exist at all inside a network namespace."""
    name = interface_of(host)
    if name:
        os.environ.setdefault("GLOO_SOCKET_IFNAME", name)


def interface_of(host: str) -> str | None:
    """The network interface whose IPv4 address is `host`'s (a loopback one for loopback)."""
    import fcntl
    import socket
    import struct

    try:
        address = socket.gethostbyname(host)
    except OSError:
        return None
    names = [name for _, name in socket.if_nameindex()]
    if address.startswith("127."):
        return next((n for n in names if n.startswith("lo")), None)
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        for name in names:
            try:        # SIOCGIFADDR: the interface's IPv4 address, at bytes 20..24 of the ifreq
                ifreq = fcntl.ioctl(s.fileno(), 0x8915, struct.pack("256s", name[:15].encode()))
            except OSError:
                continue                      # no IPv4 address
            if socket.inet_ntoa(ifreq[20:24]) == address:
                return name
    return None


def cache_dir() -> Path | None:
    """Where generated datasets are kept between commands: OMNITUNE_CACHE_DIR, else
    $XDG_CACHE_HOME/omnitune, else ~/.cache/omnitune; None when OMNITUNE_CACHE_DIR is "off"."""
    value = os.environ.get("OMNITUNE_CACHE_DIR")
    if value == "off":
        return None
    if value:
        return Path(value)
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "omnitune"


# glibc's malloc hands a freed block of over 128 KiB straight back to the kernel, so a training
# step's activations and gradients come from fresh pages every step, each page a fault, and the
# faults slow the step. It raises that threshold by itself only after freeing a larger block,
# which a process that builds its datasets may do and one that loads them may not, so processes
# of one workload can train at different speeds. Fixed thresholds make every process alike.
MMAP_THRESHOLD = 32 << 20       # glibc's largest: blocks up to this come from the heap
TRIM_THRESHOLD = 256 << 20      # the heap keeps this much freed memory before giving it back


def keep_freed_memory() -> None:
    """Set malloc's thresholds (mallopt) in this process; nothing where libc is not glibc."""
    import ctypes

    try:
        libc = ctypes.CDLL("libc.so.6")
        mallopt = libc.mallopt
    except (OSError, AttributeError):
        return
    M_TRIM_THRESHOLD, M_MMAP_THRESHOLD = -1, -3
    mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD)
    mallopt(M_TRIM_THRESHOLD, TRIM_THRESHOLD)
