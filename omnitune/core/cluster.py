"""Devices and the cluster they belong to.

A device is one training process: a CPU worker with a number of threads, or one CUDA GPU.
A layout is a set of devices that can run side by side (their CPU cores do not overlap); the
planner chooses among layouts. With no cluster spec, this machine offers its CPU cores split
into workers several ways, its GPUs alone, and its GPUs beside CPU workers on the cores left free.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from omnitune.core.errors import UserError
from omnitune.core.files import from_dict, read_json

LOOPBACK = "127.0.0.1"
DEFAULT_PORT = 29400      # torchrun's rendezvous port: nodes started apart cannot each pick a free one


def is_loopback(host: str) -> bool:
    return host in ("127.0.0.1", "localhost", "::1")


def endpoint(text: str) -> tuple[str, int]:
    """The host and port of a rendezvous "HOST:PORT"; port 0 means a free one (one node only).
    The job's own store listens on the next port, so the last port is not allowed."""
    host, sep, port = text.rpartition(":")
    if not (sep and host and port.isdigit() and int(port) < 65535):
        raise ValueError(f"rendezvous must be HOST:PORT with a port below 65535, got {text!r}")
    return host, int(port)


@dataclass(frozen=True)
class Device:
    id: str
    kind: Literal["cpu", "cuda"]
    host: str = LOOPBACK
    threads: int = 1          # torch intra-op threads of this worker process
    node: int = 0             # which node of the cluster spec (one `omnitune run --node-rank` each)
    cuda_index: int = -1      # which GPU of its host, for kind == "cuda"
    # EMULATION, for experiments on one machine: each training step is stretched to this many
    # times its real duration (the worker sleeps for the difference).
    emulated_slowdown: float = 1.0

    def __post_init__(self):
        if not self.id:
            raise ValueError("device id must not be empty")
        if self.node < 0:
            raise ValueError(f"device {self.id!r}: node must be at least 0, got {self.node}")
        if self.threads < 1:
            raise ValueError(f"device {self.id!r}: threads must be at least 1, got {self.threads}")
        if not 1.0 <= self.emulated_slowdown <= 1000.0:
            raise ValueError(f"device {self.id!r}: emulated_slowdown must be in [1, 1000], got {self.emulated_slowdown}")
        if self.kind == "cuda" and self.cuda_index < 0:
            raise ValueError(f"device {self.id!r}: a cuda device needs cuda_index >= 0")


@dataclass(frozen=True)
class Cluster:
    devices: tuple[Device, ...]
    layouts: dict[str, tuple[str, ...]]   # layout name -> device ids usable together
    rendezvous: str = f"{LOOPBACK}:0"     # host:port of the c10d rendezvous; port 0 = pick a free one
    server_host: str = LOOPBACK           # where the parameter server runs
    server_node: int = 0                  # the spec's first node on server_host

    def __post_init__(self):
        ids = [d.id for d in self.devices]
        if not ids:
            raise ValueError("a cluster needs at least one device")
        if len(set(ids)) != len(ids):
            raise ValueError(f"device ids must be unique: {ids}")
        for name, members in self.layouts.items():
            unknown = set(members) - set(ids)
            if unknown or not members:
                raise ValueError(f"layout {name!r} names unknown devices {sorted(unknown)}")
        endpoint(self.rendezvous)

    def device(self, device_id: str) -> Device:
        return next(d for d in self.devices if d.id == device_id)

    def layout(self, name: str) -> tuple[Device, ...]:
        return tuple(self.device(i) for i in self.layouts[name])

    @property
    def hosts(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys(d.host for d in self.devices))


