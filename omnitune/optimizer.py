"""Choose the configuration with the least predicted time to target: Omnivore's optimizer.

time_to_target = sec_per_iter (hardware efficiency, perfmodel) × iters_to_target (statistical
efficiency, probes). Every setup (layout, protocol variant, batch) is scored for hardware
efficiency first. Probes then follow Omnivore's loop (Hadjis et al. 2016, §4):
  1. Cold start, synchronous: momentum 0.9, learning rate over decades (0.1 … 0.0001, carried
     on past an edge that wins) at a middle batch; then every other batch at that rate and at the
     rate scaled with its update batch; then half a decade either side of the best one's rate.
  2. Each other protocol climbs its own ladder of rungs, least asynchronous first. A rung tries
     momentum from Omnivore's grid (the rule's value mu* - (1 - 1/g) first) and the previous
     rung's learning rate, a third and a tenth of it, skipping momenta and per-device batches
     above the previous rung's optimum (they shrink with staleness; the batch is Rudra's rule).
     Rudra's staleness-scaled step has its base rate raised by the mean staleness it divides by.
  3. A ladder stops when a rung's samples per second, at the previous optimum's per-device
     batch, are not 10% above the previous optimum's: asynchrony no longer buys hardware speed.
The search is sized to the job (budget.py): the cold start's decade probes are short scouts
(largest rate first, stopping at the first that does worse than the best so far) whose best
predicted training time sets the planning budget, re-set after every probe from the best time so
far, and so how many probes follow and how long each trains. When no scout can predict a time to
target (a long job, its curve barely off chance), every later probe trains for the same predicted
training time as the scouts did (iterations × the setup's seconds per iteration, so faster setups
train more iterations), and configurations rank by their training loss at the end: Omnivore's
own criterion. The leaders of the best setups then train on from where their probes stopped to
a few times that length and are ranked again (`final`: short-horizon bias), and the run starts
from the winner's state. The plan carries a predicted time only if its probe could extrapolate one.
Settings at least as large as one that diverged are skipped, and so is a sync setup whose updates
a faster one makes too (`faster_twin`: as many samples per update). Each probe is capped at the
iterations that could still beat the best time so far, and runs as an optuna trial (ask/tell)
whose pruner stops it when it lags the others at the same predicted training time (study.py).
Probing is injected (`Prober`), so this module starts no process and imports no torch; so is
timing (`Timer`): given one, the setups the hardware model puts above every measured one, while
no calibration job ran their shape, are timed by a real job before any probe (`time_fastest`),
and a leader still unmeasured after the search before it may win (`measure_leaders`).

The setups include subsets of each layout's devices that the hardware model says are worth a
probe (`subsets`: on devices of unequal speed the slowest is left out while some protocol runs
faster without it; with CPUs beside GPUs, each kind alone), and on devices of unequal speed
groups are formed by speed (protocols.by_speed) and every variant also comes balanced.
"""

from __future__ import annotations

import math
import statistics
import time
from dataclasses import dataclass, replace
from typing import Callable

from omnitune import budget as budget_mod, perfmodel, protocols, simulator, study as study_mod
from omnitune.balance import device_batches, wasted
from omnitune.errors import UserError
from omnitune.perfmodel import PerfModel, Shape
from omnitune.plan import ANALYTIC, MEASURED, SCHEMA_VERSION, SIMULATED, Candidate, Plan, Planning, Prediction
from omnitune.profile import Profile
from omnitune.protocols import Variant
from omnitune.runspec import RunSpec
from omnitune.statmodel import ProbeConfig, ProbeResult

# (config, max_iters, max_seconds, on_eval, evals) -> result; on_eval(iteration, accuracy) returns
# True to stop (prune); evals: how many test evaluations the probe may make. A prober with
# `handoffs` (probe.make_prober: where each configuration's latest probe stopped) also takes
# start=handoff, to go on from there.
Prober = Callable[[ProbeConfig, int, float, Callable[[int, float], bool], int], ProbeResult]
LR_DECADES = (0.1, 0.01, 0.001, 0.0001)   # Omnivore's cold start
LR_REFINE = (1 / 3, 3.0)                  # then about half a decade either side of the best
RUNG_LRS = (1.0, 1 / 3, 0.1)              # a rung's rates, times the previous rung's best
DEFAULT_BATCHES = (8, 16, 32, 64, 128, 256)
MU_STAR = 0.9    # the synchronous optimum Omnivore starts from
OMNIVORE_MOMENTA = (0.0, 0.3, 0.6, 0.9)   # the momentum grid Omnivore searches for g > 1
STOP_GAIN = 0.10  # climb a ladder only while samples per second improve by at least this much
RANKED_BY_TIME, RANKED_BY_LOSS = "predicted time to target", "training loss at equal training time"
# Short-horizon bias (Wu et al. 2018): after equal short training a smaller learning rate often
# leads on loss, and falls behind over the long run. A loss above the best by less than this
# fraction of both the best loss and the best's progress from the untrained loss is a tie, which
# goes to the larger effective learning rate.
LOSS_TIE = 0.10
# So the best of the FINALISTS best setups of a search ranked by loss train on, from where their
# probes stopped, to FINAL_GROWTH times the probes' training time, and are ranked again by training
# loss. teacher-mlp: batch 128 at lr 0.06 won the tie over batch 256 at 0.03 (0.320 vs 0.291); at 3
# times as long, 0.285 vs 0.262, and batch 256 at 0.03 is the grid's best. shapes-resnet: batch
# 16 led 32 (2.14 vs 2.19); at 3 times as long 1.94 vs 1.87.
FINALISTS = 2
FINAL_GROWTH = 3.0
# A layout's slowest devices are left out one at a time while that speeds some protocol up, at most
# this many: each subset is a full set of setups to score, and 15 CPU cores beside a GPU would
# otherwise make 15 of them.
MAX_LEFT_OUT = 3
UNRANKED = (4, 0.0, 0.0)   # sorts after every key long_horizon_keys gives


@dataclass(frozen=True)
class Space:
    """What to search. A field given a single value pins it (the CLI's --protocol etc.)."""
    protocols: tuple[str, ...] = protocols.NAMES
    groups: tuple[int, ...] | None = None          # None: every g that splits the devices evenly
    batch_sizes: tuple[int, ...] = DEFAULT_BATCHES
    lrs: tuple[float, ...] | None = None           # None: search decades, then refine
    momentum: float | None = None                  # None: the rule mu* - implicit, and OMNIVORE_MOMENTA
    layouts: tuple[str, ...] | None = None


@dataclass(frozen=True)
class Config:
    layout: str
    variant: Variant
    groups: tuple[tuple[str, ...], ...]
    batch: int                                     # per device (before balancing)
    lr: float
    momentum: float
    idle: tuple[tuple[str, str], ...] = ()         # devices of the layout left out, and why

    @property
    def g(self) -> int:
        return len(self.groups)


