"""`omnitune run`: prepare the run dir, launch every process of the plan, read the summary.

With re-planning, the run goes in segments (Omnivore's optimizer epochs): each segment ends at a
checkpoint, short probes from that checkpoint re-tune learning rate and momentum for the current
g (fewer groups when the best momentum is zero), and the next segment resumes with the new plan.
Each re-plan is a line of replans.jsonl in the run dir.
"""

from __future__ import annotations

import dataclasses
import json
import time
from pathlib import Path

import torch

from omnitune import plan as plan_mod, replan as replan_mod, workload as workload_mod
from omnitune.errors import UserError
from omnitune.runtime import launch as launch_mod
from omnitune.runtime.context import JobArgs
from omnitune.runtime.summary import RunSummary, load as load_summary, save as save_summary

CHECKPOINT = "checkpoint.pt"


def prepare(plan_path: str, out_dir: str, max_time_s: float, eval_every_s: float, timeout_s: float,
            resume: bool = False) -> tuple[plan_mod.Plan, JobArgs]:
    """Validate inputs and lay out the run dir; no process is started here."""
    plan = plan_mod.load(plan_path)
    if max_time_s <= 0:
        raise UserError(f"--max-time-s must be positive, got {max_time_s}")
    if eval_every_s <= 0:
        raise UserError(f"--eval-every-s must be positive, got {eval_every_s}")
    hosts = {d.host for d in plan.devices} | {plan.server_host}
    if hosts - {"127.0.0.1", "localhost"}:
        raise UserError(f"{plan_path}: devices on other hosts {sorted(hosts)}: multi-host runs "
                        "are not supported yet (see README, 'Several machines')")
    run_dir = Path(out_dir)
    resume_from = None
    if resume:
        resume_from = str((run_dir / CHECKPOINT).resolve())
        if not Path(resume_from).is_file():
            raise UserError(f"--resume: no {CHECKPOINT} in {run_dir}")
    run_dir.mkdir(parents=True, exist_ok=True)
    if not resume:
        for stale in ("metrics.jsonl", "summary.json", "replans.jsonl"):
            (run_dir / stale).unlink(missing_ok=True)
    job = JobArgs(plan_path=str(Path(plan_path).resolve()), run_dir=str(run_dir.resolve()),
                  max_time_s=max_time_s, eval_every_s=eval_every_s, timeout_s=timeout_s, resume_from=resume_from)
    return plan, job


def run(plan_path: str, out_dir: str, max_time_s: float = 300.0, eval_every_s: float = 0.02,
        timeout_s: float = 120.0, resume: bool = False, replan_every_s: float | None = None,
        replan_probe_iters: int = 30, checkpoint_every_s: float | None = None, max_restarts: int = 0) -> RunSummary:
    plan, job = prepare(plan_path, out_dir, max_time_s, eval_every_s, timeout_s, resume)
    if checkpoint_every_s is not None and checkpoint_every_s <= 0:
        raise UserError(f"--checkpoint-every-s must be positive, got {checkpoint_every_s}")
    if max_restarts < 0:
        raise UserError(f"--max-restarts must be at least 0, got {max_restarts}")
    job = dataclasses.replace(job, checkpoint_every_s=checkpoint_every_s or float("inf"), max_restarts=max_restarts)
    if replan_every_s is None:
        return run_job(plan, job)
    if replan_every_s <= 0:
        raise UserError(f"--replan-every-s must be positive, got {replan_every_s}")
    return run_with_replans(plan, job, replan_every_s, replan_probe_iters)


def run_job(plan: plan_mod.Plan, job: JobArgs) -> RunSummary:
    from omnitune.runtime.worker import main

    launch_mod.launch(main, (job,), plan.processes, Path(job.run_dir) / "logs", rendezvous=plan.rendezvous,
                      max_restarts=job.max_restarts)
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
        new_plan, record = replan(plan, run_dir / CHECKPOINT, probe_iters)
        replans, replan_s = replans + 1, replan_s + time.perf_counter() - start
        record.update(iteration=summary.iterations, train_s=train_s, replan_s=time.perf_counter() - start)
        with open(run_dir / "replans.jsonl", "a") as f:
            f.write(json.dumps(record) + "\n")
        plan_path = run_dir / f"plan-replan-{replans}.json"
        plan_mod.save(new_plan, plan_path)
        plan = new_plan
        job = dataclasses.replace(job, plan_path=str(plan_path), resume_from=str(run_dir / CHECKPOINT))
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
