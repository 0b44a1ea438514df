"""`omnitune profile`: measure each device's training step and the links between devices.

Devices of the largest layout are measured concurrently, one process each, so that contention
for cores and memory bandwidth is in the numbers; the same processes then time gloo all-reduce
and point-to-point round trips. Devices outside that layout are measured in this process.
"""

from __future__ import annotations

import os
import platform
import socket
import statistics
import sys
import time
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Callable

import torch

from omnitune import workload as workload_mod
from omnitune.cluster import Cluster, Device
from omnitune.errors import UserError
from omnitune.plan import SCHEMA_VERSION as PLAN_SCHEMA, Plan
from omnitune.runtime.context import emulate_slowdown
from omnitune.profile import SCHEMA_VERSION as PROFILE_SCHEMA
from omnitune.profile import (AllReduceTiming, DeviceProfile, HostFacts, Network, P2PTiming,
                              Profile, StepTiming)


@dataclass(frozen=True)
class Settings:
    """How hard to measure. `quick` trades precision for a run of a few seconds (tests)."""
    # A Settings travels to the profile's worker processes, so it stays a plain frozen value.
    max_batch: int = 512
    max_step_s: float = 0.5     # stop growing the batch once one step takes longer
    repeats: int = 7
    warmup: int = 2
    link_repeats: int = 20
    calibrate_s: float = 0.6                 # each calibration job runs this long
    calibrate_batches: tuple[int, ...] = (8, 32, 128)

    @classmethod
    def make(cls, quick: bool, max_batch: int | None = None) -> "Settings":
        s = cls(max_batch=64, max_step_s=0.1, repeats=3, warmup=1, link_repeats=5, calibrate_s=0.2,
                calibrate_batches=(8, 32)) if quick else cls()
        if max_batch is not None:
            if max_batch < 1:
                raise UserError(f"--max-batch must be at least 1, got {max_batch}")
            s = cls(**{**s.__dict__, "max_batch": max_batch})
        return s


def batch_sizes(max_batch: int) -> list[int]:
    """1, 2, 4, … up to max_batch (included even if not a power of two)."""
    sizes = [1 << k for k in range(max_batch.bit_length()) if 1 << k <= max_batch]
    return sizes + ([max_batch] if sizes[-1] != max_batch else [])


def _median_time(fn: Callable[[], None], repeats: int, warmup: int, sync: Callable[[], None]) -> float:
    for _ in range(warmup):
        fn()
    sync()
    times = []
    for _ in range(repeats):
        t = time.perf_counter()
        fn()
        sync()
        times.append(time.perf_counter() - t)
    return statistics.median(times)


class StepTimer:
    """Times one training step on one device: draw a batch, forward, backward, SGD step."""

    def __init__(self, wl: workload_mod.Workload, train, device: torch.device, emulated: Device | None = None):
        self.wl, self.train, self.device, self.emulated = wl, train, device, emulated
        torch.manual_seed(0)
        self.model = wl.build_model().to(device)
        self.opt = torch.optim.SGD(self.model.parameters(), lr=1e-3, momentum=0.9)
        self.sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)

    def time(self, batch: int, s: Settings) -> float | None:
        """Median seconds per step at `batch`, or None when it does not fit in memory."""
        stream = workload_mod.batches(self.train, batch, seed=0)

        def step():
            # The batch is drawn inside the timed step, as the runtime's loop draws it.
            started = time.perf_counter()
            x, y = next(stream)
            self.opt.zero_grad()
            self.wl.loss_fn(self.model(x.to(self.device)), y.to(self.device)).backward()
            self.opt.step()
            emulate_slowdown(self.emulated, started)
        try:
            return _median_time(step, s.repeats, s.warmup, self.sync)
        except torch.OutOfMemoryError:
            torch.cuda.empty_cache()
            return None


def measure_steps(timer: StepTimer, s: Settings, barrier: Callable[[], None] = lambda: None,
                  on_batch: Callable[[int], None] = lambda b: None) -> list[StepTiming]:
    """Step timings at batch 1, 2, 4, …; `barrier` keeps concurrent devices in step."""
    out: list[StepTiming] = []
    done = False
    for b in batch_sizes(s.max_batch):
        barrier()
        if done:
            continue
        sec = timer.time(b, s)
        if sec is None:
            done = True
            continue
        out.append(StepTiming(batch_size=b, sec_per_step=sec, samples_per_s=b / sec))
        on_batch(b)
        done = sec > s.max_step_s
    if not out:
        raise UserError("profile: not even batch size 1 fits on the device")
    return out


def device_profile(device_id: str, steps: list[StepTiming], concurrent: bool) -> DeviceProfile:
    return DeviceProfile(device_id=device_id, steps=tuple(steps),
                         max_batch=max(t.batch_size for t in steps), concurrent=concurrent)