@dataclass(frozen=True)
class Setup:
    """A configuration's hardware side: where and how it runs, and how fast (perfmodel)."""
    layout: str
    variant: Variant
    groups: tuple[tuple[str, ...], ...]
    batch: int                                     # per device (before balancing)
    batches: tuple[tuple[int, ...], ...]           # per group, each device's batch (balanced or not)
    sec_per_iter: float
    staleness: tuple[int, ...] = ()                # measured by the profile's calibration job
    probe_sec_per_iter: float = 0.0                # a probe's iteration: every replica's compute, in one process
    idle: tuple[tuple[str, str], ...] = ()         # devices of the layout left out, and why
    model_sec_per_iter: float | None = None        # set when a real job timed sec_per_iter: the model's figure

    def scored(self, lr: float, momentum: float, probe: ProbeResult | None = None, note: str = "") -> "Scored":
        return Scored(self.config(lr, momentum), self.sec_per_iter, probe, note, self.model_sec_per_iter)

    @property
    def samples_per_s(self) -> float:
        return self.variant.samples_per_update(self.batches) / self.sec_per_iter

    def config(self, lr: float, momentum: float) -> Config:
        return Config(self.layout, self.variant, self.groups, self.batch, lr, momentum, self.idle)

    def probe(self, lr: float, momentum: float) -> ProbeConfig:
        """What a probe of this setup trains: configurations alike in it share statistical efficiency."""
        return ProbeConfig(self.variant, self.batches, lr, momentum, self.staleness if self.variant.has_server else ())


@dataclass(frozen=True)
class Scored:
    config: Config
    sec_per_iter: float
    probe: ProbeResult | None = None
    note: str = ""                                 # why it was not probed
    model_sec_per_iter: float | None = None        # set when a real job timed it: the model's figure

    @property
    def iters(self) -> float | None:
        return self.probe.iters_to_target if self.probe else None

    @property
    def time_to_target_s(self) -> float | None:
        return None if self.iters is None else self.iters * self.sec_per_iter


# A configuration -> its seconds per iteration measured by a short real job (timing.py), None on failure
Timer = Callable[[Config], "float | None"]
MAX_TIMED = 3           # finalists timed at most, one after another while the leader is unmeasured
TIMED_TOLERANCE = 0.15  # a measured figure this close to the model's leaves a loss ranking as it was

# (configuration, nominal per-device batch) -> (seconds per iteration, the staleness histogram
# its probes replay; () for the emulator's own schedule)
Hardware = Callable[[Shape, int], tuple[float, tuple[int, ...]]]


def profiled(profile: Profile, model: str = ANALYTIC) -> Hardware:
    """Seconds per iteration from the calibrated analytic model (perfmodel) or the simulator
    run on the profile's measurements (simulator.from_profile). The analytic model is used only
    where it is calibrated, or for one device alone: a configuration no calibration job timed
    (a subset of a layout, groups formed by speed) is simulated, the simulator being the better
    model of what the profile never ran (benchmarks.simulator: 8-11% against the raw analytic
    model's 41-45%). Staleness from the calibration jobs where they measured it, else simulated."""
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


def enumerate_setups(profile: Profile, space: Space, hardware: Hardware | None = None) -> list[Setup]:
    """Every layout and its candidate subsets × admitted variant × batch, scored for hardware
    efficiency (by default the profile's calibrated model; a fleet's simulator for clusters that
    cannot run here)."""
    perf = PerfModel.from_profile(profile)
    hardware = hardware or profiled(profile)
    seen: set[frozenset[str]] = set()      # a set of devices is scored once (the GPUs alone, of every layout)

    def setups(name: str, ids: tuple[str, ...], idle: tuple[tuple[str, str], ...]) -> list[Setup]:
        if frozenset(ids) in seen:
            return []
        seen.add(frozenset(ids))
        return layout_setups(profile, space, perf, hardware, name, ids, idle)
    out = []
    for layout, devices in profile.cluster.layouts.items():
        if space.layouts is None or layout in space.layouts:
            out += subsets(profile, layout, devices, setups)
    return out


def layout_setups(profile: Profile, space: Space, perf: PerfModel, hardware: Hardware, layout: str,
                  devices: tuple[str, ...], idle: tuple[tuple[str, str], ...] = ()) -> list[Setup]:
    """Every admitted variant × batch on these devices. On devices of unequal speed (beyond the
    profile's noise), groups are formed by speed and may differ in size, and every variant also
    comes with balanced batches, unless they give a device under balance.MIN_BALANCED_SHARE of
    the nominal batch: it would be all but idle, and leaving it out is a subset of its own."""
    out = []
    het = heterogeneous(profile, devices)
    fast = speeds(profile, devices)
    for v in protocols.admitted(len(devices), space.protocols, het):
        if space.groups is not None and v.groups not in space.groups:
            continue
        groups = protocols.by_speed(devices, fast, v.groups, v.balanced) if het else v.group(devices)
        for b in _batch_sizes(profile, devices, space):
            batch = device_batches(perf.contended(devices), v, groups, b)
            if wasted(v, batch, b):
                continue
            shape = Shape(groups, batch, v, layout)
            sec, staleness = hardware(shape, b)
            batches = tuple(tuple(batch[d] for d in g) for g in groups)
            out.append(Setup(layout, v, groups, b, batches, sec, staleness, probe_cost(perf, shape, batches),
                             idle))
    return out


def subsets(profile: Profile, layout: str, devices: tuple[str, ...],
            setups: Callable[[str, tuple[str, ...], tuple[tuple[str, str], ...]], list[Setup]]) -> list[Setup]:
    """The layout's setups, and those of the subsets of its devices worth a probe. The hardware
    model prunes: on devices of one kind but unequal speed the slowest is left out only if some
    protocol, at some batch, runs more samples per second without it, and so on while that holds
    (at most MAX_LEFT_OUT); with CPUs beside GPUs, each kind alone instead (the GPUs alone, the
    CPUs alone), unless a layout of that kind holds them already. Each subset's setups say which
    devices sit idle and why."""
    whole = setups(layout, devices, ())
    out = list(whole)
    kinds = {profile.cluster.device(d).kind for d in devices}
    if len(kinds) > 1:
        for kind in sorted(kinds):
            mine = tuple(d for d in devices if profile.cluster.device(d).kind == kind)
            if not within_another(profile, layout, mine):
                out += setups(f"{layout}: {kind} only", mine,
                              tuple((d, f"{kind} only") for d in devices if d not in mine))
        return out
    fast = speeds(profile, devices)
    current, idle, kept = devices, (), whole
    while len(current) > 1 and len(idle) < MAX_LEFT_OUT and heterogeneous(profile, current):
        slowest = min(current, key=fast.get)
        fewer = tuple(d for d in current if d != slowest)
        name = f"{layout} less {','.join([x for x, _ in idle] + [slowest])}"
        trial = setups(name, fewer, ())
        before = best_rates(kept)
        gain = max(((after / before[x], x) for x, after in best_rates(trial).items() if x in before),
                   default=(0.0, ""))
        if gain[0] <= 1.0:
            break
        idle += ((slowest, f"{fast[slowest]:,.0f} samples/s, the slowest: {gain[1]} runs {gain[0] - 1:.0%} "
                           "more samples per second without it"),)
        kept = [replace(s, idle=idle) for s in trial]
        out += kept
        current = fewer
    return out


