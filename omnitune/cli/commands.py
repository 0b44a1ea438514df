"""The `omnitune` command: profile → plan → run. Each command loads, calls one core function, writes."""

from __future__ import annotations

import collections
import contextlib
import json
import os
import sys
import threading
import time
from pathlib import Path
from typing import Optional

import typer
from rich.console import Console
from rich.table import Table

import omnitune.runtime.quick_exit  # noqa: F401  (a command ends without its last collections)
from omnitune.core.errors import UserError

app = typer.Typer(add_completion=False, no_args_is_help=True,
                  help="Find the fastest way to train a model on your CPUs and GPUs, then run it.")
# Wide enough for the candidates table when output is piped (rich assumes 80 columns).
console = Console(stderr=True)
out = Console(width=None if sys.stdout.isatty() else 150)


def _fail(e: Exception) -> None:
    from rich.markup import escape
    # Messages quote torch's, which hold "[/path/file.cc:78]": text, not markup.
    console.print(f"[red]error:[/red] {escape(str(e))}", highlight=False, soft_wrap=True)
    raise typer.Exit(2)


def _version(value: bool) -> None:
    if value:
        from importlib.metadata import version
        print(f"omnitune {version('omnitune')}")
        raise typer.Exit()


@app.callback()
def _options(
    _: bool = typer.Option(False, "--version", callback=_version, is_eager=True,
                           help="print omnitune's version and exit"),
):
    pass


@app.command()
def profile(
    workload: str = typer.Option(..., help="NAME: ./models/NAME.py, else the bundled workload NAME; or a path "
                                 "to a workload file"),
    out_path: Path = typer.Option(..., "--out", help="where to write the profile JSON"),
    cluster: Optional[Path] = typer.Option(None, help="cluster spec (YAML or JSON); default: this machine"),
    data_dir: Optional[str] = typer.Option(None, help="local data for workloads that read files"),
    quick: bool = typer.Option(False, help="a cheaper profile: fewer repeats, batches up to 64 and shorter "
                               "calibration jobs (still every one `plan` needs)"),
    max_batch: Optional[int] = typer.Option(None, help="largest batch size to try (default 512, quick 64); a GPU "
                                            "goes on doubling past it while its throughput rises"),
    node_rank: Optional[int] = typer.Option(None, help="which node of the cluster spec this is, for a spec "
                                            "of several nodes: run the same command on each"),
):
    """Measure each device's training throughput and the links between devices."""
    from omnitune.runtime import launch
    launch.start_server()        # its imports overlap this process's own; the profiler waits before timing
    import omnitune.api as api
    from omnitune.core.cluster import load_cluster, local_cluster
    try:
        with _profiling() as progress:
            prof = api.profile(workload, out_path, cluster, data_dir, quick, max_batch, node_rank, progress=progress)
    except UserError as e:
        _fail(e)
    if prof is None:
        spec = load_cluster(cluster) if cluster else local_cluster()
        out.print(f"node {node_rank}: measured; node {spec.server_node}, the server's, writes the profile")
        return
    _render_profile(prof, out_path)


@contextlib.contextmanager
def _profiling():
    """The profiler's progress on the status line: `profile`'s and `train`'s."""
    with console.status("profiling…") as status:
        yield lambda m: status.update(f"profiling: {m}")


def _render_profile(prof, out_path: Path) -> None:
    table = Table(title=f"{prof.workload}: {prof.model_params:,} parameters")
    for col in ("device", "threads", "batch 1 (samples/s)", "best (samples/s)", "at batch", "gain"):
        table.add_column(col, justify="right")
    for dp in prof.devices:
        dev, one, best = prof.cluster.device(dp.device_id), dp.steps[0], dp.best
        table.add_row(dp.device_id, str(dev.threads) if dev.kind == "cpu" else dev.kind,
                      f"{one.samples_per_s:,.0f}", f"{best.samples_per_s:,.0f}", str(best.batch_size),
                      f"{best.samples_per_s / one.samples_per_s:.1f}×")
    out.print(table)
    if prof.network:
        ar = max(prof.network.allreduce, key=lambda a: a.bytes)
        out.print(f"all-reduce {ar.bytes:,} B among {ar.group_size}: {ar.seconds * 1e3:.2f} ms; "
                  f"server update {prof.network.server_update_s * 1e3:.2f} ms")
    out.print(f"wrote {out_path}")


