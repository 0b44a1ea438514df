"""`omnitune run`: prepare the run dir, launch every process of the plan's run spec, read the summary.

With re-planning, the run goes in segments (Omnivore's optimizer epochs): each segment ends at a
checkpoint, a re-planning function (handed in by the caller: the runtime does no planning)
re-tunes the run spec from that checkpoint, and the next segment resumes with it. Each re-plan
is a line of replans.jsonl in the run dir.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import json
import math
import pickle
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import torch

from omnitune.core import plan as plan_mod
from omnitune.core.change import Knobs, Why, changes, evaluations
from omnitune.core.errors import UserError
from omnitune.core.files import append_jsonl, to_dict
from omnitune.core.runspec import RunSpec
from omnitune.efficiency import eta
from omnitune.efficiency.tuner import Policy as TunerPolicy
import omnitune.runtime.checkpoint as checkpoint
import omnitune.runtime.launch as launch_mod
import omnitune.runtime.monitor as monitor
import omnitune.runtime.segments as segments
import omnitune.runtime.workload as workload_mod
from omnitune.runtime.context import JobArgs
from omnitune.runtime.process import main as process_main
from omnitune.runtime.summary import RunSummary, load as load_summary, save as save_summary
from omnitune.runtime.topology import nodes

# (run spec, checkpoint, why the run paused) -> (the re-tuned run spec, a record of what was
# tried, for replans.jsonl)
Replanner = Callable[[RunSpec, Path, Why], tuple[RunSpec, dict]]


# The in-run tuner a run has unless told otherwise (`--no-in-place`: none): stability and a
# cool-down near the target, read from the run itself; with it, pauses come only as insurance
# (`run_with_replans`, not `scheduled`). Its batch moves by goodput only where the caller gives
# it the batches' speeds (api.run does, from the plan's profile). docs/decisions.md, job.IN_PLACE.
IN_PLACE = TunerPolicy(cool_down=True)


@dataclass(frozen=True)
class RunOptions:
    """How a plan runs (`omnitune run`'s options). A bad value is a UserError naming its option."""
    max_time_s: float = 300.0                 # stop training after this many seconds
    eval_every_s: float = 0.02                # seconds between test-set evaluations, at least
    timeout_s: float = 120.0                  # a peer silent this long ends the job
    resume: bool = False                      # go on from the run dir's checkpoint
    from_scratch: bool = False                # start from untrained weights, not the plan's probe
    replan_every_s: float | None = None       # re-tune every this many seconds of training, not when it pays
    replan_probe_iters: int = 30              # iterations of each re-tuning probe
    checkpoint_every_s: float | None = None   # checkpoint every this many seconds of training
    max_restarts: int = 0                     # restarts from the last checkpoint after a process fails
    node_rank: int | None = None              # which node of a plan on several nodes this is
    retune: bool = True                       # re-tune lr, momentum, batch, protocol in the run (`retuning`)
    stop_on_stall: bool = False               # instead of re-tuning, end a run that stalls (monitor.STALL_SHARE)
    in_place: TunerPolicy | None = IN_PLACE   # the tuner that changes the running job in place (None: none)

    def __post_init__(self) -> None:
        for name in ("max_time_s", "eval_every_s", "timeout_s", "replan_every_s", "checkpoint_every_s"):
            value = getattr(self, name)
            if value is not None and not value > 0:
                raise UserError(f"{option(name)} must be positive, got {value}")
        for name, least in (("max_restarts", 0), ("replan_probe_iters", 1)):
            if getattr(self, name) < least:
                raise UserError(f"{option(name)} must be at least {least}, got {getattr(self, name)}")
        if self.stop_on_stall and self.replan_every_s is not None:
            raise UserError("--stop-on-stall ends a run that stalls, which re-tuning answers instead: "
                            "drop --replan-every-s")

    @property
    def retuning(self) -> bool:
        """Whether the run pauses to re-tune: by default (unless --no-retune, or --stop-on-stall,
        which ends a stalled run instead), or every --replan-every-s."""
        return self.retune and not self.stop_on_stall or self.replan_every_s is not None


def option(field: str) -> str:
    """A field's name as the command-line option it is."""
    return "--" + field.replace("_", "-")


def prepare(spec: RunSpec, out_dir: str, options: RunOptions, source: str = "the run spec",
            start_from: Path | None = None) -> JobArgs:
    """Lay out this node's run dir; no process is started here. `source` names where the spec
    came from, for errors. `start_from`: a checkpoint a fresh run starts from (the plan's probe),
    on the coordinator's host; a resume goes on from the run dir's own.

    The coordinator's node keeps the run's files (metrics, checkpoint, summary); the other nodes'
    run dirs hold their processes' logs.
    """
    resume = options.resume
    everyone = nodes(spec)
    here = launch_mod.pick_node(everyone, spec.rendezvous, options.node_rank, source)
    coordinator = here == launch_mod.coordinator(everyone)
    run_dir = Path(out_dir)
    resume_from = None
    if resume and coordinator:
        resume_from = str((run_dir / checkpoint.FILE).resolve())
        if not Path(resume_from).is_file():
            raise UserError(f"--resume: no {checkpoint.FILE} in {run_dir}")
    elif start_from is not None and coordinator:
        if not start_from.is_file():
            raise UserError(f"{source}: the checkpoint it starts from, {start_from}, is missing; plan again, or "
                            "run it with --from-scratch")
        resume_from = str(start_from.resolve())
    run_dir.mkdir(parents=True, exist_ok=True)
    if coordinator and not resume:      # a restart must not go on from an earlier run's checkpoint
        for stale in ("metrics.jsonl", "summary.json", "replans.jsonl", "restarts.jsonl", "eta.jsonl", checkpoint.FILE,
                      checkpoint.BEST_FILE):
            (run_dir / stale).unlink(missing_ok=True)
    return JobArgs(spec=spec, run_dir=str(run_dir.resolve()), max_time_s=options.max_time_s,
                   eval_every_s=options.eval_every_s, timeout_s=options.timeout_s, resume_from=resume_from, node=here.index,
                   store_port=launch_mod.store_port(everyone, spec.rendezvous))


def run(plan_path: str, out_dir: str, options: RunOptions = RunOptions(),
        replan: Replanner | None = None, first_pause_s: float | None = None) -> RunSummary | None:
    """Run this node's processes of the plan; the coordinator's node returns the run's summary.

    The run starts where the plan's chosen probe stopped (its `start` checkpoint; the run's clock
    counts that probe's training), unless `options.from_scratch`. Given `replan` (the runtime does
    no planning: api.run hands in pause.retune) and `options.retuning`, the run pauses to re-tune its
    spec from a checkpoint at `next_stop` (or every `options.replan_every_s` seconds of training);
    a plan on several nodes is not re-tuned."""
    plan = plan_mod.load(plan_path)
    if plan.simulated_cluster:
        raise UserError(f"{plan_path}: planned by simulation for a cluster of {plan.simulated_cluster}, whose nodes "
                        "are names, not machines; to run on such nodes, write a cluster spec with their hosts "
                        "(`nodes:`), profile it and plan again")
    if options.replan_every_s is not None and len(nodes(plan.spec)) > 1:
        raise UserError("--replan-every-s: re-planning runs on one node only, and this plan has several")
    start = None if options.from_scratch else plan_mod.start_path(plan, plan_path)
    plan = dataclasses.replace(plan, spec=scheduled(plan.spec, options.max_time_s, plan.prediction.sec_per_iter))
    job = prepare(plan.spec, out_dir, options, plan_path, start)
    job = dataclasses.replace(job, plan_path=str(Path(plan_path).resolve()),
                              predicted_sec_per_iter=plan.prediction.sec_per_iter,
                              predicted_time_to_target_s=plan.prediction.time_to_target_s,
                              planning_s=plan.planning.spent_s if plan.planning else None,
                              planning_probes=plan.planning.probes if plan.planning else 0,
                              checkpoint_every_s=options.checkpoint_every_s or float("inf"),
                              max_restarts=options.max_restarts, tuner=options.in_place)
    if options.replan_every_s is not None and replan is None:
        raise ValueError("replan_every_s needs a replan function")
    if not options.retuning or replan is None or len(nodes(plan.spec)) > 1:
        return run_job(dataclasses.replace(job, stall_stop_from_s=0.0 if options.stop_on_stall else float("inf")))
    body = functools.partial(run_with_replans, plan, job, options.replan_every_s, replan, first_pause_s,
                             restart_s=RESUME_S if segments.waits(job) else RESTART_S,
                             from_limit=plan.prediction.iters_to_target is None,
                             scheduled=options.in_place is None)
    return segments.resident(body, run_job)


def scheduled(spec: RunSpec, max_time_s: float, sec_per_iter: float) -> RunSpec:
    """The spec with a horizon for its recipe's schedule: the plan's predicted iterations to
    target, or, where the plan could predict none, the iterations its predicted speed fits in the
    run's time limit (a schedule that never decays would leave the run at its peak rate)."""
    if spec.horizon > 0 or sec_per_iter <= 0 or not math.isfinite(max_time_s):
        return spec
    return dataclasses.replace(spec, horizon=max(1, round(max_time_s / sec_per_iter)))


def run_spec(spec: RunSpec, out_dir: str, max_time_s: float = 300.0, eval_every_s: float = 0.02,
             timeout_s: float = 120.0, resume: bool = False, start_from: Path | None = None,
             **experiment) -> RunSummary:
    """Run a run spec on this one node, with no plan behind it (benchmarks, experiments), from
    scratch or from the checkpoint `start_from`. `experiment` sets JobArgs' experiment fields:
    eval_every_iters, max_iters, trajectory."""
    options = RunOptions(max_time_s=max_time_s, eval_every_s=eval_every_s, timeout_s=timeout_s, resume=resume)
    job = prepare(spec, out_dir, options, start_from=start_from)
    return run_job(dataclasses.replace(job, **experiment))


def run_job(job: JobArgs) -> RunSummary | None:
    """Launch this node's processes of `job.spec`; the coordinator's node returns the summary."""
    everyone = nodes(job.spec)
    here = next(n for n in everyone if n.index == job.node)
    coordinator = here == launch_mod.coordinator(everyone)
    try:
        launch_mod.launch_node(process_main, (job,), here, everyone, job.spec.rendezvous, Path(job.run_dir) / "logs",
                               run_id(job.spec), job.max_restarts, job.timeout_s)
    except UserError as e:
        saved = Path(job.run_dir) / checkpoint.FILE
        if coordinator and saved.is_file():
            raise UserError(f"{e}; the checkpoint {saved} is intact: the same command with --resume goes on "
                            "from it") from None
        raise
    if not coordinator:
        return None
    return load_summary(Path(job.run_dir) / "summary.json")


def run_id(spec: RunSpec) -> str:
    """Names the rendezvous: every node computes it alike from the same run spec."""
    return hashlib.sha256(json.dumps(to_dict(spec), sort_keys=True).encode()).hexdigest()[:12]


# When a run pauses to re-tune (planning/retune.py decides what it goes on with): phases double,
# and a pause comes only once all re-tuning so far, the coming one's cost included, fits in
# RETUNE_SHARE of the training time so far. A short run is never paused, unless it diverges, or
# goes too slowly to reach its target within its time limit (monitor.off_pace).
RETUNE_SHARE = 0.10      # all re-tuning costs at most this share of the training time so far
FIRST_COST_S = 6.0       # one pause's cost before any was measured, where the re-tuner gives no estimate,
RESTART_S = 4.5          # of which the restart (docs/decisions.md, job.FIRST_COST_S and job.RESTART_S),
RESUME_S = 0.15          # or, where the processes wait for the next segment (segments.py), going on (0.07-0.15 s)
# A recipe's schedule spans the plan's predicted iterations, or the iterations the profile's step
# time fits in the time limit (`scheduled`). That step time can miss the run's by much more than
# the run's own spread, and a schedule that ends well before the limit leaves a run at its floor
# rate, short of its target (docs/decisions.md, job.PACE_CHECK_SHARE). So a re-tuned run
# re-fits the horizon at its own pace once it has trained PACE_CHECK_SHARE of its time limit: a
# segment boundary with no probes (`paced`).
PACE_CHECK_SHARE = 0.05
# Before LOWER_FROM of its way to the target at its recent pace (eta.way), being off pace pauses
# the run as the schedule does: no lower rate is read, since short-horizon bias is at its worst
# early and a run that lowers its rate in its first seconds misses its target. A stall alone lowers
# no rate where the recent pace gets to the target at all: the run is still on its way, and a
# pause's short readings favour lower rates whatever they do over a run; a third of a healthy
# run's rate, taken late on its way, costs it time (docs/decisions.md, job.LOWER_FROM). Where the
# pace never gets there (eta.way None), a stall is a stall. Such an early pause ("plateau") then
# checks for a plateau: a third of the rate, read for ten times a pause's updates, must gain 12%
# (retune.plateau), so that a run levelled off under its target, whose every stall is "on the
# way", still lowers its rate (docs/decisions.md, retune.Rules.plateau_gain).
LOWER_FROM = 0.5


def next_stop(last_stop_s: float, spent_s: float, cost_s: float) -> float:
    """The training time at which the run next pauses: at least twice the last pause's, and late
    enough that the re-tuning spent so far plus this pause's `cost_s` is at most RETUNE_SHARE of
    the training time by then."""
    return max(2.0 * last_stop_s, (spent_s + cost_s) / RETUNE_SHARE)


def run_with_replans(plan: plan_mod.Plan, job: JobArgs, every_s: float | None, replan: Replanner,
                     first_pause_s: float | None = None, launch: Callable[[JobArgs], RunSummary] | None = None,
                     restart_s: float = RESTART_S, from_limit: bool = False,
                     scheduled: bool = True) -> RunSummary:
    """The run in segments, re-tuned between them; `launch` runs a segment (default `run_job`:
    new processes for each; segments.py keeps them). A pause costs what the run waits for: the
    re-tuning probes and the restart of the processes after them (the next segment's wall time
    less its training and evaluation: `restart_s` until measured). The next pause comes at
    `next_stop`, or every `every_s` seconds of training. Until a pause is timed, its probes are
    taken to cost `first_pause_s` (the re-tuner's own estimate), else FIRST_COST_S less the restart.
    A schedule is re-fitted at the run's pace first (`pace_check_at`, `paced`; `from_limit`: its
    horizon spans the time limit, the plan predicting no iterations). Not `scheduled` (the run is
    tuned in place, reading the run itself): no pause on a schedule, only the insurance ones, at
    a divergence, a stall, or a pace that misses the time limit."""
    job = dataclasses.replace(job, retuned=True, diverge_stop=True)
    launch = launch or run_job
    led = Ledger.start(_trained_s(job.resume_from), first_pause_s, restart_s, scheduled)
    check_s = pace_check_at(job.spec, job.max_time_s, led.train_s)
    while True:
        stop_s = led.next_stop(every_s, job.max_time_s)
        pacing = check_s is not None and check_s < stop_s
        stop_s, check_s = (check_s, None) if pacing else (stop_s, check_s)
        summary = led.segment(launch, job, stop_s)
        if summary.reached_target or summary.wall_s >= job.max_time_s:
            break
        if pacing and summary.wall_s >= stop_s:     # the segment ran to the check: no pause, a new schedule
            plan, job = repace(plan, job, summary, from_limit, led)
        else:
            plan, job = pause(plan, job, summary, replan, led)
    return led.finish(summary, Path(job.run_dir))


@dataclass
class Ledger:
    """A re-tuned run's clock and what its pauses cost: `train_s`, its training time at the end of
    the last segment; `probes_s` and `restart_s`, a pause's probes and the restart after it
    (estimates until timed); `spent_s`, all re-tuning so far; `owed_s`, the restart the last
    pause still owes (paid as the next segment starts)."""
    train_s: float
    probes_s: float
    restart_s: float
    spent_s: float = 0.0
    owed_s: float = 0.0
    replans: int = 0
    resumed: bool = False            # the next segment starts after a pause or a re-fitted schedule
    began: float = 0.0               # perf_counter at the last segment's end, or at its launch
    segment_from_s: float = 0.0      # training time at the last segment's start
    wall_before: float = 0.0
    started_at_s: float = 0.0
    stalled_at_s: float | None = None
    diverged_at_s: float | None = None
    first_stop_s: float | None = None
    repaced: dict | None = None
    scheduled: bool = True           # pauses come on a schedule too, not only as insurance

    @classmethod
    def start(cls, train_s: float, first_pause_s: float | None, restart_s: float, scheduled: bool = True) -> Ledger:
        probes_s = FIRST_COST_S - RESTART_S if first_pause_s is None else first_pause_s
        return cls(train_s, probes_s, restart_s, wall_before=train_s, started_at_s=train_s, scheduled=scheduled)

    @property
    def cost_s(self) -> float:
        """The next pause's cost: its probes and the restart after it."""
        return self.probes_s + self.restart_s

    def next_stop(self, every_s: float | None, max_time_s: float) -> float:
        """When the next segment ends for a pause: every `every_s`, else at `next_stop` (what
        re-tuning has cost by then: what was spent, the restart owed, and this pause), or never
        where a pause there would leave less of the time limit than it costs, or where pauses come
        only as insurance (not `scheduled`)."""
        if every_s is None and not self.scheduled:
            return math.inf
        if every_s is not None:
            stop_s = self.train_s + every_s
        else:
            stop_s = next_stop(self.train_s, self.spent_s + self.owed_s, self.cost_s)
        self.first_stop_s = stop_s if self.first_stop_s is None else self.first_stop_s
        if every_s is None and not monitor.pause_pays(stop_s, self.cost_s, max_time_s):
            return math.inf
        return stop_s

    def segment(self, launch: Callable[[JobArgs], RunSummary], job: JobArgs, stop_s: float) -> RunSummary:
        """Run a segment to `stop_s`, and account for it. A stall pauses it at once where a pause
        fits the budget; being off pace, once its latest half lasted as long as a pause costs (the
        ski-rental rule: docs/decisions.md, monitor.off_pace)."""
        stall_from_s = (self.spent_s + self.owed_s + self.cost_s) / RETUNE_SHARE
        self.began, self.segment_from_s = time.perf_counter(), self.train_s
        summary = launch(dataclasses.replace(job, stop_at_s=stop_s, stall_stop_from_s=stall_from_s,
                                             pace_wait_s=self.cost_s))
        self.stalled_at_s = self.stalled_at_s if self.stalled_at_s is not None else summary.stalled_at_s
        self.diverged_at_s = self.diverged_at_s if self.diverged_at_s is not None else summary.diverged_at_s
        if self.resumed:          # this segment began with a restart after a pause
            self.restart_s = max(0.0, time.perf_counter() - self.began - (summary.wall_s - self.wall_before))
            self.spent_s, self.owed_s = self.spent_s + self.restart_s, 0.0
        # The next segment's clock starts at this one's training time (its checkpoint's): the
        # evaluations are not the restart's.
        self.train_s = self.wall_before = summary.wall_s - summary.eval_s
        self.began, self.resumed = time.perf_counter(), True
        return summary

    def finish(self, summary: RunSummary, run_dir: Path) -> RunSummary:
        """The run's summary, with its pauses. A later segment resumes from the pause's
        checkpoint: the run itself started at the first's."""
        summary = dataclasses.replace(summary, replans=self.replans, replan_s=self.spent_s,
                                      stalled_at_s=self.stalled_at_s, diverged_at_s=self.diverged_at_s,
                                      started_at_s=self.started_at_s, first_pause_at_s=self.first_stop_s,
                                      repaced=self.repaced, pause_cost_s=self.cost_s)
        save_summary(summary, run_dir / "summary.json")
        return summary


def repace(plan: plan_mod.Plan, job: JobArgs, summary: RunSummary, from_limit: bool,
           led: Ledger) -> tuple[plan_mod.Plan, JobArgs]:
    """The schedule re-fitted at the run's own pace (`paced`): a segment boundary, no probes."""
    spec = paced(job.spec, summary, job.max_time_s, from_limit)
    led.repaced = {"iteration": summary.iterations, "train_s": led.train_s, "before": job.spec.horizon,
                   "after": spec.horizon, "sec_per_iter": summary.measured_sec_per_iter,
                   "predicted_sec_per_iter": job.predicted_sec_per_iter}
    led.owed_s = led.restart_s
    return replanned(plan, job, spec, Path(job.run_dir) / "plan-paced.json")


def pause(plan: plan_mod.Plan, job: JobArgs, summary: RunSummary, replan: Replanner,
          led: Ledger) -> tuple[plan_mod.Plan, JobArgs]:
    """A pause: why the run paused, the re-tuner's decision from its checkpoint (a diverged run's
    best one), the schedule re-fitted from where the next segment starts, a line of
    replans.jsonl; returns the next segment's plan and job."""
    run_dir = Path(job.run_dir)
    everything = metrics_lines(run_dir)
    lines = evaluations(everything)
    why = pause_why([r for r in lines if r.get("train_s", 0.0) > led.segment_from_s], led.segment_from_s)
    way = eta.way(lines, job.spec.target) if job.spec.target else None
    early = why if way is not None and (why == Why.STALL or why == Why.OFF_PACE and way < LOWER_FROM) else None
    why = Why.PLATEAU if early else why
    now = in_force(job.spec, run_dir / checkpoint.FILE)       # what the run did, its changes in place kept
    policy = job.tuner or TunerPolicy()
    over = edge(everything, now if why == Why.DIVERGENCE else None, policy.cut)
    back_at = back_to_best(run_dir, led.train_s) if why == Why.DIVERGENCE else None
    chosen, record = replan(now, run_dir / checkpoint.FILE, why)
    spec = below_edge(chosen, over, policy.ceiling)
    if over is not None:
        record.update(edge_per_sample=over)
    if spec is not chosen:      # held below the edge: the run goes on with another rate than the pause chose
        record.update(held_from_lr=chosen.lr, switched=True, **({"after": {**record["after"], "lr": spec.lr}}
                                                                if "after" in record else {}))
    led.probes_s = time.perf_counter() - led.began
    led.replans, led.spent_s, led.owed_s = led.replans + 1, led.spent_s + led.probes_s, led.restart_s
    record.update(iteration=summary.iterations, train_s=led.train_s, replan_s=led.probes_s, spent_s=led.spent_s,
                  why=why.value, back_to_iteration=back_at, restart_s=led.restart_s, way=way,
                  **({"early": early.value} if early else {}))
    at = back_at if back_at is not None else summary.iterations      # where the next segment starts
    spec = refit_horizon(spec, run_dir, at, job.spec, iterations_left(summary, job.max_time_s))
    record.update(horizon={"before": job.spec.horizon, "after": spec.horizon})
    append_jsonl(run_dir / "replans.jsonl", record)
    # A divergence the pause found no better setting for was most likely noise: the run no
    # longer stops for one (each stop would cost a pause, and change nothing).
    diverge_stop = job.diverge_stop and not (why == Why.DIVERGENCE and not record["switched"])
    return replanned(plan, dataclasses.replace(job, diverge_stop=diverge_stop), spec,
                     run_dir / f"plan-replan-{led.replans}.json")


def replanned(plan: plan_mod.Plan, job: JobArgs, spec: RunSpec, path: Path) -> tuple[plan_mod.Plan, JobArgs]:
    """The plan and job of the next segment: `spec`, saved as a plan at `path` (resident
    processes read it there), resumed from the run's checkpoint."""
    plan = dataclasses.replace(plan, spec=spec, implicit_momentum=spec.variant.implicit_momentum())
    plan_mod.save(plan, path)
    return plan, dataclasses.replace(job, spec=spec, plan_path=str(path),
                                     resume_from=str(Path(job.run_dir) / checkpoint.FILE))


def pace_check_at(spec: RunSpec, max_time_s: float, start_s: float) -> float | None:
    """The training time at which a run re-fits its schedule at its own pace (PACE_CHECK_SHARE of
    its time limit in); None where nothing would change: no time limit, no horizon or no target,
    or a recipe at a constant rate."""
    if spec.horizon <= 0 or spec.target is None or not math.isfinite(max_time_s):
        return None
    if workload_mod.load(spec.workload).recipe.schedule == "constant":
        return None
    return start_s + PACE_CHECK_SHARE * max_time_s


def paced(spec: RunSpec, summary: RunSummary, max_time_s: float, from_limit: bool) -> RunSpec:
    """The spec with its schedule re-fitted at the pace the run kept (`iterations_left`): a horizon
    that spans the time limit (`from_limit`) ends where the limit now comes; one the plan
    predicted ends there at the latest."""
    left = iterations_left(summary, max_time_s)
    if left is None:
        return spec
    last = summary.iterations + round(left)
    horizon = last if from_limit else min(spec.horizon, last)
    return dataclasses.replace(spec, horizon=max(summary.iterations + 1, horizon))


def pause_why(segment: list[dict], since_s: float = 0.0) -> Why:
    """Why the run pauses, from the evaluations of the segment that ends (it began at training
    time `since_s`): a divergence where the latest diverged, off pace where any in the latest half
    of the segment was (monitor.off_pace), a stall where any there was stalled, else the schedule.
    The whole latest half, not the latest reading: a run that swings reads unstalled at one
    evaluation and stalled at the next; and not the whole segment: a stall long over would count
    (docs/decisions.md, job.pause_why)."""
    latest = segment[-1] if segment else {}
    if latest.get("diverged"):
        return Why.DIVERGENCE
    half = (since_s + latest.get("train_s", since_s)) / 2
    recent = [r for r in segment if r.get("train_s", 0.0) >= half]
    if any(r.get("off_pace") for r in recent):
        return Why.OFF_PACE
    return Why.STALL if any(r.get("stalled") for r in recent) else Why.SCHEDULE


def readings(run_dir: Path) -> list[dict]:
    """The run's evaluations so far (metrics.jsonl, less its changes in place)."""
    return evaluations(metrics_lines(run_dir))


def metrics_lines(run_dir: Path) -> list[dict]:
    """The run's metrics.jsonl so far: its evaluations and its changes in place."""
    path = run_dir / "metrics.jsonl"
    text = path.read_text() if path.is_file() else ""
    return [json.loads(line) for line in text.splitlines() if line.strip()]


def in_force(spec: RunSpec, path: Path) -> RunSpec:
    """The spec with the values its checkpoint at `path` says the changes in place left in force,
    where that checkpoint's job ran `spec` (process.in_force's rule): what the run was doing
    when it paused, which the pause reads around; `spec` itself where it holds none."""
    if not path.is_file():
        return spec
    knobs = torch.load(path, map_location="cpu", weights_only=True).get("knobs")
    if not knobs or Knobs.from_dict(knobs["base"]) != Knobs.of(spec):
        return spec
    return Knobs.from_dict(knobs["now"]).on(spec)


def edge(lines: list[dict], diverged: RunSpec | None, cut: float) -> float | None:
    """The lowest rate per sample of batch that went over the edge of stability in the run so
    far: each rate the in-run tuner cut (a change in place "unstable", to `cut` of it), and the
    setting `diverged` at, where the run paused for a divergence; None where none did. Per sample:
    a rate scaled with its batch (the linear rule) meets the same edge."""
    rates = [c["lr"] / cut / sum(c["batch_size"].values()) for c in changes(lines)
             if c.get("why") == "unstable" and c.get("batch_size")]
    if diverged is not None:
        rates.append(diverged.lr / sum(diverged.batch_size.values()))
    return min(rates, default=None)


def below_edge(spec: RunSpec, over: float | None, ceiling: float) -> RunSpec:
    """The pause's choice, held below the run's edge of stability (`edge`): a rate per sample at
    or past it goes to `ceiling` of it, the in-run tuner's own rule, so that no pause takes the
    run over its edge twice (a 30-update reading cannot see an edge that a thousand meet)."""
    total = sum(spec.batch_size.values())
    if over is None or spec.lr < over * total * (1 - 1e-9):
        return spec
    return dataclasses.replace(spec, lr=ceiling * over * total)


def back_to_best(run_dir: Path, train_s: float) -> int | None:
    """A diverged run goes on from its best score's checkpoint (BEST_FILE), which becomes the
    run's checkpoint with the clock where the run is (`train_s`: the diverged training counts).
    Returns that checkpoint's iteration; None where the run kept none."""
    best = run_dir / checkpoint.BEST_FILE
    if not best.is_file():
        return None
    state = torch.load(best, map_location="cpu", weights_only=True)
    checkpoint.save_state(run_dir / checkpoint.FILE, {"model": state["model"], "optimizer": state["optimizer"]},
                          state["iteration"], train_s)
    return int(state["iteration"])


def refit_horizon(spec: RunSpec, run_dir: Path, iteration: int, before: RunSpec | None = None,
                  limit_iters: float | None = None) -> RunSpec:
    """The recipe's schedule re-fitted at a pause at `iteration`: its horizon becomes the
    iterations to target that the run's own readings now predict (eta.horizon), never
    before this iteration, and never past the run's time limit, `limit_iters` more iterations at
    the pace it kept (`iterations_left`): a schedule that has not decayed by then leaves the run
    at a high rate when it ends, short of its target (docs/decisions.md, job.refit_horizon).
    Where the pause changed the batches from `before`'s, the iterations left scale inversely with
    them, the limit's too (a bigger batch's steps take less than proportionally longer: its
    schedule then ends somewhat early). With no
    estimate yet, the horizon stays, within the limit; with no horizon, the schedule is constant."""

    if spec.horizon <= 0 or spec.target is None:
        return spec
    per = sum(before.batch_size.values()) / sum(spec.batch_size.values()) if before is not None else 1.0
    last = math.inf if limit_iters is None else iteration + limit_iters * per
    iters = eta.horizon(readings(run_dir), spec.target)
    if iters is not None:
        wanted = iteration + (iters - iteration) * per
    elif spec.horizon <= last:
        return spec
    else:
        wanted = spec.horizon
    return dataclasses.replace(spec, horizon=max(iteration + 1, round(min(wanted, last))))


def iterations_left(summary: RunSummary, max_time_s: float) -> float | None:
    """How many iterations a paused run has left before its time limit, at the pace it kept so
    far (its evaluations in it: the limit counts them); None where it has no limit. The next
    segment's clock starts at the training time (`wall_s` less `eval_s`)."""
    if not math.isfinite(max_time_s) or summary.iterations <= 0 or summary.wall_s <= 0:
        return None
    return max(0.0, max_time_s - (summary.wall_s - summary.eval_s)) * summary.iterations / summary.wall_s


def _trained_s(path: str | None) -> float:
    """The training time a checkpoint holds (0 without one)."""
    if path is None:
        return 0.0
    try:
        return float(torch.load(path, map_location="cpu", weights_only=True)["train_s"])
    except (RuntimeError, KeyError, EOFError, TypeError, pickle.UnpicklingError) as e:
        raise UserError(f"{path}: not a checkpoint of this model ({str(e).splitlines()[0]})") from None