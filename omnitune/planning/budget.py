"""How much planning a job deserves. Pure: no torch, no clock.

Omnivore spends about 10% of training on its optimizer (Hadjis et al. 2016, §4). Until a probe
predicts a time to target, the budget is a fixed RULES.unknown_budget_s, shared by probes of
RULES.min_probe_s or more. Once one predicts the training time of the best configuration found so far,
that prediction sets the budget for the rest of the search:

    planning (the first probes included) <= RULES.fraction × predicted training time

and, within it, how many probes run and how long each may train. A job predicted to train for
less than RULES.small_job_s gets a quick search instead: a fixed few seconds, so the whole `plan`
(datasets included) ends within about 15 s, and the table says the job was too small for a full
search. When no probe of the cold start's decades can predict (a long job: its curve has barely
left chance), the budget stays RULES.unknown_budget_s, and the search ranks configurations by training
loss after equal training time instead; the leaders of the two best setups then train on
(RULES.finalists, final.py) in what the probes left of the budget (`final_reserve_s`, so that the
round ends within it), and the winner's training is handed on to the run, not spent. That
budget is small because the run re-tunes as it goes (runtime/job.py): a longer search buys the
run little (docs/decisions.md, budget.RULES.unknown_budget_s). Scouts must learn before they rank:
where the first one's training loss has not fallen RULES.learned below its first minibatch's, it
trains again at twice the iterations, and the budget grows to cover the scouts at that length
(Trials.lengthen; budget.RULES.learned). `--budget-s` overrides all of this. A probe that would end
past the budget, by the profile's step times, is not started (on a large simulated fleet one
probe takes seconds).

A probe's test evaluations are budgeted too (`evaluations`): on a large model one costs as much as
many training steps.
"""

from __future__ import annotations

import math
from dataclasses import dataclass


@dataclass(frozen=True)
class Rules:
    """The planner's budget policy (docs/decisions.md, budget.*)"""

    # docs/decisions.md has a record, `budget.RULES.name`, for each value below that a measurement
    # chose, and says which are set by design.
    fraction: float = 0.10         # planning's share of the predicted training time
    small_job_s: float = 10.0      # below this predicted training time, a quick search
    small_budget_s: float = 4.0    # a quick search's probing, scouts included: with `plan`'s ~4 s of start-up, a tiny
                                   # job starts within 10 s (docs/decisions.md, budget.RULES.small_budget_s)
    scouts: int = 4                # the cold start's first probes: learning rate over Omnivore's decades
    scout_s: float = 1.5           # its reference setup is one where this long trains
    scout_iters: int = 40          # at least this many iterations
    unknown_budget_s: float = 6.0  # the budget while no probe can predict the training time,
    unknown_probes: int = 8        # or enough for this many of the shortest probes where a step is slow
    min_probe_s: float = 0.5       # shorter probes say nothing about a learning rate
    min_probe_iters: int = 20      # nor do fewer iterations,
    learned: float = 0.10          # nor a scout whose training loss is not this much below its first minibatch's:
    scout_doublings: int = 3       # it trains again at twice the iterations, at most this many times
    guard: float = 3.0             # a probe stops at this many times its seconds, if the profile misjudged its speed
    max_probe_s: float = 30.0      # longer ones buy little ranking for their cost
    wanted_probes: int = 16        # a full search's probes: Omnivore's decades, refinement and a rung or two
    probe_test: int = 500          # probes evaluate on this many test samples, or more: enough that
    errors_at_target: int = 50     # about this many are wrong at the target (a high target's few errors are noise)
    evals: int = 64                # at most this many times (closely at first; the last at the probe's end),
    ranking_evals: int = 4         # fewer when probes are ranked by their training loss,
    eval_share: float = 0.25       # and in all for at most about this share of the probe's time
    finalists: int = 2             # the final round (final.py): the best setups ranked by loss train on
    final_growth: float = 3.0      # to at most this many times their probes' training time,
    final_reserved: float = 2.0    # and the probes leave the budget room for this many


RULES = Rules()


