"""The plan: what `omnitune plan` chose and why, as a frozen, versioned dataclass."""

from __future__ import annotations

import math
import os
from dataclasses import dataclass
from typing import Literal

from omnitune.cluster import Device, endpoint
from omnitune.files import atomic_write_json, load_versioned, to_dict

SCHEMA_VERSION = 1
Protocol = Literal["sync", "groups", "softsync", "hpsgd", "gossip"]
SERVER_PROTOCOLS = ("groups", "softsync")      # a parameter-server process joins the workers
ONE_GROUP_PROTOCOLS = ("sync", "hpsgd", "gossip")  # every device in one group


@dataclass(frozen=True)
class Prediction:
    sec_per_iter: float
    iters_to_target: float           # inf when the probes say the target is out of reach
    time_to_target_s: float
    curve: tuple[tuple[float, float], ...] = ()   # the winner's probe: (iteration, test accuracy)

    def __post_init__(self):
        if not all(v >= 0 for v in (self.sec_per_iter, self.iters_to_target, self.time_to_target_s)):
            raise ValueError(f"prediction: times must not be negative, got {self}")


@dataclass(frozen=True)
class Candidate:
    layout: str
    protocol: Protocol
    groups: int
    batch_size: int                  # per device
    lr: float
    momentum: float                  # explicit
    implicit_momentum: float         # assumed from asynchrony, 1 - 1/g
    sec_per_iter: float
    iters_to_target: float | None    # None: not probed (ruled out by hardware efficiency alone)
    time_to_target_s: float | None
    note: str = ""
    detail: str = ""                     # the protocol's parameter and balancing, e.g. "n=2, balanced"
    iters_band: tuple[float, ...] = ()   # ±1σ band of iters_to_target from the probe's fitted curve

    def __post_init__(self):
        times = (self.sec_per_iter, self.iters_to_target, self.time_to_target_s)
        if self.groups < 1 or self.batch_size < 1 or not all(v is None or v >= 0 for v in times):
            raise ValueError(f"candidate {self.layout!r} {self.protocol} g={self.groups}: needs groups >= 1, "
                             "batch_size >= 1 and times >= 0")


@dataclass(frozen=True)
class Plan:
    schema_version: int
    workload: str
    data_dir: str | None
    target_accuracy: float
    seed: int
    protocol: Protocol
    layout: str
    devices: tuple[Device, ...]                # in rank order of the workers
    groups: tuple[tuple[str, ...], ...]        # device ids of each compute group
    batch_size: dict[str, int]                 # per device id
    lr: float
    momentum: float                            # explicit momentum
    implicit_momentum: float                   # assumed from asynchrony
    prediction: Prediction
    candidates: tuple[Candidate, ...]
    profile: str
    rendezvous: str
    server_host: str
    created_at: str
    softsync_n: int = 1                        # softsync: update after ceil(learners / n) gradients
    scale_lr_by_staleness: bool = True         # softsync: each gradient's step is lr / staleness (Rudra)
    gossip_every: int = 1                      # gossip: average with a random peer every this many steps
    rebalance: bool = False                    # re-balance batches in a group from measured step times
    server_node: int = 0                       # the cluster spec's node that runs the parameter server

    def __post_init__(self):
        if not 0 < self.target_accuracy <= 1:
            raise ValueError(f"target_accuracy must be in (0, 1], got {self.target_accuracy}")
        if not (self.lr > 0 and math.isfinite(self.lr)):
            raise ValueError(f"lr must be positive, got {self.lr}")
        if not -1 < self.momentum < 1:
            raise ValueError(f"momentum must be in (-1, 1), got {self.momentum}")
        ids = [d.id for d in self.devices]
        grouped = [i for g in self.groups for i in g]
        if sorted(grouped) != sorted(ids) or any(not g for g in self.groups):
            raise ValueError(f"groups {self.groups} must split the devices {ids} into non-empty groups")
        if self.protocol in ONE_GROUP_PROTOCOLS and len(self.groups) != 1:
            raise ValueError(f"protocol {self.protocol} takes one group, got {len(self.groups)}")
        if self.protocol == "softsync" and any(len(g) != 1 for g in self.groups):
            raise ValueError("protocol softsync takes one device per group (each a learner)")
        if not 1 <= self.softsync_n <= len(self.groups) and self.protocol == "softsync":
            raise ValueError(f"softsync_n must be in 1..{len(self.groups)} (the learners), got {self.softsync_n}")
        if self.gossip_every < 1:
            raise ValueError(f"gossip_every must be at least 1, got {self.gossip_every}")
        if set(self.batch_size) != set(ids) or min(self.batch_size.values()) < 1:
            raise ValueError(f"batch_size needs a value >= 1 for each device {ids}")
        endpoint(self.rendezvous)
        if self.server_node < 0:
            raise ValueError(f"server_node must be at least 0, got {self.server_node}")

    @property
    def server(self) -> bool:
        """Whether a parameter-server process joins the workers."""
        return self.protocol in SERVER_PROTOCOLS

    @property
    def processes(self) -> int:
        return len(self.devices) + int(self.server)


def save(plan: Plan, path: str | os.PathLike) -> None:
    atomic_write_json(path, to_dict(plan))


def load(path: str | os.PathLike) -> Plan:
    return load_versioned(path, Plan, supported=(1,))
