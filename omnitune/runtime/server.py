"""The parameter server of `groups` (Omnivore) and `softsync` (Rudra): the master copy of the
model, updated as gradients arrive.

Every message from a leader is [gradient | change of BatchNorm statistics | loss | batch | clock
of the weights it used]; the server answers [weights | statistics | stop | its clock | the group's
batch]. The arithmetic lives in `ParameterServer`, which a test drives in-process; `serve` only
moves messages. With balanced batches, `serve` also times each group between its gradients and
re-sets the groups' total batches so that each takes as long (balance.GroupBalancer, Ji et al.);
the answer's last entry carries the group's new total (0: unchanged).
"""

from __future__ import annotations

import time
from collections import Counter

import torch
import torch.distributed as dist

from omnitune.core.protocols import Variant
from omnitune.efficiency.balance import GroupBalancer
from omnitune.runtime.context import Context
from omnitune.runtime.flat import get_buffers, get_params, num_buffers, num_params, set_buffers, set_grads
from omnitune.runtime.optim import Update
from omnitune.runtime.topology import group_ranks


REBALANCE_EVERY = 10      # balanced groups: re-set their batches every this many gradients per group


class ParameterServer:
    """Weights, momentum and BatchNorm statistics, updated once per `gradients_per_update`
    gradients of the variant (1 for Omnivore's groups; ceil(learners / n) for Rudra's n-softsync).

    A gradient's staleness sigma is the server's clock minus the clock of the weights it was
    computed on. Each update applies
        v <- mu v + (1/k) sum_i s_i g_i;   w <- w - lr v          (k gradients, s_i its scale)
    with s_i = 1 / max(sigma_i, 1) when the variant scales by staleness (Rudra), else 1; and adds
    the mean of the k groups' changes of the BatchNorm statistics to the server's.
    """

    def __init__(self, model: torch.nn.Module, opt: Update, variant: Variant):
        self.model, self.opt = model, opt
        self.P, self.B = num_params(model), num_buffers(model)
        self.per_update = variant.gradients_per_update
        self.scaled = variant.scales_lr_by_staleness
        self.grad, self.stats = torch.zeros(self.P), torch.zeros(self.B)
        self.clock = 0
        self.pending: list[int] = []           # who sent the gradients of the update being gathered
        self.staleness: Counter = Counter()
        self.scale_sum = 0.0

    def receive(self, msg: torch.Tensor, src: int) -> None:
        P, B = self.P, self.B
        sigma = self.clock - int(msg[P + B + 2])
        scale = 1.0 / max(sigma, 1) if self.scaled else 1.0
        self.grad.add_(msg[:P], alpha=scale / self.per_update)
        self.stats.add_(msg[P:P + B], alpha=1.0 / self.per_update)
        self.pending.append(src)
        self.staleness[sigma] += 1
        self.scale_sum += scale

    def ready(self, senders_left: int) -> bool:
        """Whether enough gradients are in: all of an update's, or every sender still sending."""
        return len(self.pending) >= min(self.per_update, senders_left)

    def update(self) -> list[int]:
        """Apply the gathered gradients; return who sent them (they wait for the new weights)."""
        set_grads(self.model, self.grad)
        self.opt.step()
        if self.B:
            set_buffers(self.model, get_buffers(self.model, torch.empty(self.B)) + self.stats)
        self.grad.zero_()
        self.stats.zero_()
        self.clock += 1
        waiting, self.pending = self.pending, []
        return waiting

    def reply(self, out: torch.Tensor, stopping: bool) -> torch.Tensor:
        """[weights | statistics | stop | clock]."""
        get_params(self.model, out[:self.P])
        get_buffers(self.model, out[self.P:self.P + self.B])
        out[-2], out[-1] = float(stopping), self.clock
        return out


class Liveness:
    """Ends the job when a leader has sent nothing for `timeout_s` while others kept sending: an
    asynchronous server would otherwise train on without it, never noticing it had gone."""

    def __init__(self, ranks: list[int], timeout_s: float, clock=time.monotonic):
        self.timeout_s, self.clock = timeout_s, clock
        self.heard = dict.fromkeys(ranks, clock())

    def heard_from(self, rank: int) -> None:
        now = self.clock()
        self.heard[rank] = now
        silent = [r for r, t in self.heard.items() if now - t > self.timeout_s]
        if silent:
            raise RuntimeError(f"timed out: rank(s) {silent} sent nothing for {self.timeout_s:g} s while the "
                               "others kept training")

    def forget(self, ranks) -> None:
        """These stop sending now, by design."""
        for r in ranks:
            self.heard.pop(r, None)


