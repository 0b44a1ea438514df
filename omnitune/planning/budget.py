"""How much planning a job deserves. Pure: no torch, no clock.

Omnivore spends about 10% of training on its optimizer (Hadjis et al. 2016, §4). Until a probe
predicts a time to target, the budget is a fixed UNKNOWN_BUDGET_S, shared by probes of
MIN_PROBE_S or more. Once one predicts the training time of the best configuration found so far,
that prediction sets the budget for the rest of the search:

    planning (the first probes included) <= FRACTION × predicted training time

and, within it, how many probes run and how long each may train. A job predicted to train for
less than SMALL_JOB_S gets a quick search instead: a fixed few seconds, so the whole `plan`
(datasets included) ends within about 15 s, and the table says the job was too small for a full
search. When no probe of the cold start's decades can predict (a long job: its curve has barely
left chance), the budget stays UNKNOWN_BUDGET_S, and the search ranks configurations by training
loss after equal training time instead; the leaders of the two best setups then train on
(FINALISTS, final.py) in what the probes left of the budget (`final_reserve_s`, so that the
round ends within it), and the winner's training is handed on to the run, not spent. That
budget is small because the run re-tunes as it goes (runtime/job.py): a longer search buys the
run little (docs/decisions.md, budget.UNKNOWN_BUDGET_S). Scouts must learn before they rank:
where the first one's training loss has not fallen LEARNED below its first minibatch's, it
trains again at twice the iterations, and the budget grows to cover the scouts at that length
(Trials.lengthen; budget.LEARNED). `--budget-s` overrides all of this. A probe that would end
past the budget, by the profile's step times, is not started (on a large simulated fleet one
probe takes seconds).

A probe's test evaluations are budgeted too (`evaluations`): on a large model one costs as much as
many training steps.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

# docs/decisions.md has a record, `budget.NAME`, for each value below that a measurement chose,
# and says which are set by design.
FRACTION = 0.10          # planning's share of the predicted training time
SMALL_JOB_S = 10.0       # below this predicted training time, a quick search
SMALL_BUDGET_S = 4.0     # a quick search's probing, scouts included: with `plan`'s ~4 s of start-up, a tiny
                         # job starts within 10 s (docs/decisions.md, budget.SMALL_BUDGET_S)
SCOUTS = 4               # the cold start's first probes: learning rate over Omnivore's decades
SCOUT_S = 1.5            # its reference setup is one where this long trains
SCOUT_ITERS = 40         # at least this many iterations
UNKNOWN_BUDGET_S = 6.0   # the budget while no probe can predict the training time,
UNKNOWN_PROBES = 8       # or enough for this many of the shortest probes where a step is slow
MIN_PROBE_S = 0.5        # shorter probes say nothing about a learning rate
MIN_PROBE_ITERS = 20     # nor do fewer iterations,
LEARNED = 0.10           # nor a scout whose training loss is not this much below its first minibatch's:
SCOUT_DOUBLINGS = 3      # it trains again at twice the iterations, at most this many times
GUARD = 3.0              # a probe stops at this many times its seconds, if the profile misjudged its speed
MAX_PROBE_S = 30.0       # longer ones buy little ranking for their cost
WANTED_PROBES = 16       # a full search's probes: Omnivore's decades, refinement and a rung or two
PROBE_TEST = 500         # probes evaluate on this many test samples, or more: enough that
ERRORS_AT_TARGET = 50    # about this many are wrong at the target (a high target's few errors are noise)
EVALS = 64               # at most this many times (closely at first; the last at the probe's end),
RANKING_EVALS = 4        # fewer when probes are ranked by their training loss,
EVAL_SHARE = 0.25        # and in all for at most about this share of the probe's time
FINALISTS = 2            # the final round (final.py): the best setups ranked by loss train on
FINAL_GROWTH = 3.0       # to at most this many times their probes' training time,
FINAL_RESERVED = 2.0     # and the probes leave the budget room for this many


def probe_test_size(target: float, available: int) -> int:
    """How many test samples a probe evaluates on: PROBE_TEST, or enough that ERRORS_AT_TARGET are
    wrong at the target, at most the whole test set. At a high target a few hundred samples hold
    only a handful of errors, and they can read well off the whole set the run judges by."""
    return min(available, max(PROBE_TEST, math.ceil(ERRORS_AT_TARGET / max(1.0 - target, 1e-9))))


def evaluations(probe_s: float, eval_s: float, most: int = EVALS) -> int:
    """How many test evaluations a probe of `probe_s` seconds affords, one costing `eval_s`: at
    most EVAL_SHARE of its time, and at least two (the middle and the end). Worked out from the
    profile's step times, not measured while probing, so the same seed gives the same curve."""
    return max(2, min(most, int(EVAL_SHARE * probe_s / max(eval_s, 1e-9))))


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
    `least_s` is what UNKNOWN_PROBES probes of MIN_PROBE_ITERS cost on the setup whose probe steps
    fastest (`least_probing`: where a step is slow, a fixed budget buys too few probes to rank;
    budget.UNKNOWN_PROBES), or, where the scouts had to train longer to learn, what the scouts cost
    (Trials.lengthen): with no prediction the budget is at least that.

    The probes still to run share what is left: WANTED_PROBES of them when each can train for at
    least MIN_PROBE_S, fewer (but at least one) when not.
    """
    if override_s is not None:
        total, full, reason = override_s, True, f"--budget-s {override_s:g}"
    elif predicted_train_s is None:
        total, full = max(UNKNOWN_BUDGET_S, least_s), True
        reason = ("no probe could predict the training time: a fixed budget, as the run re-tunes" if
                  least_s <= UNKNOWN_BUDGET_S else
                  f"no probe could predict the training time: {UNKNOWN_PROBES} of the shortest probes, or scouts that "
                  "learn, as the run re-tunes")
    elif predicted_train_s < SMALL_JOB_S:
        total, full = SMALL_BUDGET_S, False
        reason = (f"predicted training {predicted_train_s:.1f}s is under {SMALL_JOB_S:.0f}s: too small for a full "
                  f"search, a quick one of {SMALL_BUDGET_S:.0f}s")
    else:
        total, full = FRACTION * predicted_train_s, True
        reason = f"{FRACTION:.0%} of the predicted training time {predicted_train_s:.0f}s"
    left = max(total - scouts_s, 0.0)
    probes = max(1, min(WANTED_PROBES, int(left / MIN_PROBE_S)))
    probe_s = min(MAX_PROBE_S, max(MIN_PROBE_S, left / probes))
    return Budget(total, probe_s, probes if left > 0 else 0, full, reason)


def least_probing(fastest_probe_sec: float) -> float:
    """Seconds of UNKNOWN_PROBES probes of MIN_PROBE_ITERS at the fastest setup's probe step."""
    return UNKNOWN_PROBES * MIN_PROBE_ITERS * fastest_probe_sec


def final_reserve_s(probe_s: float) -> float:
    """What ranking by loss keeps of the budget for the final round, probes of `probe_s` each:
    room for FINAL_RESERVED, not FINAL_GROWTH, so that the search's probes are not cut by half."""
    return FINALISTS * (FINAL_RESERVED - 1) * probe_s