def within_another(profile: Profile, layout: str, devices: tuple[str, ...]) -> bool:
    """Whether another layout of one kind holds all these devices (the GPUs alone; the CPU
    workers beside a GPU, which are one-per-core less the GPU's core): its own setups cover them."""
    kinds = {profile.cluster.device(d).kind for d in devices}
    return any(name != layout and set(devices) <= set(ids) and {profile.cluster.device(d).kind for d in ids} == kinds
               for name, ids in profile.cluster.layouts.items())


def best_rates(setups: list[Setup]) -> dict[str, float]:
    """The most samples per second of each protocol (balanced or not), over its shapes and batches:
    what a subset is compared on."""
    out: dict[str, float] = {}
    for s in setups:
        key = f"{s.variant.protocol}{' (balanced)' if s.variant.balanced else ''} at batch {s.batch}"
        out[key] = max(out.get(key, 0.0), s.samples_per_s)
    return out


def probe_cost(perf: PerfModel, shape: Shape, batches: tuple[tuple[int, ...], ...]) -> float:
    """Seconds a probe takes per iteration: it computes, one after another in one process on this
    machine's CPU, the gradients of every sample an iteration consumes. An estimate (the probe's
    threads differ from the devices'), used to turn a probe's time into an iteration cap, so the
    same profile and seed give the same probes and plan. A GPU's samples cost what they cost on
    the profile's widest CPU worker: the probe does not run on the GPU (an H200's 5 ms steps sized
    probes that then ran 30 times longer on the CPU, and a 15 s search took 127). One CPU device
    alone is the exception: there a probe runs the runtime's loop as the run would, which the
    profile's calibration job of its layout timed, so that job's seconds per iteration are the
    probe's (teacher-mlp's scouts at batch 64, sized from the bare step of 1.26 ms, trained 3 s
    where 1.5 s was meant; the loop's 2.0)."""
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


def heterogeneous(profile: Profile, devices: tuple[str, ...], z: float = perfmodel.NOISE_Z) -> bool:
    """Whether some device is slower than the fastest (by best throughput) beyond the profile's
    noise (perfmodel.slower)."""
    return perfmodel.unequal([profile.device(d) for d in devices], z)


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


def _batch_sizes(profile: Profile, devices: tuple[str, ...], space: Space) -> list[int]:
    """The space's batch sizes, less those beyond what every device of the layout was profiled at;
    GPUs alone go on doubling the default sizes as far as their curve was measured (a GPU's
    throughput rises past where a CPU's has levelled off: an H200's was still rising at 512)."""
    largest = min(profile.device(d).max_batch for d in devices)
    sizes = list(space.batch_sizes)
    if space.batch_sizes == DEFAULT_BATCHES and all(profile.cluster.device(d).kind == "cuda" for d in devices):
        while sizes[-1] * 2 <= largest:
            sizes.append(sizes[-1] * 2)
    return [b for b in sizes if b <= largest]


def time_fastest(setups: list[Setup], timer: Timer, unmeasured: Callable[[Config], bool],
                 log: Callable[[str], None] = lambda m: None) -> list[Setup]:
    """Before any probe, the setups that the hardware model says run more samples per second than
    every measured one, while no real job timed their shape, are timed (the fastest first, at
    most MAX_TIMED), so that the search caps its probes and ranks on measured speeds: a setup
    timed only after the search has had every rival's probe cut short against its imagined
    speed. A setup whose job fails is left out."""
    def key(s: Setup) -> Config:
        return s.config(LR_DECADES[1], MU_STAR)
    modelled = {s: unmeasured(key(s)) for s in setups}
    fastest = max((s.samples_per_s for s in setups if not modelled[s]), default=0.0)
    rivals = sorted((s for s in setups if modelled[s] and s.samples_per_s > fastest),
                    key=lambda s: -s.samples_per_s)[:MAX_TIMED]
    timed = {}
    for s in rivals:
        timed[s] = timer(key(s))
        log(f"timed {s.layout} {s.variant.label} batch {s.batch}: " +
            (f"{timed[s] * 1e3:.2f} ms an iteration (the model said {s.sec_per_iter * 1e3:.2f})"
             if timed[s] else "the job failed: left out"))
    return [replace(s, sec_per_iter=timed[s], model_sec_per_iter=s.sec_per_iter) if timed.get(s) else s
            for s in setups if s not in timed or timed[s]]


@dataclass(frozen=True)
class Search:
    scored: list[Scored]         # every configuration considered, best first
    planning: Planning           # what the search spent, and its budget

    @property
    def ranked(self) -> bool:
        """Whether configurations were ranked by training loss, not by time to target."""
        return self.planning.ranked_by == RANKED_BY_LOSS


def search(profile: Profile, space: Space, prober: Prober, max_probe_iters: int = 100_000,
           budget_s: float | None = None, study=None, log: Callable[[str], None] = lambda m: None,
           hardware: Hardware | None = None, timer: Timer | None = None) -> Search:
    """Score every setup; probe statistical efficiency where it could still win.

    `budget_s` fixes the probing budget; None sizes it to the job (budget.py). `study` is an
    optuna study (in memory when None); probes it already holds are reused, so an interrupted
    search resumes. With a `timer`, setups whose speed no calibration job measured are timed by a
    real job before the search where they could lead (`time_fastest`), and a leader still
    unmeasured after it before it may win (`measure_leaders`). Returns every configuration considered,
    best predicted time to target first (unprobed ones last), and what planning spent.
    """
    start = time.perf_counter()         # scoring the setups counts against the budget, as probes do
    setups = enumerate_setups(profile, space, hardware)
    if not setups:
        raise ValueError(f"no configuration fits the pinned options (protocols {space.protocols}, groups "
                         f"{space.groups}, batch sizes {space.batch_sizes}) and the profile's devices")
    if timer is not None:
        perf = PerfModel.from_profile(profile)
        unmeasured = lambda c: not measured_shape(perf, c)     # noqa: E731
        setups = time_fastest(setups, timer, unmeasured, log)
        if not setups:
            raise UserError("every configuration's timing job failed (a real job of each, before the search); "
                            "`omnitune run` would fail the same way: check that the devices work, or plan with "
                            "--no-time-finalists to trust the hardware model")
    loop = OmnivoreLoop(setups, space, prober, study or study_mod.new_study(), max_probe_iters, budget_s, log, start)
    scored = loop.run()
    if timer is not None:
        scored = loop.measure_leaders(scored, timer, unmeasured)
    if loop.ranking:
        scored = loop.final(scored)
    b = loop.budget or budget_mod.plan_budget(None, loop.elapsed(), budget_s)
    reason = b.reason if not loop.finalists else \
        f"{b.reason}; then the {loop.finalists} leaders trained on to {FINAL_GROWTH:g}× their probes' training time"
    return Search(scored, Planning(loop.elapsed(), loop.probes_run, b.seconds, b.full, reason,
                                   RANKED_BY_LOSS if loop.ranking else RANKED_BY_TIME))


