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
import sys
from datetime import datetime, timezone
from pathlib import Path
from typing import Callable

import torch

from omnitune import protocols, workload as workload_mod
from omnitune.cluster import Cluster, Device, is_loopback
from omnitune.profile import SCHEMA_VERSION as PROFILE_SCHEMA
from omnitune.profile import DeviceProfile, HostFacts, Network, Profile, StepTiming
from omnitune.runspec import RunSpec
from omnitune.runtime import launch as launch_mod
from omnitune.runtime.context import torch_device
from omnitune.runtime.measure import Settings, StepTimer, measure_steps
from omnitune.runtime.profile_worker import ProfileJob, main as worker_main
from omnitune.runtime.topology import placed_nodes


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
    wl = workload_mod.load(workload_spec)
    model = wl.build_model()
    datasets = wl.build_datasets(data_dir, 0)
    train = datasets[0]
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
        specs = calibration_specs(cluster, biggest, workload_spec, data_dir, settings.calibrate_batches,
                                  server_only=several)
        log_dir.mkdir(parents=True, exist_ok=True)
        # This node's processes load the datasets, faster than building them: from the cache, or a copy here.
        cached = data_dir is None and wl.cache_path() is not None
        shared = log_dir / "datasets.pt"
        job = ProfileJob(workload_spec, data_dir, concurrent, settings, biggest, specs, everyone, here.index,
                         launch_mod.store_port(everyone, cluster.rendezvous),
                         None if cached else workload_mod.share(datasets, shared), str(log_dir),
                         () if several else alone_specs(cluster, biggest, workload_spec, data_dir, settings))
        try:
            results = launch_mod.launch_node(worker_main, (job,), here, everyone, cluster.rendezvous, log_dir,
                                             run_id=f"profile-{_digest(cluster, workload_spec)}")
        finally:
            shared.unlink(missing_ok=True)
        gathered = next((r for r in results.values() if r is not None), None)
        if gathered is None:                    # another node's rank 0 has the measurements
            return None
        by_rank = {r["rank"]: r for r in gathered}
        for r in by_rank.values():
            if "device_id" in r:
                devices[r["device_id"]] = DeviceProfile.measured(r["device_id"], r["steps"], concurrent=True)
        link_kind = "tcp-gloo" if any(not is_loopback(n.host) for n in everyone) else "loopback-gloo"
        network = Network(link_kind=link_kind, allreduce=tuple(by_rank[1]["allreduce"]),
                          p2p=tuple(by_rank[0]["p2p"]), server_update_s=by_rank[0]["server_update_s"])
        calibration = by_rank[0]["calibration"]
    alike: dict[tuple, list[StepTiming]] = {}     # devices outside that layout, alike, are measured once
    for device in cluster.devices:
        if device.id not in devices:
            key = (device.kind, device.host, device.threads, device.emulated_slowdown)
            if key not in alike:
                progress(f"device {device.id} ({device.threads} threads)" if device.kind == "cpu" else device.id)
                alike[key] = measure_alone(wl, train, device, settings)
            devices[device.id] = DeviceProfile.measured(device.id, alike[key], False)
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


def calibration_specs(cluster: Cluster, layout: str, workload_spec: str, data_dir: str | None,
                      batches: tuple[int, ...], server_only: bool = False) -> tuple[RunSpec, ...]:
    """Real jobs to time on `layout`: every protocol variant the planner may choose there.

    The profile's processes are placed as a parameter-server job's (rank i + 1 runs device i);
    a job without a server would put its device i on rank i, another device's process, which
    on one host changes nothing but across hosts is the wrong machine: `server_only` keeps to
    the protocols with a server."""
    ids = cluster.layouts[layout]
    devices = tuple(cluster.device(i) for i in ids)
    return tuple(
        RunSpec(workload=workload_spec, data_dir=data_dir, variant=v, devices=devices, groups=v.group(ids),
                batch_size={i: b for i in ids}, lr=0.01, momentum=0.0, rendezvous=cluster.rendezvous,
                server_host=cluster.server_host, server_node=cluster.server_node)
        for v in protocols.admitted(len(ids)) for b in batches if v.has_server or not server_only)


def alone_specs(cluster: Cluster, measured: str, workload_spec: str, data_dir: str | None,
                settings: Settings) -> tuple[tuple[str, RunSpec], ...]:
    """Sync jobs of the cluster's other layouts of one device, at the smallest and the largest
    calibration batch: the planner's model of such a layout is its device's step time alone, and
    the runtime's loop costs more than a step (teacher-mlp's one worker at batch 192 ran 3.7 ms
    an update where the step times said 2.7), so these jobs calibrate it as the measured
    layout's jobs calibrate that."""
    batches = tuple(dict.fromkeys((settings.calibrate_batches[0], settings.calibrate_batches[-1])))
    return tuple((name, spec) for name, ids in cluster.layouts.items() if name != measured and len(ids) == 1
                 for spec in calibration_specs(cluster, name, workload_spec, data_dir, batches))


def measure_alone(wl, train, device: Device, s: Settings) -> list[StepTiming]:
    threads = torch.get_num_threads()
    try:
        return measure_steps(StepTimer(wl, train, torch_device(device), device), s)
    finally:
        torch.set_num_threads(threads)
