"""omnitune from Python: the three steps the commands take, with the same checks and files.

    import omnitune
    prof = omnitune.profile("lenet-digits", out="profile.json")
    plan = omnitune.plan(omnitune.PlanRequest("lenet-digits", 0.97, profile="profile.json", out="plan.json"))
    summary = omnitune.run("plan.json", "runs/demo", omnitune.RunOptions(max_time_s=60))

or all three at once: `omnitune.train("lenet-digits", "runs/demo", 0.97)`, as `omnitune train`.
A bad argument raises omnitune.UserError with a one-line message naming it.
"""

from __future__ import annotations

import contextlib
import os
import random
import shutil
import tempfile
from datetime import datetime, timezone
from functools import partial
from pathlib import Path
from typing import Callable, Iterator

import numpy as np
import torch

import omnitune.planning as planning
from omnitune.core import plan as plan_mod, profile as profile_mod
from omnitune.core.cluster import load_cluster, local_cluster
from omnitune.core.errors import UserError
from omnitune.core.plan import Plan
from omnitune.core.profile import Profile
from omnitune.efficiency import fleet as fleet_mod
from omnitune.planning import retune as retune_mod, study as study_mod
from omnitune.planning.request import PlanRequest
from omnitune.probing import pause, probe, timing
from omnitune.profiling import cache as profile_cache, profiler
from omnitune.runtime import job, workload as wl_mod
from omnitune.runtime.job import RunOptions
from omnitune.runtime.summary import RunSummary

Say = Callable[[str], None]


def quiet(message: str) -> None:
    pass


def profile(workload: str, out: str | Path | None = None, cluster: str | Path | None = None,
            data_dir: str | None = None, quick: bool = False, max_batch: int | None = None,
            node_rank: int | None = None, progress: Say = quiet) -> Profile | None:
    """Measure each device's training throughput and the links between devices, on this machine
    (or the cluster spec `cluster`), and write the profile to `out` if given. On a cluster of
    several nodes every node calls this with its `node_rank`; the server's node returns the
    profile, the others None. Worker logs are kept beside `out` only when a failure wrote into
    them (its message names them). A profile of this machine (no `cluster`) is kept in omnitune's
    cache too, for `train` to use again (profiling/cache.py)."""
    settings = profiler.Settings.make(quick, max_batch)
    spec = load_cluster(Path(cluster)) if cluster else local_cluster()
    out = Path(out) if out is not None else None
    logs = out.with_name(out.name + ".logs") if out else Path(tempfile.mkdtemp(prefix="omnitune-profile-"))
    done = False
    try:
        prof = profiler.profile(spec, workload, data_dir, settings, logs, progress=progress, node_rank=node_rank)
        if prof is not None and out is not None:
            profile_mod.save(prof, out)
        if prof is not None and cluster is None:
            profile_cache.keep(prof, data_dir, quick, max_batch)
        done = True
        return prof
    finally:
        if done or out is None or not (logs.is_dir() and any(logs.iterdir())):
            shutil.rmtree(logs, ignore_errors=True)


def plan(request: PlanRequest, progress: Say = quiet, notice: Say = quiet) -> Plan:
    """Search for the configuration with the least predicted time to target and return it as a
    plan, written to `request.out` if given, with the study beside it (an interrupted search
    resumes) and the checkpoint the run starts from. `progress` hears what the search is doing;
    `notice`, what the user should know (a profile of another workload or another machine)."""
    fleet = fleet_mod.load(request.cluster) if request.cluster is not None else None
    prof = fleet.profile if fleet else profile_mod.load(request.profile)
    source = request.cluster if fleet else request.profile
    largest = max(len(devices) for devices in prof.cluster.layouts.values())
    if request.groups is not None and request.groups > largest:
        raise UserError(f"--groups {request.groups}: more groups than devices ({source} has at most "
                        f"{largest} devices in a layout)")
    wl = wl_mod.load(request.workload)
    if wl_mod.resolve(prof.workload) != wl.path:
        notice(f"warning: {source} was measured with workload {prof.workload!r}, not {request.workload!r}")
    seed_everything(request.seed)
    prober = probe.make_prober(wl, request.data_dir, request.target, request.seed)
    elsewhere = "" if fleet else timing.here(prof)
    if elsewhere:
        notice(f"planning for a machine you are not on ({elsewhere}): the probes train on this machine's CPU, "
               "and every seconds-per-iteration figure comes from the profile")
    timed = request.time_finalists and not fleet and not elsewhere and request.hardware_model == plan_mod.ANALYTIC
    study = study_mod.new_study(study_storage(request.out) if request.out else None,
                                request.study_name(prof.measured_at, len(prof.devices)))
    if fleet:
        progress(f"simulating every configuration on {fleet.nodes} nodes")
    space = request.space().for_recipe(wl.recipe)
    found = planning.search(prof, space, prober, max_probe_iters=request.probe_iters,
                            budget_s=request.budget_s, study=study, log=progress,
                            hardware=fleet.hardware if fleet else planning.profiled(prof, request.hardware_model),
                            timer=partial(time_config, request, prof, progress) if timed else None)
    if request.predict_s > 0:
        progress(f"probing the chosen configuration for {request.predict_s:g}s to predict its time")
        found = planning.predict(found, prober, request.predict_s)
    result = planning.build_plan(found, prof, str(source) if fleet else profile_entry(source, request.out),
                                 request.workload, request.data_dir,
                                 request.target, request.seed,
                                 datetime.now(timezone.utc).isoformat(timespec="seconds"),
                                 simulated_cluster=fleet.description if fleet else "",
                                 hardware_model=request.hardware_model)
    if request.out is not None:
        if not fleet:
            result = probe.hand_on(result, prober, Path(request.out))
        plan_mod.save(result, request.out)
    return result


