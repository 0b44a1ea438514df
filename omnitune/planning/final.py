"""The final round of a search ranked by loss. After a probe's short training, what leads tends
to win: smaller rates and batches (short-horizon bias, Wu et al. 2018). So the budget.RULES.finalists best
setups (layout, protocol, batch), each at its lowest-loss learning rate and momentum, train on
from where their probes stopped (the prober's hand-offs) to budget.RULES.final_growth times the probes'
training time, and the lowest training loss at that end wins; a tie (ranking.LOSS_TIE) goes to
the larger learning rate per sample (ranking.rate_per_sample), the lower loss among equal ones.
The run then starts from the winner's state, so its extra training is not lost. Each setup is
compared at its own lowest loss, not at the rate that won its tie: a tie-won larger rate against
another setup's lower one would be a comparison of rates, and the round is for setups."""

from __future__ import annotations

from dataclasses import replace

import omnitune.planning.budget as budget_mod
from omnitune.planning.phases import ByLoss
from omnitune.planning.probes import HandsOn
from omnitune.planning.ranking import UNRANKED, long_horizon_keys, rank_key, rate_per_sample
from omnitune.planning.space import Scored
from omnitune.planning.trials import Trials



def leaders(scored: list[Scored]) -> list[Scored]:
    """The budget.RULES.finalists best setups, each at its lowest training loss, in the search's order."""
    setups: dict[tuple, list[Scored]] = {}
    for s in scored:
        if rank_key(s.probe, s.sec_per_iter, True) is not None and s.probe.train_loss is not None:
            setups.setdefault(s.setup_key, []).append(s)
    return [min(tried, key=lambda s: s.probe.train_loss)
            for tried in list(setups.values())[:budget_mod.RULES.finalists]]


def final(scored: list[Scored], trials: Trials) -> tuple[list[Scored], int]:
    """The ranking after the final round, and how many leaders trained on (0: no round, for want
    of two leaders, of a ranking by loss, or of a prober that hands on)."""
    prober, phase = trials.runner.prober, trials.phase
    if not isinstance(prober, HandsOn) or not isinstance(phase, ByLoss):
        return scored, 0
    first = leaders(scored)
    if len(first) < 2 or any(s.probe.config not in prober.handoffs for s in first):
        return scored, 0
    growth = fitting_growth(first, prober, phase.train_s, trials.spending.left())
    if growth is None:
        trials.log("no final round: the probes spent the planning budget")
        return scored, 0
    went_on = []
    for s in first:
        start = prober.handoffs[s.probe.config]
        total = max(start.iterations + budget_mod.RULES.min_probe_iters,
                    round(growth * phase.train_s / s.sec_per_iter))
        limit_s = budget_mod.RULES.guard * max(budget_mod.RULES.min_probe_s,
                                               (total - start.iterations) * probe_step_s(s))
        r = trials.runner.go_on(s.probe.config, total, limit_s, budget_mod.RULES.ranking_evals, start=start)
        trials.log(f"finalist {s.config.variant.label} batch {s.config.batch} lr {s.config.lr:.3g} trained on to "
                   f"{r.iters} iterations: training loss {r.train_loss}")
        went_on.append(replace(s, probe=r))
    # The progress that scales the tie is from the untrained loss.
    keys = long_horizon_keys([(rank_key(r.probe, r.sec_per_iter, True), rate_per_sample(r.config),
                               s.probe.start_loss) for s, r in zip(first, went_on)])
    order = [went_on[i] for i in sorted(range(len(went_on)), key=lambda i: keys[i] or UNRANKED)]
    return order + [s for s in scored if s not in first], len(went_on)


def probe_step_s(s: Scored) -> float:
    """A finalist's seconds per iteration when it trains on: as fast as its probe went."""
    return s.probe.seconds / max(s.probe.iters, 1)


def fitting_growth(first: list[Scored], prober: HandsOn, train_s: float, left_s: float) -> float | None:
    """How far the finalists train on, as a multiple of the probes' training time: budget.RULES.final_growth,
    or less where that would outrun what is left of the budget (each finalist costs its probe's
    seconds per iteration); None where they could not train on by half again."""
    rate = sum(train_s / s.sec_per_iter * probe_step_s(s) for s in first)
    done = sum(prober.handoffs[s.probe.config].iterations * probe_step_s(s) for s in first)
    growth = (min(budget_mod.RULES.final_growth, (max(left_s, 0.0) + done) / rate) if rate > 0
              else budget_mod.RULES.final_growth)
    return growth if growth >= 1.5 else None