@app.command()
def plan(
    profile_path: Optional[Path] = typer.Option(None, "--profile", help="a profile written by `omnitune profile`"),
    cluster: Optional[Path] = typer.Option(None, help="instead of --profile: a cluster of node types and counts "
                                           "(node_types), each with a profile of one node; planned by simulation"),
    workload: str = typer.Option(..., help="the workload to plan for (the profile's, normally)"),
    target_accuracy: Optional[float] = typer.Option(None, help="test accuracy to reach, in (0, 1]"),
    target_loss: Optional[float] = typer.Option(None, help="instead: a test loss to get under (the workload's "
                                                "loss_fn, e.g. nats per character)"),
    out_path: Path = typer.Option(..., "--out", help="where to write the plan JSON"),
    data_dir: Optional[str] = typer.Option(None),
    protocol: Optional[str] = typer.Option(None, help="pin the protocol: sync, groups, softsync, hpsgd or gossip"),
    groups: Optional[int] = typer.Option(None, help="pin the number of compute groups"),
    batch_size: Optional[int] = typer.Option(None, help="pin the batch size per device"),
    lr: Optional[float] = typer.Option(None, help="pin the learning rate"),
    momentum: Optional[float] = typer.Option(None, help="pin the explicit momentum"),
    weight_decay: Optional[float] = typer.Option(None, help="pin the weight decay (default: the recipe's, "
                                                 "compared with a decade either side of it where it has one and probes can predict a time)"),
    seed: int = typer.Option(0),
    probe_iters: int = typer.Option(100_000, help="most iterations one probe may train"),
    budget_s: Optional[float] = typer.Option(None, help="most seconds to spend on probes (default: sized to "
                                             "the job, about 10% of its predicted training time)"),
    predict_s: float = typer.Option(0.0, help="then probe the chosen configuration this many seconds more, to "
                                    "predict its time to target where the search could not (long jobs)"),
    hardware_model: str = typer.Option("analytic", help="seconds per iteration from the analytic model calibrated "
                                       "on the profile's jobs (analytic), or from the simulator (simulated); "
                                       "--cluster always simulates"),
    time_finalists: bool = typer.Option(True, help="time a leader whose speed no calibration job measured with a "
                                        "short real job before it may win (only on the profiled machine)"),
):
    """Predict time to target for each configuration and write the fastest as a plan."""
    from omnitune.planning.request import PlanRequest
    try:
        request = PlanRequest(workload, target_accuracy, profile_path, cluster, out_path, data_dir, protocol, groups,
                              batch_size, lr, momentum, seed, probe_iters, budget_s, predict_s, hardware_model,
                              time_finalists, target_loss, weight_decay)
        result = _planned(request)
    except (ValueError, UserError) as e:
        _fail(UserError(str(e)))
    _render_plan(result, out_path)


def _planned(request):
    """`plan`'s search, with its progress on the status line."""
    import omnitune.api as api
    with _planning() as (progress, notice):
        return api.plan(request, progress, notice)


@contextlib.contextmanager
def _planning():
    """The search's progress on the status line, and what the user should know printed above
    it: `plan`'s and `train`'s."""
    with console.status("planning…") as status:
        yield (lambda m: status.update(f"planning: {m}")), (lambda m: console.print(m, highlight=False))


def _render_plan(result, out_path: Path) -> None:
    out.print(_candidates_table(result))
    out.print(_chosen(result))
    for device, why in result.idle.items():
        out.print(f"idle: {device} ({why})")
    out.print(_hardware_source(result))
    spent = result.planning
    scope = "full search" if spent.full else "quick search: the job is too small for a full one"
    out.print(f"planning took {spent.seconds:.1f}s for {spent.probes} probes ({scope}; budget {spent.budget_s:.1f}s: "
              f"{spent.reason})")
    if result.start:
        out.print(f"the run starts where the chosen configuration's probe stopped ({result.start}: "
                  f"{spent.handed_on_iters} iterations, {spent.handed_on_s:.1f}s of training, which the run's clock "
                  f"counts): planning's own cost {spent.spent_s:.1f}s")
    out.print(f"wrote {out_path}")


