"""Probes' training: each protocol's own update rule, with virtual workers in one process.

A probe must see the statistics `omnitune run` produces, so each emulator does what the
runtime's loop does, one iteration (the runtime's unit) per `step()`:
    sync      one gradient on every device's batch together, one step of the recipe (the devices'
              batches concatenated: exact without BatchNorm; with it, batch statistics span
              every device's samples, as SyncBatchNorm's would);
    groups,   the runtime's own parameter server (runtime.server.ParameterServer): each group's
    softsync  gradient is computed on the weights it last read. Which weights: the order in which
              workers of equal speed reach the server (deterministic turns), or, where the profile
              measured one, a staleness histogram sampled per gradient. Softsync sums
              ceil(learners/n) gradients per update, each divided by its staleness (Rudra);
    hpsgd     n replicas step locally; the average change merges into G one step late;
    gossip    n replicas step locally; every `every` steps the runtime's seeded matching pairs
              them and each pair averages its states.
The state is the parameters and BatchNorm's statistics (runtime/flat.py), as in the runtime.
Every virtual device reads its own shard in the order the runtime's worker of that rank reads
it (workload.batches with the run's seed), and weights start as the runtime's do: a probe with
the run's seed replays the run's data.
An iteration costs forward/backward passes: sync 1 (of every device's samples at once), groups 1,
softsync ceil(learners/n), hpsgd and gossip one per replica. The planning budget is wall time,
so a costlier probe spends more of it.
"""

from __future__ import annotations

import heapq
import itertools
from collections import Counter, deque
from typing import Iterator

import numpy as np
import torch

from omnitune.core import protocols
from omnitune.core.protocols import matching
from omnitune.efficiency.statmodel import ProbeConfig
from omnitune.runtime.checkpoint import Start, make_optimizer
from omnitune.runtime.flat import (flatten_state, get_buffers, get_grads, get_state, num_buffers, num_params,
                                  set_state, unflatten_state)
from omnitune.runtime.optim import Update, optimizer
from omnitune.runtime.server import ParameterServer
from omnitune.runtime.workload import Workload, batches


class Emulator:
    """One protocol's training on virtual workers; `step()` makes one iteration.

    Weights start from `seed` (as every runtime process builds its model after
    torch.manual_seed(seed)) or from a checkpoint's model and optimizer state. From a
    checkpoint of `start_iteration`, the data streams start where a resumed run's do (seed +
    iteration), and the iteration count goes on from there. Every update is the workload's
    recipe (runtime/optim.py) with the probe's weight decay, its schedule spanning `horizon`
    iterations (0: a constant rate).
    """

    def __init__(self, wl: Workload, train, cfg: ProbeConfig, seed: int, init_state: dict | None = None,
                 init_optimizer: dict | None = None, start_iteration: int = 0, horizon: int = 0):
        torch.manual_seed(seed)
        self.wl, self.train, self.cfg, self.run_seed, self.horizon = wl, train, cfg, seed, horizon
        self.recipe = wl.recipe.decayed(cfg.weight_decay)
        self.seed = seed + start_iteration        # the data streams' seed, as the runtime's on resume
        self.model = wl.build_model()              # what the coordinator evaluates
        if init_state is not None:
            self.model.load_state_dict(init_state)
        self.net = wl.build_model()                # computes every worker's gradients
        self.P, self.B = num_params(self.model), num_buffers(self.model)
        self.init_optimizer = init_optimizer
        self.it = start_iteration
        self.staleness: Counter = Counter()        # as the runtime's summary counts it

    def start_state(self) -> torch.Tensor:
        return get_state(self.model, torch.empty(self.P + self.B))

    def update(self, params) -> Update:
        """The recipe's update at this probe's rate and momentum, at its iteration."""
        return optimizer(params, self.cfg.lr, self.cfg.momentum, self.recipe, self.horizon, self.it)

    def gradient(self, state: torch.Tensor, x: torch.Tensor, y: torch.Tensor) -> tuple[float, torch.Tensor]:
        """Loss and gradient at `state` on one minibatch; BatchNorm's statistics in `state` move
        as the forward pass moves them."""
        set_state(self.net, state)
        self.net.zero_grad(set_to_none=False)
        loss = self.wl.loss_fn(self.net(x), y)
        loss.backward()
        state[self.P:] = get_buffers(self.net, torch.empty(self.B))
        return float(loss.detach()), get_grads(self.net, torch.empty(self.P))

    def step(self) -> float:
        raise NotImplementedError

    def current_model(self) -> torch.nn.Module:
        """The model the runtime's coordinator evaluates."""
        raise NotImplementedError

    def optimizer_state(self) -> dict:
        """The optimizer's state_dict that goes with current_model."""
        raise NotImplementedError

    def updates(self) -> list[Update]:
        """Every optimizer this emulation steps (one, or one per replica)."""
        raise NotImplementedError

    def set_rate(self, lr: float) -> None:
        """Go on at another base learning rate (a re-tuning pause's cool-down), momentum kept."""
        for opt in self.updates():
            opt.set_hyper(lr, opt.param_groups[0]["momentum"])

    def checkpoint_state(self) -> dict:
        """The current model and its optimizer's state as a checkpoint's "model" and "optimizer"
        entries, which a run (or a longer probe) goes on from."""
        model = self.current_model()
        return {"model": {k: v.detach().clone() for k, v in model.state_dict().items()},
                "optimizer": self.optimizer_state()}

    @property
    def mean_staleness(self) -> float:
        n = sum(self.staleness.values())
        return sum(t * k for t, k in self.staleness.items()) / n if n else 0.0


