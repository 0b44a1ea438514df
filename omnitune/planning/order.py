"""The order of Omnivore's search (Hadjis et al. 2016, §4), over a `Trials`:

1. Cold start, synchronous: momentum 0.9, learning rate over decades (0.1 … 0.0001, carried on
   past an edge that wins) at a middle batch; then every other batch at that rate and at the rate
   scaled with its update batch; then half a decade either side of the best one's rate.
2. Each other protocol climbs its own ladder of rungs, least asynchronous first. A rung tries
   momentum from Omnivore's grid (the rule's value mu* - (1 - 1/g) first) and the previous rung's
   learning rate, a third and a tenth of it, skipping momenta and per-device batches above the
   previous rung's optimum (they shrink with staleness; the batch is Rudra's rule).
3. A ladder stops when a rung's samples per second, at the previous optimum's per-device batch,
   are not STOP_GAIN above the previous optimum's: asynchrony no longer buys hardware speed.
"""

from __future__ import annotations

import math

from omnitune.core import protocols
import omnitune.planning.budget as budget_mod
from omnitune.planning.ranking import LOSS_TIE, RankKey
from omnitune.planning.space import Scored, Setup, faster_twin
from omnitune.planning.trials import Trials

# After the cold start, about half a decade either side of the best, the larger first: where the
# budget holds one of them, the lower one's short probe would read better whatever the run needs
# (short-horizon bias), and the larger wins a tie (ranking.LOSS_TIE) (docs/decisions.md,
# order.LR_REFINE).
LR_REFINE = (3.0, 1 / 3)
RUNG_LRS = (1.0, 1 / 3, 0.1)              # a rung's rates, times the previous rung's best
STOP_GAIN = 0.10                          # climb a ladder only while samples per second improve this much


def run(trials: Trials) -> list[Scored]:
    """The cold start, then each ladder; every configuration considered, best first."""
    root, ladders = protocols.ladders(list(dict.fromkeys(s.variant for s in trials.setups)))
    base = cold_start(trials, trials.among(root)) if root else None
    for ladder in ladders:
        prev = base
        for k, rung in enumerate(ladder):
            setups = trials.among(rung)
            if prev is None:                   # no synchronous root in the space: start here
                prev = cold_start(trials, setups)
                continue
            reason = saturated(trials, setups, prev)
            if reason:
                trials.log(reason)
                for later in ladder[k:]:
                    trials.skip(trials.among(later), prev.config.lr, f"not probed: {reason}")
                break
            prev = climb(trials, setups, prev) or prev
    return trials.scored()


