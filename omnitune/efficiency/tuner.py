"""The in-run tuner: reads the run as it trains and decides its changes in place. Pure: it takes
typed readings and returns a `Change` or None; the runtime feeds it and applies what it returns
(runtime/inplace.py).

Readings (the coordinator's, after each of its checks):
    TrainLoss     the training loss's moving average (runtime/monitor.py: each minibatch weighs
                  DIVERGE_EMA), once it moved
    Evaluation    a test reading: the iteration and the score the target is judged by
    Gradients     the squared norms of the workers' own gradients and of their average, at one
                  step of a synchronous group of two or more (runtime/worker.py)

Rules, each reading the run itself rather than a side probe (short readings favour small rates,
and cannot see the edge of stability a thousand updates on: Wu et al. 2018):
    stability     the average staying past `unstable` times its lowest since the last change
                  for `persist` iterations, or going past `sudden` times it, is the edge of
                  stability (a spike that recovers is not): the rate is cut by `cut`, and no
                  later change of this tuner's raises it past `ceiling` times the rate that
                  went over the edge.
    climb         (off by default: docs/decisions.md, tuner.Policy) until the run first meets
                  that edge, a rate whose loss average still falls over `climb_every` iterations
                  is multiplied by `climb` (at most to `climb_most` times the rate the run began
                  with): a range test (Smith 2017) read on the run itself, which ends a climb's
                  step over the edge at the rate before it.
    cool-down     once the recent pace (statmodel.pace_share) puts the run `1 - cool_share` of
                  its way to the target, or, after the run met the edge of stability, the rate in
                  force has done what it can (the loss average has made no new lowest over
                  `plateau_share` of the iterations so far, since the last change settled: near
                  the edge a plateau is the rate's noise floor; below any edge met it may be a
                  slow phase of the problem's own, which a lower rate only lengthens), the rate
                  decays linearly to `cool_floor` of
                  itself in `cool_steps` steps, over `cool_share / (1 - cool_share)` of the
                  iterations so far: a warmup-stable-decay schedule's last part (Hägele et al.
                  2024), which no constant rate has. A plateau's cool-down that ends short of
                  the target keeps its floor (a step decay; at most `plateau_decays` of them);
                  one begun near the target goes back to the stable rate (the target was not
                  near). The next starts on a plateau, or near the target at twice the
                  iterations the last began at.
    goodput       the gradient noise scale phi from the workers' gradients (McCandlish et al.
                  2018; efficiency/goodput.py), averaged over the steps: every `goodput_every`
                  iterations the batch goes to the total of `speeds` (samples a second at each
                  total, from the plan's hardware model) with the most goodput, where that gains
                  `goodput_gain`, and the rate follows the batch by AdaScale's gain (Pollux,
                  Qiao et al. 2021), never past the stability ceiling.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from omnitune.core.change import Change, Knobs, Reason
import omnitune.efficiency.goodput as goodput
import omnitune.efficiency.statmodel as statmodel

def largest_stable(losses: dict[float, float], within: float = 0.10) -> float:
    """Of candidate rates read from one checkpoint (rate -> its validation loss after the same
    short reading), the largest whose loss is within `within` of the lowest: the edge of
    stability read as in a range test (Smith 2017), not the lowest reading, which favours the
    smallest rate that holds still over a short horizon (Wu et al. 2018). A reading that is
    not finite is past the edge."""
    finite = {lr: x for lr, x in losses.items() if math.isfinite(x)}
    if not finite:
        raise ValueError("largest_stable needs at least one finite reading")
    best = min(finite.values())
    return max(lr for lr, x in finite.items() if x <= best + within * abs(best))


@dataclass(frozen=True)
class TrainLoss:
    iteration: int
    average: float          # the moving average of the training loss


@dataclass(frozen=True)
class Evaluation:
    iteration: int
    score: float            # as the target judges it (core/target.py): higher is better


@dataclass(frozen=True)
class Gradients:
    iteration: int
    small: float            # the mean over workers of |g_i|^2, each of `b_small` samples
    big: float              # |mean of g_i|^2, of `b_big` samples
    b_small: float
    b_big: float


@dataclass(frozen=True)
class Policy:
    """The tuner's constants (docs/decisions.md, tuner.Policy). `largest_stable`'s margin is its
    own argument: it reads a pause's candidates, not the run."""
    unstable: float = 1.5       # the loss average over its lowest since the last change: the edge
    cut: float = 0.5            # an unstable rate is multiplied by this
    ceiling: float = 0.5        # of the rate that went unstable: the most a later change gives back
    settle: int = 50            # iterations after a change before the loss is judged again
    warmup: int = 100           # iterations after the first loss reading before it is judged (DIVERGE_WARMUP)
    cool_down: bool = False     # decay the rate when the target is near
    cool_share: float = 0.15    # of the run's predicted iterations, the cool-down's length
    cool_floor: float = 0.1     # the rate's share at the cool-down's end
    speeds: tuple[tuple[int, float], ...] = ()   # (total batch, samples a second): the goodput rule's
                                                 # choices (none: no batch changes)
    goodput_every: int = 200    # iterations between the goodput rule's decisions
    goodput_gain: float = 0.10  # a batch change must gain this much goodput (Pollux's hysteresis)
    noise_ema: float = 0.02     # each step's noise readings weigh this much in their averages
    cool_steps: int = 8         # a cool-down's linear decay, as this many changes in place
    persist: int = 100          # iterations the loss stays over `unstable` times its lowest to be the edge
    climb: float = 1.0          # a rate whose loss still falls is multiplied by this (1: never, the default)
    climb_every: int = 200      # iterations over which the loss must fall, after a change settles
    climb_most: float = 4.0     # the climbs' most, over the rate the run began with
    sudden: float = 2.0         # a loss average past this times its lowest is the edge at once
    plateau_share: float = 0.25  # of the iterations so far, a stretch with no new lowest loss: a plateau
    plateau_decays: int = 2     # the most plateaus' cool-downs that end short (the rate to cool_floor^2)

    def __post_init__(self):
        if not self.unstable > 1:
            raise ValueError(f"unstable must be above 1, got {self.unstable}")
        if not (self.climb >= 1 and self.climb_most >= 1):
            raise ValueError(f"climb and climb_most must be at least 1, got {self.climb}, {self.climb_most}")
        if not self.sudden > self.unstable:
            raise ValueError(f"sudden must be above unstable ({self.unstable}), got {self.sudden}")
        for name in ("cut", "ceiling", "cool_share", "cool_floor", "plateau_share"):
            if not 0 < getattr(self, name) < 1:
                raise ValueError(f"{name} must be in (0, 1), got {getattr(self, name)}")

    def start(self, knobs: Knobs, target_score: float | None) -> Tuner:
        return Tuner(self, knobs, target_score)