def _chosen(result) -> str:
    """What the plan chose, and why: its predicted time, or the criterion that chose it where no
    time could be predicted."""
    from omnitune.planning.ranking import RANKED_BY_LOSS
    p, spec = result.prediction, result.spec
    chose = (f"chose {spec.variant.label} on layout {result.layout} with {len(spec.groups)} group(s), "
             f"{_batches(spec.batch_size)}, lr {spec.lr}, momentum {spec.momentum} "
             f"(implicit {result.implicit_momentum:.2f})"
             + ("" if spec.weight_decay is None else f", weight decay {spec.weight_decay:g}"))
    if result.planning and result.planning.ranked_by == RANKED_BY_LOSS:
        return _chosen_by_loss(result, chose)
    if p.time_to_target_s is None:
        return (f"{chose}: no probe could predict the time to target, so this is the configuration whose "
                f"probe reached the highest accuracy ({p.curve[-1][1]:.3f}); {p.sec_per_iter * 1e3:.2f} ms per "
                "iteration. A larger --budget-s runs longer probes.")
    return (f"{chose}: predicted {p.time_to_target_s:.2f}s = {_iters(result.candidates[0])} iterations × "
            f"{p.sec_per_iter * 1e3:.2f} ms")


def _chosen_by_loss(result, chose: str) -> str:
    """`_chosen` where the probes ranked by loss: no scout could predict a time to target."""
    from omnitune.planning import budget
    from omnitune.planning.ranking import LOSS_TIE
    p, spent = result.prediction, result.planning
    when = ("no probe could predict its time to target (--predict-s 30 probes it longer to)"
            if p.time_to_target_s is None else
            f"predicted {p.time_to_target_s:.2f}s = {_iters(result.candidates[0])} iterations × "
            f"{p.sec_per_iter * 1e3:.2f} ms")
    if spent.blind:
        lead = ("the lowest loss after the final round leads" if spent.finalists else
                "within the leading setup the largest learning rate whose probe's loss fell below it at all "
                "leads (a run at too high a rate stalls or diverges, which re-tunes it; at too low a rate it "
                "only goes slowly)")
        return (f"{chose}: a guess. No scout could predict the time to target, and no probe's training loss "
                f"fell {budget.RULES.learned:.0%} below {spent.label_loss:.3f}, the loss of "
                "predicting the training labels' frequencies: the probes had learned little from the inputs "
                f"and their losses rank little; {lead}. The run re-tunes as it learns (unless --no-retune), "
                f"and a larger --budget-s probes for longer; {when}")
    final = (f"; the best of the {spent.finalists} best setups then trained on to "
             f"up to {budget.RULES.final_growth:g}× as long (within the budget), and the lowest loss there won"
             if spent.finalists else "")
    return (f"{chose}: no scout could predict the time to target, so this is the configuration with the "
            f"lowest training loss after equal training time (Omnivore's criterion; losses within "
            f"{LOSS_TIE:.0%} of the lowest tie, and the tie goes to the larger learning "
            f"rate per sample{final}); {when}")


def _hardware_source(result) -> str:
    """Where the plan's seconds per iteration come from."""
    from omnitune.core import plan as plan_mod
    p = result.prediction
    if result.simulated_cluster:
        nodes = len({d.node for d in result.spec.devices})
        return (f"simulated plan for {result.simulated_cluster} ({nodes} nodes): seconds per iteration and "
                "staleness come from the simulator; `omnitune run` needs real nodes and refuses this plan")
    if result.hardware_model == plan_mod.MEASURED:
        return (f"seconds per iteration from a short real job of this configuration ({p.sec_per_iter * 1e3:.2f} ms; "
                f"the model, with no calibration job of its shape, said {p.model_sec_per_iter * 1e3:.2f})")
    if result.hardware_model == plan_mod.SIMULATED:
        return ("seconds per iteration from the simulator, run on the profile's measurements (no calibration "
                "job timed this configuration, or --hardware-model simulated)")
    return "seconds per iteration from the analytic model, calibrated on the profile's real jobs"


