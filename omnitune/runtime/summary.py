"""summary.json: what a run measured, beside what its plan predicted."""

from __future__ import annotations

import os
from dataclasses import dataclass, field

from omnitune.core.change import Knobs
from omnitune.core.files import atomic_write_json, load_versioned, to_dict

SCHEMA_VERSION = 1


@dataclass(frozen=True)
class RunSummary:
    schema_version: int
    reached_target: bool
    time_to_target_s: float | None  # training time: evaluation pauses excluded
    wall_to_target_s: float | None  # the same, evaluation pauses included
    iterations: int
    final_accuracy: float
    target_accuracy: float | None   # None: the job trained for its time (a calibration job)
    predicted_time_to_target_s: float | None
    predicted_sec_per_iter: float
    measured_sec_per_iter: float
    wall_s: float
    eval_s: float                   # time the coordinator spent evaluating the test set
    plan: str
    protocol: str
    processes: int
    updates_per_group: tuple[int, ...]
    mean_staleness: float           # the mean of `staleness`
    evaluations: int
    protocol_stats: dict[str, float] = field(default_factory=dict)   # e.g. disagreement (gossip)
    restarts: int = 0               # times torchelastic restarted the processes after a failure
    checkpoints: int = 0            # periodic checkpoints written (the last attempt's)
    replans: int = 0                # pauses to re-tune during the run (omnitune run --retune)
    replan_s: float = 0.0           # wall time they cost (probes and restarts), not in time_to_target_s
    # Measured, per update the coordinator made: staleness[t] updates used information t steps
    # old. Server protocols: server updates between a gradient's read of the weights and its
    # application; hpsgd: local steps before the average change merged; gossip: local steps since
    # the worker last averaged with a peer; sync: 0.
    staleness: tuple[int, ...] = ()
    planning_s: float | None = None  # what `plan` spent finding this run's spec (the profile not counted;
    planning_probes: int = 0         # nor the training it handed on, which started_at_s counts)
    started_at_s: float = 0.0        # training time of the checkpoint the run started from (a plan's probe,
                                     # or a resume), counted in time_to_target_s
    target_loss: float | None = None  # the run's target when it is a test loss to get under
    final_loss: float | None = None   # the test loss of the checkpoint
    stalled_at_s: float | None = None  # training time at which the best accuracy had not improved for
                                       # a fifth of the training (monitor.STALL_SHARE); None: never
    diverged_at_s: float | None = None  # training time at which the training loss first diverged
                                        # (monitor.DIVERGE_FACTOR); None: never
    first_pause_at_s: float | None = None  # a re-tuned run's: the time on its clock its first pause was
                                           # set for (job.next_stop, or --replan-every-s); None: not
                                           # re-tuned
    pause_cost_s: float | None = None  # a re-tuned run's: what its next pause was estimated (or, once one
                                       # was timed, measured) to cost, probes and restart, at its end
    repaced: dict[str, float] | None = None   # the schedule re-fitted at the run's own pace (job.paced): iteration,
                                    # train_s, horizon before and after, sec_per_iter measured and predicted
    changes: int = 0                 # changes in place the run took (metrics.jsonl has a row for each)
    knobs: Knobs | None = None       # the values in force at the end, where changes in place left
                                     # other values than the run's spec (None: none did)

    def __post_init__(self):
        if self.reached_target != (self.time_to_target_s is not None):
            raise ValueError("reached_target must agree with time_to_target_s")


def save(summary: RunSummary, path: str | os.PathLike) -> None:
    atomic_write_json(path, to_dict(summary))


def load(path: str | os.PathLike) -> RunSummary:
    return load_versioned(path, RunSummary, supported=(1,))
