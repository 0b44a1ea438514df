"""One process of `omnitune profile`'s concurrent measurement.

The launch has one process per device of the measured layout (ranks 1..n) and one more (rank 0)
that plays the parameter server; on several nodes each runs where its device is (the server on
the spec's server node), and rank 0 gathers every rank's results. Phase 1: each device rank times training steps while the others
do the same (a barrier per batch size keeps them concurrent). Phase 2: gloo all-reduce among
device ranks for every group size 2..n, point-to-point round trips between the server rank and
a device rank (on another node, when there is one: the link a leader's exchange crosses), and
one server update. Phase 3 (calibration): short real jobs of the runtime itself, in this order:
the cluster's one-device layouts (one worker on every core, a GPU alone), whose job rank 0 runs
while the others wait; the layouts of GPUs beside CPU workers, as sync jobs with balanced
batches on ranks 0, 1, …; each protocol and number of groups of the measured layout, at a few
batch sizes; on devices of unequal speed, last, the server protocols' groups formed by speed
(balanced or not), from phase 1's step times, which every rank gathers, so their staleness is
measured too. No protocol starts its jobs past Settings.calibration_deadline_s.
"""

from __future__ import annotations

import math
import statistics
import tempfile
import time
from dataclasses import dataclass, field, replace
from datetime import timedelta

import torch
import torch.distributed as dist

from omnitune.core import protocols
from omnitune.core.cluster import Device
from omnitune.core.recipe import Recipe
from omnitune.core.profile import AllReduceTiming, Calibration, DeviceProfile, P2PTiming
from omnitune.core.runspec import RunSpec
from omnitune.efficiency.balance import device_batches, speed_calibrations
from omnitune.efficiency.perfmodel import pooled
import omnitune.runtime.workload as workload_mod
from omnitune.runtime.checkpoint import Start, make_optimizer
from omnitune.runtime.context import JobArgs, torch_device
from omnitune.runtime.flat import num_buffers, num_params
from omnitune.runtime.launch import join
from omnitune.runtime.measure import Settings, StepTimer, barriers, measure_steps
from omnitune.runtime.process import run_role
from omnitune.runtime.server import ParameterServer
from omnitune.runtime.topology import Node, roles


@dataclass(frozen=True)
class ProfileJob:
    workload: str
    data_dir: str | None
    devices: tuple[Device, ...]         # device of rank 1, 2, …
    settings: Settings
    layout: str = ""                    # the layout the devices form (named in calibration records)
    calibration_specs: tuple[RunSpec, ...] = ()
    nodes: tuple[Node, ...] = ()        # where each rank runs
    node: int = 0                       # the node these processes run on
    store_port: int = 0                 # of the job's store, served by rank 0
    datasets: str | None = None         # the datasets, written by `workload.share` (None: build them)
    scratch: str = ""                   # a folder of this node's for the calibration jobs' run dirs
    # The cluster's other layouts of one device (one worker on every core), each with its sync job
    # at the calibration batches: timed first, in the server rank's process (profiler.alone_specs).
    alone_specs: tuple[tuple[str, RunSpec], ...] = ()
    # The layouts of GPUs beside CPU workers, each with its sync job (balanced) at the calibration
    # batches, run next by ranks 0, 1, … (profiler.mixed_specs); and the steps of the devices
    # measured alone before this launch (or modelled from them), which with the measured
    # layout's balance those jobs.
    mixed_specs: tuple[tuple[str, RunSpec], ...] = ()
    alone_steps: dict = field(default_factory=dict)
    launched_at: float = 0.0            # time.time() when the processes were launched (phases' ready_s)