class OmnivoreLoop:
    """Omnivore's search: a cold start, then a ladder per protocol, with capped, prunable probes
    recorded in an optuna study."""

    def __init__(self, setups: list[Setup], space: Space, prober: Prober, study, max_probe_iters: int,
                 budget_s: float | None, log: Callable[[str], None], start: float | None = None):
        self.setups, self.space, self.prober, self.study = setups, space, prober, study
        self.max_iters, self.override_s, self.log = max_probe_iters, budget_s, log
        # Set once the scouts have run, or at once from an override.
        self.budget = None if budget_s is None else budget_mod.plan_budget(None, 0.0, budget_s)
        self.scouting = budget_s is None          # the cold start's first probes
        # Once no scout can predict a time to target, probes train for equal (predicted) training
        # time and are compared by their training loss at its end.
        self.ranking = False
        self.train_s = 0.0                        # each ranking probe's predicted training time
        self.probes_run = 0
        self.finalists = 0                        # leaders that trained on (final)
        self.results: dict[ProbeConfig, ProbeResult] = study_mod.stored_results(study)
        self.best = math.inf            # the best time to target so far: later probes are capped to beat it
        self.predicted = math.inf       # the best predicted one, reached or extrapolated: sets the budget
        self.diverged: list[ProbeConfig] = []
        self.tried: dict[tuple[Setup, float, float], str] = {}     # every (setup, lr, momentum) considered
        self.start = time.perf_counter() if start is None else start
        # Probes report accuracy on a shared clock of predicted training time (for the pruner).
        self.tick_s = min(s.sec_per_iter for s in setups) * 50
        self.eval_s = eval_cost(setups, getattr(prober, "test_size", budget_mod.PROBE_TEST))

    def run(self) -> list[Scored]:
        root, ladders = protocols.ladders(list(dict.fromkeys(s.variant for s in self.setups)))
        base = self.cold_start(self.among(root)) if root else None
        for ladder in ladders:
            prev = base
            for k, rung in enumerate(ladder):
                setups = self.among(rung)
                if prev is None:                   # no synchronous root in the space: start here
                    prev = self.cold_start(setups)
                    continue
                reason = self.saturated(setups, prev)
                if reason:
                    self.log(reason)
                    for later in ladder[k:]:
                        self.skip(self.among(later), prev, f"not probed: {reason}")
                    break
                prev = self.climb(setups, prev) or prev
        return self.scored()

    def among(self, variants: list[Variant]) -> list[Setup]:
        return [s for s in self.setups if s.variant in variants]

    def rates(self, s: Setup, effective: list[float]) -> list[float]:
        """Learning rates to try on `s`: pinned ones as given, else these effective steps times the
        variant's lr_gain (Rudra's staleness-scaled step gets its base rate raised)."""
        if self.space.lrs is not None:
            return list(self.space.lrs)
        return [float(f"{lr * s.variant.lr_gain:.3g}") for lr in effective]

    def momenta(self, v: Variant, ceiling: float | None = None) -> list[float]:
        """The rule's explicit momentum mu* - (1 - 1/g); with a ceiling, then Omnivore's grid, none
        above it."""
        if self.space.momentum is not None:
            return [self.space.momentum]
        rule = v.rule_momentum(MU_STAR)
        if ceiling is None:
            return [rule]
        return [m for m in dict.fromkeys([rule, *OMNIVORE_MOMENTA]) if m <= ceiling]

    def cold_start(self, setups: list[Setup]) -> Scored | None:
        """Learning rate over decades at a reference setup (the batch nearest the middle, fastest,
        among those a scout trains enough iterations of and with no faster twin); then every other
        setup at the best rate and at the rate scaled with its update batch; then half a decade
        either side of the best setup's rate. Batches come before the refinement: when the budget
        is short, which batch matters more than a rate's last half decade (teacher-mlp, seeds 2
        and 3: a 15 s budget spent refining batch 64 at 2-3 s a probe, batch 256 never probed,
        and the plan took 2.4x the grid's best)."""
        if not setups:
            return None
        middle = sorted(self.space.batch_sizes)[len(self.space.batch_sizes) // 2]
        # Scouts of 20 iterations say nothing (shapes-resnet: both cores at batch 64, 130 ms an
        # iteration, ranked lr 0.1 by losses 2.24 vs 2.28): the reference lets them train SCOUT_ITERS.
        firsts = [s for s in setups if faster_twin(s, self.setups) is None] or setups
        enough = [s for s in firsts if budget_mod.SCOUT_S >= budget_mod.SCOUT_ITERS * s.probe_sec_per_iter]
        ref = max(enough or [min(firsts, key=lambda s: s.probe_sec_per_iter)],
                  key=lambda s: (-abs(math.log(s.batch / middle)), s.samples_per_s))
        mu = self.momenta(ref.variant)[0]
        best = self.decades(ref, mu)
        ref_samples = ref.variant.samples_per_update(ref.batches)
        for s in sorted(setups, key=lambda s: -s.samples_per_s):
            scale = s.variant.samples_per_update(s.batches) / ref_samples
            effective = [best] if best is None or scale == 1 else [best, best * scale]
            for lr in self.rates(s, [] if best is None else effective):
                self.probe(s, lr, self.momenta(s.variant)[0])
        lead = self.best_of(setups)
        if best is not None and lead is not None:       # None: pinned rates, or no decade ranked
            s = self.setup_of(lead.config)
            step = lead.config.lr / s.variant.lr_gain
            for f in LR_REFINE:
                self.probe(s, self.rates(s, [float(f"{step * f:.2g}")])[0], lead.config.momentum)
        return self.best_of(setups)

    def decades(self, ref: Setup, mu: float) -> float | None:
        """The best effective learning rate at `ref`: decades from the largest down, until one does
        worse than the best so far (the scouts, compared by time if they reach the target, else by
        training loss), carried on past a winning edge."""
        if self.space.lrs is not None:
            for lr in self.space.lrs:
                self.probe(ref, lr, mu)
            self.end_scouting(ref)
            return None
        tried: list[float] = []
        for lr in LR_DECADES:                # largest first, until one does worse than the best so far
            tried.append(lr)
            self.probe(ref, self.rates(ref, [lr])[0], mu)
            scout = [k for x in tried if (k := self.scout_rank(ref, self.rates(ref, [x])[0], mu)) is not None]
            if len(scout) >= 2 and scout[-1] > min(scout):
                break
        self.end_scouting(ref)
        best = self.best_rate(ref, mu, tried)
        while best is not None and (best == max(tried) < 1 or best == min(tried) > 1e-6):
            edge = best * 10 if best == max(tried) else best / 10
            tried.append(edge)
            self.probe(ref, self.rates(ref, [edge])[0], mu)
            if self.best_rate(ref, mu, tried) != edge:
                break
            best = edge
        return best

    def setup_of(self, config: Config) -> Setup:
        return next(s for s in self.setups if s.config(config.lr, config.momentum) == config)

    def best_rate(self, s: Setup, mu: float, effective: list[float]) -> float | None:
        done = [lr for lr in effective if self.rank(s, self.rates(s, [lr])[0], mu) is not None]
        if not done:
            return None
        keys = self.horizon_keys([(s, self.rates(s, [lr])[0], mu) for lr in done])
        return done[keys.index(min(keys))]

    def climb(self, setups: list[Setup], prev: Scored) -> Scored | None:
        """One rung: the previous optimum's per-device batch and the next smaller (Rudra), momenta
        no larger than its, and its step, a third and a tenth of it; closest to it first."""
        pc = prev.config
        sizes = sorted({s.batch for s in setups if s.batch <= pc.batch}, reverse=True)[:2]
        near = sorted((s for s in setups if s.batch in sizes), key=lambda s: (-s.batch, -s.samples_per_s))
        step = pc.lr / pc.variant.lr_gain
        for s in near:
            for lr in self.rates(s, [step * f for f in RUNG_LRS]):
                for mu in self.momenta(s.variant, pc.momentum):
                    self.probe(s, lr, mu)
        self.skip([s for s in setups if s.batch not in sizes], prev,
                  f"not probed: batch not the previous optimum's {pc.batch} or the next below it (Rudra)")
        return self.best_of(setups)

    def saturated(self, setups: list[Setup], prev: Scored) -> str:
        """Why the ladder stops here ("" if it does not): samples per second at the previous
        optimum's per-device batch are not STOP_GAIN above the previous optimum's."""
        pc = prev.config
        before = self.setup_of(pc)
        same = [s for s in setups if s.batch == pc.batch] or setups
        after = max(same, key=lambda s: (s.layout == pc.layout, s.samples_per_s))
        if after.samples_per_s >= (1 + STOP_GAIN) * before.samples_per_s:
            return ""
        return (f"{after.variant.label} gives {after.samples_per_s:,.0f} samples/s at batch {after.batch}, not "
                f"{STOP_GAIN:.0%} above {before.samples_per_s:,.0f} of {pc.variant.label}: stop adding asynchrony")

    def scout_rank(self, s: Setup, lr: float, mu: float) -> tuple[int, float] | None:
        """Before the mode is known: by time to target where a probe predicts one, else by loss."""
        r = self.results.get(s.probe(lr, mu))
        return rank_key(r, s.sec_per_iter, False) or rank_key(r, s.sec_per_iter, True)

    def rank(self, s: Setup, lr: float, mu: float) -> tuple[int, float] | None:
        return rank_key(self.results.get(s.probe(lr, mu)), s.sec_per_iter, self.ranking)

    def horizon_keys(self, tried: list[tuple[Setup, float, float]]) -> list[tuple[int, float, float] | None]:
        """long_horizon_keys of probed (setup, lr, momentum) triples compared together."""
        results = [self.results.get(s.probe(lr, mu)) for s, lr, mu in tried]
        return long_horizon_keys([(rank_key(r, s.sec_per_iter, self.ranking), lr / s.variant.lr_gain,
                                   r.start_loss if r else None) for (s, lr, _), r in zip(tried, results)])

    def best_of(self, setups: list[Setup]) -> Scored | None:
        done = [(s, lr, mu) for (s, lr, mu), note in self.tried.items()
                if s in setups and not note and self.rank(s, lr, mu) is not None]
        if not done:
            return None
        keys = self.horizon_keys(done)
        s, lr, mu = done[keys.index(min(keys))]
        return s.scored(lr, mu, self.results[s.probe(lr, mu)])

    def skip(self, setups: list[Setup], prev: Scored, note: str) -> None:
        for s in setups:
            self.tried.setdefault((s, prev.config.lr, s.variant.rule_momentum(MU_STAR)), note)

    def probe(self, s: Setup, lr: float, mu: float) -> ProbeResult | None:
        key = (s, lr, mu)
        pc = s.probe(lr, mu)
        if key in self.tried:
            return self.results.get(pc)
        if pc not in self.results and self.probes_run and not self.fits(s):
            self.tried[key] = f"not probed: planning budget of {self.budget_s():.1f}s spent"
            return None
        if pc not in self.results and self.ranking and self.train_s / s.sec_per_iter < budget_mod.MIN_PROBE_ITERS:
            # Floored at MIN_PROBE_ITERS it would train longer than the others and win on loss
            # for that alone (shapes-resnet: batch 256, 4x the scouts' training time, missed 0.9).
            self.tried[key] = (f"not probed: in the probes' training time of {self.train_s:.1f}s it would train "
                               f"{self.train_s / s.sec_per_iter:.0f} iterations, under {budget_mod.MIN_PROBE_ITERS}: "
                               "no fair comparison by loss")
            return None
        twin = faster_twin(s, self.setups)
        if twin is not None:
            self.tried[key] = (f"not probed: the same updates as {twin.layout} at batch {twin.batch}, which runs "
                               f"faster ({twin.sec_per_iter * 1e3:.2f} against {s.sec_per_iter * 1e3:.2f} ms)")
            return None
        if any(d.variant == pc.variant and d.lr <= pc.lr and d.momentum <= pc.momentum for d in self.diverged):
            self.tried[key] = "not probed: at least as large as a setting that diverged"
            return None
        r = self.results.get(pc) or self.run_probe(pc, s.sec_per_iter, s.probe_sec_per_iter)
        if r is None:
            self.tried[key] = f"not probed: cannot beat {self.best:.2f}s"
            return None
        self.tried[key] = ""
        if r.note == "diverged":
            self.diverged.append(pc)
        if r.ranks_by_time:
            self.predicted = min(self.predicted, r.iters_to_target * s.sec_per_iter)
            if r.reached or not self.ranking:
                self.best = min(self.best, r.iters_to_target * s.sec_per_iter)
        if not self.scouting:
            self.set_budget()
        return r

    def end_scouting(self, ref: Setup) -> None:
        """After the scouts: the budget from their best predicted time; and when none could predict
        one, ranking by training loss at equal training time from here on."""
        if not self.ranking and not any(r.ranks_by_time for r in self.results.values()):
            # Every later probe trains as long (in predicted training time) as the scouts did.
            self.train_s = self.cap(ref.sec_per_iter, ref.probe_sec_per_iter) * ref.sec_per_iter
            self.ranking = True
        if self.scouting:
            self.scouting = False
            self.set_budget()
        if self.ranking:
            self.log(f"no scout could predict the time to target: probes train {self.train_s:.1f}s each "
                     "(predicted training time) and are ranked by their training loss")

    def elapsed(self) -> float:
        return time.perf_counter() - self.start

    def budget_s(self) -> float:
        """The planning budget; while scouting, before one exists, the budget the scouts would get
        if none of them predicts a time (a larger one can only follow)."""
        return self.budget.seconds if self.budget is not None else budget_mod.UNKNOWN_BUDGET_S

    def fits(self, s: Setup) -> bool:
        """Whether a probe of `s` ends within the budget, by the profile's step times: a probe that
        would overrun it is not started (on a large simulated fleet one probe takes seconds)."""
        iters = min(self.beat(s.sec_per_iter), self.cap(s.sec_per_iter, s.probe_sec_per_iter))
        return self.elapsed() + iters * s.probe_sec_per_iter <= self.budget_s()

    def set_budget(self) -> None:
        """The budget from the best predicted training time so far: it shrinks as the search
        finds faster configurations."""
        best = None if math.isinf(self.predicted) else self.predicted
        new = budget_mod.plan_budget(best, self.elapsed(), self.override_s)
        if new != self.budget and (self.budget is None or new.reason != self.budget.reason):
            self.log(f"budget: {new.seconds:.1f}s ({new.reason}); probes of up to {new.probe_s:.1f}s")
        self.budget = new

    def cap(self, sec: float, probe_sec: float) -> int:
        """A probe's iterations: its probe time's worth, or when ranking, its training time's
        (so that probes of faster setups train more iterations)."""
        if self.ranking:
            return max(budget_mod.MIN_PROBE_ITERS, round(self.train_s / sec))
        probe_s = budget_mod.SCOUT_S if self.scouting or self.budget is None else self.budget.probe_s
        return max(budget_mod.MIN_PROBE_ITERS, int(probe_s / max(probe_sec, 1e-9)))


    def beat(self, sec: float) -> int:
        """The most iterations a probe may train: those that could still beat the best time."""
        return self.max_iters if math.isinf(self.best) else int(min(self.max_iters, self.best / sec))

    def run_probe(self, pc: ProbeConfig, sec: float, probe_sec: float) -> ProbeResult | None:
        beat = self.beat(sec)
        if beat < 1:
            return None
        cap = min(beat, self.cap(sec, probe_sec))
        probe_s = cap * probe_sec
        # The iteration cap sets the probe's length; the time limit only guards a bad estimate.
        limit_s = budget_mod.GUARD * max(probe_s, self.budget.probe_s if self.budget else budget_mod.SCOUT_S)
        trial = study_mod.ask(self.study, pc)
        reported = {"step": -1}

        def on_eval(iteration: int, accuracy: float) -> bool:
            if self.scouting or self.ranking:     # compared at their end, not pruned on early accuracy
                return False
            step = int(iteration * sec / self.tick_s)
            if step <= reported["step"]:
                return False
            for t in range(reported["step"] + 1, step + 1):        # carry forward over skipped ticks
                trial.report(1.0 - accuracy, t)
            reported["step"] = step
            return trial.should_prune()
        self.probes_run += 1
        most = budget_mod.RANKING_EVALS if self.ranking else budget_mod.EVALS
        evals = budget_mod.evaluations(probe_s, self.eval_s, most)
        r = self.prober(pc, cap, limit_s, on_eval, evals)
        if r.note == "pruned":
            r = replace(r, iters_to_target=None, note="pruned: lagging the median")
        elif beat < self.max_iters and not r.reached and r.note != "diverged" \
                and (r.iters_to_target is None or r.iters_to_target > beat):
            r = replace(r, iters_to_target=None, note=f"cannot beat {self.best:.2f}s in {beat} iterations")
        study_mod.tell(self.study, trial, r, sec)
        self.results[pc] = r
        self.log(f"probe {pc.variant.label} batches={pc.batches} lr={pc.lr:.3g} momentum={pc.momentum}: {r.note}")
        return r

    def final(self, scored: list[Scored]) -> list[Scored]:
        """Ranked by loss after a probe's short training, what leads early tends to win: smaller
        rates and batches (short-horizon bias). So the FINALISTS best setups (layout, protocol,
        batch), each at its lowest-loss learning rate and momentum, train on from where their
        probes stopped (the prober's `handoffs`) to FINAL_GROWTH times the probes' training time,
        and the lowest training loss at that end wins (a tie, LOSS_TIE as in the search, goes to
        the larger learning rate): the run then starts from its state, so its extra training is not
        lost. Each setup is compared at its own lowest loss, not at the rate
        that won its tie: a tie-won larger rate against another setup's lower one is a comparison
        of rates, and the round is for setups (teacher-mlp: one worker at lr 0.12 lost to both
        cores at 0.03, whose runs took twice as long). Not done when the prober keeps no hand-offs."""
        handoffs = getattr(self.prober, "handoffs", None)
        if handoffs is None:
            return scored
        setups: dict[tuple, list[Scored]] = {}            # in the search's order (ties to the larger rate)
        for s in scored:
            c = s.config
            if rank_key(s.probe, s.sec_per_iter, True) is not None and s.probe.train_loss is not None:
                setups.setdefault((c.layout, c.variant, c.groups, c.batch), []).append(s)
        leaders = [min(tried, key=lambda s: s.probe.train_loss) for tried in list(setups.values())[:FINALISTS]]
        if len(leaders) < 2 or any(s.probe.config not in handoffs for s in leaders):
            return scored
        went_on = []
        for s in leaders:
            start = handoffs[s.probe.config]
            total = max(start.iterations + budget_mod.MIN_PROBE_ITERS, round(FINAL_GROWTH * self.train_s / s.sec_per_iter))
            per_iter = s.probe.seconds / max(s.probe.iters, 1)       # as fast as its probe went
            limit_s = budget_mod.GUARD * max(budget_mod.MIN_PROBE_S, (total - start.iterations) * per_iter)
            self.probes_run += 1
            r = self.prober(s.probe.config, total, limit_s, lambda it, acc: False, budget_mod.RANKING_EVALS,
                            start=start)
            self.log(f"finalist {s.config.variant.label} batch {s.config.batch} lr {s.config.lr:.3g} trained on to "
                     f"{r.iters} iterations: training loss {r.train_loss}")
            went_on.append(replace(s, probe=r))
        # Ties go to the larger learning rate, as in the search: the round is still short
        # (teacher-mlp, seed 3: batch 128 at 0.01 beat 256 at 0.04 by 0.2508 to 0.2519, and took 114 s
        # to the other's 51-54). The progress that scales the tie is from the untrained loss.
        keys = long_horizon_keys([(rank_key(r.probe, r.sec_per_iter, True), r.config.lr / r.config.variant.lr_gain,
                                   s.probe.start_loss) for s, r in zip(leaders, went_on)])
        order = [went_on[i] for i in sorted(range(len(went_on)), key=lambda i: keys[i] or UNRANKED)]
        self.finalists = len(went_on)
        return order + [s for s in scored if s not in leaders]

    def measure_leaders(self, scored: list[Scored], timer: Timer, unmeasured: Callable[[Config], bool]) \
            -> list[Scored]:
        """No configuration wins on a speed nobody measured: while the leader's seconds per
        iteration come from a model with no calibration job of its shape, a short real job times
        it (up to MAX_TIMED leaders), and it is ranked again on the measured figure. Ranked by
        time, its time to target follows the measured speed; ranked by loss at equal training
        time, a leader measured slower than its model said beyond TIMED_TOLERANCE trains again for
        that time at its measured speed (fewer iterations), as every other probe did at its own."""
        timed: dict[tuple, float | None] = {}         # per setup: a rate or momentum changes no speed
        while scored:
            best = scored[0]
            c = best.config
            setup = (c.layout, c.variant, c.groups, c.batch)
            if best.probe is None or best.model_sec_per_iter is not None or not unmeasured(c):
                break
            if setup not in timed:
                if len(timed) == MAX_TIMED:
                    break
                timed[setup] = timer(c)
                self.log(f"timed {c.layout} {c.variant.label} batch {c.batch}: " +
                         (f"{timed[setup] * 1e3:.2f} ms an iteration (the model said {best.sec_per_iter * 1e3:.2f})"
                          if timed[setup] else "the job failed"))
            sec = timed[setup]
            if sec is None:         # unmeasurable: it ranks after every configuration that could be
                scored = scored[1:] + [replace(best, probe=None, note="not chosen: its timing job failed")]
                continue
            went = replace(best, sec_per_iter=sec, model_sec_per_iter=best.sec_per_iter)
            if self.ranking and sec > (1 + TIMED_TOLERANCE) * best.sec_per_iter:
                went = replace(went, probe=self.retrain(best.probe.config, sec))
            scored = self.ordered([went] + scored[1:])
        return scored

    def retrain(self, pc: ProbeConfig, sec: float) -> ProbeResult:
        """A probe of `pc` from scratch for the search's training time at `sec` per iteration."""
        cap = max(budget_mod.MIN_PROBE_ITERS, round(self.train_s / sec))
        self.probes_run += 1
        limit_s = budget_mod.GUARD * max(budget_mod.MIN_PROBE_S, self.train_s)
        r = self.prober(pc, cap, limit_s, lambda it, acc: False, budget_mod.RANKING_EVALS)
        self.results[pc] = r
        return r

    def ordered(self, out: list[Scored]) -> list[Scored]:
        """Best first: by rank_key and the long-horizon tie rule, then by seconds per iteration."""
        keys = long_horizon_keys([(rank_key(x.probe, x.sec_per_iter, self.ranking),
                                   x.config.lr / x.config.variant.lr_gain, x.probe and x.probe.start_loss) for x in out])
        order = sorted(range(len(out)), key=lambda i: (keys[i] or UNRANKED, out[i].sec_per_iter))
        return [out[i] for i in order]

    def scored(self) -> list[Scored]:
        """Every configuration considered, probed or not, and every setup never reached."""
        out = self.ordered([s.scored(lr, mu, self.results.get(s.probe(lr, mu)) if not note else None, note)
                            for (s, lr, mu), note in self.tried.items()])
        reached = {s for s, _, _ in self.tried}
        lr = out[0].config.lr if out else LR_DECADES[0]
        out += [s.scored(lr, s.variant.rule_momentum(MU_STAR), None, "not probed")
                for s in self.setups if s not in reached]
        return out


def faster_twin(s: Setup, setups: list[Setup]) -> Setup | None:
    """The fastest setup that makes the same updates as `s` in less time, if any. Sync's update is
    one step on the gradient of all its devices' samples together, so sync setups with as many
    samples per update (one worker at batch 256, both cores at 128 each) need the same iterations
    and differ only in seconds per iteration: the slower is never worth a probe. Compared at equal
    training time, it trains fewer iterations of the same updates, and a lead in loss is noise
    (teacher-mlp: both cores at 128 led one worker at 256 by 0.0015 at 3× the probes' length, and
    ran 110 s against 56)."""
    if not isinstance(s.variant, protocols.Sync):
        return None
    samples = s.variant.samples_per_update(s.batches)
    twins = [t for t in setups if isinstance(t.variant, protocols.Sync) and t.sec_per_iter < s.sec_per_iter
             and t.variant.samples_per_update(t.batches) == samples]
    return min(twins, key=lambda t: t.sec_per_iter, default=None)


def rank_key(r: ProbeResult | None, sec_per_iter: float, ranking: bool) -> tuple[int, float] | None:
    """How a probe ranks (lower is better), None when it cannot: first by time to target (reached,
    or predicted within the probe's evidence unless ranking), then, when ranking, by training loss at
    the probe's end."""
    if r is None or r.note == "diverged" or r.note.startswith("pruned"):
        return None
    if r.ranks_by_time and (r.reached or not ranking):
        return (0, r.iters_to_target * sec_per_iter)
    if ranking and r.train_loss is not None and math.isfinite(r.train_loss):
        return (1, r.train_loss)
    return None


def long_horizon_keys(ranked: list[tuple[tuple[int, float] | None, float, float | None]]) \
        -> list[tuple[int, float, float] | None]:
    """Sort keys (lower is better) for (rank_key, effective learning rate, start loss) triples
    compared together: a reached or predicted time first; then the training losses that tie with
    the best (LOSS_TIE), the largest learning rate first; then the other losses.

    The tie is measured against both the best loss and the progress it made from the untrained
    loss (the median start loss): near chance, where the best has barely moved, a loss 10% above
    it is no tie but a probe that learned nothing."""
    losses = [k[1] for k, _, _ in ranked if k is not None and k[0] == 1]
    starts = [s for k, _, s in ranked if k is not None and k[0] == 1 and s is not None]
    tie = -math.inf
    if losses:
        best = min(losses)
        progress = statistics.median(starts) - best if starts else best
        tie = best + LOSS_TIE * max(0.0, min(best, progress))
    out = []
    for key, lr, _ in ranked:
        if key is None:
            out.append(None)
        elif key[0] == 1 and key[1] <= tie:
            out.append((1, -lr, key[1]))
        else:
            out.append((0 if key[0] == 0 else 2, key[1], 0.0))
    return out


def candidate_rows(scored: list[Scored]) -> tuple[Candidate, ...]:
    """The plan file's record of every configuration considered."""
    return tuple(Candidate(
        layout=s.config.layout, variant=s.config.variant, batch_size=s.config.batch, lr=s.config.lr,
        momentum=s.config.momentum, implicit_momentum=s.config.variant.implicit_momentum(),
        sec_per_iter=s.sec_per_iter, iters_to_target=s.iters, time_to_target_s=s.time_to_target_s,
        note=probe_note(s.probe) if s.probe else (s.note or "not probed"),
        iters_band=band(s.probe.interval) if s.probe and s.probe.interval and s.iters else (),
        model_sec_per_iter=s.model_sec_per_iter) for s in scored)


def probe_note(r: ProbeResult) -> str:
    """A probe's outcome, with its training loss at the end when it stopped short of the target."""
    if r.reached or r.train_loss is None:
        return r.note
    return f"{r.note}; training loss {r.train_loss:.3f} after {r.iters} iterations"


def band(interval: tuple[float, float]) -> tuple[float, ...]:
    """A band for the plan file: (low, high), or (low,) when it has no top (the target may never
    be reached)."""
    return tuple(x for x in interval if math.isfinite(x))


def predict(found: Search, prober: Prober, seconds: float) -> Search:
    """Probe the chosen configuration once more, for about `seconds` (beyond the planning budget),
    so that its curve reaches far enough to predict the time to target, with a band. A prober that
    keeps where its probes stopped (probe.make_prober's `handoffs`) goes on from there, so the
    run, starting where this probe stops, loses none of it. The search's
    ranking stands; only the winner's probe is replaced. Where planning ranked by training loss,
    this is the way to a prediction on a long job."""
    best = found.scored[0] if found.scored else None
    if best is None or best.probe is None or seconds <= 0:
        return found
    old = best.probe
    per_iter = old.seconds / old.iters if old.iters and old.seconds > 0 else None
    if per_iter is None:
        return found
    cap = max(budget_mod.MIN_PROBE_ITERS, int(seconds / per_iter))
    start = time.perf_counter()
    went_on = getattr(prober, "handoffs", {}).get(old.config)     # the probe goes on from where it stopped
    if went_on is None:
        r = prober(old.config, cap, budget_mod.GUARD * seconds, lambda it, acc: False, budget_mod.EVALS)
    else:
        r = prober(old.config, went_on.iterations + cap, budget_mod.GUARD * seconds, lambda it, acc: False,
                   budget_mod.EVALS, start=went_on)
    spent = time.perf_counter() - start
    p = found.planning
    planning = replace(p, seconds=p.seconds + spent, probes=p.probes + 1,
                       reason=f"{p.reason}; then {spent:.1f}s probing the chosen configuration to predict its time")
    return Search([replace(best, probe=r)] + found.scored[1:], planning)


def spec_batches(perf: PerfModel, c: Config) -> dict[str, int]:
    """Each device's batch of a configuration (balanced by the devices' speeds side by side)."""
    return device_batches(perf.contended([d for g in c.groups for d in g]), c.variant, c.groups, c.batch)


def spec_of(c: Config, profile: Profile, workload: str, data_dir: str | None, target: float | None,
            seed: int) -> RunSpec:
    """The run spec of a configuration on the profile's cluster."""
    cluster = profile.cluster
    return RunSpec(workload=workload, data_dir=data_dir, variant=c.variant,
                   devices=tuple(cluster.device(d) for g in c.groups for d in g), groups=c.groups,
                   batch_size=spec_batches(PerfModel.from_profile(profile), c), lr=c.lr, momentum=c.momentum,
                   seed=seed, target_accuracy=target, rendezvous=cluster.rendezvous,
                   server_host=cluster.server_host, server_node=cluster.server_node)


def build_plan(found: Search, profile: Profile, profile_path: str, workload: str,
               data_dir: str | None, target: float, seed: int, created_at: str, simulated_cluster: str = "",
               hardware_model: str = ANALYTIC) -> Plan:
    """The winning configuration as a Plan: the first of the search's ranking. When no probe could
    be ranked, the configuration whose probe reached the highest accuracy, with no prediction; a
    clear error when no probe learned at all."""
    scored = found.scored
    best = scored[0]
    if rank_key(best.probe, best.sec_per_iter, found.ranked) is None:
        learned = [s for s in scored if s.probe and len(s.probe.curve) > 1 and s.probe.note != "diverged"
                   and s.probe.curve[-1][1] > s.probe.curve[0][1]]
        if not learned:
            notes = sorted({s.probe.note for s in scored if s.probe})
            raise UserError(f"--target-accuracy {target}: no probe reached it or could extrapolate to it "
                            f"(probe outcomes: {', '.join(notes) or 'none run'}); try a lower target, "
                            "a larger --probe-iters or other --lr values")
        best = max(learned, key=lambda s: (s.probe.curve[-1][1], -s.sec_per_iter))
        scored = [best] + [s for s in scored if s is not best]
    c = best.config
    perf = PerfModel.from_profile(profile)
    if best.model_sec_per_iter is not None:
        hardware_model = MEASURED
    elif hardware_model == ANALYTIC and not analytic_covers(perf, Shape(c.groups, spec_batches(perf, c), c.variant,
                                                                        c.layout)):
        hardware_model = SIMULATED        # no calibration job timed this shape: `profiled` simulated it
    spec = spec_of(c, profile, workload, data_dir, target, seed)
    return Plan(
        schema_version=SCHEMA_VERSION, spec=spec, layout=c.layout,
        implicit_momentum=c.variant.implicit_momentum(),
        prediction=Prediction(best.sec_per_iter, best.iters, best.time_to_target_s,
                              tuple((float(i), float(a)) for i, a in best.probe.curve), best.model_sec_per_iter),
        candidates=candidate_rows(scored), profile=profile_path, created_at=created_at, planning=found.planning,
        hardware_model=SIMULATED if simulated_cluster else hardware_model, simulated_cluster=simulated_cluster,
        idle=dict(c.idle))
