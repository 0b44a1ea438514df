"""Protocols without a parameter server: hpsgd (overlapped synchronisation) and gossip.

Both move a model's state: its parameters and its BatchNorm statistics (runtime/flat.py).

hpsgd (hierarchical parallel SGD): every worker trains a replica L of the global model G. Each
iteration it commits its local SGD step to L, then waits for the all-reduce of the previous
iteration's change (L − G), which ran in the background during this iteration's forward and
backward pass; the average change is merged into G, and L becomes G plus the local progress
made meanwhile. Communication overlaps computation; gradients are one step stale.

gossip (Jin et al. 2016): no server and no global barrier. Every `every` iterations each worker
averages its state with one peer, chosen by a random perfect matching that every worker derives
from the seed and the round number (pull: each fetches the other's). The coordinator stops the
job through the job's key-value store: it names a last round just beyond the round any worker
has announced, and every worker stops there, so no one waits for a departed peer. Workers read
the store only at round boundaries, so a stop takes up to three rounds of `every` steps.
"""

from __future__ import annotations

import copy
import itertools

import torch
import torch.distributed as dist

from omnitune.core import protocols
from omnitune.core.change import Knobs
from omnitune.core.protocols import matching
from omnitune.runtime.context import Context
from omnitune.runtime.flat import get_params, get_state, num_params, num_state, set_state
from omnitune.runtime.workload import batches


def train_hpsgd(ctx: Context, group) -> dict | None:
    spec, role, model = ctx.spec, ctx.role, ctx.model
    S = num_state(model)
    opt = ctx.make_optimizer()
    shadow = copy.deepcopy(model) if role.coordinator else None    # holds G for evaluation and checkpoints
    monitor = ctx.new_monitor(opt, shadow) if role.coordinator else None
    G = get_state(model, torch.empty(S))
    sent_from = G.clone()                                       # L when the change in flight was taken
    msg = torch.zeros(S + 4)                                    # [change (S) | loss | count | stop | changes published]
    work, stop, iterations, sent_at = None, 0.0, ctx.start.iteration, 0
    final, final_at = G, iterations
    overlapped = syncs = 0
    n = len(role.group_ranks)
    data = Stream(ctx)
    tuning = ctx.new_tuning(opt, monitor, data.take)
    while True:
        x, y = data.next()
        loss = ctx.compute_grads(x, y)
        opt.step()                                              # committed to the replica L
        iterations += 1
        L = get_state(model, torch.empty(S))
        if work is not None:
            overlapped += int(work.is_completed())              # finished while we computed
            syncs += 1
            work.wait()
            ctx.staleness[iterations - sent_at] += 1            # local steps since that change was taken
            G += msg[:S] / n                                    # merge the average change
            L = G + (L - sent_from)                             # local progress, rebased on new G
            set_state(model, L)
            if msg[S + 2] > 0:
                break
            tuning.take(round(float(msg[S + 3])), iterations)   # every replica, after the same merge
            if monitor:
                monitor.record_loss(float(msg[S]) / n)
                if monitor.due(iterations):
                    set_state(shadow, G)
                stop = float(monitor.check(shadow, iterations))
                if stop:                                        # the run's model is the one judged,
                    final, final_at = G.clone(), iterations     # not the next merge past it
                else:                                           # no change after the check that ends it
                    tuning.decide(iterations)
        msg[:S] = (L - G) * data.weight
        msg[S], msg[S + 1], msg[S + 2], msg[S + 3] = loss, 1.0, stop, tuning.published
        sent_from, sent_at = L, iterations
        work = dist.all_reduce(msg, group=group, async_op=True)
    if monitor:
        set_state(model, final)
        return ctx.finish(monitor, opt, final_at, [final_at],
                          stats={"overlapped_fraction": overlapped / max(syncs, 1)})
    return None


class Stream:
    """A peer's minibatches, and its weight in a mean over the workers (its share of the samples,
    times their number: 1 with equal batches); both follow a change in place of the batch."""

    def __init__(self, ctx: Context):
        self.ctx = ctx
        self.take(Knobs.of(ctx.spec), ctx.start.iteration)

    def take(self, knobs: Knobs, iteration: int) -> None:
        spec, role = self.ctx.spec, self.ctx.role
        self.sizes = [knobs.batch_size[d] for g in spec.groups for d in g]      # in shard order
        self.size = self.sizes[role.shard]
        self.weight = len(self.sizes) * protocols.sample_weights(self.sizes)[role.shard]
        self.stream = batches(self.ctx.train, self.size, spec.seed + iteration, role.shard, len(spec.devices))

    def next(self):
        return next(self.stream)


