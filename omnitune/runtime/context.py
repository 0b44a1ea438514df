"""What one process of a run knows (its role, its device, the workload, the run's limits), and
the pieces every protocol's training loop shares: a step's gradient, the coordinator's monitor,
and the summary it writes at the end."""

from __future__ import annotations

import io
import math
import os
import signal
import sys
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import torch

from omnitune.core import env
from omnitune.core.change import Change, Knobs
from omnitune.core.cluster import Device
from omnitune.core.files import append_jsonl, atomic_write_bytes, to_dict
from omnitune.core.runspec import RunSpec
from omnitune.core.target import Target
import omnitune.runtime.checkpoint as checkpoint
from omnitune.runtime.checkpoint import Start
from omnitune.efficiency.tuner import Policy as TunerPolicy
from omnitune.runtime.inplace import Tuning, feed
import omnitune.runtime.monitor as monitor_mod
from omnitune.runtime.monitor import Monitor
from omnitune.runtime.optim import Update
from omnitune.runtime.summary import SCHEMA_VERSION, RunSummary, save as save_summary
from omnitune.runtime.topology import Role
from omnitune.runtime.workload import Workload, autocast


FAULT_MARK = "omnitune fault hook:"      # in the broken rank's stderr log


@dataclass(frozen=True)
class JobArgs:
    """The arguments every process of a run receives (they must pickle)."""
    spec: RunSpec
    run_dir: str
    max_time_s: float
    eval_every_s: float
    timeout_s: float
    eval_every_iters: int = 0          # > 0: evaluate every this many iterations instead (benchmarks)
    max_iters: int = 0                 # > 0: stop after this many iterations (experiments)
    min_iters: int = 0                 # > 0: run past max_time_s until this many are timed (monitor.STRETCH)
    trajectory: int = 0                # > 0: save the coordinator's weights after each of that many
                                       # iterations to trajectory.pt (experiments)
    plan_path: str = ""                # the plan the spec came from, named in the summary
    predicted_sec_per_iter: float = 0.0
    predicted_time_to_target_s: float | None = None
    planning_s: float | None = None    # what `plan` spent finding the spec (None: not recorded)
    planning_probes: int = 0
    resume_from: str | None = None     # a checkpoint to start from
    stop_at_s: float = float("inf")    # end this job (a segment) at this much training time
    stall_stop_from_s: float = float("inf")   # a stall at or after this much training time ends it
    pace_wait_s: float = float("inf")         # being off pace (monitor.off_pace) ends it once the
                                              # latest half of the training lasted this long
    retuned: bool = False              # keep the best score's checkpoint (BEST_FILE)
    diverge_stop: bool = False         # a divergence ends the job (re-tuning answers it)
    checkpoint_every_s: float = float("inf")   # the coordinator checkpoints at this interval
    max_restarts: int = 0              # torchelastic restarts every process after a failure
    node: int = 0                      # the cluster spec's node these processes run on
    store_port: int = 0                # of the job's own key-value store, on the coordinator's host
    attempt: int = 0                   # which start of the job: 0, then 1 after the first restart
    owner_pid: int = 0                 # > 0: after each segment, wait for the next one from this
                                       # process, the command's (segments.py)
    changes: tuple[Change, ...] = ()   # changes in place at given iterations (inplace.py)
    tuner: TunerPolicy | None = None   # the coordinator's policy for changes in place (None: none)