def local_cluster(cpu_count: int | None = None, cuda_count: int | None = None) -> Cluster:
    """This machine: one CPU worker per core, or one worker on all cores, and in between k workers
    of cores/k threads each for every k that divides the cores ("4-workers": cpu4x0 … cpu4x3 on
    16 cores). With GPUs: the GPUs alone ("gpus"), and the GPUs beside CPU workers on the cores
    their processes leave free, one core each (a GPU's process launches its kernels and feeds it
    data; CPU threads that crowd it out slow both): one worker per free core ("gpus+per-core")
    and one worker on all of them ("gpus+one-worker", device cpu-rest)."""
    cpus = cpu_count if cpu_count is not None else (len(os.sched_getaffinity(0)) or 1)
    if cuda_count is None:
        import torch
        cuda_count = torch.cuda.device_count() if torch.cuda.is_available() else 0
    gpus = tuple(Device(f"cuda{i}", "cuda", cuda_index=i) for i in range(cuda_count))
    per_core = tuple(Device(f"cpu{i}", "cpu", threads=1) for i in range(cpus))
    layouts = {"one-per-core": tuple(d.id for d in per_core)}
    devices = per_core + gpus
    for k in sorted((k for k in range(2, cpus) if cpus % k == 0), reverse=True):
        workers = tuple(Device(f"cpu{k}x{i}", "cpu", threads=cpus // k) for i in range(k))
        devices += workers
        layouts[f"{k}-workers"] = tuple(d.id for d in workers)
    if cpus > 1:
        whole = Device("cpu-all", "cpu", threads=cpus)
        devices = devices + (whole,)
        layouts["one-worker"] = (whole.id,)
    if gpus:
        ids = tuple(d.id for d in gpus)
        layouts["gpus"] = ids
        free = cpus - len(gpus)
        if free >= 1:
            layouts["gpus+per-core"] = ids + tuple(d.id for d in per_core[:free])
        if free > 1:
            rest = Device("cpu-rest", "cpu", threads=free)
            devices += (rest,)
            layouts["gpus+one-worker"] = ids + (rest.id,)
    return Cluster(devices=devices, layouts=layouts)


@dataclass(frozen=True)
class NodeSpec:
    host: str = LOOPBACK
    cpu_workers: tuple[int, ...] = (1,)   # threads of each CPU worker on this host
    gpus: tuple[int, ...] = ()            # CUDA indices on this host
    emulated_slowdown: tuple[float, ...] = ()  # EMULATION: per CPU worker, steps take this many times longer


@dataclass(frozen=True)
class ClusterSpec:
    schema_version: int
    nodes: tuple[NodeSpec, ...]
    rendezvous: str = ""
    server_host: str = ""
    notes: str = field(default="")


def read_spec(path: str | os.PathLike) -> dict:
    """A spec file (YAML or JSON) as a mapping; one-line errors naming the file."""
    path = Path(path)
    if path.suffix in (".yaml", ".yml"):
        import yaml
        try:
            data = yaml.safe_load(path.read_text())
        except FileNotFoundError:
            raise UserError(f"{path}: file not found") from None
        except (OSError, UnicodeDecodeError) as e:
            raise UserError(f"{path}: cannot read ({e.__class__.__name__})") from None
        except yaml.YAMLError as e:
            raise UserError(f"{path}: not valid YAML ({str(e).splitlines()[0]})") from None
        except RecursionError:
            raise UserError(f"{path}: not valid YAML (nested too deeply)") from None
        except ValueError as e:     # PyYAML lets some bad scalars through: 2020-13-01, 4300+ digit integers
            raise UserError(f"{path}: not valid YAML ({str(e).split(';')[0]})") from None
    else:
        data = read_json(path)
    if not isinstance(data, dict):
        raise UserError(f"{path}: expected a mapping at the top level")
    return data


def read_spec_as(path: Path, cls: type, refuse: dict[str, str] | None = None):
    """A spec file (version 1, the default) as the frozen dataclass `cls`; a key of `refuse`
    (the other kind of spec's) is an error with its message."""
    data = read_spec(path)
    for key, message in (refuse or {}).items():
        if key in data:
            raise UserError(f"{path}: {message}")
    data.setdefault("schema_version", 1)
    spec = from_dict(cls, data, str(path))
    if spec.schema_version != 1:
        raise UserError(f"{path}: schema_version {spec.schema_version} is not one of [1]")
    return spec


def load_cluster(path: str | os.PathLike) -> Cluster:
    """Read a cluster spec (YAML or JSON) into a Cluster with a single layout of all its devices."""
    path = Path(path)
    spec = read_spec_as(path, ClusterSpec, refuse={
        "node_types": "node_types describes a cluster to plan for by simulation: give it to "
                      "`omnitune plan --cluster`, not here"})
    if not spec.nodes:
        raise UserError(f"{path}: nodes: at least one node is needed")
    devices = []
    for n, node in enumerate(spec.nodes):
        prefix = "" if len(spec.nodes) == 1 else f"n{n}-"
        slow = node.emulated_slowdown
        if slow and len(slow) != len(node.cpu_workers):
            raise UserError(f"{path}: nodes[{n}].emulated_slowdown: needs one factor per cpu_workers entry")
        for i, threads in enumerate(node.cpu_workers):
            if threads < 1:
                raise UserError(f"{path}: nodes[{n}].cpu_workers[{i}]: threads must be at least 1")
            try:
                devices.append(Device(f"{prefix}cpu{i}", "cpu", host=node.host, threads=threads, node=n,
                                      emulated_slowdown=slow[i] if slow else 1.0))
            except ValueError as e:
                raise UserError(f"{path}: nodes[{n}]: {e}") from None
        for g in node.gpus:
            if g < 0:
                raise UserError(f"{path}: nodes[{n}].gpus: a GPU index must be at least 0, got {g}")
            devices.append(Device(f"{prefix}cuda{g}", "cuda", host=node.host, cuda_index=g, node=n))
    if not devices:
        raise UserError(f"{path}: nodes: no cpu_workers or gpus listed")
    hosts = [node.host for node in spec.nodes]
    server_host = spec.server_host or hosts[0]
    if server_host not in hosts:
        raise UserError(f"{path}: server_host: {server_host!r} is not the host of any node {hosts}")
    try:
        rdzv_host, port = endpoint(spec.rendezvous or f"{hosts[0]}:0")
    except ValueError as e:
        raise UserError(f"{path}: rendezvous: {e}") from None
    if rdzv_host not in hosts:
        raise UserError(f"{path}: rendezvous: {rdzv_host!r} is not the host of any node {hosts} (its first node "
                        "there hosts the rendezvous)")
    rendezvous = f"{rdzv_host}:{port or (DEFAULT_PORT if len(hosts) > 1 else 0)}"
    try:
        return Cluster(devices=tuple(devices), layouts={"cluster": tuple(d.id for d in devices)},
                       rendezvous=rendezvous, server_host=server_host, server_node=hosts.index(server_host))
    except ValueError as e:
        raise UserError(f"{path}: {e}") from None
