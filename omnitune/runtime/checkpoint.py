"""Checkpoints: written atomically by the coordinator, loaded with weights_only=True.

A checkpoint holds the model, the optimizer's state (momentum buffers, or AdamW's moments), the iteration and
the training time so far, so a later job (a resume, or the next segment after a re-plan) goes
on where this one stopped, with the clock and counters continuing.
"""

from __future__ import annotations

import io
import pickle
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.distributed as dist

from omnitune.core.errors import UserError
from omnitune.core.files import atomic_write_bytes
from omnitune.core.recipe import Recipe
from omnitune.runtime.optim import Update, optimizer


FILE = "checkpoint.pt"     # in the run dir, on the coordinator's host
BEST_FILE = "best.pt"      # the best score's, kept while re-tuning (a diverged run goes on from it)


@dataclass(frozen=True)
class Start:
    """Where a job starts: from scratch, or from a checkpoint."""
    iteration: int = 0
    train_s: float = 0.0
    optimizer: dict | None = None
    knobs: dict | None = None         # {"base", "now"}: changes in place in force (Context.knobs_record)


def save(path: Path, model: torch.nn.Module, opt: Update, iteration: int, train_s: float,
         knobs: dict | None = None) -> None:
    state = {"model": model.state_dict(), "optimizer": opt.state_dict()}
    save_state(path, {**state, "knobs": knobs} if knobs else state, iteration, train_s)


def save_state(path: Path, state: dict, iteration: int, train_s: float) -> None:
    """A checkpoint of a model's and optimizer's state dicts (`state`: "model", "optimizer"):
    from a run, or from the probe a plan hands on (probe.Handoff)."""
    data = io.BytesIO()
    torch.save({**state, "iteration": iteration, "train_s": train_s}, data)
    atomic_write_bytes(path, data.getvalue())


def shared(path: str | None) -> bytes | None:
    """The checkpoint at rank 0's `path` (None: start from scratch), as bytes on every rank of the
    default process group: only the coordinator's host needs the file."""
    data = b""
    if dist.get_rank() == 0 and path is not None:
        try:
            data = Path(path).read_bytes()
        except OSError as e:
            raise UserError(f"{path}: cannot read the checkpoint ({e.strerror})") from None
    size = torch.tensor([len(data)])
    dist.broadcast(size, src=0)
    if not size:
        return None
    buf = torch.frombuffer(bytearray(data), dtype=torch.uint8) if data else torch.empty(int(size), dtype=torch.uint8)
    dist.broadcast(buf, src=0)
    return buf.numpy().tobytes()


def load(data: bytes | None, model: torch.nn.Module, name: str) -> Start:
    """Load a checkpoint's weights into `model` (None: start from scratch); return the counters and
    optimizer state to continue from. `name` says where the bytes came from, for errors."""
    if data is None:
        return Start()
    try:
        state = torch.load(io.BytesIO(data), map_location="cpu", weights_only=True)
        model.load_state_dict(state["model"])
    except (RuntimeError, KeyError, EOFError, TypeError, pickle.UnpicklingError) as e:
        raise UserError(f"{name}: not a checkpoint of this model ({str(e).splitlines()[0]})") from None
    return Start(int(state["iteration"]), float(state["train_s"]), state["optimizer"], state.get("knobs"))


def make_optimizer(model: torch.nn.Module, lr: float, momentum: float, start: Start, recipe: Recipe = Recipe(),
                   horizon: int = 0) -> Update:
    """The recipe's update with the run's learning rate and momentum, keeping a checkpoint's
    optimizer state, and its schedule at the checkpoint's iteration."""
    opt = optimizer(model.parameters(), lr, momentum, recipe, horizon, start.iteration)
    if start.optimizer is not None:
        opt.load_state_dict(start.optimizer)
        opt.switch(lr, momentum)                # a re-plan may have changed them
    return opt
