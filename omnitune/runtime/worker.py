"""The entry point of every process of a run, and the workers' training loops.

Within a compute group, members compute their share of one minibatch and all-reduce the
gradients (weighted by their batch sizes, so unequal batches average correctly). With `sync`
every worker then steps its own replica; with `groups` the leader sends the group's gradient to
the parameter server and the group continues from the weights it sends back (Omnivore §3).
"""

from __future__ import annotations

import dataclasses
import time
from datetime import timedelta
from pathlib import Path

import torch
import torch.distributed as dist

from omnitune import env, plan as plan_mod, workload as workload_mod
from omnitune.files import append_jsonl
from omnitune.runtime import checkpoint
from omnitune.runtime.context import Context, JobArgs, backend, buffer_device, emulate_slowdown, torch_device
from omnitune.runtime.flat import get_grads, num_params, set_grads, set_params
from omnitune.runtime.monitor import Monitor
from omnitune.runtime.launch import join
from omnitune.runtime.topology import group_ranks, nodes, roles
from omnitune.plan import Plan
from omnitune.runtime.balance import equal_time_batches, step_time_line
from omnitune.workload import Workload, batches


def main(job: JobArgs) -> dict | None:
    """Run this process's role; the coordinator returns the run summary as a dict."""
    plan = plan_mod.load(job.plan_path)
    rank, store = join(nodes(plan), job.node, job.store_port, job.timeout_s, backend(plan))
    try:
        job = dataclasses.replace(job, attempt=agreed_attempt())
        latest = Path(job.run_dir) / checkpoint.FILE
        if job.attempt > 0 and rank == 0 and latest.is_file():   # restarted by torchelastic: go on from there
            job = dataclasses.replace(job, resume_from=str(latest))
        wl = workload_mod.load(plan.workload)
        train, test = wl.build_datasets(plan.data_dir, plan.seed)
        return run_role(job, plan, wl, train, test, store)
    finally:
        dist.destroy_process_group()


def agreed_attempt() -> int:
    """Which start of the job this is. torchelastic counts restarts per node, and a node restarted
    only because another failed does not count one, so take the largest count of any process."""
    count = torch.tensor([env.restart_count()])
    dist.all_reduce(count, op=dist.ReduceOp.MAX)
    return int(count)


def run_role(job: JobArgs, plan: Plan, wl: Workload, train, test, store: dist.Store) -> dict | None:
    """This rank's part of one job, in an initialised process group; ranks the plan leaves out idle.

    Only the coordinator reads the checkpoint to start from (its host alone has the run dir's);
    every rank gets it from there. The profiler calls this too, to time real jobs back to back
    in one set of processes.
    """
    # Every rank creates every group, in the same order (a torch.distributed requirement). A group
    # does not inherit the default group's timeout: without one, a stuck peer stalls it for 30 min.
    timeout = timedelta(seconds=job.timeout_s)
    pgs = [dist.new_group(list(r), timeout=timeout) for r in group_ranks(plan)]
    everyone = roles(plan)
    rank = dist.get_rank()
    state = checkpoint.shared(job.resume_from if rank == 0 else None)
    if rank >= len(everyone):
        dist.barrier()
        return None
    role = everyone[rank]
    device = torch_device(role.device)
    torch.manual_seed(plan.seed)                # identical initial weights on every rank
    model = wl.build_model().to(device)
    start = checkpoint.load(state, model, job.resume_from or "the coordinator's checkpoint")
    torch.manual_seed(plan.seed + role.rank + start.iteration)
    ctx = Context(job, plan, role, device, wl, model, train, test, store, start)
    dist.barrier()
    if role.kind == "server":
        from omnitune.runtime.server import serve, serve_softsync
        return serve_softsync(ctx) if plan.protocol == "softsync" else serve(ctx)
    if plan.protocol in ("hpsgd", "gossip"):
        from omnitune.runtime import peer
        return (peer.train_hpsgd if plan.protocol == "hpsgd" else peer.train_gossip)(ctx, pgs[role.group])
    return train_worker(ctx, pgs[role.group])


