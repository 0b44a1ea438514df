"""`omnitune profile`: measure each device's training step and the links between devices.

Devices outside the largest CPU layout are measured first, in this process, each with the host
to itself: a GPU without CPU workers contending, its batch grown until its throughput levels off
or its memory runs out. Then the devices of that layout are measured concurrently, one process
each, so that contention for cores and memory bandwidth is in the numbers; the same processes
time gloo all-reduce and point-to-point round trips, and real jobs of the runtime (calibration):
every protocol on that layout, each one-device layout, and each layout of GPUs beside CPU
workers, with batches balanced from the steps measured before. CPU workers of a width between
the concurrent layout's and the widest are not timed: their steps are modelled from those two
(`in_between`). The layouts of a few such workers get no calibration job, and the planner times
such a setup by a real job before it may win; a GPU machine's `cpu-rest` is in the mixed
layout's jobs, balanced from the widest's steps scaled by threads.
"""

from __future__ import annotations

import hashlib
import math
import statistics
import time
from dataclasses import replace
from datetime import datetime, timezone
from pathlib import Path
from typing import Callable

import torch

from omnitune.core import protocols
from omnitune.core.cluster import Cluster, Device, is_loopback
from omnitune.core.errors import UserError
from omnitune.core.profile import SCHEMA_VERSION as PROFILE_SCHEMA
from omnitune.core.profile import DeviceProfile, Network, Profile, StepTiming
from omnitune.core.runspec import RunSpec
from omnitune.runtime import workload as workload_mod
from omnitune.runtime import launch as launch_mod
from omnitune.runtime.context import torch_device
from omnitune.runtime.host import host_facts
from omnitune.runtime.measure import Settings, StepTimer, alone_steps
from omnitune.runtime.profile_worker import ProfileJob, main as worker_main
from omnitune.runtime.topology import placed_nodes

SHARED_DATASETS = "datasets.pt"     # in the log dir: the datasets this node's processes load (workload.share)


def profile(cluster: Cluster, workload_spec: str, data_dir: str | None, settings: Settings,
            log_dir: Path, progress: Callable[[str], None] = lambda msg: None,
            node_rank: int | None = None) -> Profile | None:
    """Measure every device of `cluster` and its links, for one workload.

    On a cluster of several nodes each node runs this with its `node_rank`; the node of the
    parameter-server rank gathers the measurements and returns the profile, the others None.
    """
    biggest = concurrent_layout(cluster)
    concurrent = cluster.layout(biggest)
    if len(concurrent) > 1:
        launch_mod.start_server()   # (the command may have started it already) its imports overlap ours
    wl = workload_mod.load(workload_spec)
    model = wl.build_model()
    datasets = wl.build_datasets(data_dir, 0)
    train = datasets[0]
    # Rank 0 plays the parameter server on the server's node; rank i runs device i - 1 where it is.
    everyone = placed_nodes([(cluster.server_node, cluster.server_host)] + [(d.node, d.host) for d in concurrent])
    here = launch_mod.pick_node(everyone, cluster.rendezvous, node_rank, "the cluster spec")
    launch_mod.server_ready()       # started by the command, importing beside it: not beside a timing
    network, calibration = None, []
    modelled = in_between(cluster, biggest) if len(concurrent) > 1 else {}
    devices = outside(cluster, biggest, wl, train, settings, progress, skip=set(modelled)) \
        if here.index == 0 or len(concurrent) == 1 else {}
    if len(concurrent) > 1:
        progress(f"{len(concurrent)} workers of layout {biggest!r} at once, then their links")
        job = concurrent_job(cluster, biggest, workload_spec, data_dir, settings, wl, datasets, devices, modelled,
                             everyone, here, log_dir)
        try:
            results = launch(job, here, everyone, cluster, workload_spec, log_dir, progress)
        finally:
            (log_dir / SHARED_DATASETS).unlink(missing_ok=True)
        gathered = next((r for r in results.values() if r is not None), None)
        if gathered is None:                    # another node's rank 0 has the measurements
            return None
        network, calibration = read_gathered(gathered, devices, everyone)
        progress(took(gathered[0]["phases"], len(concurrent) + 1))      # a rank per device, and the server rank
        add_modelled(cluster, modelled, devices, progress)
    for device in cluster.devices:          # the one device of a one-device cluster
        if device.id not in devices:
            progress(named(device))
            devices[device.id] = DeviceProfile.measured(device.id, measure_alone(wl, train, device, settings,
                                                                                 progress), False)
    return Profile(
        schema_version=PROFILE_SCHEMA, workload=workload_spec,
        model_params=sum(p.numel() for p in model.parameters()),
        model_bytes=sum(p.numel() * p.element_size() for p in model.parameters()),
        cluster=cluster, devices=tuple(devices[d.id] for d in cluster.devices), network=network,
        host=host_facts(), measured_at=datetime.now(timezone.utc).isoformat(timespec="seconds"),
        quick=settings.repeats < Settings().repeats, calibration=tuple(calibration),
    )