@dataclass
class Context:
    job: JobArgs
    role: Role
    device: torch.device
    workload: Workload
    model: torch.nn.Module
    train: torch.utils.data.Dataset
    test: torch.utils.data.Dataset
    store: object                                    # the job's key-value store (a torch.distributed Store)
    start: Start = Start()
    step_times: list = field(default_factory=list)   # seconds of each local compute step
    batch_times: dict = field(default_factory=dict)  # mean step seconds at each batch size run
    steps: int = 0                                   # local steps (or server updates) in this attempt
    staleness: Counter = field(default_factory=Counter)   # measured, per update (RunSummary.staleness)
    fault: tuple | None = None        # the testing fault hook (env.fault): (action, rank, iteration)
    key: int = 0                      # this job's number in this process (every rank counts alike)
    base: Knobs | None = None         # the values the job was launched with, before its checkpoint's
    tuning: Tuning | None = None      # changes in place (new_tuning)

    def __post_init__(self):
        if self.job.attempt == 0:        # the hook breaks the first attempt only
            self.fault = env.fault()

    @property
    def spec(self) -> RunSpec:
        return self.job.spec

    @property
    def run_dir(self) -> Path:
        return Path(self.job.run_dir)

    def tick(self) -> None:
        """Count a step; the testing fault hook fires here."""
        self.steps += 1
        if self.fault and self.fault[1:] == (self.role.rank, self.start.iteration + self.steps):
            action = self.fault[0]
            print(f"{FAULT_MARK} {action} rank {self.role.rank} at iteration {self.fault[2]}, time {time.time():.3f}",
                  file=sys.stderr, flush=True)
            if action == "kill":
                os.kill(os.getpid(), signal.SIGKILL)
            time.sleep(1e9)

    def make_optimizer(self) -> Update:
        """The workload's recipe at the run's rate and momentum, from the checkpoint's state."""
        spec = self.spec
        return checkpoint.make_optimizer(self.model, spec.lr, spec.momentum, self.start,
                                         self.workload.recipe.decayed(spec.weight_decay), spec.horizon)

    def new_tuning(self, opt: Update, monitor: Monitor | None = None, on_batch=None) -> Tuning:
        """This process's side of the changes in place. The coordinator gets the job's scheduled
        changes still ahead of its checkpoint (one due at the checkpoint's iteration or before is
        in the values it holds) and its policy, and logs each change beside its evaluations."""
        knobs, lead = Knobs.of(self.spec), self.role.coordinator
        ahead = tuple(c for c in self.job.changes + forced() if c.at >= self.start.iteration) if lead else ()
        policy = None
        if monitor is not None and self.job.tuner is not None:
            target = monitor.target.score if math.isfinite(monitor.target.score) else None
            policy = feed(monitor, self.job.tuner.start(knobs, target))
        self.tuning = Tuning(self.store, self.key, opt, knobs, ahead, policy)
        self.tuning.on_batch = on_batch
        if monitor is not None:
            self.tuning.on_change = lambda change, now, it: log_change(monitor, change, now, it)
        return self.tuning

    def compute_grads(self, x: torch.Tensor, y: torch.Tensor) -> float | torch.Tensor:
        """Forward and backward on one minibatch; the gradients stay in the model. Returns the loss:
        on a GPU alone in its group, as a tensor on the GPU (the monitor reads it later, so the
        step does not wait for the device; its step time is then the host's); else a float, which
        waits for the step, so that step_times (rebalance) hold the device's time.
        With a bf16 recipe, a GPU computes the forward pass under bf16 autocast."""
        started = time.perf_counter()
        self.model.zero_grad()              # to None: backward writes the gradients, no zeroing kernels
        with autocast(self.workload, self.device):
            loss = self.workload.loss_fn(self.model(x.to(self.device)), y.to(self.device))
        loss.backward()
        value = loss.detach()
        if self.device.type != "cuda" or len(self.role.group_ranks) > 1:
            value = float(value)
        emulate_slowdown(self.role.device, started)
        self.step_times.append(time.perf_counter() - started)
        self.tick()
        return value

    def new_monitor(self, opt: Update, model: torch.nn.Module | None = None) -> Monitor:
        """The coordinator's monitor; it checkpoints `model` (default: this process's) with `opt`
        every `checkpoint_every_s`."""
        job = self.job
        monitor = Monitor(self.workload, self.test, self.spec.target or Target(float("inf")),
                          min(job.max_time_s, job.stop_at_s), job.eval_every_s, self.run_dir / "metrics.jsonl",
                          checkpoint_every_s=job.checkpoint_every_s, attempt=job.attempt,
                          eval_every_iters=job.eval_every_iters, max_iters=job.max_iters, min_iters=job.min_iters,
                          record=job.trajectory, stall_stop_from_s=job.stall_stop_from_s,
                          pace_wait_s=job.pace_wait_s, limit_s=job.max_time_s,
                          diverge_stop=job.diverge_stop)
        monitor.start -= self.start.train_s          # the clock goes on from the checkpoint
        if job.attempt > 0:
            append_jsonl(self.run_dir / "restarts.jsonl", {"attempt": job.attempt, "time": round(time.time(), 3),
                                                           "iteration": self.start.iteration,
                                                           "train_s": self.start.train_s})
        saved = model or self.model
        if job.checkpoint_every_s < float("inf"):
            path = self.run_dir / checkpoint.FILE
            monitor.saver = lambda it, train_s: checkpoint.save(path, saved, opt, it, train_s, self.knobs_record())
        if job.retuned:        # the best so far: first where this segment starts
            best = self.run_dir / checkpoint.BEST_FILE
            monitor.best_saver = lambda it, train_s: checkpoint.save(best, saved, opt, it, train_s,
                                                                     self.knobs_record())
            monitor.keep_best(self.start.iteration, self.start.train_s)
        return monitor

    def knobs_record(self) -> dict | None:
        """What a checkpoint keeps of the changes in place: the values the job was launched with
        and those in force (None: nothing changed)."""
        if self.tuning is None or self.base is None or self.tuning.knobs == self.base:
            return None
        return {"base": self.base.to_dict(), "now": self.tuning.knobs.to_dict()}

    def finish(self, monitor: Monitor, opt, iterations: int, updates_per_group: list[int],
               stats: dict[str, float] | None = None) -> dict:
        """Evaluate the final model (unless that was the last evaluation's), then write the
        checkpoint and summary.json (the coordinator's job): final_accuracy is the checkpoint's."""
        if monitor.evaluated_at != iterations:
            monitor.evaluate(self.model, iterations)
        wall = monitor.elapsed()
        checkpoint.save(self.run_dir / checkpoint.FILE, self.model, opt, iterations, wall - monitor.eval_s,
                        self.knobs_record())
        if monitor.trajectory:
            save_tensor(self.run_dir / "trajectory.pt", torch.stack(monitor.trajectory))
        job, counts = self.job, histogram(self.staleness)
        summary = RunSummary(
            schema_version=SCHEMA_VERSION,
            reached_target=monitor.time_to_target_s is not None,
            time_to_target_s=monitor.time_to_target_s,
            wall_to_target_s=monitor.wall_to_target_s,
            iterations=iterations,
            final_accuracy=monitor.final_accuracy,
            target_accuracy=self.spec.target_accuracy,
            target_loss=self.spec.target_loss,
            final_loss=monitor.final_loss,
            predicted_time_to_target_s=job.predicted_time_to_target_s,
            predicted_sec_per_iter=job.predicted_sec_per_iter,
            planning_s=job.planning_s,
            planning_probes=job.planning_probes,
            measured_sec_per_iter=monitor_mod.sec_per_iter(monitor, iterations, wall,
                                                           (self.start.iteration, self.start.train_s)),
            wall_s=wall,
            eval_s=monitor.eval_s,
            plan=job.plan_path,
            protocol=self.spec.variant.protocol,
            processes=self.spec.processes,
            updates_per_group=tuple(updates_per_group),
            mean_staleness=sum(t * n for t, n in enumerate(counts)) / max(sum(counts), 1),
            evaluations=monitor.evaluations,
            protocol_stats=dict(stats or {}),
            restarts=job.attempt,
            checkpoints=monitor.checkpoints,
            staleness=counts,
            started_at_s=self.start.train_s,
            stalled_at_s=monitor.stalled_at_s,
            diverged_at_s=monitor.diverged_at_s,
            changes=self.tuning.applied if self.tuning else 0,
            knobs=self.tuning.knobs if self.knobs_record() else None,
        )
        save_summary(summary, self.run_dir / "summary.json")
        return to_dict(summary)