def profile_entry(profile: str | Path, out: str | Path | None) -> str:
    """The profile's path as a plan records it: relative to the plan's folder where the plan is
    written, so that a run from any folder finds it beside the plan (`pause_step_s`); as given
    otherwise. A path as given on the command line is relative to where `plan` ran: a run from
    elsewhere priced no batch at its pauses."""
    if out is None:
        return str(profile)
    return os.path.relpath(Path(profile).resolve(), Path(out).resolve().parent)


def time_config(request: PlanRequest, prof: Profile, progress: Say, config: planning.Config) -> float | None:
    """A configuration's seconds per iteration, by a short real job of the runtime."""
    progress(f"timing {config.layout} {config.variant.label} with a real job")
    return timing.time_spec(planning.spec_of(config, prof, request.workload, request.data_dir,
                                             request.target, request.seed))


def run(plan_path: str | Path, out_dir: str | Path, options: RunOptions = RunOptions(),
        notice: Say = quiet) -> RunSummary | None:
    """Run the plan as a real distributed job: this node's processes; the coordinator's node
    returns the run's summary (measured beside predicted), the others None. With
    `options.in_place` (the default, job.IN_PLACE) the running job is tuned in place (its batch
    stays unless that policy is given the batches' speeds, `goodput_speeds`), and with
    `options.retuning` (the default) it pauses to re-tune its learning rate and momentum, and
    where the profile prices them (`pause_step_s`) its batch and protocol, when it diverges,
    stalls or goes off pace, and, not tuned in place, also whenever a pause costs at most a
    tenth of its training so far (planning/retune.py). `notice` hears where the pauses cannot
    price batches (the plan's profile is not at hand)."""
    if not options.retuning:
        return job.run(str(plan_path), str(out_dir), options)
    replan, first_pause_s = retuner(plan_path, options.replan_probe_iters, notice=notice,
                                    lean=options.in_place is not None)
    return job.run(str(plan_path), str(out_dir), options, replan, first_pause_s)


class TrainSteps:
    """What `train` tells as it goes: each step's progress, and what each step made. Quiet here;
    the CLI's show each step on a status line and render what it made, as its commands do."""

    @contextlib.contextmanager
    def profiling(self) -> Iterator[Say]:
        """While this machine is measured: yields what hears the profiler's progress."""
        yield quiet

    def profiled(self, prof: Profile, path: Path, kept: Path | None) -> None:
        """The profile the plan is made on, written to `path`; `kept` is the file of omnitune's
        cache it was read from, None where it was measured now."""

    @contextlib.contextmanager
    def planning(self) -> Iterator[tuple[Say, Say]]:
        """While the plan is searched for: yields `plan`'s `progress` and `notice`."""
        yield quiet, quiet

    def planned(self, result: Plan, path: Path) -> None:
        """The plan, written to `path`."""

    @contextlib.contextmanager
    def running(self, plan_path: Path, out_dir: Path, options: RunOptions) -> Iterator[Say]:
        """While the plan runs: yields `run`'s `notice`."""
        yield quiet


def train(workload: str, out_dir: str | Path, target_accuracy: float | None = None,
          target_loss: float | None = None, profile_path: str | Path | None = None, data_dir: str | None = None,
          quick: bool = False, fresh_profile: bool = False, seed: int = 0, budget_s: float | None = None,
          options: RunOptions = RunOptions(), steps: TrainSteps = TrainSteps()) -> RunSummary | None:
    """Profile this machine, plan and run, in one call: `profile`, `plan` and `run` with their
    defaults, writing profile.json, plan.json and the run's files to `out_dir`; returns the run's
    summary. The profile is `profile_path` where given (of this machine: the run is here), else
    measured once: a later `train` of the same workload and settings here reads it from
    omnitune's cache (profiling/cache.py) unless `fresh_profile`. Every argument is checked
    before the profile's seconds are spent; `steps` hears each step and sees what it made."""
    out_dir = Path(out_dir)
    request = PlanRequest(workload, target_accuracy, profile_path or out_dir / "profile.json", None,
                          out_dir / "plan.json", data_dir, seed=seed, budget_s=budget_s, target_loss=target_loss)
    if profile_path is not None:
        check_given_profile(Path(profile_path), quick, fresh_profile)
    try:
        out_dir.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise UserError(f"--out-dir {out_dir}: {e.strerror or e}") from None
    if profile_path is None:
        profile_here(request, quick, fresh_profile, steps)
    with steps.planning() as (progress, notice):
        result = plan(request, progress, notice)
    steps.planned(result, request.out)
    with steps.running(request.out, out_dir, options) as notice:
        return run(request.out, out_dir, options, notice)


