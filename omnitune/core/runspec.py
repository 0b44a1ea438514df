"""A run spec: what to run. The runtime, and the profiler's calibration jobs, take one of these;
a plan is a run spec plus the prediction that chose it."""

from __future__ import annotations

import math
from dataclasses import dataclass

from omnitune.core.cluster import LOOPBACK, Device, endpoint
from omnitune.core.protocols import Variant
from omnitune.core.target import Target, from_fields


@dataclass(frozen=True)
class RunSpec:
    workload: str
    data_dir: str | None
    variant: Variant                           # the protocol and its shape
    devices: tuple[Device, ...]                # in rank order of the workers
    groups: tuple[tuple[str, ...], ...]        # device ids of each compute group
    batch_size: dict[str, int]                 # per device id
    lr: float
    momentum: float                            # explicit; the runtime's own update takes any in (-1, 1)
    seed: int = 0
    horizon: int = 0                           # iterations the recipe's schedule spans (0: a constant rate)
    weight_decay: float | None = None          # the plan's choice over the recipe's (None: the recipe's)
    target_accuracy: float | None = None       # stop on reaching it; None: train for the time allowed
    target_loss: float | None = None           # or stop on a test loss at or below it
    rendezvous: str = f"{LOOPBACK}:0"          # c10d rendezvous host:port; port 0 = pick a free one
    server_host: str = LOOPBACK
    server_node: int = 0                       # the cluster spec's node that runs the parameter server

    def __post_init__(self):
        if self.target_accuracy is not None and not 0 < self.target_accuracy <= 1:
            raise ValueError(f"target_accuracy must be in (0, 1], got {self.target_accuracy}")
        if self.target_loss is not None and not (self.target_loss > 0 and math.isfinite(self.target_loss)):
            raise ValueError(f"target_loss must be positive, got {self.target_loss}")
        if self.target_accuracy is not None and self.target_loss is not None:
            raise ValueError("a run has one target: target_accuracy or target_loss, not both")
        if not (self.lr > 0 and math.isfinite(self.lr)):
            raise ValueError(f"lr must be positive, got {self.lr}")
        if not -1 < self.momentum < 1:
            raise ValueError(f"momentum must be in (-1, 1), got {self.momentum}")
        ids = self.device_ids
        grouped = [i for g in self.groups for i in g]
        if sorted(grouped) != sorted(ids) or len(set(ids)) != len(ids) or any(not g for g in self.groups):
            raise ValueError(f"groups {self.groups} must split the devices {ids} into non-empty groups")
        self.variant.validate(tuple(len(g) for g in self.groups))
        if set(self.batch_size) != set(ids) or min(self.batch_size.values()) < 1:
            raise ValueError(f"batch_size needs a value >= 1 for each device {ids}")
        endpoint(self.rendezvous)
        if self.weight_decay is not None and not (self.weight_decay >= 0 and math.isfinite(self.weight_decay)):
            raise ValueError(f"weight_decay must be a number >= 0, got {self.weight_decay}")
        if self.horizon < 0:
            raise ValueError(f"horizon must be at least 0, got {self.horizon}")
        if self.server_node < 0:
            raise ValueError(f"server_node must be at least 0, got {self.server_node}")

    @property
    def target(self) -> Target | None:
        return from_fields(self.target_accuracy, self.target_loss)

    @property
    def device_ids(self) -> tuple[str, ...]:
        return tuple(d.id for d in self.devices)

    @property
    def group_batches(self) -> tuple[tuple[int, ...], ...]:
        """Each compute group's per-device batches, in group order."""
        return tuple(tuple(self.batch_size[d] for d in g) for g in self.groups)

    @property
    def server(self) -> bool:
        """Whether a parameter-server process joins the workers."""
        return self.variant.has_server

    @property
    def processes(self) -> int:
        return len(self.devices) + int(self.server)

    def device(self, device_id: str) -> Device:
        return next(d for d in self.devices if d.id == device_id)
