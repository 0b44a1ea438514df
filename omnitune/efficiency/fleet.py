"""A cluster described by node types and counts, for planning at a scale that cannot run here.

Users profile one node of each type (`omnitune profile` on it) and describe the cluster as

    node_types:
      - {name: box, count: 64, profile: profiles/box.json, layout: one-worker}
    intra_node: {gbit_s: 100, latency_us: 2}      # optional: the profile's measured link
    inter_node: {gbit_s: 10, latency_us: 20}      # needed once there is more than one node

Each node runs its type's layout (by default the profile's layout with the most samples per
second at its best batch). `omnitune plan --cluster spec.yaml` then plans for the whole cluster
with the simulator's seconds per iteration and staleness (simulator.py) in place of the
calibrated analytic model, which only knows the layouts the profile ran. The plan is marked
simulated: its hosts are names, not machines, and `omnitune run` refuses it.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field, replace
from functools import cached_property
from pathlib import Path
from typing import Callable

from omnitune.core import profile as profile_mod
from omnitune.core.cluster import Cluster, read_spec_as
from omnitune.core.errors import UserError
from omnitune.core.profile import Profile
from omnitune.core.protocols import Variant
import omnitune.efficiency.simulator as simulator
from omnitune.efficiency.perfmodel import Shape


@dataclass(frozen=True)
class LinkSpec:
    gbit_s: float                  # bandwidth, Gbit/s
    latency_us: float = 10.0       # one message's fixed cost, microseconds

    def link(self) -> simulator.Link:
        return simulator.Link(self.latency_us * 1e-6, self.gbit_s * 1e9 / 8)


@dataclass(frozen=True)
class NodeType:
    name: str
    count: int
    profile: str                   # measured on one node of this type; relative to the spec's folder
    layout: str = ""               # which of the profile's layouts each node runs ("": the fastest)


@dataclass(frozen=True)
class FleetSpec:
    schema_version: int
    node_types: tuple[NodeType, ...]
    intra_node: LinkSpec | None = None
    inter_node: LinkSpec | None = None
    notes: str = field(default="")


@dataclass(frozen=True)
class Fleet:
    """A loaded fleet spec: its profiles, the cluster they add up to, and its network."""
    path: str
    spec: FleetSpec
    profiles: dict[str, Profile]           # by node type
    layouts: dict[str, str]                # the layout each type's nodes run
    network: simulator.Network

    @property
    def nodes(self) -> int:
        return sum(t.count for t in self.spec.node_types)

    @property
    def description(self) -> str:
        return ", ".join(f"{t.count} × {t.name}" for t in self.spec.node_types)

    @cached_property
    def profile(self) -> Profile:
        """The whole cluster as one profile: every node runs its type's layout, each device a copy
        of the type's profile's, named "{type}{i}-{device}", on host "{type}{node}"; one layout of
        them all. The server runs on the first node, with the first type's network."""
        devices, measured, node = [], [], 0
        for t in self.spec.node_types:
            own = self.profiles[t.name]
            for i in range(t.count):
                for d in own.cluster.layouts[self.layouts[t.name]]:
                    dev_id = f"{t.name}{i}-{d}"
                    devices.append(replace(own.cluster.device(d), id=dev_id, host=f"{t.name}{node}", node=node))
                    measured.append(replace(own.device(d), device_id=dev_id))
                node += 1
        cluster = Cluster(tuple(devices), {"cluster": tuple(d.id for d in devices)},
                          rendezvous=f"{devices[0].host}:29400", server_host=devices[0].host)
        first = self.profiles[self.spec.node_types[0].name]
        return replace(first, cluster=cluster, devices=tuple(measured), calibration=())

    def scenario(self, shape: Shape) -> simulator.Scenario:
        """A configuration of this cluster, for the simulator; o from the first type's
        calibration jobs (the whole cluster's profile has none)."""
        return simulator.from_profile(self.profile, shape, self.network, self.overhead(shape.variant))

    @cached_property
    def overhead(self) -> Callable[[Variant], float]:
        return simulator.overheads(self.profiles[self.spec.node_types[0].name])

    def hardware(self, shape: Shape, batch: int) -> tuple[float, tuple[int, ...]]:
        """Seconds per iteration and the staleness histogram the probes replay, simulated."""
        out = simulator.simulate(self.scenario(shape), simulator.ITERATIONS, seed=0)
        return out.sec_per_iter, out.staleness if shape.variant.has_server else ()


def load(path: str | os.PathLike) -> Fleet:
    """Read a fleet spec and the profiles it names; one-line errors naming the field."""
    path = Path(path)
    spec = read_spec_as(path, FleetSpec, refuse={
        "nodes": "nodes lists machines to profile (`omnitune profile --cluster`, then `plan --profile`); "
                 "`plan --cluster` takes node_types and counts to simulate"})
    if not spec.node_types:
        raise UserError(f"{path}: node_types: at least one node type is needed")
    profiles, layouts, names = {}, {}, set()
    for i, t in enumerate(spec.node_types):
        where = f"{path}: node_types[{i}]"
        if not t.name or t.name in names:
            raise UserError(f"{where}.name: must be a unique, non-empty name, got {t.name!r}")
        names.add(t.name)
        if t.count < 1:
            raise UserError(f"{where}.count: must be at least 1, got {t.count}")
        prof_path = (path.parent / t.profile) if not Path(t.profile).is_absolute() else Path(t.profile)
        if not prof_path.is_file():
            raise UserError(f"{where}.profile: no profile at {prof_path}")
        profiles[t.name] = prof = profile_mod.load(prof_path)
        if t.layout and t.layout not in prof.cluster.layouts:
            raise UserError(f"{where}.layout: {t.layout!r} is not one of {sorted(prof.cluster.layouts)} in "
                            f"{prof_path}")
        layouts[t.name] = t.layout or fastest_layout(prof)
    workloads = {p.workload for p in profiles.values()}
    if len(workloads) > 1:
        raise UserError(f"{path}: node_types: the profiles were measured with different workloads {sorted(workloads)}")
    for key in ("intra_node", "inter_node"):
        link = getattr(spec, key)
        if link is not None and not (link.gbit_s > 0 and link.latency_us >= 0):
            raise UserError(f"{path}: {key}: needs gbit_s > 0 and latency_us >= 0, got {link.gbit_s} and "
                            f"{link.latency_us}")
    if sum(t.count for t in spec.node_types) > 1 and spec.inter_node is None:
        raise UserError(f"{path}: inter_node: a cluster of several nodes needs the link between them "
                        "(gbit_s, latency_us)")
    first = profiles[spec.node_types[0].name]
    message, ring = simulator.profile_links(first)
    intra = spec.intra_node.link() if spec.intra_node else message
    inter = spec.inter_node.link() if spec.inter_node else intra
    network = simulator.Network(intra, inter, None if spec.intra_node else ring)
    return Fleet(str(path), spec, profiles, layouts, network)


def fastest_layout(prof: Profile) -> str:
    """The layout whose devices together train the most samples per second at their best batch."""
    return max(prof.cluster.layouts, key=lambda name: sum(prof.device(d).best.samples_per_s
                                                          for d in prof.cluster.layouts[name]))