def check_given_profile(path: Path, quick: bool, fresh_profile: bool) -> None:
    """Refuse what `train` cannot do with a profile measured already: measure it (`quick`,
    `fresh_profile`), or run on the machine it measured where that is another."""
    if quick:
        raise UserError("--quick measures a cheaper profile: not with --profile, which is measured already")
    if fresh_profile:
        raise UserError("--fresh-profile measures a profile: not with --profile, which is measured already")
    elsewhere = timing.here(profile_mod.load(path))
    if elsewhere:
        raise UserError(f"--profile {path}: not of this machine ({elsewhere}); `train` runs here: "
                        "plan for another machine with `omnitune plan`")


def profile_here(request: PlanRequest, quick: bool, fresh_profile: bool, steps: TrainSteps) -> None:
    """This machine's profile of the request's workload, written where the request reads it: the
    one omnitune's cache keeps (unless `fresh_profile`), else measured now (and kept)."""
    found = None if fresh_profile else profile_cache.kept(request.workload, request.data_dir, quick, None)
    if found:
        kept, prof = found
        profile_mod.save(prof, request.profile)
    else:
        kept = None
        with steps.profiling() as progress:
            prof = profile(request.workload, request.profile, None, request.data_dir, quick, progress=progress)
    steps.profiled(prof, request.profile, kept)


def retuner(plan_path: str | Path, iters: int, priced: bool = True, notice: Say = quiet,
            lean: bool = False) -> tuple[Callable, float]:
    """The re-tuning function `run` hands the runtime (pause.retune, each reading `iters`
    updates), and what its first pause should cost (pause.pause_cost_s). `priced=False`: rates
    and momenta only, as if the plan's profile were not at hand; where it is not, `notice` hears so.
    `lean`: the run is tuned in place, and its pauses read less (pause.lean_read)."""
    plan = plan_mod.load(plan_path)
    step_s = pause_step_s(plan, plan_path) if priced else None
    if priced and step_s is None and not plan.simulated_cluster:
        notice(f"the plan's profile {plan.profile} is not at hand (beside the plan, or as given) or cannot be "
               "read: the run's pauses compare rates and momenta only, not batches or protocols")
    # What the pause will weigh and read (a simulated fleet's plan does not run here: job.run says so).
    wl = None if plan.simulated_cluster else wl_mod.load(plan.spec.workload)
    validation = pause.validation_size(wl, plan.spec.data_dir) if wl else pause.RETUNE_VALIDATION
    return (partial(pause.retune, iters=iters, step_s=step_s, lean=lean),
            pause.pause_cost_s(plan.spec, iters, step_s, plan.prediction.sec_per_iter, wl, validation))


GOODPUT_SCALES = (0.5, 1.0, 2.0, 4.0)    # the batches, times the plan's, the in-run goodput rule weighs


def goodput_speeds(plan: Plan, plan_path: str | Path) -> tuple[tuple[int, float], ...]:
    """(total batch, samples a second) at GOODPUT_SCALES of the plan's batches, by the hardware
    model of its profile; none where the profile is not at hand. The in-run tuner's goodput rule
    moves the batch among these: `RunOptions(in_place=replace(job.IN_PLACE, speeds=...))`."""
    step_s = pause_step_s(plan, plan_path)
    out = []
    for scale in GOODPUT_SCALES:
        spec = retune_mod.scaled(plan.spec, scale)
        x = retune_mod.throughput(spec, step_s)
        if x is not None:
            out.append((sum(spec.batch_size.values()), x))
    return tuple(out)


def profile_path(plan: Plan, plan_path: str | Path) -> Path | None:
    """Where the plan's profile is: beside the plan at `plan_path`, as `plan` records it
    (`profile_entry`), or, for an older plan, a path as given; None where neither is a file."""
    return next((p for p in (Path(plan_path).parent / plan.profile, Path(plan.profile)) if p.is_file()), None)


def pause_step_s(plan: Plan, plan_path: str | Path) -> planning.StepTime | None:
    """The hardware model of the plan's profile (`profile_path`), which prices a pause's other
    batches and protocols; None where that profile is not at hand (another node's path, a
    simulated fleet): pauses then compare rates and momenta only."""
    try:
        path = profile_path(plan, plan_path)
        if plan.simulated_cluster or path is None:
            return None
        return planning.spec_step_s(profile_mod.load(path), plan.layout)
    except UserError:
        return None


def seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


def study_storage(plan_path: str | Path) -> Path:
    """Probes are kept in a journal beside the plan (PLAN.study.jsonl), so an interrupted `plan`
    resumes where it stopped."""
    plan_path = Path(plan_path)
    plan_path.parent.mkdir(parents=True, exist_ok=True)
    return plan_path.with_suffix(".study.jsonl")


__all__ = ["PlanRequest", "RunOptions", "TrainSteps", "UserError", "plan", "profile", "run", "train"]
