"""What one process of a run knows: its role, its device, the workload and the run's limits."""

from __future__ import annotations

import os
import signal
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import torch

from omnitune import env
from omnitune.cluster import Device
from omnitune.plan import Plan
from omnitune.runtime.checkpoint import Start
from omnitune.runtime.topology import Role
from omnitune.workload import Workload


FAULT_MARK = "omnitune fault hook:"      # in the broken rank's stderr log


@dataclass(frozen=True)
class JobArgs:
    """The arguments every process of a run receives (they must pickle)."""
    plan_path: str
    run_dir: str
    max_time_s: float
    eval_every_s: float
    timeout_s: float
    resume_from: str | None = None     # a checkpoint to start from
    stop_at_s: float = float("inf")    # end this job (a segment) at this much training time
    checkpoint_every_s: float = float("inf")   # the coordinator checkpoints at this interval
    max_restarts: int = 0              # torchelastic restarts every process after a failure
    node: int = 0                      # the cluster spec's node these processes run on
    store_port: int = 0                # of the job's own key-value store, on the coordinator's host
    attempt: int = 0                   # which start of the job: 0, then 1 after the first restart


@dataclass
class Context:
    job: JobArgs
    plan: Plan
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
    fault: tuple | None = None        # the testing fault hook (env.fault): (action, rank, iteration)

    def __post_init__(self):
        if self.job.attempt == 0:        # the hook breaks the first attempt only
            self.fault = env.fault()

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

    @property
    def run_dir(self) -> Path:
        return Path(self.job.run_dir)


def torch_device(device: Device | None) -> torch.device:
    """Claim a device for this process: its GPU, or its share of CPU threads."""
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


def backend(plan: Plan) -> str:
    """gloo for CPU tensors and point-to-point; NCCL for collectives on CUDA tensors."""
    if any(d.kind == "cuda" for d in plan.devices):
        return "cpu:gloo,cuda:nccl"
    return "gloo"


def buffer_device(plan: Plan, role: Role, device: torch.device) -> torch.device:
    """All-reduce buffers live on the GPU only when every member of the group is a GPU."""
    members = plan.groups[role.group] if role.group >= 0 else ()
    on_gpu = members and all(next(d for d in plan.devices if d.id == m).kind == "cuda" for m in members)
    return device if on_gpu else torch.device("cpu")