class Shards:
    """Each device's minibatches from its own shard, as the runtime's worker of that rank reads
    them; a group's minibatch is its devices' together."""

    def __init__(self, train, batches_per_group: tuple[tuple[int, ...], ...], seed: int):
        sizes = [b for group in batches_per_group for b in group]
        self.streams = [batches(train, b, seed, shard=i, n_shards=len(sizes)) for i, b in enumerate(sizes)]
        first = [sum(len(g) for g in batches_per_group[:j]) for j in range(len(batches_per_group))]
        self.groups = [range(f, f + len(g)) for f, g in zip(first, batches_per_group)]

    def device(self, i: int) -> tuple[torch.Tensor, torch.Tensor]:
        return next(self.streams[i])

    def group(self, j: int) -> tuple[torch.Tensor, torch.Tensor]:
        xs, ys = zip(*(next(self.streams[i]) for i in self.groups[j]))
        return torch.cat(xs), torch.cat(ys)


class SyncEmulator(Emulator):
    """One replica stepping on the gradient of every device's batch at once: the runtime's loop
    for a replica alone (its model's own parameters and update), with the devices' batches
    concatenated. No flat copies of the state, which would only add time to each step: the same
    arithmetic as the runtime's."""

    def __init__(self, *args, **kw):
        super().__init__(*args, **kw)
        self.net.load_state_dict(self.model.state_dict())
        self.opt = self.update(self.net.parameters())
        if self.init_optimizer is not None:
            self.opt.load_state_dict(self.init_optimizer)
            self.opt.switch(self.cfg.lr, self.cfg.momentum)
        self.data = Shards(self.train, self.cfg.batches, self.seed)

    def step(self) -> float:
        x, y = self.data.group(0)
        self.net.zero_grad(set_to_none=False)
        loss = self.wl.loss_fn(self.net(x), y)
        loss.backward()
        self.opt.step()
        self.staleness[0] += 1
        self.it += 1
        return float(loss.detach())

    def current_model(self) -> torch.nn.Module:
        return self.net

    def updates(self) -> list[Update]:
        return [self.opt]

    def optimizer_state(self) -> dict:
        return self.opt.state_dict()


