"""The profile: what `omnitune profile` measured, as a frozen, versioned dataclass."""

from __future__ import annotations

import math
import os
from dataclasses import dataclass

from omnitune.core.cluster import Cluster
from omnitune.core.files import atomic_write_json, load_versioned, to_dict

SCHEMA_VERSION = 4          # 2 added calibration staleness, 3 step spread, 4 modelled devices; older files load as they are


def _positive(x: float) -> bool:
    return x > 0 and math.isfinite(x)


@dataclass(frozen=True)
class StepTiming:
    """One device training at one batch size: forward, backward and optimizer step."""
    batch_size: int
    sec_per_step: float       # median over repeats, after warm-up
    samples_per_s: float
    spread: float = 0.0       # standard deviation of log(seconds) over the repeats (0: not measured)

    def __post_init__(self):
        if self.batch_size < 1 or not (self.sec_per_step > 0 and math.isfinite(self.sec_per_step)):
            raise ValueError(f"batch {self.batch_size}: needs batch_size >= 1 and sec_per_step > 0")
        if not (self.samples_per_s > 0 and math.isfinite(self.samples_per_s)):
            raise ValueError(f"batch {self.batch_size}: samples_per_s must be positive, got {self.samples_per_s}")
        if not (self.spread >= 0 and math.isfinite(self.spread)):
            raise ValueError(f"batch {self.batch_size}: spread must be a finite number >= 0, got {self.spread}")


@dataclass(frozen=True)
class DeviceProfile:
    device_id: str
    steps: tuple[StepTiming, ...]
    max_batch: int            # the largest batch measured that fit (and kept within the time cap)
    concurrent: bool          # measured while the other devices of its layout ran too
    modelled: bool = False    # steps modelled from other devices' (profiler.in_between), not timed

    def __post_init__(self):
        if not self.steps:
            raise ValueError(f"device {self.device_id!r}: no step timings")
        if self.max_batch < 1:
            raise ValueError(f"device {self.device_id!r}: max_batch must be at least 1, got {self.max_batch}")

    @classmethod
    def measured(cls, device_id: str, steps, concurrent: bool) -> "DeviceProfile":
        """A device's profile from its step timings: the largest batch timed is its max_batch."""
        return cls(device_id, tuple(steps), max(t.batch_size for t in steps), concurrent)

    @property
    def best(self) -> StepTiming:
        return max(self.steps, key=lambda s: s.samples_per_s)


@dataclass(frozen=True)
class AllReduceTiming:
    group_size: int
    bytes: int
    seconds: float            # median time of one all_reduce of a float32 tensor of `bytes`

    def __post_init__(self):
        if self.group_size < 2 or self.bytes < 1 or not _positive(self.seconds):
            raise ValueError(f"all-reduce of {self.bytes} bytes among {self.group_size}: "
                             "needs group_size >= 2, bytes >= 1 and seconds > 0")


@dataclass(frozen=True)
class P2PTiming:
    bytes: int
    round_trip_s: float       # median time of send(bytes) then recv(bytes) back

    def __post_init__(self):
        if self.bytes < 1 or not _positive(self.round_trip_s):
            raise ValueError(f"round trip of {self.bytes} bytes: needs bytes >= 1 and round_trip_s > 0")


@dataclass(frozen=True)
class Network:
    link_kind: str                       # e.g. "loopback-gloo"
    allreduce: tuple[AllReduceTiming, ...]
    p2p: tuple[P2PTiming, ...]
    server_update_s: float               # the parameter server applying one update to the model

    def __post_init__(self):
        if not _positive(self.server_update_s):
            raise ValueError(f"server_update_s must be positive, got {self.server_update_s}")


@dataclass(frozen=True)
class Calibration:
    """A real job of the runtime (omnitune run's code) timed for a short while."""
    layout: str
    protocol: str
    groups: int
    batch_size: int           # per device
    sec_per_iter: float       # measured: training time / model updates
    staleness: tuple[int, ...] = ()   # measured: staleness[t] gradients applied t updates late
    # The groups the job ran and each member's batch, where they were formed by speed (balanced
    # or not); empty: the layout split into equal groups in order, batch_size on every device.
    members: tuple[tuple[str, ...], ...] = ()
    batches: tuple[tuple[int, ...], ...] = ()
    balanced: bool = False    # the batches followed measured speed (Ji et al.)

    def __post_init__(self):
        if self.groups < 1 or self.batch_size < 1 or not _positive(self.sec_per_iter):
            raise ValueError(f"calibration {self.layout!r}: needs groups >= 1, batch_size >= 1 and sec_per_iter > 0")


@dataclass(frozen=True)
class HostFacts:
    hostname: str
    cpu_count: int
    platform: str
    python: str
    torch: str
    cuda_devices: tuple[str, ...]

    def __post_init__(self):
        if self.cpu_count < 1:
            raise ValueError(f"cpu_count must be at least 1, got {self.cpu_count}")


@dataclass(frozen=True)
class Profile:
    schema_version: int
    workload: str
    model_params: int
    model_bytes: int
    cluster: Cluster
    devices: tuple[DeviceProfile, ...]
    network: Network | None              # None when no layout has two or more devices
    host: HostFacts
    measured_at: str
    quick: bool
    calibration: tuple[Calibration, ...] = ()

    def __post_init__(self):
        if self.model_params < 1 or self.model_bytes < 1:
            raise ValueError(f"model_params and model_bytes must be at least 1, got {self.model_params}, "
                             f"{self.model_bytes}")
        measured = {d.device_id for d in self.devices}
        missing = [d.id for d in self.cluster.devices if d.id not in measured]
        if missing:
            raise ValueError(f"devices: no measurements for {missing}")
        for cal in self.calibration:
            if not 1 <= cal.groups <= len(self.cluster.layouts.get(cal.layout, ())):
                raise ValueError(f"calibration: layout {cal.layout!r} with {cal.groups} groups does not fit "
                                 f"the cluster's layouts {sorted(self.cluster.layouts)}")

    def device(self, device_id: str) -> DeviceProfile:
        return next(d for d in self.devices if d.device_id == device_id)


def save(profile: Profile, path: str | os.PathLike) -> None:
    atomic_write_json(path, to_dict(profile))


def load(path: str | os.PathLike) -> Profile:
    return load_versioned(path, Profile, supported=(1, 2, 3, SCHEMA_VERSION))