def message_sizes(model_bytes: int) -> list[int]:
    """A small message for latency, then ¼×, 1× and 4× the model for bandwidth (bytes, ×4)."""
    sizes = {4096, max(4, model_bytes // 4 // 4 * 4), model_bytes // 4 * 4, model_bytes * 4 // 4 * 4}
    return sorted(s for s in sizes if s >= 4)


# Per message size: fewer repeats (at least 3) when they would take longer, so that a many-rank
# machine's links take a small part of its profile (docs/decisions.md, profile_worker.LINK_BUDGET_S).
LINK_BUDGET_S = 0.4


def repeats_for(warm_s: float, most: int) -> int:
    """How many timed calls fit LINK_BUDGET_S after a warm-up call of `warm_s` (3 to `most`):
    a 5 MB message over a 20 Mbit/s link takes 2 s a call."""
    return max(3, min(most, int(LINK_BUDGET_S / max(warm_s, 1e-9))))


def _timed(fn, repeats: int, agree=lambda warm_s: warm_s) -> float:
    """Median of the timed calls after one warm-up. `agree` turns this rank's warm-up time into
    the one every rank taking part uses, so that all make the same number of calls."""
    t = time.perf_counter()
    fn()
    times = []
    for _ in range(repeats_for(agree(time.perf_counter() - t), repeats)):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return statistics.median(times)


def _slowest(group):
    def agree(warm_s: float) -> float:
        t = torch.tensor([warm_s])
        dist.all_reduce(t, op=dist.ReduceOp.MAX, group=group)
        return float(t)
    return agree


def time_allreduce(n: int, sizes: list[int], repeats: int) -> list[AllReduceTiming]:
    """All-reduce among device ranks 1..k for k = 2..n."""
    out = []
    rank = dist.get_rank()
    for k in range(2, n + 1):
        # Every rank creates every group, in order; a group does not inherit the default's timeout.
        group = dist.new_group(list(range(1, k + 1)), timeout=timedelta(seconds=300))
        for nbytes in sizes:
            dist.barrier()
            if 1 <= rank <= k:
                t = torch.zeros(nbytes // 4)
                sec = _timed(lambda: dist.all_reduce(t, group=group), repeats, _slowest(group))
                out.append(AllReduceTiming(group_size=k, bytes=nbytes, seconds=sec))
    return out


def p2p_partner(nodes) -> int:
    """The device rank the server rank (0) times its round trips with: one on another node when
    there is one (a leader's exchange crosses the link between them), else rank 1."""
    server = next((n for n in nodes if 0 in n.ranks), None)
    far = [r for n in nodes if n is not server for r in n.ranks]
    return min(far) if far else 1


def time_p2p(sizes: list[int], repeats: int, partner: int = 1) -> list[P2PTiming]:
    """Round trips between the server rank (0) and device rank `partner`, as a leader's exchange;
    rank 0 tells the partner how many it will time."""
    out = []
    rank = dist.get_rank()
    for nbytes in sizes:
        dist.barrier()
        t = torch.zeros(nbytes // 4)
        if rank == 0:
            def ping():
                dist.send(t, dst=partner)
                dist.recv(t, src=partner)

            def tell(warm_s: float) -> float:
                dist.send(torch.tensor([warm_s]), dst=partner)
                return warm_s
            out.append(P2PTiming(bytes=nbytes, round_trip_s=_timed(ping, repeats, tell)))
        elif rank == partner:
            dist.recv(t, src=0)
            dist.send(t, dst=0)
            warm = torch.zeros(1)
            dist.recv(warm, src=0)
            for _ in range(repeats_for(float(warm), repeats)):
                dist.recv(t, src=0)
                dist.send(t, dst=0)
    return out


def time_server_update(model: torch.nn.Module, repeats: int, recipe: Recipe) -> float:
    """One update of the parameter server and its reply, as `serve` makes them."""
    torch.set_num_threads(1)                          # the server runs with one thread
    model = model.cpu()
    opt = make_optimizer(model, lr=1e-3, momentum=0.9, start=Start(), recipe=recipe)
    ps = ParameterServer(model, opt, protocols.Groups(g=1))
    size = num_params(model) + num_buffers(model)
    msg, reply = torch.zeros(size + 3), torch.zeros(size + 2)
    msg[:num_params(model)] = torch.randn(num_params(model)) * 1e-3

    def update():
        msg[-1] = ps.clock
        ps.receive(msg, 1)
        ps.update()
        ps.reply(reply, False)
    return _timed(update, repeats)


CALIBRATION_TEST = 64
CALIBRATION_STEPS = 8      # updates a calibration job should see at its larger batch
# Updates a calibration job times at least (past its first, the warm-up), running up to
# monitor.STRETCH times calibrate_s for them: a job that sees only a few updates gives the planner
# the gap between two of them, not the seconds an update takes (docs/decisions.md, monitor.STRETCH
# and profile_worker.CALIBRATION_MIN_UPDATES).
CALIBRATION_MIN_UPDATES = 4
CALIBRATION_FLOOR_S = 0.2  # the shortest a job runs when the budget is shared among many


def job_seconds(s: Settings, jobs: int) -> float:
    """How long each of `jobs` calibration jobs runs: calibrate_s, or less where the jobs would
    outrun calibration_budget_s together (never under CALIBRATION_FLOOR_S, nor over calibrate_s)."""
    return min(s.calibrate_s, max(CALIBRATION_FLOOR_S, s.calibration_budget_s / max(jobs, 1)))


def sized_specs(job: ProfileJob, steps: list, specs: tuple[RunSpec, ...] | None = None) -> tuple[RunSpec, ...]:
    """The layout's calibration jobs (or `specs`), their largest batch cut to the largest that the measured
    steps say a job times CALIBRATION_STEPS updates of in `calibrate_s`, and at least twice the
    smallest batch, so that the two still fix a slope; a middle batch at or above the cut is
    left out. Uncut, a slow model's job at the largest batch sees only a few updates, the first of
    them a warm-up, in several times the time of one at a smaller batch. Where even the smallest
    batch's job would run past `calibrate_s` for its CALIBRATION_MIN_UPDATES updates and warm-up,
    that batch halves, down to `calibrate_least_batch`. By default that is the smallest batch
    itself, as halving made the predictions worse (docs/decisions.md, measure.Settings), and the
    groups formed by speed keep the first."""
    first, large = job.settings.calibrate_batches[0], job.settings.calibrate_batches[-1]
    specs = job.calibration_specs if specs is None else specs
    if large <= first or any(s is None for s in steps) or not specs:
        return specs
    slowest: dict[int, float] = {}
    for timings in steps:
        for t in timings:
            slowest[t.batch_size] = max(slowest.get(t.batch_size, 0.0), t.sec_per_step)
    small = first
    while small // 2 >= job.settings.calibrate_least_batch \
            and slowest.get(small, 0.0) * (CALIBRATION_MIN_UPDATES + 1) > job.settings.calibrate_s:
        small //= 2
    everyone = set.intersection(*({t.batch_size for t in timings} for timings in steps))
    fit = [b for b in everyone if 2 * small <= b <= large
           and slowest[b] * CALIBRATION_STEPS <= job.settings.calibrate_s]
    cut = max(fit, default=min(2 * small, large))
    top = max(min(s.batch_size.values()) for s in specs)
    out = []
    for s in specs:
        b = min(s.batch_size.values())
        if b == first and small < first:
            out.append(replace(s, batch_size=dict.fromkeys(s.batch_size, small)))
        elif b < cut:
            out.append(s)
        elif b == top:
            out.append(replace(s, batch_size=dict.fromkeys(s.batch_size, cut)))
    return tuple(out)


def speed_specs(job: ProfileJob, steps: list) -> tuple[RunSpec, ...]:
    """Calibration jobs of groups formed by speed (balance.speed_calibrations), from the step
    times every device of the layout just measured (the same on every rank), at the smallest
    calibration batch. Their ranks run the devices the groups name: a job whose rank would run
    a device of another node than its process's is left out."""
    base = next((s for s in job.calibration_specs if s.variant.has_server), None)
    if base is None or any(s is None for s in steps):
        return ()
    devices = [DeviceProfile.measured(d.id, s, concurrent=True) for d, s in zip(job.devices, steps)]
    placed = {i + 1: d.node for i, d in enumerate(job.devices)}
    out = []
    for v, groups, batch in speed_calibrations(devices, job.settings.calibrate_batches[0]):
        spec = replace(base, variant=v, groups=groups, batch_size=batch)
        if all(r.device.node == placed[r.rank] for r in roles(spec) if r.kind == "worker"):
            out.append(spec)
    return tuple(out)


def device_steps(job: ProfileJob, steps: list) -> dict:
    """Every device's steps: the measured layout's, and those timed alone."""
    return {d.id: s for d, s in zip(job.devices, steps)} | dict(job.alone_steps)


def layout_steps(timings: dict, steps: list, ids) -> list:
    """The steps that size a layout's jobs: its own devices' (of `timings`), else the measured
    layout's (`steps`). Sized by the CPU cores' steps, a GPU alone is timed at its smallest
    batches only, a line too short to extend (docs/decisions.md, profile_worker.layout_steps)."""
    own = [timings[d] for d in ids if d in timings]
    return own if len(own) == len(ids) else steps


def alone_sized(job: ProfileJob, steps: list) -> list[tuple[str, RunSpec]]:
    """The one-device layouts' jobs, each layout's largest batch cut as `sized_specs` cuts the
    measured layout's, from that layout's own steps (`layout_steps`)."""
    out, timings = [], device_steps(job, steps)
    for layout in dict.fromkeys(name for name, _ in job.alone_specs):
        specs = tuple(s for name, s in job.alone_specs if name == layout)
        ids = [d.id for d in specs[0].devices]
        out += [(layout, s) for s in sized_specs(job, layout_steps(timings, steps, ids), specs)]
    return out


def mixed_sized(job: ProfileJob, steps: list) -> list[tuple[str, RunSpec, int]]:
    """The mixed layouts' jobs (layout, spec, nominal batch), their batches balanced from every
    device's measured steps (the measured layout's and those timed alone), the largest nominal
    batch cut as `sized_specs` cuts the measured layout's, from the layout's own steps."""
    if not job.mixed_specs or any(s is None for s in steps):
        return []
    timings, out = device_steps(job, steps), []
    for layout in dict.fromkeys(name for name, _ in job.mixed_specs):
        specs = tuple(s for name, s in job.mixed_specs if name == layout)
        ids = [d.id for d in specs[0].devices]
        for spec in sized_specs(job, layout_steps(timings, steps, ids), specs):
            if not all(d in timings for d in ids):
                continue
            compute = pooled([DeviceProfile.measured(d, timings[d], concurrent=False) for d in ids])
            nominal = min(spec.batch_size.values())
            batch = device_batches(compute, spec.variant, spec.groups, nominal)
            out.append((layout, replace(spec, batch_size=batch), nominal))
    return out


def calibrate(job: ProfileJob, jobs: list[tuple[str, RunSpec, int | None]], wl, train, test, store,
              seconds: float, deadline_s: float = math.inf) -> tuple[list[Calibration], int]:
    """Run each calibration job (layout, spec, and where its groups or batches were formed by
    speed, its nominal batch; else None) as a real job for `seconds` (longer where it has not
    seen CALIBRATION_MIN_UPDATES updates by then, shorter where it has timed
    Settings.calibration_updates); rank 0 reports seconds per update. No protocol
    starts its jobs once `deadline_s` has passed (rank 0's clock decides for every rank); the
    calibrations, and how many jobs were left out."""
    out, began, unit, going, left_out = [], time.perf_counter(), None, True, 0
    # A calibration job trains for time, not to a target: it evaluates only once, at its end, on
    # a few test samples, so its time goes to the updates it times.
    test = workload_mod.first(test, CALIBRATION_TEST)
    # Enough timed updates end a job early: its first check, after the first update, ends the warm-up.
    updates = job.settings.calibration_updates + 1 if job.settings.calibration_updates > 0 else 0
    with tempfile.TemporaryDirectory(prefix=f"calibration-{dist.get_rank()}-", dir=job.scratch or None) as tmp:
        for layout, spec, nominal in jobs:
            if (layout, spec.variant.key, spec.groups, nominal is None) != unit and going:
                unit = (layout, spec.variant.key, spec.groups, nominal is None)     # a protocol's batches go together
                flag = torch.tensor([int(time.perf_counter() - began < deadline_s)])
                dist.broadcast(flag, src=0)
                going = bool(flag.item())
            if not going:
                left_out += 1
                continue
            args = JobArgs(spec=spec, run_dir=tmp, max_time_s=seconds, eval_every_s=1e9,
                           eval_every_iters=1 << 30, timeout_s=120, plan_path="(calibration)",
                           min_iters=CALIBRATION_MIN_UPDATES, max_iters=updates)
            summary = run_role(args, wl, train, test, store)
            if summary is None:
                continue
            cal = Calibration(layout=layout, protocol=spec.variant.key, groups=len(spec.groups),
                              batch_size=spec.batch_size[spec.devices[0].id],
                              sec_per_iter=summary["measured_sec_per_iter"], staleness=tuple(summary["staleness"]))
            if nominal is not None:
                cal = replace(cal, batch_size=nominal, members=spec.groups,
                              batches=spec.group_batches,
                              balanced=spec.variant.balanced)
            out.append(cal)
    return out, left_out


def calibration_jobs(job: ProfileJob, measured: list) -> list[tuple[str, RunSpec, int | None]]:
    """Every calibration job (layout, spec, nominal batch where speed formed its groups or
    batches), each layout's batches cut to what its steps say fits `calibrate_s`, in the order
    they run: the one-device layouts (where a GPU alone is), the GPUs beside CPU workers, the
    measured layout's protocols, then its groups formed by speed."""
    return ([(layout, s, None) for layout, s in alone_sized(job, measured)]
            + mixed_sized(job, measured)
            + [(job.layout, s, None) for s in sized_specs(job, measured)]
            + [(job.layout, s, job.settings.calibrate_batches[0]) for s in speed_specs(job, measured)])


def main(job: ProfileJob) -> list[dict] | None:
    """This rank's measurements; rank 0 returns every rank's, in rank order."""
    rank, store = join(job.nodes, job.node, job.store_port, 300, "gloo")
    device = job.devices[rank - 1] if rank > 0 else None
    torch_dev = torch_device(device)
    try:
        wl = workload_mod.load(job.workload)
        train, test = workload_mod.shared(job.datasets) if job.datasets else wl.build_datasets(job.data_dir, 0)
        timer = StepTimer(wl, train, torch_dev, device)
        result: dict = {"rank": rank}
        began = time.perf_counter()
        phases = {"ready_s": time.time() - job.launched_at if job.launched_at else 0.0}
        if device is not None:
            result.update(device_id=device.id, steps=measure_steps(timer, job.settings, barrier=dist.barrier))
        else:
            for _ in range(barriers(job.settings)):
                dist.barrier()                          # the server rank idles while devices are timed
        model_bytes = sum(p.numel() * p.element_size() for p in timer.model.parameters())
        sizes = message_sizes(model_bytes)
        reps = job.settings.link_repeats
        phases["steps_s"] = time.perf_counter() - began
        allreduce = time_allreduce(len(job.devices), sizes, reps)
        p2p = time_p2p(sizes, reps, p2p_partner(job.nodes))
        if rank == 1:
            result["allreduce"] = allreduce
        if rank == 0:
            result.update(p2p=p2p, server_update_s=time_server_update(timer.model, reps, timer.wl.recipe))
        phases["links_s"] = time.perf_counter() - began - phases["steps_s"]
        steps = [None] * dist.get_world_size()
        dist.all_gather_object(steps, result.get("steps"))        # collective: every rank is here
        measured = steps[1:]
        # Each job's seconds from how many there are; their batches are then cut to fit those seconds.
        seconds = job_seconds(job.settings, len(calibration_jobs(job, measured)))
        jobs = calibration_jobs(replace(job, settings=replace(job.settings, calibrate_s=seconds)), measured)
        calibrating = time.perf_counter()
        calibration, left_out = calibrate(job, jobs, wl, train, test, store, seconds,
                                          job.settings.calibration_deadline_s)
        if rank == 0:
            phases.update(calibration_s=time.perf_counter() - calibrating, calibration_jobs=len(jobs) - left_out,
                          calibration_job_s=seconds, calibration_left_out=left_out)
            result.update(calibration=calibration, phases=phases)
        everyone = [None] * dist.get_world_size() if rank == 0 else None
        dist.gather_object(result, everyone, dst=0)
        return everyone
    finally:
        dist.destroy_process_group()
