"""A change a running job takes in place, at a step boundary, without ending a process: its
learning rate, its momentum (AdamW's beta1) and its per-device batch sizes. Changes of the
devices, of g or of the protocol need new processes and are not changes of this kind.

A change is decided by the coordinator (the tuner's policy, or a schedule given with the job),
published on the job's own key-value store, and applied by every process at the same step
(runtime/inplace.py). Each one is a row of the run's metrics.jsonl. Pure: no torch.
"""

from __future__ import annotations

import dataclasses
import enum
import math
from dataclasses import dataclass

from omnitune.core.runspec import RunSpec


class Reason(enum.Enum):
    """Why the run's knobs changed."""
    SCHEDULED = "scheduled"      # given with the job (an experiment, a test, a user's schedule)
    UNSTABLE = "unstable"        # the training loss rose past the policy's margin: the rate comes down
    CLIMB = "climb"              # the loss still falls and no edge was met: the rate goes up (a range test)
    NOISE_SCALE = "noise scale"  # the batch follows the gradient noise scale (goodput), the rate the batch
    COOL_DOWN = "cool-down"      # the target is near, or the score stopped rising: the rate decays


class Why(str, enum.Enum):
    """Why a re-tuned run paused (runtime/job.py), as its re-tuner reads it (probing/pause.py)."""
    SCHEDULE = "schedule"        # its budget allowed a pause
    STALL = "stall"              # its score stopped rising (monitor.STALL_SHARE)
    OFF_PACE = "off pace"        # at its pace it would miss its target within its time limit
    PLATEAU = "plateau"          # a stall, or off pace early, while its recent pace still gets there
    DIVERGENCE = "divergence"    # its training loss diverged


@dataclass(frozen=True)
class Change:
    """New values for some of the knobs (None: unchanged). `batch_scale` multiplies every
    device's batch (rounded, at least 1), so that balanced batches keep their shares. `at`: the
    iteration after which a scheduled change is published (0 for the policy's own, which are
    published when decided)."""
    lr: float | None = None
    momentum: float | None = None
    batch_scale: float | None = None
    why: Reason = Reason.SCHEDULED
    at: int = 0

    def __post_init__(self):
        if self.lr is not None and not (self.lr > 0 and math.isfinite(self.lr)):
            raise ValueError(f"a change's lr must be positive, got {self.lr}")
        if self.momentum is not None and not -1 < self.momentum < 1:
            raise ValueError(f"a change's momentum must be in (-1, 1), got {self.momentum}")
        if self.batch_scale is not None and not (self.batch_scale > 0 and math.isfinite(self.batch_scale)):
            raise ValueError(f"a change's batch_scale must be positive, got {self.batch_scale}")
        if self.at < 0:
            raise ValueError(f"a change's iteration must be at least 0, got {self.at}")

    def to_dict(self) -> dict:
        return {"lr": self.lr, "momentum": self.momentum, "batch_scale": self.batch_scale,
                "why": self.why.value, "at": self.at}

    @classmethod
    def from_dict(cls, d: dict) -> Change:
        return cls(lr=d.get("lr"), momentum=d.get("momentum"), batch_scale=d.get("batch_scale"),
                   why=Reason(d.get("why", Reason.SCHEDULED.value)), at=int(d.get("at", 0)))


@dataclass(frozen=True)
class Knobs:
    """The values in force: the learning rate, the momentum and each device's batch."""
    lr: float
    momentum: float
    batch_size: dict[str, int]

    @classmethod
    def of(cls, spec: RunSpec) -> Knobs:
        return cls(spec.lr, spec.momentum, dict(spec.batch_size))

    def after(self, change: Change) -> Knobs:
        scale = change.batch_scale
        batches = self.batch_size if scale is None else \
            {d: max(1, round(b * scale)) for d, b in self.batch_size.items()}
        return Knobs(self.lr if change.lr is None else change.lr,
                     self.momentum if change.momentum is None else change.momentum, batches)

    def on(self, spec: RunSpec) -> RunSpec:
        """`spec` with these values."""
        return dataclasses.replace(spec, lr=self.lr, momentum=self.momentum, batch_size=dict(self.batch_size))

    def to_dict(self) -> dict:
        return {"lr": self.lr, "momentum": self.momentum, "batch_size": dict(self.batch_size)}

    @classmethod
    def from_dict(cls, d: dict) -> Knobs:
        return cls(float(d["lr"]), float(d["momentum"]), {k: int(v) for k, v in d["batch_size"].items()})


def evaluations(lines: list[dict]) -> list[dict]:
    """The evaluation rows of a run's metrics.jsonl, less its change rows ("event": "change")."""
    return [x for x in lines if "event" not in x]


def changes(lines: list[dict]) -> list[dict]:
    """The change rows of a run's metrics.jsonl: each with its iteration, training time, why, and
    the values in force after it."""
    return [x for x in lines if x.get("event") == "change"]
