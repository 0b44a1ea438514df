"""`omnitune profile`: measure each device's training step and the links between devices.

Devices of the largest layout are measured concurrently, one process each, so that contention
for cores and memory bandwidth is in the numbers; the same processes then time gloo all-reduce
and point-to-point round trips. Devices outside that layout are measured in this process.
"""

from __future__ import annotations

import hashlib
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
from omnitune.cluster import Cluster, Device, is_loopback
from omnitune.errors import UserError
from omnitune.plan import SCHEMA_VERSION as PLAN_SCHEMA, SERVER_PROTOCOLS, Plan
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
            log_dir: Path, progress: Callable[[str], None] = lambda msg: None,
            node_rank: int | None = None) -> Profile | None:
    """Measure every device of `cluster` and its links, for one workload.

    On a cluster of several nodes each node runs this with its `node_rank`; the node of the
    parameter-server rank gathers the measurements and returns the profile, the others None.
    """
    from omnitune.runtime import launch as launch_mod
    from omnitune.runtime.profile_worker import ProfileJob, main as worker_main
    from omnitune.runtime.topology import placed_nodes

    wl = workload_mod.load(workload_spec)
    model = wl.build_model()
    train, _ = wl.build_datasets(data_dir, 0)
    biggest = max(cluster.layouts, key=lambda k: len(cluster.layouts[k]))
    concurrent = cluster.layout(biggest)
    # Rank 0 plays the parameter server on the server's node; rank i runs device i - 1 where it is.
    everyone = placed_nodes([(cluster.server_node, cluster.server_host)] + [(d.node, d.host) for d in concurrent])
    here = launch_mod.pick_node(everyone, cluster.rendezvous, node_rank, "the cluster spec")
    devices: dict[str, DeviceProfile] = {}
    network, calibration = None, []
    if len(concurrent) > 1:
        progress(f"{len(concurrent)} workers of layout {biggest!r} at once, then their links")
        several = len(everyone) > 1
        plans = calibration_plans(cluster, biggest, workload_spec, data_dir, settings.calibrate_batches,
                                  server_only=several)
        job = ProfileJob(workload_spec, data_dir, concurrent, settings, plans, everyone, here.index,
                         launch_mod.store_port(everyone, cluster.rendezvous))
        results = launch_mod.launch_node(worker_main, (job,), here, everyone, cluster.rendezvous, log_dir,
                                         run_id=f"profile-{_digest(cluster, workload_spec)}")
        gathered = next((r for r in results.values() if r is not None), None)
        if gathered is None:                    # another node's rank 0 has the measurements
            return None
        by_rank = {r["rank"]: r for r in gathered}
        for r in by_rank.values():
            if "device_id" in r:
                devices[r["device_id"]] = device_profile(r["device_id"], r["steps"], concurrent=True)
        link_kind = "tcp-gloo" if any(not is_loopback(n.host) for n in everyone) else "loopback-gloo"
        network = Network(link_kind=link_kind, allreduce=tuple(by_rank[1]["allreduce"]),
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


def _digest(*parts) -> str:
    """Names the rendezvous run that every node of one profile computes alike."""
    return hashlib.sha256(repr(parts).encode()).hexdigest()[:12]


def calibration_plans(cluster: Cluster, layout: str, workload_spec: str, data_dir: str | None,
                      batches: tuple[int, ...], server_only: bool = False) -> tuple[Plan, ...]:
    """Real jobs to time on `layout`: every protocol variant the planner may choose there.

    The profile's processes are placed as a parameter-server job's (rank i + 1 runs device i);
    a job without a server would put its device i on rank i, another device's process, which
    on one host changes nothing but across hosts is the wrong machine: `server_only` keeps to
    the protocols with a server."""
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
        for v in variants(len(ids), PROTOCOLS) for b in batches
        if not server_only or v.protocol in SERVER_PROTOCOLS)


def measure_alone(wl, train, device: Device, s: Settings) -> list[StepTiming]:
    from omnitune.runtime.context import torch_device

    threads = torch.get_num_threads()
    try:
        return measure_steps(StepTimer(wl, train, torch_device(device), device), s)
    finally:
        torch.set_num_threads(threads)
