"""What the search has considered: every (setup, learning rate, momentum, weight decay), probed or
skipped with its reason, and how the probed ones compare in the current phase (phases.py).

The weight decay is the recipe's (None) until the cold start compares the recipe's grid
(order.decays); from then on every probe takes the one chosen there (`decay`)."""

from __future__ import annotations

import statistics
from dataclasses import dataclass
from typing import Callable

from omnitune.core.protocols import Variant
from omnitune.efficiency.statmodel import ProbeResult, ProbeStatus
import omnitune.planning.budget as budget_mod
from omnitune.planning.phases import ByLoss, ByTime, Phase, Spending
from omnitune.planning.probes import ProbeRunner
from omnitune.planning.ranking import RankKey, long_horizon_keys, ordered, rank_key, rate_per_sample
from omnitune.planning.space import LR_DECADES, MU_STAR, OMNIVORE_MOMENTA, Config, Scored, Setup, Space, faster_twin


@dataclass(frozen=True)
class Skipped:
    """A configuration the search did not probe, and why."""
    reason: str


Tried = tuple[Setup, float, float, float | None]   # a setup, a learning rate, a momentum, a weight decay


class Trials:
    def __init__(self, setups: list[Setup], space: Space, runner: ProbeRunner, spending: Spending,
                 log: Callable[[str], None]):
        self.setups, self.space, self.runner, self.spending, self.log = setups, space, runner, spending, log
        self.phase: Phase = ByTime()
        self.tried: dict[Tried, Skipped | None] = {}      # None: probed
        self.decay: float | None = space.decays[0] if len(space.decays) == 1 else None   # pinned, or the recipe's

    def among(self, variants: list[Variant]) -> list[Setup]:
        return [s for s in self.setups if s.variant in variants]

    def setup_of(self, config: Config) -> Setup:
        return next(s for s in self.setups if s.config(config.lr, config.momentum, config.weight_decay) == config)

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

    def probe(self, s: Setup, lr: float, mu: float) -> ProbeResult | None:
        """Probe (s, lr, mu) at the search's weight `decay` unless it was considered already or a
        rule skips it: past the budget, too slow for a fair comparison by loss, a faster twin makes
        its updates, or at least as large as a setting that diverged."""
        key, pc = (s, lr, mu, self.decay), s.probe(lr, mu, self.decay)
        if key in self.tried:
            return self.runner.results.get(pc)
        skipped = None if pc in self.runner.results else self.skips(s)
        twin = faster_twin(s, self.setups)
        if skipped is None and twin is not None:
            skipped = Skipped(f"not probed: the same updates as {twin.layout} at batch {twin.batch}, which runs "
                              f"faster ({twin.sec_per_iter * 1e3:.2f} against {s.sec_per_iter * 1e3:.2f} ms)")
        if skipped is None and self.runner.blocked(pc):
            skipped = Skipped("not probed: at least as large as a setting that diverged")
        r = None if skipped else (self.runner.results.get(pc) or
                                  self.runner.run(pc, s.sec_per_iter, s.probe_sec_per_iter, self.phase, self.spending))
        if skipped is None and r is None:
            skipped = Skipped(f"not probed: cannot beat {self.runner.best:.2f}s")
        self.tried[key] = skipped
        if r is not None:
            self.runner.record(pc, r, s.sec_per_iter, self.phase.by_loss)
            self.spending.reset(self.runner.predicted)
        return r

    def lengthen(self, s: Setup, lr: float, mu: float) -> bool:
        """Scouts that have not learned cannot rank rates: their losses sit within noise of the
        untrained loss, and the rate they pick is a draw (docs/decisions.md, budget.RULES.learned).
        So while this scout's training
        loss is less than budget.RULES.learned below its first minibatch's, it trains on to twice the
        iterations, from where it stopped (ProbeRunner.run; at most budget.RULES.scout_doublings times), and
        reads as one probe of them all would; every later probe trains at least as many (the
        phase), and the budget with no prediction covers budget.RULES.scouts decades of them beyond what was
        spent (this scout's going on, the others from scratch); a budget that `--budget-s` pinned
        may not, and then the scouts stay as they are.
        False where the scout says nothing on this (none, or diverged): the next decade's decides."""
        for _ in range(budget_mod.RULES.scout_doublings):
            r = self.runner.results.get(s.probe(lr, mu, self.decay))
            if r is None or r.status == ProbeStatus.DIVERGED:
                return False
            if learned(r) or not isinstance(self.phase, ByTime):
                return True
            longer = ByTime(2 * max(self.phase.least_iters, r.iters or 0))
            # this scout's iterations beyond where it stopped, and the other decades' from scratch
            start = self.runner.handoff(s.probe(lr, mu, self.decay))
            iters = (budget_mod.RULES.scouts * longer.least_iters if start is None
                     else budget_mod.RULES.scouts * longer.least_iters - start.iterations)
            scouts_s = iters * s.probe_sec_per_iter
            self.spending.at_least(self.spending.elapsed() + scouts_s, self.runner.predicted)
            if not self.spending.fits(longer.least_iters, s.probe_sec_per_iter):
                return True          # a pinned budget (--budget-s) too small for longer scouts: rank these
            self.phase = longer
            self.log(f"the scout at lr={lr:.3g} has not learned ({r.start_loss:.3f} to {r.train_loss:.3f}): "
                     f"scouts train {self.phase.least_iters} iterations")
            self.tried.pop((s, lr, mu, self.decay), None)
            self.runner.results.pop(s.probe(lr, mu, self.decay), None)
            self.probe(s, lr, mu)
        return True

    def skips(self, s: Setup) -> Skipped | None:
        """Why a new probe of `s` is not started: the phase finds it too slow to compare, or the
        budget is spent."""
        why = self.phase.too_short(s.sec_per_iter)
        if why:
            return Skipped(why)
        iters = self.runner.iterations(s.sec_per_iter, s.probe_sec_per_iter, self.phase, self.spending)
        # Ranked by loss, the final round (final.py) trains the leaders on within the same budget,
        # at what the probes took (more than the profile's steps say: their evaluations, the start).
        # It needs two setups: while this probe's is the only one probed, nothing is kept for it,
        # so that a model whose other setups step too slowly to compare spends its budget on its
        # rate (docs/decisions.md, trials.skips). A second setup probed later keeps the room from
        # then on; if the budget no longer has it, there is no final round, and the rate had the
        # budget instead.
        probed = {key[0] for key, skipped in self.tried.items() if skipped is None} | {s}
        finals = self.phase.by_loss and len(probed) >= budget_mod.RULES.finalists
        reserve = budget_mod.final_reserve_s(self.probe_s(iters * s.probe_sec_per_iter)) if finals else 0.0
        if self.runner.probes_run and not self.spending.fits(iters, s.probe_sec_per_iter, reserve):
            return Skipped(f"not probed: planning budget of {self.spending.budget.seconds:.1f}s spent")
        return None

    def probe_s(self, predicted_s: float) -> float:
        """A probe's seconds: `predicted_s`, or the median of what the probes so far took where more."""
        took = [r.seconds for r in self.runner.results.values() if r.seconds > 0]
        return max(predicted_s, statistics.median(took) if took else 0.0)

    def skip(self, setups: list[Setup], lr: float, reason: str) -> None:
        for s in setups:
            self.tried.setdefault((s, lr, s.variant.rule_momentum(MU_STAR), self.decay), Skipped(reason))

    def end_scouting(self, ref: Setup) -> None:
        """After the scouts (the decades at the reference setup): when none could predict a time to
        target, ranking by training loss at equal training time from here on, each probe training
        as long (in predicted training time) as a probe of the reference does now."""
        if not self.phase.by_loss and not any(r.ranks_by_time for r in self.runner.results.values()):
            iters = self.phase.iterations(ref.sec_per_iter, ref.probe_sec_per_iter, self.spending.budget.probe_s)
            self.phase = ByLoss(iters * ref.sec_per_iter)
            self.log(f"no scout could predict the time to target: probes train {self.phase.train_s:.1f}s each "
                     "(predicted training time) and are ranked by their training loss")

    def pruned(self, s: Setup, lr: float, mu: float) -> bool:
        """Whether the probe of (s, lr, mu) was pruned: it lagged the median at equal training time."""
        r = self.runner.results.get(s.probe(lr, mu, self.decay))
        return r is not None and r.status == ProbeStatus.PRUNED

    def learned_above(self, s: Setup, mu: float, effective: list[float]) -> bool:
        """Whether a probe of `s` at one of these effective rates has learned (`learned`)."""
        results = [self.runner.results.get(s.probe(self.rates(s, [lr])[0], mu, self.decay)) for lr in effective]
        return any(r is not None and r.status not in (ProbeStatus.PRUNED, ProbeStatus.DIVERGED) and learned(r)
                   for r in results)

    def scout_rank(self, s: Setup, lr: float, mu: float) -> RankKey | None:
        """Before the phase is known: by time to target where a probe predicts one, else by loss."""
        r = self.runner.results.get(s.probe(lr, mu, self.decay))
        return rank_key(r, s.sec_per_iter, False) or rank_key(r, s.sec_per_iter, True)

    def rank(self, s: Setup, lr: float, mu: float, wd: float | None) -> RankKey | None:
        return rank_key(self.runner.results.get(s.probe(lr, mu, wd)), s.sec_per_iter, self.phase.by_loss)

    def horizon_keys(self, tried: list[Tried]) -> list[tuple[int, float, float] | None]:
        """long_horizon_keys of probed (setup, lr, momentum, weight decay) compared together."""
        results = [self.runner.results.get(s.probe(lr, mu, wd)) for s, lr, mu, wd in tried]
        return long_horizon_keys([(rank_key(r, s.sec_per_iter, self.phase.by_loss), rate_per_sample(s.config(lr, mu)),
                                   r.start_loss if r else None) for (s, lr, mu, _), r in zip(tried, results)])

    def best_of(self, setups: list[Setup]) -> Scored | None:
        done = [key for key, skipped in self.tried.items()
                if key[0] in setups and skipped is None and self.rank(*key) is not None]
        if not done:
            return None
        keys = self.horizon_keys(done)
        s, lr, mu, wd = done[keys.index(min(keys))]
        return s.scored(lr, mu, self.runner.results[s.probe(lr, mu, wd)], weight_decay=wd)

    def best_rate(self, s: Setup, mu: float, effective: list[float]) -> float | None:
        """The best of these effective learning rates at (s, mu), among those probed and ranked."""
        done = [lr for lr in effective if self.rank(s, self.rates(s, [lr])[0], mu, self.decay) is not None]
        if not done:
            return None
        keys = self.horizon_keys([(s, self.rates(s, [lr])[0], mu, self.decay) for lr in done])
        return done[keys.index(min(keys))]

    def scored(self) -> list[Scored]:
        """Every configuration considered, probed or not, best first, and every setup never reached."""
        out = ordered([s.scored(lr, mu, self.runner.results.get(s.probe(lr, mu, wd)) if skipped is None else None,
                                skipped.reason if skipped else "", wd)
                       for (s, lr, mu, wd), skipped in self.tried.items()], self.phase.by_loss)
        reached = {key[0] for key in self.tried}
        lr = out[0].config.lr if out else LR_DECADES[0]
        out += [s.scored(lr, s.variant.rule_momentum(MU_STAR), None, "not probed", self.decay)
                for s in self.setups if s not in reached]
        return out


def learned(r: ProbeResult) -> bool:
    """Whether a probe says something about its rate: it reached or predicts a time, or its
    training loss fell budget.RULES.learned below its first minibatch's (or either is unknown)."""
    if r.ranks_by_time or r.start_loss is None or r.train_loss is None:
        return True
    return r.train_loss <= (1 - budget_mod.RULES.learned) * r.start_loss
