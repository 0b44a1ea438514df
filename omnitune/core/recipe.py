"""A workload's training recipe: the optimizer, its weight decay, the learning-rate schedule, the
precision and the gradient clipping that every process of a run, and every probe, applies.

A workload file names it in an optional dict (defaults: today's SGD at a constant rate):

    RECIPE = {"optimizer": "adamw",     # "sgd" (heavy-ball momentum) or "adamw"
              "weight_decay": 0.1,      # sgd: added to the gradient (L2); adamw: decoupled
              "beta2": 0.95,            # adamw's second-moment decay (its beta1 is the run's momentum)
              "schedule": "cosine",     # "constant", or a linear warm-up then a cosine decay
              "warmup": 0.05,           #   over this share of the run's horizon,
              "floor": 0.1,             #   down to this share of the learning rate
              "precision": "bf16",      # "fp32", or bf16 autocast on CUDA devices (CPUs stay fp32)
              "clip_grad_norm": 1.0}    # clip the update's gradient to this 2-norm (0: no clipping)

The run's momentum is AdamW's beta1: both average past gradients, and the asynchrony of g groups
adds about 1 - 1/g to either (Omnivore), so the planner lowers them by the same rule. The
schedule's horizon is the plan's predicted iterations to target (RunSpec.horizon); with no
horizon (probes, calibration jobs) the rate is constant.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, fields, replace

from omnitune.core.errors import UserError

OPTIMIZERS = ("sgd", "adamw")
SCHEDULES = ("constant", "cosine")
PRECISIONS = ("fp32", "bf16")
DECAY_STEPS = (1.0, 0.1, 10.0)   # the planner's coarse grid of weight decays, times the recipe's (its own first)


@dataclass(frozen=True)
class Recipe:
    optimizer: str = "sgd"
    weight_decay: float = 0.0
    beta2: float = 0.999
    eps: float = 1e-8
    schedule: str = "constant"
    warmup: float = 0.0
    floor: float = 0.0
    precision: str = "fp32"
    clip_grad_norm: float = 0.0

    def __post_init__(self):
        checks = {
            "optimizer": self.optimizer in OPTIMIZERS,
            "weight_decay": _number(self.weight_decay) and self.weight_decay >= 0,
            "beta2": _number(self.beta2) and 0 <= self.beta2 < 1,
            "eps": _number(self.eps) and self.eps > 0,
            "schedule": self.schedule in SCHEDULES,
            "warmup": _number(self.warmup) and 0 <= self.warmup < 1,
            "floor": _number(self.floor) and 0 <= self.floor <= 1,
            "precision": self.precision in PRECISIONS,
            "clip_grad_norm": _number(self.clip_grad_norm) and self.clip_grad_norm >= 0,
        }
        allowed = {"optimizer": OPTIMIZERS, "schedule": SCHEDULES, "precision": PRECISIONS}
        for name, ok in checks.items():
            if not ok:
                want = " or ".join(map(repr, allowed[name])) if name in allowed else _RANGES[name]
                raise ValueError(f"{name} must be {want}, got {getattr(self, name)!r}")

    def decays(self) -> tuple[float, ...]:
        """The weight decays the planner compares, the recipe's own first: a coarse grid a decade
        either side of it; none to compare where the recipe has no decay (the user chose none)."""
        return tuple(float(f"{self.weight_decay * f:.3g}") for f in DECAY_STEPS) if self.weight_decay else ()

    def decayed(self, weight_decay: float | None) -> "Recipe":
        """This recipe with a run's own weight decay (a plan's choice); None keeps the recipe's."""
        return self if weight_decay is None else replace(self, weight_decay=weight_decay)

    @property
    def warms_up(self) -> bool:
        """Whether a run's rate starts with a warm-up (`lr_factor` below 1 at first)."""
        return self.schedule != "constant" and self.warmup > 0

    def lr_factor(self, iteration: int, horizon: int) -> float:
        """The share of the learning rate at `iteration` (from 0) of a run whose schedule spans
        `horizon` iterations: 1 for a constant schedule or no horizon; past the horizon, the floor."""
        if self.schedule == "constant" or horizon <= 0:
            return 1.0
        warm = self.warmup * horizon
        if iteration < warm:
            return (iteration + 1) / warm
        progress = min(1.0, (iteration - warm) / max(horizon - warm, 1.0))
        return self.floor + (1 - self.floor) * 0.5 * (1 + math.cos(math.pi * progress))


_RANGES = {"weight_decay": "a number >= 0", "beta2": "in [0, 1)", "eps": "a number > 0",
           "warmup": "in [0, 1)", "floor": "in [0, 1]", "clip_grad_norm": "a number >= 0"}


def _number(x) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)


def parse(raw, source: str) -> Recipe:
    """The recipe a workload file's RECIPE dict names; `source` (the file) heads any error."""
    if raw is None:
        return Recipe()
    if not isinstance(raw, dict):
        raise UserError(f"{source}: RECIPE must be a dict, got {type(raw).__name__}")
    known = {f.name for f in fields(Recipe)}
    unknown = sorted(set(raw) - known)
    if unknown:
        raise UserError(f"{source}: RECIPE[{unknown[0]!r}] is not a recipe field (known: {', '.join(sorted(known))})")
    try:
        return Recipe(**raw)
    except ValueError as e:
        raise UserError(f"{source}: RECIPE[{str(e).split()[0]!r}] {str(e).split(' ', 1)[1]}") from None