def equal_speed_schedule(workers: int, per_update: int, seconds: list[float] | None = None) -> Iterator[tuple[int, int]]:
    """(worker, staleness) of each gradient in the order a server receives them, when worker i
    takes seconds[i] (default 1) from reading the weights to delivering its gradient, and waits
    for the update its gradient joins before reading again. Ties go to the lower index, so
    equal workers take deterministic turns: staleness g - 1 for Omnivore's g groups."""
    seconds = seconds or [1.0] * workers
    ready = [(seconds[i], i) for i in range(workers)]
    heapq.heapify(ready)
    read, clock, pending = [0] * workers, 0, []
    while True:
        now, i = heapq.heappop(ready)
        yield i, clock - read[i]
        pending.append(i)
        if len(pending) == per_update:
            clock += 1
            for j in pending:
                read[j] = clock
                heapq.heappush(ready, (now + seconds[j], j))
            pending = []


def sampled_schedule(workers: int, histogram: tuple[int, ...], rng: np.random.Generator) -> Iterator[tuple[int, int]]:
    """Workers in turn, each gradient's staleness drawn from a measured histogram."""
    p = np.asarray(histogram, float) / sum(histogram)
    for k in itertools.count():
        yield k % workers, int(rng.choice(len(p), p=p))


class ServerEmulator(Emulator):
    """The runtime's ParameterServer, fed gradients computed on the weights each group read."""

    def __init__(self, *args, **kw):
        super().__init__(*args, **kw)
        cfg = self.cfg
        start = Start(iteration=self.it, optimizer=self.init_optimizer)
        self.ps = ParameterServer(self.model, make_optimizer(self.model, cfg.lr, cfg.momentum, start, self.recipe,
                                                             self.horizon), cfg.variant)
        g = len(cfg.batches)
        self.data = Shards(self.train, cfg.batches, self.seed)
        self.schedule = (sampled_schedule(g, cfg.staleness, np.random.default_rng(self.seed)) if cfg.staleness
                         else equal_speed_schedule(g, cfg.variant.gradients_per_update))
        # Past server states, back as far as a gradient may be stale.
        self.history: deque[torch.Tensor] = deque([self.start_state()], maxlen=g + len(cfg.staleness) + 1)
        self.msg = torch.zeros(self.P + self.B + 3)     # the runtime's message: see runtime/server.py

    def step(self) -> float:
        P, B, losses = self.P, self.B, []
        while not self.ps.ready(len(self.cfg.batches)):
            worker, tau = next(self.schedule)
            tau = min(tau, len(self.history) - 1)
            read = self.history[-1 - tau]
            state = read.clone()
            x, y = self.data.group(worker)
            loss, grad = self.gradient(state, x, y)
            self.msg[:P], self.msg[P:P + B] = grad, state[P:] - read[P:]     # the change of statistics
            self.msg[P + B], self.msg[P + B + 1], self.msg[P + B + 2] = loss, len(y), self.ps.clock - tau
            self.ps.receive(self.msg, worker)
            losses.append(loss)
        self.ps.update()
        self.history.append(self.start_state())
        self.staleness.update(self.ps.staleness)
        self.ps.staleness.clear()
        self.it += 1
        return float(np.mean(losses))

    def current_model(self) -> torch.nn.Module:
        return self.model

    def optimizer_state(self) -> dict:
        return self.ps.opt.state_dict()

    def updates(self) -> list[Update]:
        return [self.ps.opt]


