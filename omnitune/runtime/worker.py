"""The workers' training loops for synchronous groups: `sync`, and the members of the groups that
update a parameter server (`groups`, `softsync`). Balanced batches are re-set inside a group once
per epoch (`rebalance`) and, across asynchronous groups, by the server (its reply carries the
group's new total; each member keeps its share of it).

Within a group, members compute their share of one minibatch and all-reduce the gradients
(weighted by their batch sizes, so unequal batches average correctly), and with them their
BatchNorm statistics. With `sync` every worker then steps its own replica; with a server the
leader sends the group's gradient to it and the group continues from the weights and
statistics it sends back (Omnivore §3).
"""

from __future__ import annotations

import torch
import torch.distributed as dist

from omnitune.core.change import Knobs
from omnitune.efficiency.tuner import Gradients
from omnitune.efficiency.balance import equal_time_batches, step_time_line
from omnitune.runtime.context import Context, buffer_device
from omnitune.runtime.flat import get_buffers, get_grads, num_buffers, num_params, set_buffers, set_grads, set_params
from omnitune.runtime.workload import batches


class Batches:
    """This worker's minibatches, re-balanced once per epoch when the variant is balanced."""

    def __init__(self, ctx: Context, group, iterations: int):
        spec = ctx.spec
        self.ctx, self.group = ctx, group
        self.size, self.stats = ctx.role.batch_size, {}
        # Counted the same way on every rank: they must all-reduce together.
        self.epoch = max(10, len(ctx.train) // sum(spec.batch_size.values()))
        self.on = spec.variant.balanced and len(ctx.role.group_ranks) > 1
        self.total = sum(spec.batch_size.values())       # every device's, as the knobs in force say
        self.first = iterations
        self.stream = self._stream(iterations)

    def _stream(self, iterations: int):
        # A resumed job draws a fresh data order rather than replaying the first epoch's.
        spec, role = self.ctx.spec, self.ctx.role
        return batches(self.ctx.train, self.size, spec.seed + iterations, role.shard, len(spec.devices))

    def resize(self, size: int, iterations: int) -> None:
        """Take another batch size from here on (the server re-balanced the groups)."""
        if size != self.size:
            self.size, self.stream = size, self._stream(iterations)

    def take(self, knobs: Knobs, iterations: int) -> None:
        """A change in place of the batches: this device's new one from the next step on (balanced
        batches keep their shares of the new total)."""
        total = sum(knobs.batch_size.values())
        size = round(self.size * total / self.total) if self.on else knobs.batch_size[self.ctx.role.device.id]
        self.total = total
        self.resize(max(1, size), iterations)

    def next(self, iterations: int) -> tuple[torch.Tensor, torch.Tensor]:
        if self.on and iterations > self.first and (iterations - self.first) % self.epoch == 0:
            self.size, self.stats = rebalance(self.ctx, self.group, self.size)
            self.stream = self._stream(iterations)
        return next(self.stream)


def train_sync(ctx: Context, group) -> dict | None:
    """One replica of `sync`: compute, all-reduce gradients and statistics, step. The coordinator's
    count of changes in place travels with the gradients, so every replica takes a change before
    the same step."""
    role, spec, model = ctx.role, ctx.spec, ctx.model
    P, B = num_params(model), num_buffers(model)
    # buf = [weighted gradient (P) | weighted BatchNorm statistics (B) | weighted loss | batch | stop flag
    #        | changes published | the replicas' squared gradient norms]
    buf = torch.zeros(P + B + 5, device=buffer_device(spec, role, ctx.device))
    opt = ctx.make_optimizer()
    monitor = ctx.new_monitor(opt) if role.coordinator else None
    alone = len(role.group_ranks) == 1
    stop, iterations = 0.0, ctx.start.iteration
    data = Batches(ctx, group, iterations)
    tuning = ctx.new_tuning(opt, monitor, data.take)
    while True:
        x, y = data.next(iterations)
        loss = ctx.compute_grads(x, y)
        iterations += 1
        published = tuning.published
        if not alone:
            b = float(len(y))
            get_grads(model, buf[:P])
            buf[P + B + 4] = buf[:P].dot(buf[:P])           # |g_i|^2: the gradient noise scale's small batch
            buf[:P].mul_(b)
            get_buffers(model, buf[P:P + B]).mul_(b)
            buf[P + B], buf[P + B + 1], buf[P + B + 2], buf[P + B + 3] = loss * b, b, stop, published
            dist.all_reduce(buf, group=group)
            buf[:P + B + 1].div_(buf[P + B + 1])
            set_grads(model, buf[:P])
            set_buffers(model, buf[P:P + B])
            loss, published = float(buf[P + B]), round(float(buf[P + B + 3]))
            if tuning.listening:
                k, total = len(role.group_ranks), float(buf[P + B + 1])
                tuning.noted.append(Gradients(iterations, float(buf[P + B + 4]) / k, float(buf[:P].dot(buf[:P])),
                                              total / k, total))
        tuning.take(published, iterations - 1)
        opt.step()
        ctx.staleness[0] += 1                      # every replica steps on the gradient of its own weights
        if not alone and buf[P + B + 2] > 0:
            break
        if monitor:
            monitor.record_loss(loss)
            stop = float(monitor.check(model, iterations))
            if alone and stop:
                break
            if not stop:                           # no change after the check that ends the run
                tuning.decide(iterations)
    if monitor:
        return ctx.finish(monitor, opt, iterations, [iterations], stats=data.stats)
    return None


def train_member(ctx: Context, group) -> dict | None:
    """A member of a group that updates a parameter server: compute, all-reduce in the group,
    and (the leader) exchange with the server."""
    role, spec, model = ctx.role, ctx.spec, ctx.model
    P, B = num_params(model), num_buffers(model)
    device = buffer_device(spec, role, ctx.device)
    # buf = [weighted gradient (P) | weighted change of BatchNorm statistics since the server's (B)
    #        | weighted loss | batch | clock of the weights used]
    buf = torch.zeros(P + B + 3, device=device)
    # [weights (P) | statistics (B) | stop flag | server clock | the group's total batch (0: unchanged)]
    reply = torch.zeros(P + B + 3, device=device)
    get_buffers(model, reply[P:P + B])               # the server starts from the same statistics
    iterations = ctx.start.iteration
    data = Batches(ctx, group, iterations)
    assigned = sum(spec.batch_size[d] for d in spec.groups[role.group])     # the group's total batch
    while True:
        x, y = data.next(iterations)
        loss = ctx.compute_grads(x, y)
        iterations += 1
        b = float(len(y))
        get_grads(model, buf[:P]).mul_(b)
        get_buffers(model, buf[P:P + B]).sub_(reply[P:P + B]).mul_(b)
        buf[P + B], buf[P + B + 1] = loss * b, b
        if len(role.group_ranks) > 1:
            dist.all_reduce(buf, group=group)
        buf[:P + B + 1].div_(buf[P + B + 1])
        if exchange_with_server(ctx, group, buf, reply, P, B):
            return None
        total = int(reply[P + B + 2])
        if total and total != assigned:             # the server re-balanced the groups: keep my share
            data.resize(max(1, round(data.size * total / float(buf[P + B + 1]))), iterations)
            assigned = total


def exchange_with_server(ctx: Context, group, buf: torch.Tensor, reply: torch.Tensor, P: int, B: int) -> bool:
    """The leader sends the group's gradient and gets fresh weights and statistics; the group
    shares them. Returns whether the server said to stop."""
    role = ctx.role
    if role.leader:
        buf[P + B + 2] = reply[P + B + 1]                # the clock of the weights we computed on
        dist.send(buf.cpu(), dst=0)
        answer = torch.empty(reply.numel())
        dist.recv(answer, src=0)
        reply.copy_(answer)
    if len(role.group_ranks) > 1:
        dist.broadcast(reply, src=role.group_ranks[0], group=group)
    set_params(ctx.model, reply[:P])
    set_buffers(ctx.model, reply[P:P + B])
    return bool(reply[P + B] > 0)


def rebalance(ctx: Context, group, batch: int) -> tuple[int, dict[str, float]]:
    """Performance-aware batch sizes (Ji et al. 2019): batches that make every member's step take
    the same time, keeping the group's total batch.

    Each member models its step time as t(b) = alpha + beta * b from the last two batch sizes it
    ran (at first, alpha = 0: time proportional to batch); balance.equal_time_batches solves.
    """
    ranks = ctx.role.group_ranks
    k, i = len(ranks), ranks.index(ctx.role.rank)
    recent = ctx.step_times[-20:]
    ctx.batch_times[batch] = sum(recent) / len(recent)
    alpha, beta = step_time_line(ctx.batch_times, batch)
    info = torch.zeros(3 * k, dtype=torch.float64)
    info[i], info[k + i], info[2 * k + i] = alpha, beta, batch
    dist.all_reduce(info, group=group)
    new = equal_time_batches(info[:k].tolist(), info[k:2 * k].tolist(), round(float(info[2 * k:].sum())))
    return new[i], {f"batch_rank{r}": float(b) for r, b in zip(ranks, new)}