def concurrent_job(cluster: Cluster, biggest: str, workload_spec: str, data_dir: str | None, settings: Settings,
                   wl, datasets, devices: dict[str, DeviceProfile], modelled: dict[str, tuple[str, str]],
                   everyone, here, log_dir: Path) -> ProfileJob:
    """The launch of the concurrent layout's processes: their steps side by side, their links and
    the calibration jobs (on several nodes, only those of protocols with a server); on one node,
    the other one-device layouts' jobs and the mixed layouts', balanced from the steps of
    `devices` and of the `modelled` workers (the widest's, by threads)."""
    several = len(everyone) > 1
    specs = calibration_specs(cluster, biggest, workload_spec, data_dir, settings.calibrate_batches,
                              server_only=several)
    log_dir.mkdir(parents=True, exist_ok=True)
    # This node's processes load the datasets, faster than building them: from the cache, or a copy here.
    cached = data_dir is None and wl.cache_path() is not None
    return ProfileJob(workload_spec, data_dir, cluster.layout(biggest), settings, biggest, specs, everyone, here.index,
                      launch_mod.store_port(everyone, cluster.rendezvous),
                      None if cached else workload_mod.share(datasets, log_dir / SHARED_DATASETS), str(log_dir),
                      () if several else alone_specs(cluster, biggest, workload_spec, data_dir, settings),
                      () if several else mixed_specs(cluster, workload_spec, data_dir, settings),
                      {**{d: dp.steps for d, dp in devices.items()},
                       **{d: interpolated(cluster, d, narrow, wide, devices).steps
                          for d, (narrow, wide) in modelled.items() if wide in devices}}, time.time())


def add_modelled(cluster: Cluster, modelled: dict[str, tuple[str, str]], devices: dict[str, DeviceProfile],
                 progress: Callable[[str], None]) -> None:
    """Add to `devices` the steps of the `modelled` workers whose widest was timed (interpolated),
    and say which were modelled between what."""
    for d, (narrow, wide) in modelled.items():
        if wide in devices:     # timed where the server's node is the first: else measure d alone (profile)
            devices[d] = interpolated(cluster, d, narrow, wide, devices)
    for narrow, wide in dict.fromkeys(modelled.values()):
        ids = [d for d, pair in modelled.items() if pair == (narrow, wide) and d in devices]
        threads = sorted({cluster.device(d).threads for d in ids})
        if ids:
            progress(f"{len(ids)} workers of {', '.join(map(str, threads))} threads not timed: modelled between "
                     f"{narrow}'s layout and {wide}")


def outside(cluster: Cluster, biggest: str, wl, train, settings: Settings,
            progress: Callable[[str], None], skip: set[str] = frozenset()) -> dict[str, DeviceProfile]:
    """The devices outside the concurrent layout but those in `skip`, measured first, alike ones
    once, each with the host to itself (a GPU without CPU workers beside it): the mixed layouts'
    calibration jobs balance from them."""
    devices: dict[str, DeviceProfile] = {}
    alike: dict[tuple, list[StepTiming]] = {}
    concurrent_ids = set(cluster.layouts[biggest])
    for device in cluster.devices:
        if device.id not in concurrent_ids and device.id not in skip:
            key = (device.kind, device.host, device.threads, device.emulated_slowdown)
            if key not in alike:
                progress(named(device))
                began = time.perf_counter()
                alike[key] = measure_alone(wl, train, device, settings, progress)
                progress(f"{named(device)}: timed in {time.perf_counter() - began:.1f}s")
            devices[device.id] = DeviceProfile.measured(device.id, alike[key], False)
    return devices