def _batches(batch_size: dict[str, int]) -> str:
    sizes = set(batch_size.values())
    if len(sizes) == 1:
        return f"batch {sizes.pop()}/device"
    return "batches " + ", ".join(f"{d} {b}" for d, b in batch_size.items())


def _candidates_table(result, rows: int = 12) -> Table:
    table = Table(title=f"candidates (best {min(rows, len(result.candidates))} of {len(result.candidates)})")
    decays = any(c.weight_decay is not None for c in result.candidates)     # a column only where one was chosen
    for col in ("layout", "protocol", "g", "batch", "lr", "mom.", *(("wd",) if decays else ()), "impl.", "ms/iter",
                "iters", "time (s)", "probe"):
        table.add_column(col, justify="right")
    for c in result.candidates[:rows]:
        wd = (("recipe's" if c.weight_decay is None else f"{c.weight_decay:g}",) if decays else ())
        table.add_row(c.layout, c.variant.label, str(c.groups), str(c.batch_size), f"{c.lr:g}", f"{c.momentum:g}", *wd,
                      f"{c.implicit_momentum:.2f}", f"{c.sec_per_iter * 1e3:.2f}",
                      _iters(c),
                      "-" if c.time_to_target_s is None else f"{c.time_to_target_s:.2f}", c.note)
    return table


def _iters(c) -> str:
    if c.iters_to_target is None:
        return "-"
    band = "" if not c.iters_band else f" ({c.iters_band[0]:.0f}–" + \
        (f"{c.iters_band[1]:.0f})" if len(c.iters_band) > 1 else "∞)")
    return f"{c.iters_to_target:.0f}{band}"


@app.command()
def run(
    plan_path: Path = typer.Argument(..., help="a plan written by `omnitune plan`"),
    out_dir: Path = typer.Option(..., help="run directory for metrics, checkpoint and summary"),
    max_time_s: float = typer.Option(300.0, help="stop training after this many seconds"),
    eval_every_s: float = typer.Option(0.02, help="seconds between test-set evaluations (at least; and at least "
                                       "10× one evaluation)"),
    timeout_s: float = typer.Option(120.0, help="a peer silent this long ends the job"),
    resume: bool = typer.Option(False, help="continue from OUT_DIR's checkpoint"),
    from_scratch: bool = typer.Option(False, help="start from untrained weights, not where the plan's chosen "
                                      "probe stopped"),
    retune: bool = typer.Option(True, "--retune/--no-retune", help="pause to re-tune lr, momentum, batch and "
                                "protocol from a checkpoint when the run diverges, stalls or is off the pace its "
                                "time limit needs (with --no-in-place: also whenever that costs at most a tenth of "
                                "the training so far, Omnivore's epochs); --no-retune: no pause"),
    replan_every_s: Optional[float] = typer.Option(None, help="re-tune every this many seconds of training "
                                                   "instead"),
    stop_on_stall: bool = typer.Option(False, help="instead of re-tuning, end the run once the latest fifth of "
                                       "its training reads no better than the fifth before"),
    in_place: bool = typer.Option(True, "--in-place/--no-in-place", help="tune the running job in place, "
                                  "reading the run itself: halve the rate when the training loss climbs past its "
                                  "edge of stability, and cool the rate down as the target nears"),
    replan_probe_iters: int = typer.Option(30, help="iterations of each re-tuning probe"),
    checkpoint_every_s: Optional[float] = typer.Option(None, help="checkpoint every this many seconds of training"),
    max_restarts: int = typer.Option(0, help="after a process fails, restart all from the last checkpoint "
                                     "up to this many times (torchelastic)"),
    node_rank: Optional[int] = typer.Option(None, help="which node of the cluster spec this is, for a plan "
                                            "on several nodes: run the command on each"),
    print_commands: bool = typer.Option(False, help="print the command each node runs, and exit"),
    fmt: str = typer.Option("shell", "--format", help="with --print-commands: shell (a command per node), or "
                            "slurm (an sbatch script that runs them all)"),
):
    """Run the plan as a real distributed job and report measured against predicted time."""
    from omnitune.runtime import launch
    if print_commands or fmt != "shell":
        _print_commands(plan_path, out_dir, print_commands, fmt, _run_options(locals()))
        return
    launch.start_server()        # its imports (torch, ~2 s) overlap this process's own
    from omnitune.runtime import job
    try:
        options = job.RunOptions(max_time_s=max_time_s, eval_every_s=eval_every_s, timeout_s=timeout_s,
                                 resume=resume, from_scratch=from_scratch, replan_every_s=replan_every_s,
                                 replan_probe_iters=replan_probe_iters, checkpoint_every_s=checkpoint_every_s,
                                 max_restarts=max_restarts, node_rank=node_rank, retune=retune,
                                 stop_on_stall=stop_on_stall, in_place=job.IN_PLACE if in_place else None)
        summary = _execute(plan_path, out_dir, options)
    except UserError as e:
        _fail(e)
    _render_summary(summary, plan_path, out_dir, node_rank)


