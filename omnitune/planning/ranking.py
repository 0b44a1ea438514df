"""How probed configurations compare, lower keys first: by time to target where a probe reached
the target or predicts it within its evidence; when ranking by loss (no scout could predict a
time), by training loss after equal training time, near-ties going to the larger learning rate per
sample."""

from __future__ import annotations

import math
import statistics

from omnitune.core.plan import RANKED_BY_LOSS, RANKED_BY_TIME     # the plan records them; the planner reads them here
from omnitune.efficiency.statmodel import ProbeResult
import omnitune.planning.budget as budget_mod
from omnitune.planning.space import Config, Scored

# Short-horizon bias (Wu et al. 2018): after equal short training a smaller learning rate often
# leads on loss, and falls behind over the long run. A loss above the best by less than this
# fraction of both the best loss and the best's progress from the untrained loss is a tie, which
# goes to the larger rate per sample (`rate_per_sample`).
LOSS_TIE = 0.10
UNRANKED = (4, 0.0, 0.0)   # sorts after every key long_horizon_keys gives

RankKey = tuple[int, float]


def rank_key(r: ProbeResult | None, sec_per_iter: float, by_loss: bool) -> RankKey | None:
    """How a probe ranks (lower is better), None when it cannot: first by time to target (reached,
    or predicted within the probe's evidence unless ranking by loss), then, by loss, by training
    loss at the probe's end."""
    if r is None or not r.rankable:
        return None
    if r.ranks_by_time and (r.reached or not by_loss):
        return (0, r.iters_to_target * sec_per_iter)
    if by_loss and r.train_loss is not None and math.isfinite(r.train_loss):
        return (1, r.train_loss)
    return None


def rate_per_sample(config: Config) -> float:
    """The step each sample of an update gets: the learning rate over the variant's gain and the
    samples an update averages, to 6 digits (rates scaled with the batch compare equal). What
    short-horizon bias is about is this, not the rate: a rate scaled linearly with its update's
    batch (Goyal et al. 2017) takes the same steps per sample. Compared by the rate, a tie would go
    to the larger batch at the scaled rate, the same step per sample, even on a slower setup
    (docs/decisions.md, ranking.rate_per_sample)."""
    batches = tuple((config.batch,) * len(g) for g in config.groups)
    return float(f"{config.lr / config.variant.lr_gain / config.variant.samples_per_update(batches):.6g}")


def long_horizon_keys(ranked: list[tuple[RankKey | None, float, float | None]]) \
        -> list[tuple[int, float, float] | None]:
    """Sort keys (lower is better) for (rank_key, rate per sample, start loss) triples compared
    together: a reached or predicted time first; then the training losses that tie with the best
    (LOSS_TIE), the largest rate per sample first, the lower loss among equal rates; then the
    other losses.

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
    for key, rate, _ in ranked:
        if key is None:
            out.append(None)
        elif key[0] == 1 and key[1] <= tie:
            out.append((1, -rate, key[1]))
        else:
            out.append((0 if key[0] == 0 else 2, key[1], 0.0))
    return out


def ordered(scored: list[Scored], by_loss: bool) -> list[Scored]:
    """Best first: by rank_key and the long-horizon tie rule, then by seconds per iteration."""
    keys = long_horizon_keys([(rank_key(x.probe, x.sec_per_iter, by_loss), rate_per_sample(x.config),
                               x.probe and x.probe.start_loss) for x in scored])
    order = sorted(range(len(scored)), key=lambda i: (keys[i] or UNRANKED, scored[i].sec_per_iter))
    return [scored[i] for i in order]


def ranked_loss(s: Scored) -> float | None:
    """The training loss a probe ranks by: None where it has none (not probed, diverged, pruned,
    or not finite)."""
    r = s.probe
    if r is None or not r.rankable or r.train_loss is None or not math.isfinite(r.train_loss):
        return None
    return r.train_loss


def blind(scored: list[Scored], label_loss: float | None) -> bool:
    """Whether a ranking by training loss ranked noise: no probe's training loss fell budget.RULES.learned
    below `label_loss`, the loss of predicting the training labels' frequencies
    (workload.label_loss). Such probes have learned little beyond the frequencies, and which of
    them is lowest says little of how their runs will go: a run may need hundreds of iterations
    to leave that loss (docs/decisions.md, ranking.blind). False where `label_loss` is
    unknown."""
    losses = [loss for loss in map(ranked_loss, scored) if loss is not None]
    return label_loss is not None and bool(losses) and min(losses) > (1 - budget_mod.RULES.learned) * label_loss


def boldest(scored: list[Scored], label_loss: float) -> list[Scored]:
    """A blind ranking (`blind`) led, within its leader's setup (layout, protocol, groups and
    batch), by the probe of the largest effective learning rate whose training loss fell below
    `label_loss` at all (its loss breaking a tie); as it was where none did, or where the leader
    ranks by a time to target. Such probes have learned too little for their losses to rank them,
    and what a run does with a wrong guess is not even: too high a rate stalls or diverges, which
    pauses the run to re-tune, while too low a rate only goes slowly, which nothing catches before
    the run's scheduled pause (docs/decisions.md, ranking.boldest). Setups are not compared
    here: their probes trained for the same time, not the same iterations, and the leader's speed
    may have been timed."""
    leader = scored[0] if scored else None
    key = rank_key(leader.probe, leader.sec_per_iter, True) if leader is not None else None
    if key is None or key[0] == 0:
        return scored
    below = [s for s in scored if s.setup_key == leader.setup_key and (ranked_loss(s) or math.inf) < label_loss]
    if not below:
        return scored
    pick = max(below, key=lambda s: (s.config.lr / s.config.variant.lr_gain, -s.probe.train_loss))
    return [pick] + [s for s in scored if s is not pick]
