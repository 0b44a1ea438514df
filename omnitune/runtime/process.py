"""The entry point of every process of a run: join the job, build the model, run the loop that
the variant's table gives this process's role."""

from __future__ import annotations

import dataclasses
import itertools
import time
from datetime import timedelta
from pathlib import Path
from typing import Callable

import torch
import torch.distributed as dist

from omnitune.core import env, protocols
from omnitune.core.change import Knobs
from omnitune.core.protocols import Variant
import omnitune.runtime.checkpoint as checkpoint
import omnitune.runtime.peer as peer
import omnitune.runtime.segments as segments
import omnitune.runtime.server as server
import omnitune.runtime.worker as worker
import omnitune.runtime.workload as workload_mod
from omnitune.runtime.context import Context, JobArgs, backend, torch_device
from omnitune.runtime.launch import join
from omnitune.runtime.topology import group_ranks, nodes, roles
from omnitune.runtime.workload import Workload

Loop = Callable[..., "dict | None"]

# Each variant's loops: (the parameter server's, or None without one; the workers').
LOOPS: dict[type[Variant], tuple[Loop | None, Loop]] = {
    protocols.Sync: (None, worker.train_sync),
    protocols.Groups: (server.serve, worker.train_member),
    protocols.SoftSync: (server.serve, worker.train_member),
    protocols.HPSGD: (None, peer.train_hpsgd),
    protocols.Gossip: (None, peer.train_gossip),
}


def main(job: JobArgs) -> dict | None:
    """Run this process's role; the coordinator returns the run summary as a dict."""
    spec = job.spec
    rank, store = join(nodes(spec), job.node, job.store_port, job.timeout_s, backend(spec))
    try:
        job = dataclasses.replace(job, attempt=agreed_attempt())
        latest = Path(job.run_dir) / checkpoint.FILE
        if job.attempt > 0 and rank == 0 and latest.is_file():   # restarted by torchelastic: go on from there
            job = dataclasses.replace(job, resume_from=str(latest))
        wl = workload_mod.load(spec.workload)
        train, test = wl.build_datasets(spec.data_dir, spec.seed)
        result = run_role(job, wl, train, test, store)
        segment = 0
        while job.owner_pid:              # a re-tuned run's processes wait for its next segment
            if rank == 0:
                segments.mark_paused(job, segment)
            job = segments.next_segment(store, job, segment)
            if job is None:
                break
            result, segment = run_role(job, wl, train, test, store), segment + 1
        return result
    except RuntimeError as e:
        if is_consequence(e):
            time.sleep(CAUSE_GRACE_S)
        raise
    finally:
        dist.destroy_process_group()


# A peer that fails closes its connections before its process exits. Its neighbours' "connection
# closed" errors then race its own: the elastic agent records the first process to exit, and stops
# the rest. The neighbours wait this long so that the cause (a timeout, a crash) is the one recorded.
CAUSE_GRACE_S = 2.0


def is_consequence(e: BaseException) -> bool:
    """An error that only says a peer went away."""
    text = str(e).lower()
    return any(s in text for s in ("closed by peer", "reset by peer", "broken pipe"))


def agreed_attempt() -> int:
    """Which start of the job this is. torchelastic counts restarts per node, and a node restarted
    only because another failed does not count one, so take the largest count of any process."""
    count = torch.tensor([env.restart_count()])
    dist.all_reduce(count, op=dist.ReduceOp.MAX)
    return int(count)


_JOBS = itertools.count()     # jobs this process ran: every rank counts alike (inplace.Tuning's keys)
_GROUPS: dict[tuple, tuple] = {}      # key -> (the default group it was made in, kept so its id stays its own; group)


def group(ranks: tuple[int, ...], timeout_s: float) -> dist.ProcessGroup:
    """The process group of `ranks`, created once per default group: the profile's calibration
    jobs and a re-tuned run's segments run job after job in the same processes, and every group's
    creation is a rendezvous of all of them. Every rank asks in the same order, so every rank
    creates the same groups. A group does not inherit the default group's timeout: without one, a
    stuck peer stalls it for 30 min."""
    world = dist.group.WORLD
    key = (id(world), tuple(ranks), timeout_s)
    if key not in _GROUPS:
        _GROUPS[key] = (world, dist.new_group(list(ranks), timeout=timedelta(seconds=timeout_s)))
    return _GROUPS[key][1]


def run_role(job: JobArgs, wl: Workload, train, test, store: dist.Store) -> dict | None:
    """This rank's part of one job, in an initialised process group; ranks the spec leaves out idle.

    Only the coordinator reads the checkpoint to start from (its host alone has the run dir's);
    every rank gets it from there. The profiler calls this too, to time real jobs back to back
    in one set of processes.
    """
    spec = job.spec
    key = next(_JOBS)
    # Every rank creates every group, in the same order (a torch.distributed requirement).
    pgs = [group(r, job.timeout_s) for r in group_ranks(spec)]
    everyone = roles(spec)
    rank = dist.get_rank()
    state = checkpoint.shared(job.resume_from if rank == 0 else None)
    if rank >= len(everyone):
        dist.barrier()
        return None
    device = torch_device(everyone[rank].device)
    torch.manual_seed(spec.seed)                # identical initial weights on every rank
    model = wl.build_model().to(device)
    start = checkpoint.load(state, model, job.resume_from or "the coordinator's checkpoint")
    job = in_force(job, start)
    role = roles(job.spec)[rank]
    torch.manual_seed(spec.seed + role.rank + start.iteration)
    ctx = Context(job, role, device, wl, model, workload_mod.on_device(train, device), test, store, start,
                  key=key, base=Knobs.of(spec))
    dist.barrier()
    serve, train_loop = LOOPS[type(spec.variant)]
    if role.kind == "server":
        return serve(ctx)
    return train_loop(ctx, pgs[role.group])


def in_force(job: JobArgs, start: checkpoint.Start) -> JobArgs:
    """The job with the values its checkpoint's changes in place left in force, where it was
    launched with the values that checkpoint's job was (a restart after a failure, or a resume);
    a job launched with other values (a re-tuned segment) keeps its own."""
    if start.knobs is None or Knobs.from_dict(start.knobs["base"]) != Knobs.of(job.spec):
        return job
    return dataclasses.replace(job, spec=Knobs.from_dict(start.knobs["now"]).on(job.spec))