def _changes_in_place(out_dir: Path) -> list[dict]:
    """The run's changes in place, from its metrics.jsonl (none where it has none)."""
    from omnitune.core.change import changes
    path = Path(out_dir) / "metrics.jsonl"
    if not path.is_file():
        return []
    return changes([json.loads(line) for line in path.read_text().splitlines() if line.strip()])


def _print_commands(plan_path: Path, out_dir: Path, print_commands: bool, fmt: str, options: list[str]) -> None:
    """--print-commands: the command each node runs, as shell lines or a slurm script."""
    from omnitune.runtime import slurm
    try:
        if fmt not in ("shell", "slurm"):
            raise UserError(f"--format {fmt}: shell or slurm")
        if not print_commands:
            raise UserError(f"--format {fmt}: only with --print-commands")
        if fmt == "slurm":
            out.print(slurm.slurm_script(str(plan_path), options, str(out_dir)), markup=False, highlight=False,
                      soft_wrap=True)
        else:
            out.print("\n".join(slurm.node_commands(str(plan_path), options)), soft_wrap=True)
    except UserError as e:
        _fail(e)


def _execute(plan_path: Path, out_dir: Path, options):
    """The plan's run, with its ETA on the status line."""
    import omnitune.api as api
    with _running(plan_path, out_dir, options) as notice:
        return api.run(plan_path, out_dir, options, notice)


@contextlib.contextmanager
def _running(plan_path: Path, out_dir: Path, options):
    """The run's ETA on the status line, and its notes printed above it: `run`'s and `train`'s."""
    waiting = "" if options.node_rank is None else f"node {options.node_rank}: waiting for every node to join, then "
    with console.status(f"{waiting}running {plan_path}…") as status:
        with _following(out_dir, plan_path, lambda text: status.update(f"{waiting}{text}")):
            yield lambda text: console.print(f"note: {text}")