def serve(ctx: Context) -> dict:
    """Apply gradients in arrival order until the monitor says stop, then tell every leader. The
    server is the coordinator and owns the update: a change in place of the rate or momentum
    applies to its next update; one of the batch goes to each group with its next reply, as the
    group's new total."""
    model, spec = ctx.model, ctx.spec
    opt = ctx.make_optimizer()
    ps = ParameterServer(model, opt, spec.variant)
    leaders = [r[0] for r in group_ranks(spec)]
    received = dict.fromkeys(leaders, 0)
    totals = GroupTotals({r: sum(spec.batch_size[d] for d in g) for r, g in zip(leaders, spec.groups)},
                         spec.variant.balanced and len(leaders) > 1)
    msg, reply = torch.zeros(ps.P + ps.B + 3), torch.zeros(ps.P + ps.B + 3)
    monitor = ctx.new_monitor(opt)
    tuning = ctx.new_tuning(opt, monitor, totals.take)
    stopping, done = False, set()
    live = Liveness(leaders, ctx.job.timeout_s)
    while len(done) < len(leaders):
        src = dist.recv(msg)                       # from whichever leader is ready first
        live.heard_from(src)
        if stopping:
            ps.reply(reply[:-1], True)
            reply[-1] = 0
            dist.send(reply, dst=src)
            done.add(src)
            live.forget([src])
            continue
        ps.receive(msg, src)
        received[src] += 1
        totals.heard(src, round(float(msg[ps.P + ps.B + 1])), sum(received.values()))
        monitor.record_loss(float(msg[ps.P + ps.B]))
        if not ps.ready(len(leaders) - len(done)):
            continue
        waiting = ps.update()
        ctx.tick()
        iteration = ctx.start.iteration + ps.clock
        stopping = monitor.check(model, iteration)
        if not stopping:                       # no change after the check that ends the run
            tuning.take(tuning.decide(iteration), iteration)
        ps.reply(reply[:-1], stopping)
        for dst in waiting:
            reply[-1] = totals.of(dst)
            dist.send(reply, dst=dst)
        if stopping:
            done.update(waiting)
            live.forget(waiting)
    ctx.staleness.update(ps.staleness)
    gradients = max(sum(received.values()), 1)
    stats = {"gradients_per_update": ps.per_update, "mean_lr_scale": ps.scale_sum / gradients}
    if totals.balancer:
        stats.update({f"batch_group{i}": float(totals.of(r)) for i, r in enumerate(leaders)})
    return ctx.finish(monitor, opt, ctx.start.iteration + ps.clock, [received[r] for r in leaders], stats=stats)


class GroupTotals:
    """Each group's total batch, as the server's replies carry it (0: unchanged): re-set by the
    balancer (balanced groups, Ji et al.) and by changes in place of the batch."""

    def __init__(self, totals: dict[int, int], balanced: bool):
        self.balancer = GroupBalancer(totals, REBALANCE_EVERY * len(totals)) if balanced else None
        self.totals, self.total = dict(totals), sum(totals.values())   # the total as the knobs say
        self.changed = False             # a change in place re-set them: every reply says so

    def heard(self, group: int, batch: int, gradients: int) -> None:
        if self.balancer:
            self.balancer.heard(group, batch, time.monotonic())
            if gradients % self.balancer.period == 0:
                self.totals = dict(self.balancer.rebalance())

    def take(self, knobs, iteration: int) -> None:
        """A change in place of the batch: every group's total scaled alike."""
        total = sum(knobs.batch_size.values())
        self.totals = {g: max(1, round(b * total / self.total)) for g, b in self.totals.items()}
        self.total = total
        self.changed = True
        if self.balancer:
            self.balancer.totals = dict(self.totals)

    def of(self, group: int) -> int:
        """What the reply to `group` says of its total (0: nothing new)."""
        return self.totals[group] if self.balancer or self.changed else 0
