"""The plan: what `omnitune plan` chose and why, as a frozen, versioned dataclass.

A plan is a run spec (what to run) plus its prediction, the candidates it was chosen from, and
where it came from. Version 2 nests the run spec; version-1 files (flat, with the protocol's
fields beside the plan's) still load.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass, field
from pathlib import Path

import omnitune.core.protocols as protocols
from omnitune.core.cluster import Device
from omnitune.core.files import atomic_write_json, load_versioned, to_dict
from omnitune.core.protocols import Variant
from omnitune.core.runspec import RunSpec

SCHEMA_VERSION = 2
ANALYTIC = "analytic"      # perfmodel, calibrated on the profile's jobs: clusters that ran their profile
SIMULATED = "simulated"    # simulator.py: a fleet of node types and counts that cannot run here
MEASURED = "measured"      # a short real job of the chosen configuration (timing.py)


@dataclass(frozen=True)
class Prediction:
    sec_per_iter: float
    iters_to_target: float | None    # None: no probe could predict it (the plan learned fastest in its probe)
    time_to_target_s: float | None
    curve: tuple[tuple[float, float], ...] = ()   # the winner's probe: (iteration, test accuracy)
    model_sec_per_iter: float | None = None       # the model's figure, where a real job's replaced it

    def __post_init__(self):
        times = (self.sec_per_iter, self.iters_to_target, self.time_to_target_s)
        if not all(v is None or v >= 0 for v in times) or self.sec_per_iter is None:
            raise ValueError(f"prediction: times must not be negative, got {self}")


@dataclass(frozen=True)
class Candidate:
    layout: str
    variant: Variant
    batch_size: int                  # per device
    lr: float
    momentum: float                  # explicit
    implicit_momentum: float         # assumed from asynchrony, 1 - 1/g
    sec_per_iter: float
    iters_to_target: float | None    # None: not probed (ruled out by hardware efficiency alone)
    time_to_target_s: float | None
    note: str = ""
    iters_band: tuple[float, ...] = ()   # band on iters_to_target (statmodel): (low, high), or (low,) with no top
    model_sec_per_iter: float | None = None   # the model's figure, where a real job timed sec_per_iter
    weight_decay: float | None = None         # over the workload recipe's (None: the recipe's)

    def __post_init__(self):
        times = (self.sec_per_iter, self.iters_to_target, self.time_to_target_s)
        if self.batch_size < 1 or not all(v is None or v >= 0 for v in times):
            raise ValueError(f"candidate {self.layout!r} {self.variant.label}: needs batch_size >= 1 and times >= 0")

    @property
    def groups(self) -> int:
        return self.variant.groups


# How a search ranked configurations (planning/ranking.py): the plan records which.
RANKED_BY_TIME, RANKED_BY_LOSS = "predicted time to target", "training loss at equal training time"


@dataclass(frozen=True)
class Planning:
    """What planning spent, and the budget it planned within (budget.py)."""
    seconds: float                   # the search's wall time, scouts included (not the profile's)
    probes: int                      # probes run (stored ones that were reused are not counted)
    budget_s: float
    full: bool                       # False: the job was too small for a full search
    reason: str
    ranked_by: str = RANKED_BY_TIME  # or RANKED_BY_LOSS
    handed_on_s: float = 0.0         # of `seconds`, the chosen probe's training, which the run goes on from
    handed_on_iters: int = 0         # and its iterations
    finalists: int = 0               # leaders that trained on in a final round (ranked by loss)
    label_loss: float | None = None  # the loss of predicting the training labels' frequencies (workload.label_loss)
    blind: bool = False              # ranked by loss, and no probe's training loss fell 10% below it (ranking.blind)

    def __post_init__(self):
        if self.seconds < 0 or self.probes < 0 or self.budget_s < 0 or not 0 <= self.handed_on_s <= self.seconds:
            raise ValueError(f"planning: seconds, probes and budget must not be negative, nor the training handed "
                             f"on more than the seconds, got {self}")
        if self.label_loss is not None and not (math.isfinite(self.label_loss) and self.label_loss >= 0):
            raise ValueError(f"planning: label_loss must be a loss (finite, not negative) or null, got {self.label_loss}")
        if self.blind and (self.label_loss is None or self.ranked_by != RANKED_BY_LOSS):
            raise ValueError("planning: blind needs a label_loss and a ranking by training loss")

    @property
    def spent_s(self) -> float:
        """What planning cost: its seconds less the training handed on to the run (which the run's
        clock counts, as if the run had done it)."""
        return self.seconds - self.handed_on_s


@dataclass(frozen=True)
class Plan:
    schema_version: int
    spec: RunSpec                              # what to run
    layout: str                                # which of the profile's layouts it uses
    implicit_momentum: float                   # assumed from asynchrony
    prediction: Prediction
    candidates: tuple[Candidate, ...]
    profile: str                               # the profile it was planned from
    created_at: str
    planning: Planning | None = None           # None in plans written before planning was recorded
    hardware_model: str = ANALYTIC             # which model predicted seconds per iteration
    simulated_cluster: str = ""                # a fleet's node types and counts; "" for real nodes
    idle: dict[str, str] = field(default_factory=dict)   # devices of the layout left out, and why
    start: str = ""                            # beside the plan: the chosen probe's checkpoint, where the
                                               # run starts ("": from scratch)

    def __post_init__(self):
        if self.spec.target is None:
            raise ValueError("spec.target_accuracy: a plan needs a target (or spec.target_loss)")
        if self.hardware_model not in (ANALYTIC, SIMULATED, MEASURED):
            raise ValueError(f"hardware_model must be {ANALYTIC!r}, {SIMULATED!r} or {MEASURED!r}, got "
                             f"{self.hardware_model!r}")


def save(plan: Plan, path: str | os.PathLike) -> None:
    atomic_write_json(path, to_dict(plan))


def start_path(plan: Plan, plan_path: str | os.PathLike) -> Path | None:
    """The checkpoint the plan's run starts from (None: from scratch): beside the plan file."""
    return Path(plan_path).parent / plan.start if plan.start else None