@app.command()
def train(
    workload: str = typer.Option(..., help="NAME: ./models/NAME.py, else the bundled workload NAME; or a path "
                                 "to a workload file"),
    target_accuracy: Optional[float] = typer.Option(None, help="test accuracy to reach, in (0, 1]"),
    target_loss: Optional[float] = typer.Option(None, help="instead: a test loss to get under"),
    out_dir: Path = typer.Option(..., help="where the profile, the plan and the run's files go"),
    profile_path: Optional[Path] = typer.Option(None, "--profile", help="a profile of this machine to plan on "
                                                "(default: measure one, written to OUT_DIR/profile.json)"),
    data_dir: Optional[str] = typer.Option(None, help="local data for workloads that read files"),
    quick: bool = typer.Option(False, help="a cheaper profile, as `profile --quick`"),
    seed: int = typer.Option(0),
    budget_s: Optional[float] = typer.Option(None, help="most seconds to spend on probes (default: sized to "
                                             "the job)"),
    max_time_s: float = typer.Option(300.0, help="stop training after this many seconds"),
    retune: bool = typer.Option(True, "--retune/--no-retune", help="re-tune in the run, as `run` does; "
                                "--no-retune runs the plan as it is"),
    fresh_profile: bool = typer.Option(False, help="measure this machine even where omnitune's cache keeps a "
                                       "profile of it for this workload and these settings (one measured here "
                                       "within 7 days is used again by default)"),
):
    """Profile this machine, plan and run, in one command: `profile`, `plan` and `run` with their
    defaults, without the start-up of each (a second or three apiece). The profile is measured
    once: a later `train` of the same workload here uses it again from omnitune's cache."""
    from omnitune.runtime import launch
    launch.start_server()        # warm for the profile's jobs and the run's processes alike
    import omnitune.api as api
    try:
        options = api.RunOptions(max_time_s=max_time_s, retune=retune)
        summary = api.train(workload, out_dir, target_accuracy, target_loss, profile_path, data_dir, quick,
                            fresh_profile, seed, budget_s, options, _TrainShown(workload))
    except (ValueError, UserError) as e:
        _fail(UserError(str(e)))
    _render_summary(summary, out_dir / "plan.json", out_dir, None)


class _TrainShown:
    """`train`'s steps shown as `profile`, `plan` and `run` show theirs (api.TrainSteps)."""

    def __init__(self, workload: str):
        self.workload = workload

    def profiling(self):
        return _profiling()

    def profiled(self, prof, path: Path, kept: Path | None) -> None:
        if kept is None:
            _render_profile(prof, path)
        else:
            out.print(f"this machine's profile of {self.workload}, measured at {prof.measured_at}, from omnitune's "
                      f"cache ({kept}; --fresh-profile measures it anew)")

    def planning(self):
        return _planning()

    def planned(self, result, path: Path) -> None:
        _render_plan(result, path)

    def running(self, plan_path: Path, out_dir: Path, options):
        return _running(plan_path, out_dir, options)


def _eta_recap(out_dir: Path, summary) -> str | None:
    """What the live ETA said at about a quarter of the run (eta.at_a_quarter, from eta.jsonl),
    beside when the target came; None where the run missed its target or the ETA never estimated
    it (a run of a second or two ends before its first look)."""
    from omnitune.efficiency import eta

    if not summary.reached_target or summary.time_to_target_s is None:
        return None
    lines = _json_lines(out_dir / "eta.jsonl")
    e = eta.at_a_quarter(lines, summary.time_to_target_s) if lines is not None else None
    if e is None:
        return None
    band = "" if e["band_s"] is None else \
        f" (band {e['train_s'] + e['band_s'][0]:.0f}–{e['train_s'] + e['band_s'][1]:.0f}s)"
    off = (e["train_s"] + e["eta_s"]) / summary.time_to_target_s - 1
    return (f"the ETA at {e['train_s']:.1f}s of training put the target at {e['train_s'] + e['eta_s']:.0f}s{band}; "
            f"it came at {summary.time_to_target_s:.1f}s, {abs(off):.0%} {'later' if off < 0 else 'earlier'} "
            f"(eta.jsonl; `omnitune report {out_dir}` plots every estimate)")


