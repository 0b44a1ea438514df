"""Re-tuning during a run, as Omnivore's optimizer does at every epoch (Hadjis et al. 2016, §4):
the run pauses at a checkpoint, short probes from it compare learning rates (and, with
asynchrony, momenta), and the run goes on with the winner. Pure: the probes are run by
probing/probe.py, the pauses by runtime/job.py.

When: runtime/job.py pauses the run (`next_stop`): phases double, and re-tuning costs at
most a tenth of the training time so far, so a short run is never paused.

What: the current learning rate and ×3, ÷3, ×10, ÷10 of it at the current momentum; with
asynchrony, the current rate at Omnivore's momenta as well (`candidates`).

Which: each candidate trains the same batches from the checkpoint and is scored by its loss on
a fixed validation subset (paired comparisons). The run switches only when a candidate's score
beats the current setting's by more than the noise, measured as the spread of the current
setting's scores over repeats on other batches (`decide`: hysteresis). Where the winner's
momentum is zero or below, asynchrony already gives more momentum than is wanted, and the run
falls back to less of it (`retuned`).
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass, replace

from omnitune.core.runspec import RunSpec
from omnitune.planning.space import MU_STAR, OMNIVORE_MOMENTA

LR_STEPS = (1.0, 3.0, 1 / 3, 10.0, 0.1)     # candidates' learning rates, times the current one
NOISE_FLOOR = 0.01       # scores closer than this fraction of the current one are a tie

Setting = tuple[float, float]           # (learning rate, momentum)


def candidates(lr: float, momentum: float, asynchronous: bool) -> list[Setting]:
    """The settings a pause compares, the current one first."""
    out = [(float(f"{lr * f:.3g}"), momentum) for f in LR_STEPS]
    if asynchronous:
        out += [(lr, m) for m in OMNIVORE_MOMENTA]
    return list(dict.fromkeys(out))


@dataclass(frozen=True)
class Decision:
    setting: Setting         # what the run goes on with
    switched: bool
    margin: float            # what a challenger had to beat the current score by
    reason: str


def noise(scores: list[float]) -> float:
    """The spread of one setting's scores over repeats on other batches (0 with one score)."""
    return max(scores) - min(scores) if len(scores) > 1 else 0.0


def decide(current: Setting, scores: dict[Setting, list[float]]) -> Decision:
    """Switch to the best-scoring setting (lowest mean validation loss) only when it beats the
    current one by more than the noise: the current setting's spread over repeats, and at least
    NOISE_FLOOR of its score. A setting whose loss is not finite never wins."""
    mean = {s: statistics.fmean(v) for s, v in scores.items() if v and all(map(math.isfinite, v))}
    mine = mean.get(current)
    if mine is None:
        best = min(mean, key=mean.get, default=current)
        return Decision(best, best != current, 0.0, "the current setting diverged from the checkpoint")
    margin = max(noise(scores[current]), NOISE_FLOOR * abs(mine))
    best = min(mean, key=mean.get)
    if best != current and mean[best] < mine - margin:
        return Decision(best, True, margin, f"validation loss {mean[best]:.4f} against {mine:.4f} "
                                            f"(beats it by more than the noise, {margin:.4f})")
    return Decision(current, False, margin, f"no setting beat {mine:.4f} by more than the noise, {margin:.4f}")


def retuned(spec: RunSpec, setting: Setting) -> RunSpec:
    """The spec at this (lr, momentum); with less asynchrony when the momentum is zero or below
    (Omnivore: asynchrony already supplies more momentum than is wanted), at the explicit momentum
    the variant's rule gives there."""
    lr, momentum = setting
    fewer = spec.variant.less_asynchronous(len(spec.devices)) if momentum <= 0 else None
    if fewer is None:
        return replace(spec, lr=lr, momentum=momentum)
    return replace(spec, variant=fewer, groups=fewer.group(spec.device_ids), lr=lr,
                   momentum=fewer.rule_momentum(MU_STAR))
