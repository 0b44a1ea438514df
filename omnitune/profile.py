"""The profile: what `omnitune profile` measured, as a frozen, versioned dataclass."""

from __future__ import annotations

import math
import os
from dataclasses import dataclass

from omnitune.cluster import Cluster
from omnitune.files import atomic_write_json, load_versioned, to_dict

SCHEMA_VERSION = 1


@dataclass(frozen=True)
class StepTiming:
    """One device training at one batch size: forward, backward and optimizer step."""
    batch_size: int
    sec_per_step: float       # median over repeats, after warm-up
    samples_per_s: float

    def __post_init__(self):
        if self.batch_size < 1 or not (self.sec_per_step > 0 and math.isfinite(self.sec_per_step)):
            raise ValueError(f"batch {self.batch_size}: needs batch_size >= 1 and sec_per_step > 0")


@dataclass(frozen=True)
class DeviceProfile:
    device_id: str
    steps: tuple[StepTiming, ...]
    max_batch: int            # the largest batch measured that fit (and kept within the time cap)
    concurrent: bool          # measured while the other devices of its layout ran too

    def __post_init__(self):
        if not self.steps:
            raise ValueError(f"device {self.device_id}: no step timings")

    @property
    def best(self) -> StepTiming:
        return max(self.steps, key=lambda s: s.samples_per_s)


@dataclass(frozen=True)
class AllReduceTiming:
    group_size: int
    bytes: int
    seconds: float            # median time of one all_reduce of a float32 tensor of `bytes`


@dataclass(frozen=True)
class P2PTiming:
    bytes: int
    round_trip_s: float       # median time of send(bytes) then recv(bytes) back


@dataclass(frozen=True)
class Network:
    link_kind: str                       # e.g. "loopback-gloo"
    allreduce: tuple[AllReduceTiming, ...]
    p2p: tuple[P2PTiming, ...]
    server_update_s: float               # the parameter server applying one update to the model


@dataclass(frozen=True)
class Calibration:
    """A real job of the runtime (omnitune run's code) timed for a short while."""
    layout: str
    protocol: str
    groups: int
    batch_size: int           # per device
    sec_per_iter: float       # measured: training time / model updates


@dataclass(frozen=True)
class HostFacts:
    hostname: str
    cpu_count: int
    platform: str
    python: str
    torch: str
    cuda_devices: tuple[str, ...]


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
        measured = {d.device_id for d in self.devices}
        missing = [d.id for d in self.cluster.devices if d.id not in measured]
        if missing:
            raise ValueError(f"devices: no measurements for {missing}")

    def device(self, device_id: str) -> DeviceProfile:
        return next(d for d in self.devices if d.device_id == device_id)


def save(profile: Profile, path: str | os.PathLike) -> None:
    atomic_write_json(path, to_dict(profile))


def load(path: str | os.PathLike) -> Profile:
    return load_versioned(path, Profile, supported=(1,))