def cold_start(trials: Trials, setups: list[Setup]) -> Scored | None:
    """Learning rate over decades at a reference setup (the batch nearest the middle, fastest,
    among those a scout trains budget.RULES.scout_iters iterations of and with no faster twin); then every other
    setup at the best rate and at the rate scaled with its update batch; then half a decade either
    side of the best setup's rate. Batches come before the refinement: when the budget is short,
    which batch matters more than a rate's last half decade."""
    if not setups:
        return None
    sizes = trials.space.batch_sizes
    middle = sorted(sizes)[len(sizes) // 2]
    firsts = [s for s in setups if faster_twin(s, trials.setups) is None] or setups
    enough = [s for s in firsts if budget_mod.RULES.scout_s >= budget_mod.RULES.scout_iters * s.probe_sec_per_iter]
    ref = max(enough or [min(firsts, key=lambda s: s.probe_sec_per_iter)],
              key=lambda s: (-abs(math.log(s.batch / middle)), s.samples_per_s))
    mu = trials.momenta(ref.variant)[0]
    best = decades(trials, ref, mu)
    ref_samples = ref.variant.samples_per_update(ref.batches)
    for s in sorted(setups, key=lambda s: -s.samples_per_s):
        scale = s.variant.samples_per_update(s.batches) / ref_samples
        effective = [best] if best is None or scale == 1 else [best, best * scale]
        for lr in trials.rates(s, [] if best is None else effective):
            trials.probe(s, lr, trials.momenta(s.variant)[0])
    lead = trials.best_of(setups)
    if best is not None and lead is not None:       # None: pinned rates, or no decade ranked
        s = trials.setup_of(lead.config)
        step = lead.config.lr / s.variant.lr_gain
        for f in LR_REFINE:
            trials.probe(s, trials.rates(s, [float(f"{step * f:.2g}")])[0], lead.config.momentum)
    return trials.best_of(setups)


def decades(trials: Trials, ref: Setup, mu: float) -> float | None:
    """The best effective learning rate at `ref`: decades from the largest down, until one does
    worse than the best so far (the scouts, compared by time if they reach the target, else by
    training loss, or pruned: lagging the median at equal training time, below a decade that
    learned), carried on past a winning edge. The first scout that does not diverge sets how
    long they all train: until it has learned (Trials.lengthen). A pruned scout has no loss to
    rank by, so below a decade that learned it ends the scan, where probing further decades only
    spends the budget; where no decade above has learned, the pruner compares accuracies at
    chance, and the scan goes on (docs/decisions.md, order.decades)."""
    if trials.space.lrs is not None:
        for lr in trials.space.lrs:
            trials.probe(ref, lr, mu)
        decays(trials, ref, mu, list(trials.space.lrs))
        trials.end_scouting(ref)
        return None
    tried: list[float] = []
    sized = False                 # whether a scout learned, or trained as long as it may (Trials.lengthen)
    for lr in trials.space.decades:
        tried.append(lr)
        trials.probe(ref, trials.rates(ref, [lr])[0], mu)
        sized = sized or trials.lengthen(ref, trials.rates(ref, [lr])[0], mu)
        scout = [k for x in tried if (k := trials.scout_rank(ref, trials.rates(ref, [x])[0], mu)) is not None]
        if (len(scout) >= 2 and scout[-1] > min(scout)) or (trials.pruned(ref, trials.rates(ref, [lr])[0], mu)
                                                              and trials.learned_above(ref, mu, tried[:-1])):
            break
    decays(trials, ref, mu, tried)
    trials.end_scouting(ref)
    best = trials.best_rate(ref, mu, tried)
    while best is not None and (best == max(tried) < 1 or best == min(tried) > 1e-6):
        edge = best * 10 if best == max(tried) else best / 10
        tried.append(edge)
        trials.probe(ref, trials.rates(ref, [edge])[0], mu)
        if trials.best_rate(ref, mu, tried) != edge:
            break
        best = edge
    return best


def decays(trials: Trials, ref: Setup, mu: float, tried: list[float]) -> None:
    """The weight decay every later probe takes: the recipe's coarse grid (Recipe.decays), as
    scouts at the best scout's rate. Another decay replaces the recipe's only where its time to
    target, or else its training loss, is more than LOSS_TIE below the recipe's: decay barely
    shows in a short probe, and what it is for (generalisation over a long run) not at all, so
    a smaller gap is noise (docs/decisions.md, order.decays)."""
    grid = trials.space.decays
    keys = {x: k for x in tried if (k := trials.scout_rank(ref, trials.rates(ref, [x])[0], mu)) is not None}
    if len(grid) < 2 or not keys:
        return
    if all(kind == 1 for kind, _ in keys.values()):
        # Scouts that rank by training loss do not tell decays apart (another decay must read
        # LOSS_TIE lower, and short probes' losses barely differ by decay), and where such probes
        # are all a slow model's budget buys, two more of them leave none for the rate's
        # refinement: the budget goes to the rate (docs/decisions.md, order.decays).
        trials.log(f"weight decay {grid[0]:g} (the recipe's): the scouts rank by training loss, in which a "
                   "decay does not show")
        return
    lr = trials.rates(ref, [min(keys, key=keys.get)])[0]
    ranked: dict[float | None, RankKey] = {None: min(keys.values())}
    for wd in grid[1:]:
        trials.decay = wd
        trials.probe(ref, lr, mu)
        if (k := trials.scout_rank(ref, lr, mu)) is not None:
            ranked[wd] = k
    kind, mine = ranked[None]
    better = {wd: k for wd, k in ranked.items() if k[0] < kind or (k[0] == kind and k[1] < (1 - LOSS_TIE) * mine)}
    trials.decay = min(better, key=better.get, default=None)
    chosen = grid[0] if trials.decay is None else trials.decay
    trials.log(f"weight decay {chosen:g} (of {', '.join(f'{wd:g}' for wd in grid)}, the recipe's first, "
               f"at lr {lr:.3g})")


def climb(trials: Trials, setups: list[Setup], prev: Scored) -> Scored | None:
    """One rung: the previous optimum's per-device batch and the next smaller (Rudra), momenta
    no larger than its, and its step, a third and a tenth of it; closest to it first."""
    pc = prev.config
    sizes = sorted({s.batch for s in setups if s.batch <= pc.batch}, reverse=True)[:2]
    near = sorted((s for s in setups if s.batch in sizes), key=lambda s: (-s.batch, -s.samples_per_s))
    step = pc.lr / pc.variant.lr_gain
    for s in near:
        for lr in trials.rates(s, [step * f for f in RUNG_LRS]):
            for mu in trials.momenta(s.variant, pc.momentum):
                trials.probe(s, lr, mu)
    trials.skip([s for s in setups if s.batch not in sizes], pc.lr,
                f"not probed: batch not the previous optimum's {pc.batch} or the next below it (Rudra)")
    return trials.best_of(setups)


def saturated(trials: Trials, setups: list[Setup], prev: Scored) -> str:
    """Why the ladder stops here ("" if it does not): samples per second at the previous
    optimum's per-device batch are not STOP_GAIN above the previous optimum's."""
    pc = prev.config
    before = trials.setup_of(pc)
    same = [s for s in setups if s.batch == pc.batch] or setups
    after = max(same, key=lambda s: (s.layout == pc.layout, s.samples_per_s))
    if after.samples_per_s >= (1 + STOP_GAIN) * before.samples_per_s:
        return ""
    return (f"{after.variant.label} gives {after.samples_per_s:,.0f} samples/s at batch {after.batch}, not "
            f"{STOP_GAIN:.0%} above {before.samples_per_s:,.0f} of {pc.variant.label}: stop adding asynchrony")
