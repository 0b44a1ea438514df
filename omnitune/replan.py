"""Re-planning during a run: Omnivore's steady state (Hadjis et al. 2016, §4), pure.

Every optimizer epoch the run stops at a checkpoint; short probes from it score each (learning
rate, momentum) of a small grid at the current g (runtime/job.py runs them), and the plan moves
to the best one, or to fewer groups when the best explicit momentum is zero.
"""

from __future__ import annotations

from dataclasses import replace

from omnitune import statmodel
from omnitune.optimizer import MU_STAR, OMNIVORE_MOMENTA, split


def retune_grid(lr: float, momentum: float) -> list[tuple[float, float]]:
    """Omnivore's steady state: momentum from its grid (and the current value) × lr {current, /2}."""
    momenta = sorted({*OMNIVORE_MOMENTA, momentum}, reverse=True)
    return [(r, m) for r in (lr, lr / 2) for m in momenta]


def retuned_plan(plan, scores: list[tuple[float, float, float]]):
    """The plan with the best-scoring (lr, momentum); fewer groups when the best momentum is zero.

    Omnivore (§4): if the best explicit momentum is 0, asynchrony already supplies more momentum
    than is wanted, so fall back to fewer groups (the next smaller g that splits the devices).
    """
    lr, momentum, _ = min(scores, key=lambda s: s[2])
    g = len(plan.groups)
    ids = tuple(d.id for d in plan.devices)
    if momentum <= 0 and g > 1:
        g = max(k for k in range(1, g) if len(ids) % k == 0)
        momentum = round(statmodel.explicit_momentum(MU_STAR, g), 4) if g > 1 else MU_STAR
    groups = split(ids, g)
    return replace(plan, lr=lr, momentum=momentum, groups=groups,
                   protocol="sync" if g == 1 else plan.protocol, implicit_momentum=statmodel.implicit_momentum(g))
