"""The search: score every setup for hardware efficiency, time the unmeasured fastest, probe
statistical efficiency in Omnivore's order (order.py) within the budget (phases.py), then time a
still unmeasured leader and, when ranking by loss, hold the final round (final.py)."""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Callable

from omnitune.core.errors import UserError
from omnitune.core.plan import Planning
from omnitune.core.profile import Profile
from omnitune.efficiency.perfmodel import PerfModel
import omnitune.planning.budget as budget_mod
import omnitune.planning.order as order
import omnitune.planning.study as study_mod
from omnitune.planning.final import final
from omnitune.planning.hardware import Hardware, eval_cost, measured_shape
from omnitune.planning.phases import Spending
from omnitune.planning.probes import Prober, ProbeRunner, label_loss, test_size
from omnitune.planning.ranking import RANKED_BY_LOSS, RANKED_BY_TIME, blind, boldest
from omnitune.planning.setups import enumerate_setups
from omnitune.planning.space import Scored, Space
from omnitune.planning.timed import Timer, measure_leaders, time_fastest
from omnitune.planning.trials import Trials


@dataclass(frozen=True)
class Search:
    scored: list[Scored]         # every configuration considered, best first
    planning: Planning           # what the search spent, and its budget

    @property
    def ranked(self) -> bool:
        """Whether configurations were ranked by training loss, not by time to target."""
        return self.planning.ranked_by == RANKED_BY_LOSS


def search(profile: Profile, space: Space, prober: Prober, max_probe_iters: int = 100_000,
           budget_s: float | None = None, study=None, log: Callable[[str], None] = lambda m: None,
           hardware: Hardware | None = None, timer: Timer | None = None) -> Search:
    """Score every setup; probe statistical efficiency where it could still win.

    `budget_s` fixes the probing budget; None sizes it to the job (budget.py). `study` is an
    optuna study (in memory when None); probes it already holds are reused, so an interrupted
    search resumes. With a `timer`, setups whose speed no calibration job measured are timed by a
    real job before the search where they could lead, and a leader still unmeasured after it
    before it may win (timed.py). Returns every configuration considered, best predicted time to
    target first (unprobed ones last), and what planning spent.
    """
    start = time.perf_counter()         # scoring the setups counts against the budget, as probes do
    setups = enumerate_setups(profile, space, hardware)
    if not setups:
        raise ValueError(f"no configuration fits the pinned options (protocols {space.protocols}, groups "
                         f"{space.groups}, batch sizes {space.batch_sizes}) and the profile's devices")
    if timer is not None:
        perf = PerfModel.from_profile(profile)
        unmeasured = lambda c: not measured_shape(perf, c)     # noqa: E731
        setups = time_fastest(setups, timer, unmeasured, log)
        if not setups:
            raise UserError("every configuration's timing job failed (a real job of each, before the search); "
                            "`omnitune run` would fail the same way: check that the devices work, or plan with "
                            "--no-time-finalists to trust the hardware model")
    spending = Spending(budget_s, start, log, budget_mod.least_probing(min(s.probe_sec_per_iter for s in setups)))
    # Probes report accuracy on a shared clock of predicted training time, ticking every 50 of the
    # fastest setup's iterations (for the pruner).
    runner = ProbeRunner(prober, study or study_mod.new_study(), max_probe_iters,
                         tick_s=min(s.sec_per_iter for s in setups) * 50,
                         eval_s=eval_cost(setups, test_size(prober)), log=log)
    trials = Trials(setups, space, runner, spending, log)
    scored = order.run(trials)
    if timer is not None:
        scored = measure_leaders(scored, trials, timer, unmeasured)
    scored, finalists = final(scored, trials)
    b = spending.budget
    reason = b.reason if not finalists else \
        f"{b.reason}; then the {finalists} leaders trained on, up to {budget_mod.RULES.final_growth:g}× their " \
        "probes' training time within the budget"
    labels = label_loss(prober)
    guess = guessed(scored, trials.phase.by_loss, labels, log)
    if guess and not finalists:       # a final round's longer training outweighs the short probes
        led = boldest(scored, labels)
        if led[0] is not scored[0]:
            log(f"the guess goes to lr {led[0].config.lr:.3g} of the leading setup, the largest whose probe's loss "
                f"fell below {labels:.3f}, from lr {scored[0].config.lr:.3g}")
        scored = led
    return Search(scored, Planning(spending.elapsed(), runner.probes_run, b.seconds, b.full, reason,
                                   RANKED_BY_LOSS if trials.phase.by_loss else RANKED_BY_TIME, finalists=finalists,
                                   label_loss=labels, blind=guess))


def guessed(scored: list[Scored], by_loss: bool, labels: float | None, log: Callable[[str], None]) -> bool:
    """Whether a search ranked by loss ranked probes that learned little beyond the labels'
    frequencies (ranking.blind), said in the log."""
    if not (by_loss and blind(scored, labels)):
        return False
    log(f"no probe's training loss fell {budget_mod.RULES.learned:.0%} below {labels:.3f}, the loss of predicting the "
        "training labels' frequencies: the ranking by loss is a guess")
    return True
