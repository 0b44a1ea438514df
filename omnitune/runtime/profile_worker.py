"""One process of `omnitune profile`'s concurrent measurement.

Each rank claims its device and times training steps while the others do the same (a barrier
per batch size keeps them concurrent). Then all ranks time gloo all-reduce for every group size
2..n, rank 0 and rank 1 time point-to-point round trips, and rank 0 times one parameter-server
update of the model.
"""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass
from datetime import timedelta

import torch
import torch.distributed as dist

from omnitune import env, workload as workload_mod
from omnitune.cluster import Device
from omnitune.profile import AllReduceTiming, Network, P2PTiming


@dataclass(frozen=True)
class ProfileJob:
    workload: str
    data_dir: str | None
    devices: tuple[Device, ...]       # one per rank
    settings: "object"                # profiler.Settings


def message_sizes(model_bytes: int) -> list[int]:
    """A small message for latency, then ¼×, 1× and 4× the model for bandwidth (bytes, ×4)."""
    sizes = {4096, max(4, model_bytes // 4 // 4 * 4), model_bytes // 4 * 4, model_bytes * 4 // 4 * 4}
    return sorted(s for s in sizes if s >= 4)


def _timed(fn, repeats: int) -> float:
    fn()
    times = []
    for _ in range(repeats):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return statistics.median(times)


def time_allreduce(n: int, sizes: list[int], repeats: int) -> list[AllReduceTiming]:
    out = []
    rank = dist.get_rank()
    for k in range(2, n + 1):
        group = dist.new_group(list(range(k)))        # every rank creates every group, in order
        for nbytes in sizes:
            dist.barrier()
            if rank < k:
                t = torch.zeros(nbytes // 4)
                sec = _timed(lambda: dist.all_reduce(t, group=group), repeats)
                out.append(AllReduceTiming(group_size=k, bytes=nbytes, seconds=sec))
    return out


def time_p2p(sizes: list[int], repeats: int) -> list[P2PTiming]:
    out = []
    rank = dist.get_rank()
    for nbytes in sizes:
        dist.barrier()
        t = torch.zeros(nbytes // 4)
        if rank == 0:
            def ping():
                dist.send(t, dst=1)
                dist.recv(t, src=1)
            out.append(P2PTiming(bytes=nbytes, round_trip_s=_timed(ping, repeats)))
        elif rank == 1:
            for _ in range(repeats + 1):
                dist.recv(t, src=0)
                dist.send(t, dst=0)
    return out


def time_server_update(model: torch.nn.Module, repeats: int) -> float:
    from omnitune.runtime.flat import get_params, num_params
    from omnitune.runtime.server import apply_update, make_optimizer

    threads = torch.get_num_threads()
    torch.set_num_threads(1)                          # the server runs with one thread
    model = model.cpu()
    opt = make_optimizer(model, lr=1e-3, momentum=0.9)
    grad, weights = torch.randn(num_params(model)) * 1e-3, torch.zeros(num_params(model))

    def update():
        apply_update(model, opt, grad)
        get_params(model, weights)
    try:
        return _timed(update, repeats)
    finally:
        torch.set_num_threads(threads)


def main(job: ProfileJob) -> dict:
    from omnitune.profiler import StepTimer, measure_steps
    from omnitune.runtime.context import torch_device

    rank = env.rank()
    device = job.devices[rank]
    torch_dev = torch_device(device)
    dist.init_process_group("gloo", timeout=timedelta(seconds=300))
    try:
        wl = workload_mod.load(job.workload)
        train, _ = wl.build_datasets(job.data_dir, 0)
        timer = StepTimer(wl, train, torch_dev)
        steps = measure_steps(timer, job.settings, barrier=dist.barrier)
        result = {"rank": rank, "device_id": device.id, "steps": steps}
        model_bytes = sum(p.numel() * p.element_size() for p in timer.model.parameters())
        sizes = message_sizes(model_bytes)
        reps = job.settings.link_repeats
        allreduce = time_allreduce(len(job.devices), sizes, reps)
        p2p = time_p2p(sizes, reps)
        if rank == 0:
            result["network"] = Network(link_kind="loopback-gloo", allreduce=tuple(allreduce),
                                        p2p=tuple(p2p), server_update_s=time_server_update(timer.model, reps))
        dist.barrier()
        return result
    finally:
        dist.destroy_process_group()
