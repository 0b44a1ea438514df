"""Hardware efficiency for the search: a setup's seconds per iteration from the profile (the
calibrated analytic model, or the simulator where no calibration job ran its shape), what a
probe of it costs on this machine's CPU, and the run spec it becomes."""

from __future__ import annotations

import math
from typing import Callable

from omnitune.core.target import Target, spec_fields
from omnitune.core import protocols
from omnitune.core.plan import ANALYTIC
from omnitune.core.profile import Profile
from omnitune.core.runspec import RunSpec
from omnitune.efficiency import perfmodel, simulator
from omnitune.efficiency.balance import device_batches
from omnitune.efficiency.perfmodel import PerfModel, Shape
from omnitune.planning.space import Config, Setup

# (configuration, nominal per-device batch) -> (seconds per iteration, the staleness histogram
# its probes replay; () for the emulator's own schedule)
Hardware = Callable[[Shape, int], tuple[float, tuple[int, ...]]]


def profiled(profile: Profile, model: str = ANALYTIC) -> Hardware:
    """Seconds per iteration from the calibrated analytic model (perfmodel) or the simulator
    run on the profile's measurements (simulator.from_profile). The analytic model is used only
    where it is calibrated, or for one device alone: a configuration no calibration job timed
    (a subset of a layout, groups formed by speed) is simulated, the simulator being the better
    model of what the profile never ran (docs/decisions.md, hardware.profiled). Staleness from
    the calibration jobs where they measured it, else simulated."""
    perf = PerfModel.from_profile(profile)
    overhead = simulator.overheads(profile)

    def hardware(shape: Shape, b: int) -> tuple[float, tuple[int, ...]]:
        measured = measured_staleness(profile, shape, b)
        if model == ANALYTIC and analytic_covers(perf, shape):
            return perf.sec_per_iter(shape), measured
        out = simulator.simulate(simulator.from_profile(profile, shape, overhead_s=overhead(shape.variant),
                                                        compute=perf.compute), simulator.ITERATIONS, seed=0)
        return out.sec_per_iter, measured or (out.staleness if shape.variant.has_server else ())
    return hardware


StepTime = Callable[[RunSpec], float | None]     # a run spec -> its seconds per iteration


def spec_step_s(profile: Profile, layout: str) -> StepTime:
    """A run spec's seconds per iteration on the profile's cluster, by the calibrated analytic
    model; None where no real job timed its shape (a calibration job of its devices and protocol,
    or one device alone: the simulator's figure is no ground to switch a running job on), or where a
    device's batch is past the largest its profile measured (the model would extrapolate)."""
    perf = PerfModel.from_profile(profile)
    tops = {d.device_id: d.max_batch for d in profile.devices}

    def step_s(spec: RunSpec) -> float | None:
        shape = Shape(spec.groups, dict(spec.batch_size), spec.variant, layout)
        if any(b > tops.get(d, 0) for d, b in spec.batch_size.items()) or not analytic_covers(perf, shape):
            return None
        return perf.sec_per_iter(shape)
    return step_s


def measured_shape(perf: PerfModel, c: Config) -> bool:
    """Whether a real job measured this configuration's shape: a calibration job of its own devices
    and protocol (a CPU worker alone counts: its step was timed as the runtime takes it)."""
    ids = [d for g in c.groups for d in g]
    shape = Shape(c.groups, spec_batches(perf, c), c.variant, c.layout)
    return shape.key in perf.calibration or (len(ids) == 1 and ids[0] not in perf.cuda)


def analytic_covers(perf: PerfModel, shape: Shape) -> bool:
    """Whether the analytic model answers for this shape: a calibration job timed it, or it is
    one device alone (nothing to communicate); `profiled` simulates the rest."""
    return shape.key in perf.calibration or sum(map(len, shape.groups)) == 1


def speeds(profile: Profile, devices: tuple[str, ...]) -> dict[str, float]:
    """Each device's best measured samples per second."""
    return {d: profile.device(d).best.samples_per_s for d in devices}