def host_facts() -> HostFacts:
    cuda = tuple(torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())) \
        if torch.cuda.is_available() else ()
    return HostFacts(hostname=socket.gethostname(), cpu_count=os.cpu_count() or 1,
                     platform=platform.platform(), python=sys.version.split()[0],
                     torch=torch.__version__, cuda_devices=cuda)


def profile(cluster: Cluster, workload_spec: str, data_dir: str | None, settings: Settings,
            log_dir: Path, progress: Callable[[str], None] = lambda msg: None) -> Profile:
    """Measure every device of `cluster` and its links, for one workload."""
    from omnitune.runtime import launch as launch_mod
    from omnitune.runtime.profile_worker import ProfileJob, main as worker_main

    wl = workload_mod.load(workload_spec)
    model = wl.build_model()
    train, _ = wl.build_datasets(data_dir, 0)
    hosts = set(cluster.hosts) - {"127.0.0.1", "localhost"}
    if hosts:
        raise UserError(f"profile: devices on other hosts {sorted(hosts)}: multi-host profiling "
                        "is not supported yet")
    biggest = max(cluster.layouts, key=lambda k: len(cluster.layouts[k]))
    concurrent_ids = cluster.layouts[biggest]
    devices: dict[str, DeviceProfile] = {}
    network, calibration = None, []
    if len(concurrent_ids) > 1:
        progress(f"{len(concurrent_ids)} workers of layout {biggest!r} at once, then their links")
        plans = calibration_plans(cluster, biggest, workload_spec, data_dir, settings.calibrate_batches)
        job = ProfileJob(workload_spec, data_dir, tuple(cluster.device(i) for i in concurrent_ids), settings, plans)
        # One process per device, plus rank 0 playing the parameter server.
        results = launch_mod.launch(worker_main, (job,), len(concurrent_ids) + 1, log_dir)
        by_rank = {r["rank"]: r for r in results.values()}
        for r in by_rank.values():
            if "device_id" in r:
                devices[r["device_id"]] = device_profile(r["device_id"], r["steps"], concurrent=True)
        network = Network(link_kind="loopback-gloo", allreduce=tuple(by_rank[1]["allreduce"]),
                          p2p=tuple(by_rank[0]["p2p"]), server_update_s=by_rank[0]["server_update_s"])
        calibration = by_rank[0]["calibration"]
    for device in cluster.devices:
        if device.id not in devices:
            progress(f"device {device.id} ({device.threads} threads)" if device.kind == "cpu" else device.id)
            devices[device.id] = device_profile(device.id, measure_alone(wl, train, device, settings), False)
    return Profile(
        schema_version=PROFILE_SCHEMA, workload=workload_spec,
        model_params=sum(p.numel() for p in model.parameters()),
        model_bytes=sum(p.numel() * p.element_size() for p in model.parameters()),
        cluster=cluster, devices=tuple(devices[d.id] for d in cluster.devices), network=network,
        host=host_facts(), measured_at=datetime.now(timezone.utc).isoformat(timespec="seconds"),
        quick=settings.repeats < Settings().repeats, calibration=tuple(calibration),
    )


def calibration_plans(cluster: Cluster, layout: str, workload_spec: str, data_dir: str | None,
                      batches: tuple[int, ...]) -> tuple[Plan, ...]:
    """Real jobs to time on `layout`: every protocol variant the planner may choose there."""
    from omnitune.optimizer import PROTOCOLS, split, variants
    from omnitune.plan import Prediction

    ids = cluster.layouts[layout]
    devices = tuple(cluster.device(i) for i in ids)
    return tuple(
        Plan(schema_version=PLAN_SCHEMA, workload=workload_spec, data_dir=data_dir, target_accuracy=1.0, seed=0,
             protocol=v.protocol, layout=layout, devices=devices, groups=split(ids, v.g),
             batch_size={i: b for i in ids}, lr=0.01, momentum=0.0, implicit_momentum=1 - 1 / v.g,
             prediction=Prediction(0.0, 0.0, 0.0), candidates=(), profile="", rendezvous=cluster.rendezvous,
             server_host=cluster.server_host, server_node=cluster.server_node, created_at="",
             softsync_n=v.softsync_n, gossip_every=v.gossip_every)
        for v in variants(len(ids), PROTOCOLS) for b in batches)


def measure_alone(wl, train, device: Device, s: Settings) -> list[StepTiming]:
    from omnitune.runtime.context import torch_device

    threads = torch.get_num_threads()
    try:
        return measure_steps(StepTimer(wl, train, torch_device(device), device), s)
    finally:
        torch.set_num_threads(threads)