def probe_test_size(target: float, available: int) -> int:
    """How many test samples a probe evaluates on: RULES.probe_test, or enough that RULES.errors_at_target are
    wrong at the target, at most the whole test set. At a high target a few hundred samples hold
    only a handful of errors, and they can read well off the whole set the run judges by."""
    return min(available, max(RULES.probe_test, math.ceil(RULES.errors_at_target / max(1.0 - target, 1e-9))))


def evaluations(probe_s: float, eval_s: float, most: int | None = None) -> int:
    """How many test evaluations a probe of `probe_s` seconds affords, one costing `eval_s`: at
    most RULES.eval_share of its time, and at least two (the middle and the end). Worked out from the
    profile's step times, not measured while probing, so the same seed gives the same curve."""
    most = RULES.evals if most is None else most
    return max(2, min(most, int(RULES.eval_share * probe_s / max(eval_s, 1e-9))))


@dataclass(frozen=True)
class Budget:
    seconds: float        # most seconds of probing in all, scouts included
    probe_s: float        # most seconds one probe trains
    probes: int           # how many probes that allows
    full: bool            # False: the job is too small for a full search
    reason: str           # for the plan file and the table

    def to_dict(self) -> dict:
        return {"seconds": self.seconds, "probe_s": self.probe_s, "probes": self.probes, "full": self.full,
                "reason": self.reason}


def plan_budget(predicted_train_s: float | None, scouts_s: float, override_s: float | None = None,
                least_s: float = 0.0) -> Budget:
    """The budget for probing, given the predicted training time of the best configuration so far
    (None: no probe could predict one) and the seconds planning already spent (`scouts_s`).
    `least_s` is what RULES.unknown_probes probes of RULES.min_probe_iters cost on the setup whose probe steps
    fastest (`least_probing`: where a step is slow, a fixed budget buys too few probes to rank;
    budget.RULES.unknown_probes), or, where the scouts had to train longer to learn, what the scouts cost
    (Trials.lengthen): with no prediction the budget is at least that.

    The probes still to run share what is left: RULES.wanted_probes of them when each can train for at
    least RULES.min_probe_s, fewer (but at least one) when not.
    """
    if override_s is not None:
        total, full, reason = override_s, True, f"--budget-s {override_s:g}"
    elif predicted_train_s is None:
        total, full = max(RULES.unknown_budget_s, least_s), True
        reason = ("no probe could predict the training time: a fixed budget, as the run re-tunes" if
                  least_s <= RULES.unknown_budget_s else
                  f"no probe could predict the training time: {RULES.unknown_probes} of the shortest probes, or scouts "
                  "that learn, as the run re-tunes")
    elif predicted_train_s < RULES.small_job_s:
        total, full = RULES.small_budget_s, False
        reason = (f"predicted training {predicted_train_s:.1f}s is under {RULES.small_job_s:.0f}s: too small for a "
                  f"full search, a quick one of {RULES.small_budget_s:.0f}s")
    else:
        total, full = RULES.fraction * predicted_train_s, True
        reason = f"{RULES.fraction:.0%} of the predicted training time {predicted_train_s:.0f}s"
    left = max(total - scouts_s, 0.0)
    probes = max(1, min(RULES.wanted_probes, int(left / RULES.min_probe_s)))
    probe_s = min(RULES.max_probe_s, max(RULES.min_probe_s, left / probes))
    return Budget(total, probe_s, probes if left > 0 else 0, full, reason)


def least_probing(fastest_probe_sec: float) -> float:
    """Seconds of RULES.unknown_probes probes of RULES.min_probe_iters at the fastest setup's probe step."""
    return RULES.unknown_probes * RULES.min_probe_iters * fastest_probe_sec


def final_reserve_s(probe_s: float) -> float:
    """What ranking by loss keeps of the budget for the final round, probes of `probe_s` each:
    room for RULES.final_reserved, not RULES.final_growth, so that the search's probes are not cut by half."""
    return RULES.finalists * (RULES.final_reserved - 1) * probe_s