class Tuner:
    """One run's tuner: `observe(reading, knobs)` returns the change to make, if any."""

    def __init__(self, policy: Policy, knobs: Knobs, target_score: float | None):
        self.policy, self.target = policy, target_score
        self.stable_lr = knobs.lr            # the rate outside a cool-down
        self.ceiling = math.inf
        self.highest = knobs.lr * policy.climb_most   # the rate the climbs may reach
        self.lowest, self.quiet_until, self.over_since = math.inf, 0, None
        self.lowest_at = None                # the iteration of the loss's lowest since the last change
        self.first_at = None                 # the iteration of the first loss reading
        self.climb_at, self.climb_loss = policy.climb_every, None     # the next climb's check, and the loss at the last
        self.curve: list[tuple[int, float]] = []
        self.cooling: tuple[int, int, bool] | None = None   # (first iteration, length, on a plateau) of a cool-down
        self.cool_from = 0                   # no cool-down starts near the target before this iteration
        self.decays = 0                      # plateaus' cool-downs that ended short (step decays)
        self.trace = self.g2 = None          # averages of tr(Sigma) and |G|^2 (goodput.py's notation)
        self.noise_readings, self.goodput_at = 0, 0

    def observe(self, reading: TrainLoss | Evaluation | Gradients, knobs: Knobs) -> Change | None:
        if isinstance(reading, TrainLoss):
            return self._stability(reading, knobs)
        if isinstance(reading, Gradients):
            return self._goodput(reading, knobs)
        self.curve.append((reading.iteration, reading.score))
        return self._cool_down(reading.iteration, knobs) if self.policy.cool_down else None

    def _stability(self, loss: TrainLoss, knobs: Knobs) -> Change | None:
        p = self.policy
        if self.first_at is None:            # the average's first readings are of few minibatches
            self.first_at = loss.iteration
            self.quiet_until = max(self.quiet_until, loss.iteration + p.warmup)
        if loss.iteration < self.quiet_until or not math.isfinite(loss.average):
            return None         # a loss that is not finite is a divergence: the monitor's, answered by a pause
        if loss.average < self.lowest:
            self.lowest, self.lowest_at = loss.average, loss.iteration
        if loss.average <= p.unstable * self.lowest:
            self.over_since = None
            return self._climb(loss, knobs)
        if self.over_since is None:
            self.over_since = loss.iteration
        if loss.iteration - self.over_since < p.persist and loss.average < p.sudden * self.lowest:
            return None
        self.ceiling = min(self.ceiling, p.ceiling * knobs.lr)
        self.stable_lr = min(self.stable_lr * p.cut, self.ceiling)
        return self._changed(loss.iteration, Change(lr=min(knobs.lr * p.cut, self.ceiling), why=Reason.UNSTABLE))

    def _climb(self, loss: TrainLoss, knobs: Knobs) -> Change | None:
        """A step up the range test, where the loss still falls and no edge was met."""
        p = self.policy
        if (p.climb == 1 or self.ceiling < math.inf or self.cooled or loss.iteration < self.climb_at
                or self.stable_lr * p.climb > self.highest * (1 + 1e-9)):
            return None
        falling = self.climb_loss is not None and loss.average < self.climb_loss
        self.climb_at, self.climb_loss = loss.iteration + p.climb_every, loss.average
        if not falling:
            return None
        self.stable_lr *= p.climb
        return self._changed(loss.iteration, Change(lr=knobs.lr * p.climb, why=Reason.CLIMB))

    @property
    def cooled(self) -> bool:
        """Whether a cool-down has begun (the climbs end there)."""
        return self.cooling is not None or self.cool_from > 0

    def _cool_down(self, iteration: int, knobs: Knobs) -> Change | None:
        p = self.policy
        if self.cooling is None:
            if self.target is None or len(self.curve) < 4:
                return None
            plateau = self.ceiling < math.inf and self.decays < p.plateau_decays and self._plateau(iteration)
            if not (plateau or (iteration >= self.cool_from and self._near(p))):
                return None
            self.cooling = (iteration, max(p.cool_steps, round(iteration * p.cool_share / (1 - p.cool_share))), plateau)
        first, length, plateau = self.cooling
        step = min(p.cool_steps, (iteration - first) * p.cool_steps // length + 1)
        lr = self.stable_lr * (1 - (1 - p.cool_floor) * step / p.cool_steps)
        if iteration - first < length:
            return Change(lr=lr, why=Reason.COOL_DOWN) if lr < knobs.lr * (1 - 1e-9) else None
        self.cooling, self.cool_from = None, 2 * first           # over, short of the target
        if plateau:                              # the rate had done what it could: the floor stays
            self.stable_lr, self.decays = self.stable_lr * p.cool_floor, self.decays + 1
            return self._changed(iteration, Change(lr=self.stable_lr, why=Reason.COOL_DOWN)
                                 if self.stable_lr < knobs.lr * (1 - 1e-9) else None)
        return self._changed(iteration, Change(lr=self.stable_lr, why=Reason.COOL_DOWN))   # not near after all

    def _near(self, p: Policy) -> bool:
        """Whether the recent pace puts the run `1 - cool_share` of its way to the target."""
        way = statmodel.pace_share(*zip(*self.curve), self.target)
        return way is not None and way >= 1 - p.cool_share

    def _plateau(self, iteration: int) -> bool:
        """Whether the loss average has made no new lowest since the last change over
        `plateau_share` of the iterations so far: the rate in force has done what it can."""
        return self.lowest_at is not None and iteration - self.lowest_at >= self.policy.plateau_share * iteration

    @property
    def phi(self) -> float | None:
        """The gradient noise scale from the averages (inf: the gradient is lost in the noise)."""
        if self.trace is None:
            return None
        return max(self.trace, 0.0) / self.g2 if self.g2 > 0 else math.inf

    def _goodput(self, g: Gradients, knobs: Knobs) -> Change | None:
        # Unbiased estimates from two batch sizes (McCandlish et al. 2018, appendix A).
        trace = (g.small - g.big) / (1 / g.b_small - 1 / g.b_big)
        g2 = (g.b_big * g.big - g.b_small * g.small) / (g.b_big - g.b_small)
        first = self.trace is None
        p = self.policy
        self.trace = trace if first else (1 - p.noise_ema) * self.trace + p.noise_ema * trace
        self.g2 = g2 if first else (1 - p.noise_ema) * self.g2 + p.noise_ema * g2
        self.noise_readings += 1
        if not p.speeds or self.noise_readings < 1 / p.noise_ema or g.iteration < self.goodput_at:
            return None
        self.goodput_at = g.iteration + p.goodput_every
        m0 = sum(knobs.batch_size.values())
        speeds = dict(p.speeds)
        if m0 not in speeds:
            return None
        best, gain = goodput.best_scale(self.phi, m0, {m / m0: x for m, x in speeds.items()})
        if best == 1.0 or gain < 1 + p.goodput_gain:
            return None
        lr = min(knobs.lr * goodput.gain(self.phi, m0, best * m0), self.ceiling)
        self.stable_lr = min(self.stable_lr * lr / knobs.lr, self.ceiling)
        return self._changed(g.iteration, Change(lr=lr, batch_scale=best, why=Reason.NOISE_SCALE))

    def _changed(self, iteration: int, change: Change | None) -> Change | None:
        """A change of the rate: the loss is judged against its lowest after it settles."""
        p = self.policy
        self.lowest, self.lowest_at, self.quiet_until, self.over_since = math.inf, None, iteration + p.settle, None
        self.climb_at, self.climb_loss = iteration + p.settle + p.climb_every, None
        return change
