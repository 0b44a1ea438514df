"""Changes in place: a running job takes a new learning rate, momentum or batch at a step
boundary, in every process at the same step, without ending one.

The coordinator decides (a change given with the job for its iteration, or the tuner's policy,
efficiency/tuner.py), writes change k to the job's key-value store under this job's key, and
shares the count k with the next message the protocol already sends: the gradients' all-reduce
(sync), the change's all-reduce (hpsgd), or, with no collective, the store with the round the
change applies at, as a stop is agreed (gossip). With a parameter server the coordinator is the
server: it owns the update, so a rate or momentum applies there at once, and a batch travels in
its reply as each group's new total. So every process applies change k before the same step, and
one that dies before then takes the job down with the change applied nowhere: the job goes on
from its last checkpoint, which holds the values in force when it was written (`saved`).
"""

from __future__ import annotations

import json
import os
from typing import Callable

from omnitune.core.change import Change, Knobs
from omnitune.efficiency.tuner import Evaluation, TrainLoss, Tuner

# decide(iteration, knobs in force, readings the loop noted since) -> a change, or None: the tuner's
# policy, run by the coordinator after each check
Policy = Callable[[int, Knobs, list], "Change | None"]


class Tuning:
    """One process's side of the changes of one job. `take(count)` applies every change up to
    `count` (the coordinator's count, as shared); `decide(iteration)`, on the coordinator, publishes
    what is due. `on_batch(knobs, iteration)` re-sizes this process's batches (the loop sets it);
    `on_change(change, knobs, iteration)` logs each one (the coordinator's monitor)."""

    def __init__(self, store, key: int, opt, knobs: Knobs, scheduled: tuple[Change, ...] = (),
                 policy: Policy | None = None):
        self.store, self.prefix, self.opt = store, f"omnitune/change/{key}/", opt
        self.knobs = knobs
        self.published = self.applied = 0
        self.scheduled = sorted(scheduled, key=lambda c: c.at)
        self.policy = policy
        self.noted: list = []            # readings the loop took for the policy (tuner.Gradients)
        self.on_batch: Callable[[Knobs, int], None] | None = None
        self.on_change: Callable[[Change, Knobs, int], None] | None = None

    def decide(self, iteration: int) -> int:
        """The coordinator, after its check at `iteration`: publish the changes due; returns the count."""
        while self.scheduled and self.scheduled[0].at <= iteration:
            self.publish(self.scheduled.pop(0))
        change = self.policy(iteration, self.knobs, self.noted) if self.policy else None
        self.noted = []
        if change is not None:
            self.publish(change)
        return self.published

    def publish(self, change: Change) -> None:
        self.published += 1
        self.store.set(self.prefix + str(self.published), json.dumps(change.to_dict()))

    def take(self, count: int, iteration: int) -> None:
        """Apply changes up to `count` before the step after `iteration`."""
        while self.applied < count:
            self.applied += 1
            self.apply(Change.from_dict(json.loads(self.store.get(self.prefix + str(self.applied)))), iteration)

    def apply(self, change: Change, iteration: int) -> None:
        before, after = self.knobs, self.knobs.after(change)
        if after.batch_size != before.batch_size and self.on_batch is not None:
            self.on_batch(after, iteration)
        if (after.lr, after.momentum) != (before.lr, before.momentum):
            self.opt.switch(after.lr, after.momentum)
        self.knobs = after
        # Each process's log (logs/.../stdout.log) shows what it took, and when.
        print(f"omnitune: change {self.applied} ({change.why.value}) after iteration {iteration} in process "
              f"{os.getpid()}: lr {after.lr:g}, momentum {after.momentum:g}, batch {after.batch_size}", flush=True)
        if self.on_change is not None:
            self.on_change(change, after, iteration)

    @property
    def listening(self) -> bool:
        """Whether the coordinator's policy reads what the loop notes."""
        return self.policy is not None


def feed(monitor, tuner: Tuner) -> Policy:
    """The tuner as the coordinator's policy: after each check, the readings that are new since
    the last (what the loop noted, the loss average once it moved, the evaluation just made) go
    to the tuner, and the first change it returns is published."""
    seen = {"minibatches": 0, "evaluations": 0}

    def decide(iteration: int, knobs: Knobs, noted: list) -> Change | None:
        readings = list(noted)
        if monitor.minibatches > seen["minibatches"]:
            seen["minibatches"] = monitor.minibatches
            readings.append(TrainLoss(iteration, monitor.loss_average))
        if monitor.evaluations > seen["evaluations"] and monitor.scores:
            seen["evaluations"] = monitor.evaluations
            readings.append(Evaluation(monitor.evaluated_at, monitor.scores[-1][1]))
        for reading in readings:
            change = tuner.observe(reading, knobs)
            if change is not None:
                return change
        return None
    return decide
