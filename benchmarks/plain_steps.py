"""A plain PyTorch training loop and its variants, timed against each other in one process.

The plain loop is what a user writes: random indices into the workload's training tensors on
the device (moved there once, the indices drawn there), torch.optim.SGD with momentum, the
workload's loss. Each variant changes one thing (`VARIANTS`): what torch offers for small steps
(fused SGD, the whole step as one CUDA graph, torch.compile with and without its CUDA graphs),
or what the runtime's loop does (its HeavyBall update, a float(loss) each step, batches gathered
on the host and copied, or copied from pinned memory), and `runtime-like` does all of the
runtime loop's pieces at once. benchmarks.overhead runs them.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Callable

import torch

from omnitune.core.cluster import Device
from omnitune.runtime import workload
from omnitune.runtime.optim import HeavyBall

BATCH, LR, MOMENTUM = 256, 0.01, 0.9
WARMUP_STEPS = 5                # untimed steps of each loop (torch.compile compiles in them)

Step = Callable[[], None]


@dataclass(frozen=True)
class Loop:
    """What a loop trains: a workload on one device, one batch per step."""
    workload: str
    device: Device
    batch: int = BATCH
    lr: float = LR
    momentum: float = MOMENTUM
    seed: int = 0

    @property
    def torch_device(self) -> torch.device:
        return torch.device("cuda", self.device.cuda_index) if self.device.kind == "cuda" else torch.device("cpu")


def time_variants(loop: Loop, names: tuple[str, ...], window_s: float, rounds: int) -> dict:
    """Seconds per step of each variant that builds, `rounds` times `window_s` each, taking turns
    (each round starts one further along, so no variant always follows the same one); a variant
    that fails, here or later, is dropped with its error."""
    wl = workload.load(loop.workload)
    train, _ = wl.build_datasets(None, 0)
    if not isinstance(train, torch.utils.data.TensorDataset):
        raise ValueError(f"{loop.workload}: the plain loop indexes tensors; its training set is not a TensorDataset")
    data = Data(train, loop.torch_device)
    sync = torch.cuda.synchronize if data.device.type == "cuda" else (lambda: None)
    steps, errors = {}, {}
    for name in names:
        try:
            steps[name] = warmed(VARIANTS[name](wl, data, loop), sync)
        except Exception as e:      # an optional variant reports what broke it and the rest go on
            errors[name] = f"{type(e).__name__}: {e}"[:300]
    secs: dict[str, list[float]] = {name: [] for name in steps}
    for r in range(rounds):
        turn = list(steps)[r % len(steps):] + list(steps)[:r % len(steps)] if steps else []
        for name in turn:
            try:
                secs[name].append(timed_steps(steps[name], window_s, sync))
            except Exception as e:
                errors[name] = f"{type(e).__name__}: {e}"[:300]
                steps.pop(name)
    return {"sec_per_iter": {n: secs[n] for n in steps}, "errors": errors}


def warmed(step: Step, sync: Callable[[], None]) -> Step:
    for _ in range(WARMUP_STEPS):
        step()
    sync()
    return step


def timed_steps(step: Step, window_s: float, sync: Callable[[], None]) -> float:
    """Seconds per step over whole steps for `window_s`, the device's queue drained at both ends."""
    sync()
    start, n = time.perf_counter(), 0
    while time.perf_counter() - start < window_s:
        step()
        n += 1
    sync()
    return (time.perf_counter() - start) / n


class Data:
    """A workload's training tensors on the host and, moved there once, on the device."""

    def __init__(self, train: torch.utils.data.TensorDataset, device: torch.device):
        self.device, self.host = device, train
        self.x, self.y = (t.to(device) for t in train.tensors[:2])

    def __len__(self) -> int:
        return len(self.x)


def model_for(wl, data: Data, loop: Loop) -> torch.nn.Module:
    torch.manual_seed(loop.seed)
    return wl.build_model().to(data.device)


def sgd(model: torch.nn.Module, loop: Loop, **options) -> torch.optim.SGD:
    return torch.optim.SGD(model.parameters(), lr=loop.lr, momentum=loop.momentum, **options)


def eager(model, opt, loss_fn, draw: Callable, read_loss: bool = False) -> Step:
    """A step of eager PyTorch on the batch `draw()` gives; `read_loss` reads the loss back to
    the host, as the runtime's loop does to log it (on a GPU that waits for the step)."""
    def step():
        x, y = draw()
        opt.zero_grad()
        loss = loss_fn(model(x), y)
        loss.backward()
        opt.step()
        if read_loss:
            float(loss.detach())
    return step


def on_device(data: Data, loop: Loop) -> Callable:
    """Random indices into the tensors on the device, drawn there."""
    def draw():
        idx = torch.randint(len(data), (loop.batch,), device=data.device)
        return data.x[idx], data.y[idx]
    return draw


def from_host(data: Data, loop: Loop) -> Callable:
    """Random indices into the host's tensors, the batch gathered there and copied over."""
    x, y = data.host.tensors[:2]

    def draw():
        idx = torch.randint(len(x), (loop.batch,))
        return x[idx].to(data.device), y[idx].to(data.device)
    return draw