def heterogeneous(profile: Profile, devices: tuple[str, ...], z: float = perfmodel.NOISE_Z) -> bool:
    """Whether some device is slower than the fastest (by best throughput) beyond the profile's
    noise (perfmodel.slower)."""
    return perfmodel.unequal([profile.device(d) for d in devices], z)


def probe_cost(perf: PerfModel, shape: Shape, batches: tuple[tuple[int, ...], ...]) -> float:
    """Seconds a probe takes per iteration: it computes, one after another in one process on this
    machine's CPU, the gradients of every sample an iteration consumes. An estimate (the probe's
    threads differ from the devices'), used to turn a probe's time into an iteration cap, so the
    same profile and seed give the same probes and plan. A GPU's samples cost what they cost on
    the profile's widest CPU worker: the probe does not run on the GPU. One CPU device alone is
    the exception: there a probe runs the runtime's loop as the run would, which the profile's
    calibration job of its layout timed, so that job's seconds per iteration are the probe's."""
    ids = [d for g in shape.groups for d in g]
    if len(ids) == 1 and ids[0] not in perf.cuda and shape.key in perf.calibration:
        return perf.sec_per_iter(shape)
    host = probe_host(perf)
    every = sum(float(perf.compute[host if d in perf.cuda and host else d](b))
                for g, bs in zip(shape.groups, batches) for d, b in zip(g, bs))
    return every * shape.variant.samples_per_update(batches) / sum(map(sum, batches))


def probe_host(perf: PerfModel) -> str | None:
    """The CPU device with the most threads (the probes' stand-in for a GPU); None with no CPU."""
    if perf.cores is None:
        return None
    cpus = [d for d in perf.compute if d not in perf.cuda]
    return max(cpus, key=lambda d: perf.cores.threads[d], default=None)


def eval_cost(setups: list[Setup], test_size: int) -> float:
    """Seconds a probe's test evaluation takes: a forward pass over `test_size` samples, about half
    a training step's time per sample (from the profile, at the cheapest per sample)."""
    per_sample = min(s.probe_sec_per_iter / s.variant.samples_per_update(s.batches) for s in setups)
    return test_size * per_sample / 2


def measured_staleness(profile: Profile, shape: Shape, batch: int) -> tuple[int, ...]:
    """The staleness histogram the profile's calibration job of this variant measured on the same
    groups (formed by speed or in order), balanced or not alike, at the batch nearest this one;
    () when there is none."""
    def same(c) -> bool:
        return (c.layout, c.protocol, c.groups) == (shape.layout, shape.variant.key, shape.variant.groups) \
            and bool(c.staleness) and c.balanced == shape.variant.balanced \
            and protocols.same_groups(perfmodel.calibration_shape(profile, c).groups, shape.groups)
    cals = [c for c in profile.calibration if same(c)]
    if not cals:
        return ()
    return min(cals, key=lambda c: abs(math.log(c.batch_size / batch))).staleness


def spec_batches(perf: PerfModel, c: Config) -> dict[str, int]:
    """Each device's batch of a configuration (balanced by the devices' speeds side by side)."""
    return device_batches(perf.contended([d for g in c.groups for d in g]), c.variant, c.groups, c.batch)


def spec_of(c: Config, profile: Profile, workload: str, data_dir: str | None, target: Target | float | None,
            seed: int) -> RunSpec:
    """The run spec of a configuration on the profile's cluster."""
    cluster = profile.cluster
    return RunSpec(workload=workload, data_dir=data_dir, variant=c.variant,
                   devices=tuple(cluster.device(d) for g in c.groups for d in g), groups=c.groups,
                   batch_size=spec_batches(PerfModel.from_profile(profile), c), lr=c.lr, momentum=c.momentum,
                   weight_decay=c.weight_decay, seed=seed, **spec_fields(target), rendezvous=cluster.rendezvous,
                   server_host=cluster.server_host, server_node=cluster.server_node)