class ReplicaEmulator(Emulator):
    """n replicas, one per device, each stepping on its own shard with its own optimizer state
    (of its parameters as one flat vector: the same arithmetic, element by element)."""

    def __init__(self, *args, **kw):
        super().__init__(*args, **kw)
        sizes = [b for group in self.cfg.batches for b in group]
        self.n = len(sizes)
        self.weights = protocols.sample_weights(sizes)      # averages weighted by samples, as the runtime's
        start = self.start_state()
        self.states = [start.clone() for _ in range(self.n)]
        self.opts = [self.update([s[:self.P]]) for s in self.states]
        if self.init_optimizer is not None:
            flat = flatten_state(self.init_optimizer, self.model)
            for opt in self.opts:
                opt.load_state_dict(flat)
                opt.switch(self.cfg.lr, self.cfg.momentum)
        self.data = Shards(self.train, self.cfg.batches, self.seed)

    def local_steps(self) -> float:
        losses = []
        for i, (state, opt) in enumerate(zip(self.states, self.opts)):
            x, y = self.data.device(i)
            loss, grad = self.gradient(state, x, y)
            opt.step_on([0], [state[:self.P]], [grad])
            losses.append(loss)
        self.it += 1
        return float(np.mean(losses))

    def updates(self) -> list[Update]:
        return self.opts

    def optimizer_state(self) -> dict:
        """The replicas' optimizer states, averaged as their states are (by samples)."""
        flat = self.opts[0].state_dict()
        slots = flat["state"].get(0, {})
        for k in slots:
            if k != "step":
                slots[k] = sum(w * opt.state[0][k] for w, opt in zip(self.weights, self.opts))
        return unflatten_state(flat, self.model)


class HPSGDEmulator(ReplicaEmulator):
    """Replicas L_i and the global G: each step's average change (L_i − G) merges into G one step
    later, and every L_i is rebased on the new G with its own progress kept."""

    def __init__(self, *args, **kw):
        super().__init__(*args, **kw)
        self.G = self.states[0].clone()
        self.sent_from: list[torch.Tensor] = []
        self.change: torch.Tensor | None = None

    def step(self) -> float:
        loss = self.local_steps()
        if self.change is not None:
            self.G += self.change
            self.states = [self.G + (L - sent) for L, sent in zip(self.states, self.sent_from)]
            self.staleness[1] += 1
        self.change = sum(w * (L - self.G) for w, L in zip(self.weights, self.states))
        self.sent_from = [L.clone() for L in self.states]
        return loss

    def current_model(self) -> torch.nn.Module:
        set_state(self.model, self.G)
        return self.model


class GossipEmulator(ReplicaEmulator):
    """Every `every` steps, the runtime's seeded perfect matching pairs the replicas, and each
    pair averages its states; a replica left out (odd n) keeps its own."""

    def __init__(self, *args, **kw):
        super().__init__(*args, **kw)
        self.round, self.last_averaged = 0, 0

    def step(self) -> float:
        loss = self.local_steps()
        if self.it % self.cfg.variant.every == 0:
            partner = matching(self.round, self.n, self.run_seed)
            self.round += 1
            for a, b in enumerate(partner):
                if a < b:
                    wa, wb = self.weights[a], self.weights[b]
                    mean = (wa * self.states[a] + wb * self.states[b]) / (wa + wb)
                    self.states[a], self.states[b] = mean, mean.clone()
            if partner[0] >= 0:                     # the coordinator's drift between averagings
                self.staleness[self.it - self.last_averaged] += 1
                self.last_averaged = self.it
        return loss

    def current_model(self) -> torch.nn.Module:
        set_state(self.model, self.states[0])
        return self.model


EMULATORS: dict[type[protocols.Variant], type[Emulator]] = {
    protocols.Sync: SyncEmulator,
    protocols.Groups: ServerEmulator,
    protocols.SoftSync: ServerEmulator,
    protocols.HPSGD: HPSGDEmulator,
    protocols.Gossip: GossipEmulator,
}


def emulator(wl: Workload, train, cfg: ProbeConfig, seed: int, init_state: dict | None = None,
             init_optimizer: dict | None = None, start_iteration: int = 0, horizon: int = 0) -> Emulator:
    """The emulator of `cfg`'s protocol."""
    return EMULATORS[type(cfg.variant)](wl, train, cfg, seed, init_state=init_state, init_optimizer=init_optimizer,
                                        start_iteration=start_iteration, horizon=horizon)