def new_monitor(ctx: Context, opt: torch.optim.Optimizer) -> Monitor:
    """The coordinator's monitor; it also writes a checkpoint every `checkpoint_every_s`."""
    monitor = Monitor(ctx.workload, ctx.test, ctx.plan.target_accuracy, min(ctx.job.max_time_s, ctx.job.stop_at_s),
                      ctx.job.eval_every_s, ctx.run_dir / "metrics.jsonl",
                      checkpoint_every_s=ctx.job.checkpoint_every_s, attempt=ctx.job.attempt)
    monitor.start -= ctx.start.train_s          # the clock goes on from the checkpoint
    if ctx.job.attempt > 0:
        append_jsonl(ctx.run_dir / "restarts.jsonl", {"attempt": ctx.job.attempt, "time": round(time.time(), 3),
                                                      "iteration": ctx.start.iteration, "train_s": ctx.start.train_s})
    if ctx.job.checkpoint_every_s < float("inf"):
        path = ctx.run_dir / checkpoint.FILE
        monitor.saver = lambda it, train_s: checkpoint.save(path, ctx.model, opt, it, train_s)
    return monitor


def compute_grads(ctx: Context, x: torch.Tensor, y: torch.Tensor) -> float:
    started = time.perf_counter()
    ctx.model.zero_grad(set_to_none=False)
    loss = ctx.workload.loss_fn(ctx.model(x.to(ctx.device)), y.to(ctx.device))
    loss.backward()
    value = float(loss.detach())
    emulate_slowdown(ctx.role.device, started)
    ctx.step_times.append(time.perf_counter() - started)
    ctx.tick()
    return value


def train_worker(ctx: Context, group) -> dict | None:
    """One worker: compute, all-reduce in the group, then step (sync) or ask the server (groups)."""
    role, plan, model = ctx.role, ctx.plan, ctx.model
    P = num_params(model)
    # buf = [weighted gradient (P) | weighted loss | batch size | stop flag]
    buf = torch.zeros(P + 3, device=buffer_device(plan, role, ctx.device))
    reply = torch.zeros(P + 2, device=buf.device)      # [weights (P) | stop flag | server clock]
    opt = checkpoint.make_optimizer(model, plan.lr, plan.momentum, ctx.start)
    monitor = new_monitor(ctx, opt) if role.coordinator else None
    stop, iterations = 0.0, ctx.start.iteration
    n_workers = len(plan.devices)
    batch = role.batch_size
    # A resumed job draws a fresh data order rather than replaying the first epoch's.
    stream = batches(ctx.train, batch, plan.seed + iterations, role.shard, n_workers)
    # Re-balance once per epoch, counted the same way on every rank (they must all-reduce together).
    epoch = max(10, len(ctx.train) // sum(plan.batch_size.values()))
    balance: dict[str, float] = {}
    while True:
        if plan.rebalance and len(role.group_ranks) > 1 and iterations > ctx.start.iteration \
                and (iterations - ctx.start.iteration) % epoch == 0:
            batch, balance = rebalance(ctx, group, batch)
            stream = batches(ctx.train, batch, plan.seed + iterations, role.shard, n_workers)
        x, y = next(stream)
        loss = compute_grads(ctx, x, y)
        iterations += 1
        if n_workers == 1 and not plan.server:      # a single replica: nothing to average
            opt.step()
            monitor.record_loss(loss)
            if monitor.check(model, iterations):
                break
            continue
        b = float(len(y))
        get_grads(model, buf[:P]).mul_(b)
        buf[P], buf[P + 1], buf[P + 2] = loss * b, b, stop
        if len(role.group_ranks) > 1:
            dist.all_reduce(buf, group=group)
        buf[:P + 1].div_(buf[P + 1])
        if plan.server:
            if exchange_with_server(ctx, group, buf, reply, P):
                break
            continue
        set_grads(model, buf[:P])
        opt.step()
        if buf[P + 2] > 0:
            break
        if monitor:
            monitor.record_loss(float(buf[P]))
            stop = float(monitor.check(model, iterations))
    if monitor:
        from omnitune.runtime.server import finish
        return finish(ctx, monitor, opt, iterations, [iterations], mean_staleness=0.0, stats=balance)
    return None


def exchange_with_server(ctx: Context, group, buf: torch.Tensor, reply: torch.Tensor, P: int) -> bool:
    """The leader sends the group's gradient and gets fresh weights; the group shares them.

    Returns whether the server said to stop.
    """
    role = ctx.role
    if role.leader:
        buf[P + 2] = reply[P + 1]                        # the clock of the weights we computed on
        dist.send(buf.cpu(), dst=0)
        answer = torch.empty(reply.numel())
        dist.recv(answer, src=0)
        reply.copy_(answer)
    if len(role.group_ranks) > 1:
        dist.broadcast(reply, src=role.group_ranks[0], group=group)
    set_params(ctx.model, reply[:P])
    return bool(reply[P] > 0)


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
