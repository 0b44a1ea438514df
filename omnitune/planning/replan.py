"""Re-planning during a run: Omnivore's steady state (Hadjis et al. 2016, §4), pure.

Every optimizer epoch the run stops at a checkpoint; short probes from it score each (learning
rate, momentum) of a small grid with the protocol's own emulation (probe.retune runs them), and
the run spec moves to the best one, or to less asynchrony when the best explicit momentum is zero.
"""

from __future__ import annotations

from dataclasses import replace

from omnitune.core.runspec import RunSpec
from omnitune.planning.space import MU_STAR, OMNIVORE_MOMENTA


def retune_grid(lr: float, momentum: float) -> list[tuple[float, float]]:
    """Omnivore's steady state: momentum from its grid (and the current value) × lr {current, /2}."""
    momenta = sorted({*OMNIVORE_MOMENTA, momentum}, reverse=True)
    return [(r, m) for r in (lr, lr / 2) for m in momenta]


def retuned(spec: RunSpec, scores: list[tuple[float, float, float]]) -> RunSpec:
    """The spec with the best-scoring (lr, momentum) of (lr, momentum, score) triples, lowest score
    best; with less asynchrony when the best momentum is zero or below.

    Omnivore (§4): if the best explicit momentum is 0, asynchrony already supplies more momentum
    than is wanted, so fall back to less of it (the variant's own rule: fewer groups, a smaller
    softsync n, more frequent gossip), with the explicit momentum the rule gives there.
    """
    lr, momentum, _ = min(scores, key=lambda s: s[2])
    fewer = spec.variant.less_asynchronous(len(spec.devices)) if momentum <= 0 else None
    if fewer is None:
        return replace(spec, lr=lr, momentum=momentum)
    return replace(spec, variant=fewer, groups=fewer.group(spec.device_ids), lr=lr,
                   momentum=fewer.rule_momentum(MU_STAR))
