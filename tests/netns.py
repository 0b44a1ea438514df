"""Real hosts on one machine: Linux network namespaces joined through a bridge, each with an
address of its own, their links shaped with tbf.

    with Hosts(2) as hosts:                    # hosts[0].address == "10.213.0.1", …
        hosts.shape(20)                        # every host's link: 20 Mbit/s out
        hosts[0].popen(["omnitune", "run", …])
        hosts.cut(1); hosts.mend(1)            # host 1's link down, then up again

Nothing touches the machine's own network: the bridge lives in a namespace of its own, each
host's veth pair is created straight between its namespace and the bridge's, and deleting the
namespaces deletes every link with them. That happens on exit, on an exception, on Ctrl-C
(`with` runs it), on SIGTERM (turned into an exception) and, failing all of those, at exit.
Needs root and iproute2; `unavailable()` says why not, for tests to skip with.
"""

from __future__ import annotations

import atexit
import itertools
import os
import shutil
import signal
import subprocess
from dataclasses import dataclass

PREFIX = "omnitune-"            # every namespace this harness makes starts with it
_SEQ = itertools.count()


def ip(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    return subprocess.run(["ip", *args], capture_output=True, text=True, check=check)


def unavailable() -> str | None:
    """Why namespaces cannot be made here, or None when they can."""
    if shutil.which("ip") is None or shutil.which("tc") is None:
        return "needs iproute2 (ip, tc)"
    if os.geteuid() != 0:
        return "needs root to create network namespaces"
    probe = f"{PREFIX}probe-{os.getpid()}"
    made = ip("netns", "add", probe, check=False)
    ip("netns", "del", probe, check=False)
    return None if made.returncode == 0 else f"ip netns add failed: {made.stderr.strip()}"


def leftovers() -> list[str]:
    """This harness's namespaces still present (any process's)."""
    names = ip("netns", "list").stdout.split()
    return [n for n in names if n.startswith(PREFIX)]


@dataclass(frozen=True)
class Host:
    namespace: str
    address: str
    interface: str = "eth0"

    def argv(self, cmd: list[str]) -> list[str]:
        """`cmd` run inside this host's namespace, without the caller's GLOO_SOCKET_IFNAME (an
        interface of another host: a separate machine would not have it)."""
        return ["ip", "netns", "exec", self.namespace, "env", "-u", "GLOO_SOCKET_IFNAME", *cmd]

    def run(self, cmd: list[str], **kw) -> subprocess.CompletedProcess:
        return subprocess.run(self.argv(cmd), capture_output=True, text=True, **kw)

    def popen(self, cmd: list[str], **kw) -> subprocess.Popen:
        return subprocess.Popen(self.argv(cmd), **kw)

    def listening(self) -> list[str]:
        """Local addresses of the TCP sockets listening in this namespace (HOST:PORT)."""
        out = self.run(["ss", "-Htln"], check=True).stdout
        return [line.split()[3] for line in out.splitlines() if line.strip()]


class Hosts:
    """`n` hosts on one bridge, on 10.213.K.0/24 (K from a counter: addresses exist only inside)."""

    def __init__(self, n: int = 2):
        k = next(_SEQ)
        self.tag = f"{PREFIX}{os.getpid()}-{k}"
        self.switch = f"{self.tag}-sw"
        self.hosts = [Host(f"{self.tag}-h{i}", f"10.213.{k % 250}.{i + 1}") for i in range(n)]

    def __getitem__(self, i: int) -> Host:
        return self.hosts[i]

    def __len__(self) -> int:
        return len(self.hosts)

    def __enter__(self) -> "Hosts":
        atexit.register(self.remove)
        self._previous = signal.signal(signal.SIGTERM, _raise_interrupt) \
            if signal.getsignal(signal.SIGTERM) is signal.SIG_DFL else None
        try:
            self.create()
        except BaseException:
            self.__exit__()
            raise
        return self

    def __exit__(self, *exc) -> None:
        self.remove()
        atexit.unregister(self.remove)
        if self._previous is not None:
            signal.signal(signal.SIGTERM, self._previous)

    def create(self) -> None:
        ip("netns", "add", self.switch)
        ip("-n", self.switch, "link", "add", "br0", "type", "bridge")
        ip("-n", self.switch, "link", "set", "br0", "up")
        for i, h in enumerate(self.hosts):
            ip("netns", "add", h.namespace)
            ip("-n", h.namespace, "link", "add", h.interface, "type", "veth", "peer", "name", f"port{i}",
               "netns", self.switch)
            ip("-n", self.switch, "link", "set", f"port{i}", "master", "br0", "up")
            ip("-n", h.namespace, "addr", "add", f"{h.address}/24", "dev", h.interface)
            ip("-n", h.namespace, "link", "set", h.interface, "up")
            ip("-n", h.namespace, "link", "set", "lo", "up")

    def remove(self) -> None:
        """Kill whatever still runs inside the hosts, then delete the namespaces (and their links)."""
        for ns in [h.namespace for h in self.hosts] + [self.switch]:
            for pid in ip("netns", "pids", ns, check=False).stdout.split():
                try:
                    os.kill(int(pid), signal.SIGKILL)
                except ProcessLookupError:
                    pass
            ip("netns", "del", ns, check=False)

    def shape(self, mbit: float | None) -> None:
        """Limit what every host sends to `mbit` Mbit/s (tbf; None: unshaped). Every packet between
        two hosts leaves one of them, so each direction of each link is held to the rate."""
        for h in self.hosts:
            if mbit is None:
                h.run(["tc", "qdisc", "del", "dev", h.interface, "root"])
                continue
            # The bucket holds 2 ms at the rate, at least ten full frames: small beside a model's
            # message, so a message's time is its size over the rate. Packets may queue for up to
            # 200 ms before tbf drops them.
            burst = max(15_000, int(mbit * 1e6 / 8 * 0.002))
            h.run(["tc", "qdisc", "replace", "dev", h.interface, "root", "tbf", "rate", f"{mbit}mbit",
                   "burst", str(burst), "latency", "200ms"], check=True)

    def cut(self, i: int) -> None:
        """Host i's link down: its packets go nowhere, as when a cable is pulled."""
        ip("-n", self.hosts[i].namespace, "link", "set", self.hosts[i].interface, "down")

    def mend(self, i: int) -> None:
        ip("-n", self.hosts[i].namespace, "link", "set", self.hosts[i].interface, "up")


def _raise_interrupt(signum, frame):
    raise KeyboardInterrupt(f"signal {signum}")