class Pinned:
    """Batches gathered on the host into pinned memory and copied without waiting; two buffers,
    so that a step gathers into one while the last copy may still read the other."""

    def __init__(self, data: Data, loop: Loop):
        x, y = data.host.tensors[:2]
        self.x, self.y, self.batch, self.device = x, y, loop.batch, data.device
        self.buffers = [(torch.empty((loop.batch, *x.shape[1:]), dtype=x.dtype).pin_memory(),
                         torch.empty((loop.batch, *y.shape[1:]), dtype=y.dtype).pin_memory()) for _ in range(2)]
        self.copied: list[torch.cuda.Event | None] = [None, None]
        self.turn = 0

    def __call__(self) -> tuple[torch.Tensor, torch.Tensor]:
        self.turn = k = 1 - self.turn
        if self.copied[k] is not None:
            self.copied[k].synchronize()
        bx, by = self.buffers[k]
        idx = torch.randint(len(self.x), (self.batch,))
        torch.index_select(self.x, 0, idx, out=bx)
        torch.index_select(self.y, 0, idx, out=by)
        out = bx.to(self.device, non_blocking=True), by.to(self.device, non_blocking=True)
        self.copied[k] = torch.cuda.Event()
        self.copied[k].record()
        return out


# The variants: each takes (workload, Data, Loop) and returns one step, warmed up by the caller.

def plain(wl, data, loop):
    model = model_for(wl, data, loop)
    return eager(model, sgd(model, loop), wl.loss_fn, on_device(data, loop))


def fused_sgd(wl, data, loop):
    model = model_for(wl, data, loop)
    return eager(model, sgd(model, loop, fused=True), wl.loss_fn, on_device(data, loop))


def heavyball(wl, data, loop):
    model = model_for(wl, data, loop)
    return eager(model, HeavyBall(model.parameters(), loop.lr, loop.momentum), wl.loss_fn, on_device(data, loop))


def read_loss(wl, data, loop):
    model = model_for(wl, data, loop)
    return eager(model, sgd(model, loop), wl.loss_fn, on_device(data, loop), read_loss=True)


def host_data(wl, data, loop):
    model = model_for(wl, data, loop)
    return eager(model, sgd(model, loop), wl.loss_fn, from_host(data, loop))


def host_pinned(wl, data, loop):
    if data.device.type != "cuda":
        raise ValueError("pinned memory serves copies to a GPU")
    model = model_for(wl, data, loop)
    return eager(model, sgd(model, loop), wl.loss_fn, Pinned(data, loop))


def runtime_like(wl, data, loop):
    """The runtime loop's pieces in one process: workload.batches' shuffled stream from the host,
    zero-filled gradients, a float(loss) each step and HeavyBall."""
    model = model_for(wl, data, loop)
    opt = HeavyBall(model.parameters(), loop.lr, loop.momentum)
    stream = workload.batches(data.host, loop.batch, seed=loop.seed)

    def step():
        x, y = next(stream)
        model.zero_grad(set_to_none=False)
        loss = wl.loss_fn(model(x.to(data.device)), y.to(data.device))
        loss.backward()
        float(loss.detach())
        opt.step()
    return step


def cuda_graph(wl, data, loop):
    """The whole step (indices, forward, backward, SGD) captured once as a CUDA graph and replayed,
    after warm-up steps on a side stream (torch.cuda.graphs' whole-network capture)."""
    if data.device.type != "cuda":
        raise ValueError("CUDA graphs need a GPU")
    model = model_for(wl, data, loop)
    opt, draw = sgd(model, loop), on_device(data, loop)

    def body():
        x, y = draw()
        wl.loss_fn(model(x), y).backward()
        opt.step()
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(3):
            opt.zero_grad(set_to_none=True)
            body()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    opt.zero_grad(set_to_none=True)     # backward in the graph then writes, not adds, each gradient
    with torch.cuda.graph(graph):
        body()
    return graph.replay


def compiled(mode: str | None):
    """torch.compile of the model in `mode`; tried on the GPU only (on the CPU it needs a C++
    compiler and minutes)."""
    def build(wl, data, loop):
        if data.device.type != "cuda":
            raise ValueError("torch.compile is tried on the GPU only")
        model = model_for(wl, data, loop)
        return eager(torch.compile(model, mode=mode), sgd(model, loop), wl.loss_fn, on_device(data, loop))
    return build


VARIANTS: dict[str, Callable] = {
    "plain": plain, "fused-sgd": fused_sgd, "heavyball": heavyball, "read-loss": read_loss, "host-data": host_data,
    "host-pinned": host_pinned, "runtime-like": runtime_like, "cuda-graph": cuda_graph, "compile": compiled(None),
    "compile-cudagraphs": compiled("reduce-overhead"),
}
# Variants that share a process; graphs and compiled code each get one, so that neither their
# memory pools nor a failure reach the others (an illegal address poisons a process's CUDA context).
GROUPS = (("fused-sgd", "heavyball", "read-loss", "host-data", "host-pinned", "runtime-like"), ("cuda-graph",),
          ("compile",), ("compile-cudagraphs",))
CUDA_ONLY = ("cuda-graph", "compile", "compile-cudagraphs", "host-data", "host-pinned")


def variant_groups(kind: str) -> list[tuple[str, ...]]:
    """The groups of variants that apply on a kind of device: on the CPU the data is already on
    the device, and graphs and compile are not tried."""
    groups = [tuple(n for n in g if kind == "cuda" or n not in CUDA_ONLY) for g in GROUPS]
    return [g for g in groups if g]