def in_between(cluster: Cluster, biggest: str) -> dict[str, tuple[str, str]]:
    """The CPU workers whose steps are modelled, not timed, each with the two devices it is
    modelled between: a worker outside the concurrent layout whose threads lie strictly between
    those of that layout's CPU workers on its host (one per core, timed side by side) and those
    of the widest CPU worker there (timed alone), as the layouts of a few workers between one
    per core and one on all are. No calibration job runs the layouts of a few such workers, so the
    planner times such a setup by a real job before it may win, and their steps only rank it
    (`cpu-rest` beside a GPU is in that mixed layout's jobs). Timing them would cost a machine of
    many cores a fifth of its profile (docs/decisions.md, profiler.in_between)."""
    concurrent_ids = cluster.layouts[biggest]
    plain = [c for c in cluster.devices if c.kind == "cpu" and c.emulated_slowdown == 1.0]
    out = {}
    for d in plain:
        narrow = [c for c in plain if c.id in concurrent_ids and c.host == d.host]
        wide = [w for w in plain if w.id not in concurrent_ids and w.host == d.host]
        if d.id not in concurrent_ids and narrow:
            n, w = narrow[0], max(wide, key=lambda x: x.threads)
            if n.threads < d.threads < w.threads:
                out[d.id] = (n.id, w.id)
    return out


def scaled(steps, factor: float) -> tuple[StepTiming, ...]:
    """Step timings `factor` times as long."""
    return tuple(StepTiming(s.batch_size, s.sec_per_step * factor, s.samples_per_s / factor, s.spread) for s in steps)


def interpolated(cluster: Cluster, device_id: str, narrow: str, wide: str,
                 devices: dict[str, DeviceProfile]) -> DeviceProfile:
    """A CPU worker's steps modelled from the narrow workers' (the median over those of the
    narrow one's threads on its host, timed side by side, at the batches every one of them
    timed) and the widest's (timed alone): at each batch both timed, the throughput per thread is
    interpolated geometrically in log threads; past the largest such batch, the widest's steps
    times the model's ratio to them there, up to the widest's largest batch (a worker of fewer
    threads is not cut to the batches a one-thread worker reached in its time cap). Per thread,
    the narrow workers are slowed by their neighbours and the widest by its threads'
    synchronisation, so the model lies between the two. Against such workers timed alone it
    reads up to twice their step (docs/decisions.md, profiler.in_between): a worker timed alone
    has the host to itself, which it does not have in its layout, and no job of such a layout
    has timed the truth."""
    d, n, w = cluster.device(device_id), cluster.device(narrow), cluster.device(wide)
    siblings = [devices[c.id].steps for c in cluster.devices
                if c.id in devices and devices[c.id].concurrent and c.kind == "cpu" and c.host == n.host
                and c.threads == n.threads and c.emulated_slowdown == n.emulated_slowdown]
    common = set.intersection(*({s.batch_size for s in steps} for steps in siblings)) if siblings else set()
    widest = {s.batch_size: s for s in devices[wide].steps}
    share = math.log(d.threads / n.threads) / math.log(w.threads / n.threads)
    steps = []
    for b in sorted(common & set(widest)):
        timed = [s for sib in siblings for s in sib if s.batch_size == b]
        narrow_s = statistics.median(s.sec_per_step for s in timed) * n.threads    # seconds per sample-thread
        wide_s = widest[b].sec_per_step * w.threads
        sec = math.exp((1 - share) * math.log(narrow_s) + share * math.log(wide_s)) / d.threads
        steps.append(StepTiming(b, sec, b / sec, statistics.median(s.spread for s in timed)))
    last = steps[-1] if steps else None
    ratio = last.sec_per_step / widest[last.batch_size].sec_per_step if last else w.threads / d.threads
    steps += scaled([s for b, s in sorted(widest.items()) if last is None or b > last.batch_size], ratio)
    return replace(DeviceProfile.measured(device_id, steps, False), modelled=True)


def took(phases: dict, processes: int) -> str:
    """What the concurrent launch's parts took (profile_worker.main's phases)."""
    return (f"{processes} processes ready in {phases['ready_s']:.1f}s; timed the steps in {phases['steps_s']:.1f}s, "
            f"the links in {phases['links_s']:.1f}s, {phases['calibration_jobs']} calibration jobs "
            f"(of {phases.get('calibration_job_s', 0.0):.2f}s each) in {phases['calibration_s']:.1f}s"
            + (f" ({phases['calibration_left_out']} more left out past the deadline: modelled, and timed "
               "before they may win)" if phases.get("calibration_left_out") else ""))


