"""No configuration wins on a speed nobody measured. Given a `Timer` (timing.py: a short real job
of the runtime), the setups the hardware model puts above every measured one, while no
calibration job ran their shape, are timed before any probe (`time_fastest`), and a leader still
unmeasured after the search is timed before it may win (`measure_leaders`)."""

from __future__ import annotations

from dataclasses import replace
from typing import Callable

from omnitune.efficiency.statmodel import ProbeConfig, ProbeResult
import omnitune.planning.budget as budget_mod
from omnitune.planning.phases import ByLoss
from omnitune.planning.ranking import ordered
from omnitune.planning.space import LR_DECADES, MU_STAR, Config, Scored, Setup
from omnitune.planning.trials import Trials

# A configuration -> its seconds per iteration measured by a short real job, None on failure
Timer = Callable[[Config], "float | None"]
MAX_TIMED = 3           # setups timed at most, before the search and after it
# Before the search, a setup is timed only where the model puts it this much above every measured
# one: the search climbs no protocol ladder for less (order.STOP_GAIN), and a setup that leads
# anyway is timed after the search (`measure_leaders`). A model's small lead is within its error,
# and timing it can spend the budget the probes need (docs/decisions.md, timed.TIMING_GAIN).
TIMING_GAIN = 0.10
TIMED_TOLERANCE = 0.15  # a measured figure this close to the model's leaves a loss ranking as it was


def described(s: Setup | Config, sec: float | None, model_sec: float) -> str:
    return f"timed {s.layout} {s.variant.label} batch {s.batch}: " + \
        (f"{sec * 1e3:.2f} ms an iteration (the model said {model_sec * 1e3:.2f})" if sec else "the job failed")


def time_fastest(setups: list[Setup], timer: Timer, unmeasured: Callable[[Config], bool],
                 log: Callable[[str], None] = lambda m: None) -> list[Setup]:
    """Before any probe, the setups that the hardware model says run TIMING_GAIN more samples per
    second than every measured one, while no real job timed their shape, are timed (the fastest
    first, at most MAX_TIMED), so that the search caps its probes and ranks on measured speeds: a
    setup timed only after the search would have had every rival's probe cut short against its
    imagined speed. A setup whose job fails is left out."""
    def key(s: Setup) -> Config:
        return s.config(LR_DECADES[1], MU_STAR)
    modelled = {s: unmeasured(key(s)) for s in setups}
    fastest = max((s.samples_per_s for s in setups if not modelled[s]), default=0.0)
    rivals = sorted((s for s in setups if modelled[s] and s.samples_per_s > (1 + TIMING_GAIN) * fastest),
                    key=lambda s: -s.samples_per_s)[:MAX_TIMED]
    timed = {}
    for s in rivals:
        timed[s] = timer(key(s))
        log(described(s, timed[s], s.sec_per_iter) + ("" if timed[s] else ": left out"))
    return [replace(s, sec_per_iter=timed[s], model_sec_per_iter=s.sec_per_iter) if timed.get(s) else s
            for s in setups if s not in timed or timed[s]]


def measure_leaders(scored: list[Scored], trials: Trials, timer: Timer, unmeasured: Callable[[Config], bool]) \
        -> list[Scored]:
    """While the leader's seconds per iteration come from a model with no calibration job of its
    shape, a short real job times it (up to MAX_TIMED leaders), and it is ranked again on the
    measured figure. Ranked by time, its time to target follows the measured speed; ranked by loss
    at equal training time, a leader measured slower than its model said beyond TIMED_TOLERANCE
    trains again for that time at its measured speed (fewer iterations), as every other probe did
    at its own."""
    timed: dict[tuple, float | None] = {}         # per setup: a rate or momentum changes no speed
    by_loss = trials.phase.by_loss
    while scored:
        best = scored[0]
        c = best.config
        if best.probe is None or best.model_sec_per_iter is not None or not unmeasured(c):
            break
        if best.setup_key not in timed:
            if len(timed) == MAX_TIMED:
                break
            timed[best.setup_key] = timer(c)
            trials.log(described(c, timed[best.setup_key], best.sec_per_iter))
        sec = timed[best.setup_key]
        if sec is None:         # unmeasurable: it ranks after every configuration that could be
            scored = scored[1:] + [replace(best, probe=None, note="not chosen: its timing job failed")]
            continue
        went = replace(best, sec_per_iter=sec, model_sec_per_iter=best.sec_per_iter)
        if by_loss and sec > (1 + TIMED_TOLERANCE) * best.sec_per_iter:
            went = replace(went, probe=retrain(trials, best.probe.config, sec))
        scored = ordered([went] + scored[1:], by_loss)
    return scored


def retrain(trials: Trials, pc: ProbeConfig, sec: float) -> ProbeResult:
    """A probe of `pc` from scratch for the search's training time at `sec` per iteration."""
    assert isinstance(trials.phase, ByLoss)
    train_s = trials.phase.train_s
    cap = max(budget_mod.RULES.min_probe_iters, round(train_s / sec))
    limit_s = budget_mod.RULES.guard * max(budget_mod.RULES.min_probe_s, train_s)
    r = trials.runner.go_on(pc, cap, limit_s, budget_mod.RULES.ranking_evals)
    trials.runner.results[pc] = r
    return r