def _render_summary(summary, plan_path: Path, out_dir: Path, node_rank: int | None) -> None:
    if summary is None:
        from omnitune.core import plan as plan_mod
        from omnitune.runtime.topology import roles
        coordinator = roles(plan_mod.load(plan_path).spec)[0].node
        out.print(f"node {node_rank}: its processes finished; the run's summary and checkpoint are in the run dir "
                  f"of node {coordinator}, the coordinator's")
        return
    table = Table(title=f"run {out_dir}")
    table.add_column("")
    table.add_column("predicted", justify="right")
    table.add_column("measured", justify="right")
    fmt = lambda x, unit="s": "-" if x is None else f"{x:.2f}{unit}"
    table.add_row("time to target", fmt(summary.predicted_time_to_target_s), fmt(summary.time_to_target_s))
    table.add_row("ms / iteration", fmt(summary.predicted_sec_per_iter * 1e3, ""),
                  fmt(summary.measured_sec_per_iter * 1e3, ""))
    out.print(table)
    verdict = "reached" if summary.reached_target else "did not reach"
    target = (f"test loss {summary.target_loss:g} (final loss {summary.final_loss:.4f})" if summary.target_loss
              else f"{summary.target_accuracy} (final accuracy {summary.final_accuracy:.4f})")
    out.print(f"{verdict} {target} in "
              f"{summary.iterations} iterations with {summary.processes} processes; updates per group "
              f"{list(summary.updates_per_group)}; results in {out_dir}")
    recap = _eta_recap(out_dir, summary)
    if recap:
        out.print(recap)
    if summary.planning_s is not None:
        out.print(f"planning took {summary.planning_s:.1f}s ({summary.planning_probes} probes) before this run")
    if summary.started_at_s:
        out.print(f"the run started where the plan's probe stopped: its {summary.started_at_s:.1f}s of training "
                  "are in the time to target")
    if summary.repaced:
        r = summary.repaced
        out.print(f"the schedule was re-fitted at the run's pace at {r['train_s']:.0f}s of training: its horizon "
                  f"went from {r['before']:.0f} to {r['after']:.0f} iterations ({r['sec_per_iter'] * 1e3:.0f} ms an "
                  f"iteration, {r['predicted_sec_per_iter'] * 1e3:.0f} predicted)")
    made = _changes_in_place(out_dir)
    if made:
        kinds = ", ".join(f"{why} {n}" for why, n in collections.Counter(c.get("why") for c in made).items())
        out.print(f"{len(made)} change(s) in place, no process restarted ({kinds}): the rows "
                  f"\"event\": \"change\" of {out_dir}/metrics.jsonl")
    if summary.replans:
        out.print(f"{summary.replans} pause(s) to re-tune took {summary.replan_s:.1f}s, probes and restarts "
                  f"(see {out_dir}/replans.jsonl)")
    elif summary.first_pause_at_s is not None and summary.first_pause_at_s > summary.wall_s - summary.eval_s:
        out.print(f"no pause to re-tune: the first was due at {summary.first_pause_at_s:.0f}s of training, and the "
                  "run ended before")
    if summary.stalled_at_s is not None and not summary.reached_target:
        out.print(f"stalled at {summary.stalled_at_s:.1f}s of training: its best accuracy had not improved for a "
                  "fifth of the training (metrics.jsonl marks each evaluation while it lasted)")
        unanswered = _unanswered_stall(summary)
        if unanswered:
            out.print(unanswered)
    if summary.diverged_at_s is not None:
        out.print(f"diverged at {summary.diverged_at_s:.1f}s of training: its training loss rose to twice its "
                  "lowest or more" + (", and re-tuning went on from the best checkpoint" if summary.replans else
                                      " (re-tuned, without --no-retune, it goes on from the best checkpoint)"))
    if not summary.reached_target:
        raise typer.Exit(1)


def _unanswered_stall(summary) -> str | None:
    """Why a re-tuned run that stalled and missed its target never paused: what a pause was
    estimated to cost, and when the run would have paid it (job.run_with_replans)."""
    from omnitune.runtime.job import RETUNE_SHARE

    cost = summary.pause_cost_s
    if summary.replans or cost is None or summary.stalled_at_s is None:     # cost: set by re-tuned runs only
        return None
    return (f"no pause answered the stall: one was estimated at {cost:.0f}s, and a stall pauses the run only once "
            f"that is at most a tenth of its training (from {cost / RETUNE_SHARE:.0f}s), being off pace only once the "
            f"latest half of its training lasted {cost:.0f}s with twice that left of the time limit; to go on, plan "
            "again with a lower --lr pinned, or give the run a longer --max-time-s")


# How often `run` re-fits the ETA: every ETA_EVERY_S at most, on a new reading only, and taking at
# most ETA_SHARE of a core: the fits share the machine's cores with the training, and re-fitted
# on a fixed clock they slowed it visibly (docs/decisions.md, commands.ETA_SHARE).
ETA_EVERY_S = 2.0
ETA_SHARE = 0.05