def read_gathered(gathered: list[dict], devices: dict[str, DeviceProfile], everyone) -> tuple[Network, list]:
    """The concurrent job's results: each device's steps (into `devices`), the network, the
    calibration jobs."""
    by_rank = {r["rank"]: r for r in gathered}
    for r in by_rank.values():
        if "device_id" in r:
            devices[r["device_id"]] = DeviceProfile.measured(r["device_id"], r["steps"], concurrent=True)
    link_kind = "tcp-gloo" if any(not is_loopback(n.host) for n in everyone) else "loopback-gloo"
    network = Network(link_kind=link_kind, allreduce=tuple(by_rank[1]["allreduce"]),
                      p2p=tuple(by_rank[0]["p2p"]), server_update_s=by_rank[0]["server_update_s"])
    return network, by_rank[0]["calibration"]


def launch(job: ProfileJob, here, everyone, cluster: Cluster, workload_spec: str, log_dir: Path,
           progress: Callable[[str], None]) -> dict:
    """The profile's processes; should a GPU's mixed-layout jobs fail (the GPU beside CPU workers
    is the one part the CPU-only tests cannot run), once more without them, so that the profile
    still ends: those layouts are then modelled, and the planner times any that leads."""
    run_id = f"profile-{_digest(cluster, workload_spec)}"
    try:
        return launch_mod.launch_node(worker_main, (job,), here, everyone, cluster.rendezvous, log_dir, run_id=run_id)
    except UserError as e:
        if not job.mixed_specs:
            raise
        progress(f"the calibration jobs of GPUs beside CPU workers failed ({e}); measuring again without them")
        return launch_mod.launch_node(worker_main, (replace(job, mixed_specs=()),), here, everyone,
                                      cluster.rendezvous, log_dir, run_id=run_id + "-again")


def named(device: Device) -> str:
    return f"device {device.id} ({device.threads} threads)" if device.kind == "cpu" else device.id


def concurrent_layout(cluster: Cluster) -> str:
    """The layout measured with its devices side by side: the largest of CPU workers alone where
    there is one (GPUs are timed without CPU workers contending), else the largest."""
    def key(name: str) -> tuple[bool, int]:
        ids = cluster.layouts[name]
        return all(cluster.device(d).kind == "cpu" for d in ids), len(ids)
    return max(cluster.layouts, key=key)


def mixed_specs(cluster: Cluster, workload_spec: str, data_dir: str | None,
                settings: Settings) -> tuple[tuple[str, RunSpec], ...]:
    """Sync jobs with balanced batches of each layout that puts GPUs beside CPU workers, at the
    smallest and the largest calibration batch: such a layout runs as nothing else measured does
    (the GPU's process and the CPU threads share the host; gloo copies the GPU's gradient), so it
    is timed as it would run. The worker balances the batches from the measured steps."""
    batches = tuple(dict.fromkeys((settings.calibrate_batches[0], settings.calibrate_batches[-1])))
    out = []
    for name, ids in cluster.layouts.items():
        kinds = {cluster.device(d).kind for d in ids}
        if kinds == {"cpu", "cuda"} and len({cluster.device(d).node for d in ids}) == 1:
            devices = tuple(cluster.device(d) for d in ids)
            out += [(name, RunSpec(workload=workload_spec, data_dir=data_dir, variant=protocols.Sync(balanced=True),
                                   devices=devices, groups=(ids,), batch_size={i: b for i in ids}, lr=0.01,
                                   momentum=0.0, rendezvous=cluster.rendezvous, server_host=cluster.server_host,
                                   server_node=cluster.server_node)) for b in batches]
    return tuple(out)


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
    the runtime's loop costs more than a step timed alone, so these jobs calibrate it as the
    measured layout's jobs calibrate that."""
    batches = tuple(dict.fromkeys((settings.calibrate_batches[0], settings.calibrate_batches[-1])))
    return tuple((name, spec) for name, ids in cluster.layouts.items() if name != measured and len(ids) == 1
                 for spec in calibration_specs(cluster, name, workload_spec, data_dir, batches))


def measure_alone(wl, train, device: Device, s: Settings,
                  progress: Callable[[str], None] = lambda msg: None) -> list[StepTiming]:
    """Step timings of a device outside the concurrent layout, in this process (alone_steps):
    a GPU's range grows past max_batch, and a size that does not fit in memory ends it with one
    line to `progress`. The device's threads and cached GPU memory are given back after, since
    this process goes on to measure other devices."""
    threads = torch.get_num_threads()
    try:
        return alone_steps(StepTimer(wl, train, torch_device(device), device), device, s, progress)
    finally:
        torch.set_num_threads(threads)
        if device.kind == "cuda":
            torch.cuda.empty_cache()        # the timer, its model and state, is gone with the call