def load(path: str | os.PathLike) -> Plan:
    return load_versioned(path, Plan, supported=(SCHEMA_VERSION,), legacy={1: PlanV1})


# Version 1, read for upgrading only.

@dataclass(frozen=True)
class CandidateV1:
    layout: str
    protocol: str
    groups: int
    batch_size: int
    lr: float
    momentum: float
    implicit_momentum: float
    sec_per_iter: float
    iters_to_target: float | None
    time_to_target_s: float | None
    note: str = ""
    detail: str = ""                     # the protocol's parameter and balancing, e.g. "n=2, balanced"
    iters_band: tuple[float, ...] = ()

    def upgrade(self) -> Candidate:
        return Candidate(self.layout, protocols.from_detail(self.protocol, self.groups, self.detail),
                         self.batch_size, self.lr, self.momentum, self.implicit_momentum, self.sec_per_iter,
                         self.iters_to_target, self.time_to_target_s, self.note, self.iters_band)


@dataclass(frozen=True)
class PlanV1:
    schema_version: int
    workload: str
    data_dir: str | None
    target_accuracy: float
    seed: int
    protocol: str
    layout: str
    devices: tuple[Device, ...]
    groups: tuple[tuple[str, ...], ...]
    batch_size: dict[str, int]
    lr: float
    momentum: float
    implicit_momentum: float
    prediction: Prediction
    candidates: tuple[CandidateV1, ...]
    profile: str
    rendezvous: str
    server_host: str
    created_at: str
    softsync_n: int = 1
    scale_lr_by_staleness: bool = True
    gossip_every: int = 1
    rebalance: bool = False
    server_node: int = 0

    def upgrade(self) -> Plan:
        variant = protocols.from_fields(self.protocol, len(self.groups), self.softsync_n, self.gossip_every,
                                        self.rebalance, self.scale_lr_by_staleness)
        spec = RunSpec(workload=self.workload, data_dir=self.data_dir, variant=variant, devices=self.devices,
                       groups=self.groups, batch_size=self.batch_size, lr=self.lr, momentum=self.momentum,
                       seed=self.seed, target_accuracy=self.target_accuracy, rendezvous=self.rendezvous,
                       server_host=self.server_host, server_node=self.server_node)
        return Plan(SCHEMA_VERSION, spec, self.layout, self.implicit_momentum, self.prediction,
                    tuple(c.upgrade() for c in self.candidates), self.profile, self.created_at)