@contextlib.contextmanager
def _following(run_dir: Path, plan_path: Path, show):
    """While the run goes on: every ETA_EVERY_S, the ETA from metrics.jsonl on the status line
    and in eta.jsonl (efficiency/eta.py)."""
    from omnitune.core import plan as plan_mod

    target = plan_mod.load(plan_path).spec.target
    stop, since = threading.Event(), time.time()

    def follow() -> None:
        if sys.platform == "linux":          # this thread yields to the training's (nice 19)
            os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), 19)
        last, wait_s = None, ETA_EVERY_S
        while not stop.wait(wait_s):
            began = time.thread_time()       # this thread's: a pause's probes train in another of this process
            last = _eta_step(run_dir, target, since, show, last)
            wait_s = max(ETA_EVERY_S, (time.thread_time() - began) / ETA_SHARE)
    thread = threading.Thread(target=follow, daemon=True)
    if target is not None:
        thread.start()
    try:
        yield
    finally:
        stop.set()
        if thread.is_alive():
            thread.join()


def _json_lines(path: Path) -> list | None:
    """A JSON-lines file of the run dir, less a line still being written or cut off; None where it
    cannot be read."""
    try:
        text = path.read_text()
    except OSError:
        return None
    lines = []
    for line in text.splitlines():
        try:
            lines.append(json.loads(line))
        except ValueError:
            continue
    return lines


def _eta_step(run_dir: Path, target, since: float, show, last: int | None) -> int | None:
    """One look at the run: the ETA from this run's readings (written after `since`), shown and
    kept in eta.jsonl when a new reading came; the iteration of the last reading seen."""
    from omnitune.core.files import append_jsonl
    from omnitune.efficiency import eta

    lines = _json_lines(run_dir / "metrics.jsonl")
    if lines is None:
        return last
    lines = [x for x in lines if x.get("time", since) >= since]
    if not lines or lines[-1].get("iteration") == last:       # no new reading: nothing to fit
        return last
    e = eta.estimate(lines, target)
    if e is None or e.iteration == last:
        return last
    append_jsonl(run_dir / "eta.jsonl", e.to_dict())
    show(_eta_text(e, target))
    return e.iteration


def _eta_text(e, target) -> str:
    """The status line: a bar of the training so far against the ETA, the reading, the ETA and its band."""
    from omnitune.core.target import of

    target = of(target)
    now = f"{target.metric.split()[-1]} {target.reading(e.accuracy):.3f} of {target.value:g} at {e.train_s:.1f}s"
    width = 20
    done = 1.0 if e.eta_s == 0 else (e.train_s / (e.train_s + e.eta_s) if e.eta_s is not None else 0.0)
    bar = "█" * round(done * width) + "░" * (width - round(done * width))
    if e.eta_s is None:
        return f"{bar} {now}; no ETA yet ({e.note})"
    band = "" if e.band_s is None else \
        f" ({e.band_s[0]:.0f}–{e.band_s[1]:.0f}s)"
    return f"{bar} {now}; ETA {e.eta_s:.0f}s{band}"


def _run_options(values: dict) -> list[str]:
    """`omnitune run`'s options as given, for the command each node runs (all but the node's own)."""
    import inspect

    args = []
    for name, param in inspect.signature(run).parameters.items():
        value = values[name]
        if name in ("plan_path", "node_rank", "print_commands", "fmt") or value == param.default.default:
            continue
        flag = "--" + name.replace("_", "-")
        args += [flag] if value is True else ["--no-" + flag[2:]] if value is False else [flag, str(value)]
    return args


@app.command()
def report(path: Path = typer.Argument(..., help="a run dir or a plan file")):
    """Plot a plan's candidates, or a run's curves against its prediction, as PNG."""
    import omnitune.cli.report as report_mod
    try:
        written = report_mod.report(path)
    except UserError as e:
        _fail(e)
    out.print(f"wrote {written}")


def main() -> None:  # pragma: no cover
    app()


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