class StopBoard:
    """Agreeing on a last round through the job's key-value store, without a barrier."""

    def __init__(self, store, rank: int, n: int, run_key: str):
        self.store = store
        self.rank, self.n, self.prefix = rank, n, f"omnitune/{run_key}/"

    def announce(self, round_: int) -> None:
        self.store.set(f"{self.prefix}round/{self.rank}", str(round_))

    def last_round(self) -> float:
        key = f"{self.prefix}stop"
        return float(self.store.get(key)) if self.store.check([key]) else float("inf")

    def call_stop(self, margin: int = 3) -> None:
        self.store.set(f"{self.prefix}stop", str(self.ahead(margin)))

    def ahead(self, margin: int) -> int:
        """A round no worker has reached: `margin` past the latest any has announced."""
        rounds = self.store.multi_get([f"{self.prefix}round/{i}" for i in range(self.n)])
        return max(int(r) for r in rounds) + margin

    def call_change(self, count: int, margin: int = 3) -> None:
        """Changes in place up to `count` apply at a round no worker has reached."""
        self.store.set(f"{self.prefix}change/{count}", str(self.ahead(margin)))
        self.store.add(f"{self.prefix}changes", 1)

    def changes_due(self, round_: int, seen: list[int]) -> int:
        """How many changes apply by `round_`; `seen` holds the round of each one called so far."""
        called = self.store.add(f"{self.prefix}changes", 0)
        for k in range(len(seen) + 1, called + 1):
            seen.append(int(self.store.get(f"{self.prefix}change/{k}")))
        return sum(r <= round_ for r in seen)


_GOSSIP_JOBS = itertools.count()


def train_gossip(ctx: Context, group) -> dict | None:
    spec, role, model = ctx.spec, ctx.role, ctx.model
    every = spec.variant.every
    S = num_state(model)
    opt = ctx.make_optimizer()
    monitor = ctx.new_monitor(opt) if role.coordinator else None
    me, n = role.shard, len(spec.devices)
    ranks = role.group_ranks
    # Every rank runs the same sequence of jobs (the profiler's calibration runs several in one
    # process group), so a per-process job count keeps each job's keys apart.
    board = StopBoard(ctx.store, me, n, f"gossip{next(_GOSSIP_JOBS)}")
    board.announce(0)                      # so the coordinator can call a stop before the first round
    mine, theirs = torch.empty(S), torch.empty(S)
    iterations, round_, exchanges, stopping = ctx.start.iteration, 0, {}, False
    last_averaged = iterations
    data = Stream(ctx)
    tuning, change_rounds, called = ctx.new_tuning(opt, monitor, data.take), [], 0
    while True:
        x, y = data.next()
        loss = ctx.compute_grads(x, y)
        opt.step()
        iterations += 1
        if iterations % every == 0:
            board.announce(round_)
            if round_ >= board.last_round():
                break
            tuning.take(board.changes_due(round_, change_rounds), iterations)
            partner = matching(round_, n, spec.seed)[me]
            round_ += 1
            if partner >= 0:
                average_with(model, ranks[partner], mine, theirs,
                             protocols.sample_weights([data.size, data.sizes[partner]])[0])
                exchanges[partner] = exchanges.get(partner, 0) + 1
                ctx.staleness[iterations - last_averaged] += 1      # local steps this state drifted alone
                last_averaged = iterations
        if monitor:
            monitor.record_loss(loss)
            # Only right after an averaging round: the state the coordinator keeps (eval_period).
            if not stopping and iterations % every == 0 and monitor.check(model, iterations):
                board.call_stop()
                stopping = True                 # the run's model is the one judged, not the
                final, final_at = get_state(model, torch.empty(S)), iterations    # rounds after it
            if not stopping and iterations % every == 0:
                for called in range(called + 1, tuning.decide(iterations) + 1):
                    board.call_change(called)
    stats = disagreement(model, group)
    stats.update(rounds=round_, peers=len(exchanges), exchanges=sum(exchanges.values()))
    if monitor:
        set_state(model, final)
        return ctx.finish(monitor, opt, final_at, [final_at], stats=stats)
    return None


def average_with(model: torch.nn.Module, peer: int, mine: torch.Tensor, theirs: torch.Tensor,
                 share: float = 0.5) -> None:
    """Pull: each of a pair sends its state and takes the mean of both, its own weighted by
    `share` (its samples' share of the pair's: both reach the same mean)."""
    get_state(model, mine)
    reqs = [dist.isend(mine, dst=peer), dist.irecv(theirs, src=peer)]
    for r in reqs:
        r.wait()
    set_state(model, share * mine + (1 - share) * theirs)


def disagreement(model: torch.nn.Module, group) -> dict:
    """Relative spread of the workers' weights at the end: mean over workers of ||w_i − w̄|| / ||w̄||."""
    n = dist.get_world_size(group)
    w = get_params(model, torch.empty(num_params(model)))
    mean = w.clone()
    dist.all_reduce(mean, group=group)
    mean /= n
    spread = torch.tensor([float((w - mean).norm() / mean.norm().clamp_min(1e-12))])
    dist.all_reduce(spread, group=group)
    return {"disagreement": float(spread) / n}
