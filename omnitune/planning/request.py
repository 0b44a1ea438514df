"""What `plan` is asked: the workload and target, where the hardware figures come from, the
options a user may pin, and how much to spend. A bad value is a UserError naming its option."""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

from omnitune.core import protocols
from omnitune.core.errors import UserError
from omnitune.core.plan import ANALYTIC, SIMULATED
from omnitune.core.target import Target, from_fields
from omnitune.planning.space import DEFAULT_BATCHES, Space


@dataclass(frozen=True)
class PlanRequest:
    workload: str                             # NAME (./models/NAME.py, else bundled) or a workload file
    target_accuracy: float | None = None      # test accuracy to reach, in (0, 1]
    profile: Path | None = None               # a profile written by `omnitune profile`
    cluster: Path | None = None               # or node types and counts, planned by simulation
    out: Path | None = None                   # where to write the plan (and its study and start checkpoint)
    data_dir: str | None = None
    protocol: str | None = None               # pins: one value each
    groups: int | None = None
    batch_size: int | None = None
    lr: float | None = None
    momentum: float | None = None
    seed: int = 0
    probe_iters: int = 100_000                # most iterations one probe may train
    budget_s: float | None = None             # most seconds of probing; None: sized to the job
    predict_s: float = 0.0                    # then probe the chosen configuration this much longer
    hardware_model: str = ANALYTIC            # or SIMULATED; a cluster is always simulated
    time_finalists: bool = True               # time an unmeasured leader with a real job
    target_loss: float | None = None          # or a test loss to get under (one of the two)
    weight_decay: float | None = None         # pins the recipe's weight decay (None: the recipe's grid)

    def __post_init__(self) -> None:
        if (self.target_accuracy is None) == (self.target_loss is None):
            raise UserError("give one target: --target-accuracy or --target-loss")
        if self.target_accuracy is not None and not 0 < self.target_accuracy <= 1:
            raise UserError(f"--target-accuracy must be in (0, 1], got {self.target_accuracy}")
        if self.target_loss is not None and not (self.target_loss > 0 and math.isfinite(self.target_loss)):
            raise UserError(f"--target-loss must be positive, got {self.target_loss}")
        if self.protocol is not None and self.protocol not in protocols.NAMES:
            raise UserError(f"--protocol must be one of {', '.join(protocols.NAMES)}, got {self.protocol!r}")
        for name, value in (("--groups", self.groups), ("--batch-size", self.batch_size),
                            ("--probe-iters", self.probe_iters)):
            if value is not None and value < 1:
                raise UserError(f"{name} must be at least 1, got {value}")
        if self.lr is not None and self.lr <= 0:
            raise UserError(f"--lr must be positive, got {self.lr}")
        if self.weight_decay is not None and not (self.weight_decay >= 0 and math.isfinite(self.weight_decay)):
            raise UserError(f"--weight-decay must be a number >= 0, got {self.weight_decay}")
        if self.momentum is not None and not -1 < self.momentum < 1:
            raise UserError(f"--momentum must be in (-1, 1), got {self.momentum}")
        for name, value in (("--budget-s", self.budget_s), ("--predict-s", self.predict_s)):
            if value is not None and value < 0:
                raise UserError(f"{name} must not be negative, got {value}")
        if self.hardware_model not in (ANALYTIC, SIMULATED):
            raise UserError(f"--hardware-model must be {ANALYTIC} or {SIMULATED}, got {self.hardware_model!r}")
        if (self.profile is None) == (self.cluster is None):
            raise UserError("give one of --profile (a measured cluster) or --cluster (node types to simulate)")

    @property
    def target(self) -> Target:
        return from_fields(self.target_accuracy, self.target_loss)

    def space(self) -> Space:
        """The search space, with the pinned options pinned."""
        return Space(protocols=(self.protocol,) if self.protocol else protocols.NAMES,
                     groups=(self.groups,) if self.groups else None,
                     batch_sizes=(self.batch_size,) if self.batch_size else DEFAULT_BATCHES,
                     lrs=(self.lr,) if self.lr else None, momentum=self.momentum,
                     decays=() if self.weight_decay is None else (self.weight_decay,))

    def study_name(self, measured_at: str, devices: int) -> str:
        """Everything a stored probe's outcome depends on (its length follows the budget); anything
        else starts a new study."""
        return (f"{self.workload}|{measured_at}|devices={devices}|target={self.target}|seed={self.seed}"
                f"|iters={self.probe_iters}|budget={self.budget_s}|hardware={self.hardware_model}|probes=3")
