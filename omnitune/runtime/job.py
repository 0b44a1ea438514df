"""`omnitune run`: prepare the run dir, launch every process of the plan, read the summary."""

from __future__ import annotations

from pathlib import Path

from omnitune import plan as plan_mod
from omnitune.errors import UserError
from omnitune.runtime import launch as launch_mod
from omnitune.runtime.context import JobArgs
from omnitune.runtime.summary import RunSummary, load as load_summary


def prepare(plan_path: str, out_dir: str, max_time_s: float, eval_every_s: float,
            timeout_s: float) -> tuple[plan_mod.Plan, JobArgs]:
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
    run_dir.mkdir(parents=True, exist_ok=True)
    for stale in ("metrics.jsonl", "summary.json"):
        (run_dir / stale).unlink(missing_ok=True)
    job = JobArgs(plan_path=str(Path(plan_path).resolve()), run_dir=str(run_dir.resolve()),
                  max_time_s=max_time_s, eval_every_s=eval_every_s, timeout_s=timeout_s)
    return plan, job


def run(plan_path: str, out_dir: str, max_time_s: float = 300.0, eval_every_s: float = 0.02,
        timeout_s: float = 120.0) -> RunSummary:
    from omnitune.runtime.worker import main

    plan, job = prepare(plan_path, out_dir, max_time_s, eval_every_s, timeout_s)
    launch_mod.launch(main, (job,), plan.processes, Path(job.run_dir) / "logs",
                      rendezvous=plan.rendezvous)
    return load_summary(Path(job.run_dir) / "summary.json")
