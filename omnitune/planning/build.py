"""From a search to a plan file: the winner's run spec and prediction, and every configuration
considered as a candidate row; `predict` probes the winner longer for a prediction with a band."""

from __future__ import annotations

import math
import time
from dataclasses import replace

from omnitune.core.errors import UserError
from omnitune.core.plan import ANALYTIC, MEASURED, SCHEMA_VERSION, SIMULATED, Candidate, Plan, Prediction
from omnitune.core.profile import Profile
from omnitune.core.target import Target, of
from omnitune.efficiency.perfmodel import PerfModel, Shape
from omnitune.efficiency.statmodel import ProbeResult, ProbeStatus
import omnitune.planning.budget as budget_mod
from omnitune.planning.hardware import analytic_covers, spec_batches, spec_of
from omnitune.planning.omnivore import Search
from omnitune.planning.probes import HandsOn, Prober, never
from omnitune.planning.ranking import rank_key
from omnitune.planning.space import Scored


def candidate_rows(scored: list[Scored]) -> tuple[Candidate, ...]:
    """The plan file's record of every configuration considered."""
    return tuple(Candidate(
        layout=s.config.layout, variant=s.config.variant, batch_size=s.config.batch, lr=s.config.lr,
        momentum=s.config.momentum, implicit_momentum=s.config.variant.implicit_momentum(),
        sec_per_iter=s.sec_per_iter, iters_to_target=s.iters, time_to_target_s=s.time_to_target_s,
        note=probe_note(s.probe) if s.probe else (s.note or "not probed"),
        iters_band=band(s.probe.interval) if s.probe and s.probe.interval and s.iters else (),
        model_sec_per_iter=s.model_sec_per_iter, weight_decay=s.config.weight_decay) for s in scored)


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
    hands on goes on from where the probe stopped, so the run, starting where this probe stops,
    loses none of it. The search's ranking stands; only the winner's probe is replaced. Where
    planning ranked by training loss, this is the way to a prediction on a long job."""
    best = found.scored[0] if found.scored else None
    if best is None or best.probe is None or seconds <= 0:
        return found
    old = best.probe
    per_iter = old.seconds / old.iters if old.iters and old.seconds > 0 else None
    if per_iter is None:
        return found
    cap = max(budget_mod.RULES.min_probe_iters, int(seconds / per_iter))
    start = time.perf_counter()
    went_on = prober.handoffs.get(old.config) if isinstance(prober, HandsOn) else None
    if went_on is None:
        r = prober(old.config, cap, budget_mod.RULES.guard * seconds, never, budget_mod.RULES.evals)
    else:
        r = prober(old.config, went_on.iterations + cap, budget_mod.RULES.guard * seconds, never,
                   budget_mod.RULES.evals, start=went_on)
    spent = time.perf_counter() - start
    p = found.planning
    planning = replace(p, seconds=p.seconds + spent, probes=p.probes + 1,
                       reason=f"{p.reason}; then {spent:.1f}s probing the chosen configuration to predict its time")
    return Search([replace(best, probe=r)] + found.scored[1:], planning)


def build_plan(found: Search, profile: Profile, profile_path: str, workload: str,
               data_dir: str | None, target: Target | float, seed: int, created_at: str, simulated_cluster: str = "",
               hardware_model: str = ANALYTIC) -> Plan:
    """The winning configuration as a Plan: the first of the search's ranking. When no probe could
    be ranked, the configuration whose probe reached the highest accuracy, with no prediction; a
    clear error when no probe learned at all."""
    scored = found.scored
    best = scored[0]
    if rank_key(best.probe, best.sec_per_iter, found.ranked) is None:
        learned = [s for s in scored if s.probe and len(s.probe.curve) > 1 and s.probe.status != ProbeStatus.DIVERGED
                   and s.probe.curve[-1][1] > s.probe.curve[0][1]]
        if not learned:
            notes = sorted({s.probe.note for s in scored if s.probe})
            raise UserError(f"{of(target).option} {of(target).value:g}: no probe reached it or could extrapolate to it "
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
    if best.iters is not None and math.isfinite(best.iters):
        spec = replace(spec, horizon=max(1, round(best.iters)))     # the recipe's schedule spans the prediction
    return Plan(
        schema_version=SCHEMA_VERSION, spec=spec, layout=c.layout,
        implicit_momentum=c.variant.implicit_momentum(),
        prediction=Prediction(best.sec_per_iter, best.iters, best.time_to_target_s,
                              tuple((float(i), float(a)) for i, a in best.probe.curve), best.model_sec_per_iter),
        candidates=candidate_rows(scored), profile=profile_path, created_at=created_at, planning=found.planning,
        hardware_model=SIMULATED if simulated_cluster else hardware_model, simulated_cluster=simulated_cluster,
        idle=dict(c.idle))