def forced() -> tuple[Change, ...]:
    """The change the OMNITUNE_CHANGE testing hook asks for (env.forced_change), as a scheduled one."""
    asked = env.forced_change()
    if asked is None:
        return ()
    at, lr, scale = asked
    return (Change(lr=lr, batch_scale=scale, at=at),)


def log_change(monitor: Monitor, change: Change, knobs: Knobs, iteration: int) -> None:
    """A change in place as a row of metrics.jsonl ("event": "change"), with the values now in force."""
    wall = monitor.elapsed()
    append_jsonl(monitor.metrics_path, {"event": "change", "why": change.why.value, "iteration": iteration,
                                        "wall_s": round(wall, 4), "train_s": round(wall - monitor.eval_s, 4),
                                        "attempt": monitor.attempt, "time": round(time.time(), 3),
                                        **knobs.to_dict()})


def save_tensor(path: Path, tensor: torch.Tensor) -> None:
    data = io.BytesIO()
    torch.save(tensor, data)
    atomic_write_bytes(path, data.getvalue())


def histogram(counts: Counter) -> tuple[int, ...]:
    """counts[t] for t = 0 .. the largest seen."""
    return tuple(counts.get(t, 0) for t in range(max(counts, default=-1) + 1))


def torch_device(device: Device | None) -> torch.device:
    """Claim a device for this process: its GPU, or its share of CPU threads (and malloc's
    thresholds, so that its steps run as fast as every other process's)."""
    env.keep_freed_memory()
    if device is not None and device.kind == "cuda":
        torch.cuda.set_device(device.cuda_index)
        torch.set_num_threads(1)
        return torch.device("cuda", device.cuda_index)
    torch.set_num_threads(device.threads if device is not None else 1)
    return torch.device("cpu")


def emulate_slowdown(device: Device | None, started: float) -> None:
    """EMULATION of a slower device: stretch the step begun at `started` by its slowdown factor."""
    if device is not None and device.emulated_slowdown > 1.0:
        elapsed = time.perf_counter() - started
        time.sleep((device.emulated_slowdown - 1.0) * elapsed)


def backend(spec: RunSpec) -> str:
    """gloo for CPU tensors and point-to-point; NCCL for collectives on CUDA tensors."""
    if any(d.kind == "cuda" for d in spec.devices):
        return "cpu:gloo,cuda:nccl"
    return "gloo"


def buffer_device(spec: RunSpec, role: Role, device: torch.device) -> torch.device:
    """All-reduce buffers live on the GPU only when every member of the group is a GPU."""
    members = spec.groups[role.group] if role.group >= 0 else ()
    on_gpu = members and all(spec.device(m).kind == "cuda" for m in members)
    return device if on_gpu else torch.device("cpu")
