"""`omnitune run`: prepare the run dir, launch every process of the plan, read the summary.

With re-planning, the run goes in segments (Omnivore's optimizer epochs): each segment ends at a
checkpoint, short probes from that checkpoint re-tune learning rate and momentum for the current
g (fewer groups when the best momentum is zero), and the next segment resumes with the new plan.
Each re-plan is a line of replans.jsonl in the run dir.
"""

from __future__ import annotations

import dataclasses
import hashlib
import shlex
import time
from pathlib import Path

import torch

from omnitune import plan as plan_mod, replan as replan_mod, workload as workload_mod
from omnitune.errors import UserError
from omnitune.files import append_jsonl
from omnitune.runtime import checkpoint, launch as launch_mod
from omnitune.runtime.context import JobArgs
from omnitune.runtime.summary import RunSummary, load as load_summary, save as save_summary
from omnitune.runtime.topology import nodes, roles

def prepare(plan_path: str, out_dir: str, max_time_s: float, eval_every_s: float, timeout_s: float,
            resume: bool = False, node_rank: int | None = None) -> tuple[plan_mod.Plan, JobArgs]:
    """Validate inputs and lay out this node's run dir; no process is started here.

    The coordinator's node keeps the run's files (metrics, checkpoint, summary); the other nodes'
    run dirs hold their processes' logs.
    """
    plan = plan_mod.load(plan_path)
    if max_time_s <= 0:
        raise UserError(f"--max-time-s must be positive, got {max_time_s}")
    if eval_every_s <= 0:
        raise UserError(f"--eval-every-s must be positive, got {eval_every_s}")
    everyone = nodes(plan)
    here = launch_mod.pick_node(everyone, plan.rendezvous, node_rank, plan_path)
    coordinator = here == launch_mod.coordinator(everyone)
    run_dir = Path(out_dir)
    resume_from = None
    if resume and coordinator:
        resume_from = str((run_dir / checkpoint.FILE).resolve())
        if not Path(resume_from).is_file():
            raise UserError(f"--resume: no {checkpoint.FILE} in {run_dir}")
    run_dir.mkdir(parents=True, exist_ok=True)
    if coordinator and not resume:      # a restart must not go on from an earlier run's checkpoint
        for stale in ("metrics.jsonl", "summary.json", "replans.jsonl", "restarts.jsonl", checkpoint.FILE):
            (run_dir / stale).unlink(missing_ok=True)
    job = JobArgs(plan_path=str(Path(plan_path).resolve()), run_dir=str(run_dir.resolve()),
                  max_time_s=max_time_s, eval_every_s=eval_every_s, timeout_s=timeout_s, resume_from=resume_from,
                  node=here.index, store_port=launch_mod.store_port(everyone, plan.rendezvous))
    return plan, job


def run(plan_path: str, out_dir: str, max_time_s: float = 300.0, eval_every_s: float = 0.02,
        timeout_s: float = 120.0, resume: bool = False, replan_every_s: float | None = None,
        replan_probe_iters: int = 30, checkpoint_every_s: float | None = None, max_restarts: int = 0,
        node_rank: int | None = None) -> RunSummary | None:
    """Run this node's processes of the plan; the coordinator's node returns the run's summary."""
    plan, job = prepare(plan_path, out_dir, max_time_s, eval_every_s, timeout_s, resume, node_rank)
    if checkpoint_every_s is not None and checkpoint_every_s <= 0:
        raise UserError(f"--checkpoint-every-s must be positive, got {checkpoint_every_s}")
    if max_restarts < 0:
        raise UserError(f"--max-restarts must be at least 0, got {max_restarts}")
    job = dataclasses.replace(job, checkpoint_every_s=checkpoint_every_s or float("inf"), max_restarts=max_restarts)
    if replan_every_s is None:
        return run_job(plan, job)
    if replan_every_s <= 0:
        raise UserError(f"--replan-every-s must be positive, got {replan_every_s}")
    if len(nodes(plan)) > 1:
        raise UserError("--replan-every-s: re-planning runs on one node only, and this plan has several")
    return run_with_replans(plan, job, replan_every_s, replan_probe_iters)


