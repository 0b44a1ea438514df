"""The parameter server: applies each group's gradient as it arrives (asynchronously).

It owns the master weights and the momentum buffer (explicit momentum, torch's SGD). Every
message from a leader is [gradient | loss | batch | clock of the weights it used]; the server
steps, then answers [weights | stop | its clock]. Staleness = server clock − that clock.
"""

from __future__ import annotations

import math
import time

import torch
import torch.distributed as dist

from omnitune.runtime import checkpoint
from omnitune.runtime.context import Context
from omnitune.runtime.flat import get_params, num_params, set_grads
from omnitune.runtime.monitor import Monitor
from omnitune.runtime.summary import SCHEMA_VERSION, RunSummary, finite_or_none, save
from omnitune.runtime.topology import group_ranks


def apply_update(model: torch.nn.Module, opt: torch.optim.Optimizer, grad: torch.Tensor) -> None:
    """One server update: the received gradient through the optimizer (profiled as service time)."""
    set_grads(model, grad)
    opt.step()


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
    from omnitune.runtime.worker import new_monitor

    model = ctx.model
    P = num_params(model)
    opt = checkpoint.make_optimizer(model, ctx.plan.lr, ctx.plan.momentum, ctx.start)
    leaders = [r[0] for r in group_ranks(ctx.plan)]
    updates = {leader: 0 for leader in leaders}
    msg, reply = torch.zeros(P + 3), torch.zeros(P + 2)
    monitor = new_monitor(ctx, opt)
    clock, staleness_sum, stopping, done = 0, 0.0, False, set()
    live = Liveness(leaders, ctx.job.timeout_s)
    while len(done) < len(leaders):
        src = dist.recv(msg)                       # from whichever leader is ready first
        live.heard_from(src)
        if not stopping:
            apply_update(model, opt, msg[:P])
            staleness_sum += clock - float(msg[P + 2])
            clock += 1
            ctx.tick()
            updates[src] += 1
            monitor.record_loss(float(msg[P]))
            stopping = monitor.check(model, ctx.start.iteration + clock)
        if stopping:
            done.add(src)
            live.forget([src])
        send_weights(model, reply, stopping, clock, [src])
    return finish(ctx, monitor, opt, ctx.start.iteration + clock, [updates[leader] for leader in leaders],
                  mean_staleness=staleness_sum / max(clock, 1))


def send_weights(model: torch.nn.Module, reply: torch.Tensor, stopping: bool, clock: int, dsts) -> None:
    P = reply.numel() - 2
    get_params(model, reply[:P])
    reply[P], reply[P + 1] = float(stopping), clock
    for dst in dsts:
        dist.send(reply, dst=dst)


def serve_softsync(ctx: Context) -> dict:
    """Rudra's n-softsync: one update per ceil(learners / n) gradients, each scaled by 1/staleness.

    A gradient's staleness is the server clock minus the clock of the weights it was computed on
    (at least 1 in the divisor). n = 1 waits for every learner; n = learners updates on each one.
    """
    from omnitune.runtime.worker import new_monitor

    model, plan = ctx.model, ctx.plan
    P = num_params(model)
    opt = checkpoint.make_optimizer(model, plan.lr, plan.momentum, ctx.start)
    learners = [r[0] for r in group_ranks(plan)]
    per_update = math.ceil(len(learners) / plan.softsync_n)
    received = {r: 0 for r in learners}
    msg, reply, grad = torch.zeros(P + 3), torch.zeros(P + 2), torch.zeros(P)
    monitor = new_monitor(ctx, opt)
    clock, stopping, done, pending = 0, False, set(), []
    stale_sum, scale_sum = 0.0, 0.0
    live = Liveness(learners, ctx.job.timeout_s)
    while len(done) < len(learners):
        src = dist.recv(msg)
        live.heard_from(src)
        if stopping:
            send_weights(model, reply, True, clock, [src])
            done.add(src)
            live.forget([src])
            continue
        sigma = clock - float(msg[P + 2])
        scale = 1.0 / max(sigma, 1.0) if plan.scale_lr_by_staleness else 1.0
        grad.add_(msg[:P], alpha=scale / per_update)
        pending.append(src)
        received[src] += 1
        stale_sum, scale_sum = stale_sum + sigma, scale_sum + scale
        monitor.record_loss(float(msg[P]))
        if len(pending) < min(per_update, len(learners) - len(done)):
            continue
        apply_update(model, opt, grad)
        grad.zero_()
        clock += 1
        ctx.tick()
        stopping = monitor.check(model, ctx.start.iteration + clock)
        send_weights(model, reply, stopping, clock, pending)
        if stopping:
            done.update(pending)
            live.forget(pending)
        pending = []
    n_grads = max(sum(received.values()), 1)
    return finish(ctx, monitor, opt, ctx.start.iteration + clock, [received[r] for r in learners],
                  mean_staleness=stale_sum / n_grads,
                  stats={"gradients_per_update": per_update, "mean_lr_scale": scale_sum / n_grads})


def finish(ctx: Context, monitor: Monitor, opt, iterations: int, updates_per_group: list[int],
           mean_staleness: float, stats: dict[str, float] | None = None) -> dict:
    """Evaluate once more, then write the checkpoint and summary.json (the coordinator's job)."""
    if monitor.evaluations == 0 or monitor.time_to_target_s is None:
        monitor.evaluate(ctx.model, iterations)
    wall = monitor.elapsed()
    checkpoint.save(ctx.run_dir / checkpoint.FILE, ctx.model, opt, iterations, wall - monitor.eval_s)
    pred = ctx.plan.prediction
    summary = RunSummary(
        schema_version=SCHEMA_VERSION,
        reached_target=monitor.time_to_target_s is not None,
        time_to_target_s=monitor.time_to_target_s,
        wall_to_target_s=monitor.wall_to_target_s,
        iterations=iterations,
        final_accuracy=monitor.final_accuracy,
        target_accuracy=ctx.plan.target_accuracy,
        predicted_time_to_target_s=finite_or_none(pred.time_to_target_s),
        predicted_sec_per_iter=pred.sec_per_iter,
        measured_sec_per_iter=(wall - monitor.eval_s - ctx.start.train_s) / max(iterations - ctx.start.iteration, 1),
        wall_s=wall,
        eval_s=monitor.eval_s,
        plan=ctx.job.plan_path,
        protocol=ctx.plan.protocol,
        processes=ctx.plan.processes,
        updates_per_group=tuple(updates_per_group),
        mean_staleness=mean_staleness,
        evaluations=monitor.evaluations,
        protocol_stats=dict(stats or {}),
        restarts=ctx.job.attempt,
        checkpoints=monitor.checkpoints,
    )
    save(summary, ctx.run_dir / "summary.json")
    from omnitune.files import to_dict
    return to_dict(summary)