def node_commands(plan_path: str, options: list[str]) -> list[str]:
    """The `omnitune run` command of each node of the plan, each after a comment saying what runs there."""
    plan = plan_mod.load(plan_path)
    everyone = roles(plan)
    lines = []
    for n in nodes(plan):
        kinds = [everyone[r].device.id if everyone[r].device else "parameter server" for r in n.ranks]
        note = " (the coordinator: metrics, checkpoint and summary are written here)" if 0 in n.ranks else ""
        lines.append(f"# node {n.index} on {n.host}: {', '.join(kinds)}{note}")
        lines.append(shlex.join(["omnitune", "run", plan_path, "--node-rank", str(n.index), *options]))
    return lines


def run_job(plan: plan_mod.Plan, job: JobArgs) -> RunSummary | None:
    from omnitune.runtime.worker import main

    everyone = nodes(plan)
    here = next(n for n in everyone if n.index == job.node)
    coordinator = here == launch_mod.coordinator(everyone)
    # Every node must name the same rendezvous run: the plan's contents name it.
    run_id = hashlib.sha256(Path(job.plan_path).read_bytes()).hexdigest()[:12]
    try:
        launch_mod.launch_node(main, (job,), here, everyone, plan.rendezvous, Path(job.run_dir) / "logs", run_id,
                               job.max_restarts)
    except UserError as e:
        saved = Path(job.run_dir) / checkpoint.FILE
        if coordinator and saved.is_file():
            raise UserError(f"{e}; the checkpoint {saved} is intact: the same command with --resume goes on "
                            "from it") from None
        raise
    if not coordinator:
        return None
    return load_summary(Path(job.run_dir) / "summary.json")


def run_with_replans(plan: plan_mod.Plan, job: JobArgs, every_s: float, probe_iters: int) -> RunSummary:
    run_dir = Path(job.run_dir)
    train_s, replans, replan_s = _trained_s(job.resume_from), 0, 0.0
    while True:
        summary = run_job(plan, dataclasses.replace(job, stop_at_s=train_s + every_s))
        train_s = summary.wall_s - summary.eval_s
        if summary.reached_target or summary.wall_s >= job.max_time_s:
            break
        start = time.perf_counter()
        new_plan, record = replan(plan, run_dir / checkpoint.FILE, probe_iters)
        replans, replan_s = replans + 1, replan_s + time.perf_counter() - start
        record.update(iteration=summary.iterations, train_s=train_s, replan_s=time.perf_counter() - start)
        append_jsonl(run_dir / "replans.jsonl", record)
        plan_path = run_dir / f"plan-replan-{replans}.json"
        plan_mod.save(new_plan, plan_path)
        plan = new_plan
        job = dataclasses.replace(job, plan_path=str(plan_path), resume_from=str(run_dir / checkpoint.FILE))
    summary = dataclasses.replace(summary, replans=replans, replan_s=replan_s)
    save_summary(summary, run_dir / "summary.json")
    return summary


def replan(plan: plan_mod.Plan, checkpoint: Path, probe_iters: int) -> tuple[plan_mod.Plan, dict]:
    """Re-tune lr and momentum from the checkpoint with short probes at the current g."""
    from omnitune.probe import retune_scores

    wl = workload_mod.load(plan.workload)
    g = len(plan.groups)
    update_batch = sum(plan.batch_size[d] for d in plan.groups[0])
    grid = replan_mod.retune_grid(plan.lr, plan.momentum)
    scores = retune_scores(wl, plan.data_dir, str(checkpoint), update_batch, g, grid, probe_iters, plan.seed)
    new = replan_mod.retuned_plan(plan, scores)
    shape = lambda p: {"lr": p.lr, "momentum": p.momentum, "groups": len(p.groups), "protocol": p.protocol}
    return new, {"before": shape(plan), "after": shape(new),
                 "scores": [{"lr": lr, "momentum": m, "loss": s} for lr, m, s in scores]}


def _trained_s(checkpoint: str | None) -> float:
    if checkpoint is None:
        return 0.0
    return float(torch.load(checkpoint, map_location="cpu", weights_only=True)["train_s"])
