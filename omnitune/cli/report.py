"""`omnitune report`: PNG plots of a plan (its candidates) or a run (its curves against the plan)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from omnitune.core import plan as plan_mod
from omnitune.core.change import changes, evaluations
from omnitune.core.errors import UserError
from omnitune.runtime import summary as summary_mod


def _pyplot():
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    return plt


def plot_plan(plan: plan_mod.Plan, out: Path) -> Path:
    """Seconds per iteration against iterations to target, with lines of equal time to target."""
    plt = _pyplot()
    probed = [c for c in plan.candidates if c.iters_to_target is not None]
    if not probed:
        raise UserError(f"{plan.profile}: the plan has no probed candidates to plot")
    fig, ax = plt.subplots(figsize=(7, 5))
    x = np.array([c.sec_per_iter * 1e3 for c in probed])
    y = np.array([c.iters_to_target for c in probed])
    for i, proto in enumerate(sorted({c.variant.protocol for c in probed})):
        mask = np.array([c.variant.protocol == proto for c in probed])
        ax.scatter(x[mask], y[mask], color=f"C{i}", label=proto, alpha=0.8)
    xs = np.geomspace(x.min() / 1.5, x.max() * 1.5, 50)
    best = plan.prediction.time_to_target_s or min(c.time_to_target_s for c in probed)
    for t in best * np.array([1, 1.5, 2, 4]):
        ax.plot(xs, t / (xs / 1e3), "k:", lw=0.8)
        ax.annotate(f"{t:.2g} s", (xs[-1], t / (xs[-1] / 1e3)), fontsize=7, ha="right")
    if plan.prediction.iters_to_target is not None:
        ax.scatter([plan.prediction.sec_per_iter * 1e3], [plan.prediction.iters_to_target], s=160,
                   facecolors="none", edgecolors="red", label="chosen")
    ax.set(xscale="log", yscale="log", xlabel="predicted ms per iteration (hardware efficiency)",
           ylabel="iterations to target (statistical efficiency)",
           title=f"{plan.spec.workload}: candidates and time-to-target contours", ylim=(y.min() / 1.5, y.max() * 1.5))
    ax.legend()
    fig.tight_layout()
    fig.savefig(out, dpi=110)
    plt.close(fig)
    return out


def jsonl(path: Path) -> list[dict]:
    """The lines of a JSON-lines file of the run dir; none when it is missing."""
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()] if path.is_file() else []


def plot_run(run_dir: Path, out: Path) -> Path:
    """Accuracy and loss over training time, with the plan's predicted accuracy curve; the live
    ETA's history against the time the run took (eta.jsonl); the learning rate and momentum that
    re-tuning chose over time (replans.jsonl)."""
    plt = _pyplot()
    summary = summary_mod.load(run_dir / "summary.json")
    lines = jsonl(run_dir / "metrics.jsonl")
    metrics = evaluations(lines)
    plan = plan_mod.load(summary.plan) if Path(summary.plan).is_file() else None
    t = [m["train_s"] for m in metrics]
    fig, (a1, a2, a3, a4) = plt.subplots(1, 4, figsize=(20, 4.2))
    a1.plot(t, [m["test_accuracy"] for m in metrics], "o-", ms=3, label="measured")
    on_loss = summary.target_loss is not None          # the target, and the probe's curve, are on the loss
    target_ax = a2 if on_loss else a1
    if plan is not None and plan.prediction.curve:
        pc = np.array(plan.prediction.curve)
        target_ax.plot(pc[:, 0] * plan.prediction.sec_per_iter, 1 - pc[:, 1] if on_loss else pc[:, 1], "--",
                       label="predicted (probe × s/iter)")
    if summary.target_accuracy is not None or on_loss:
        target_ax.axhline(summary.target_loss if on_loss else summary.target_accuracy, color="grey", lw=0.8,
                          label="target")
    if summary.time_to_target_s is not None:
        target_ax.axvline(summary.time_to_target_s, color="green", lw=0.8, label="reached")
    a1.set(xlabel="training time (s)", ylabel="test accuracy", title="accuracy")
    a1.legend(fontsize=8)
    a2.plot(t, [m["test_loss"] for m in metrics], label="test loss")
    a2.plot(t, [m["train_loss"] if m["train_loss"] is not None else np.nan for m in metrics], label="train loss")
    a2.set(xlabel="training time (s)", ylabel="loss", yscale="log", title="loss")
    a2.legend(fontsize=8)
    plot_eta(a3, jsonl(run_dir / "eta.jsonl"), summary.time_to_target_s, changes(lines))
    plot_tuning(a4, jsonl(run_dir / "replans.jsonl"), changes(lines), plan, summary.wall_s - summary.eval_s)
    fig.suptitle(f"{run_dir}: {summary.protocol}, {summary.processes} processes", fontsize=9)
    fig.tight_layout()
    fig.savefig(out, dpi=110)
    plt.close(fig)
    return out


def plot_eta(ax, etas: list[dict], actual_s: float | None, in_place: list[dict] = ()) -> None:
    """Each live estimate of the time to target (training so far + ETA, with its band), against
    the time the run took; each change in place (metrics.jsonl's change rows) a dotted line, where
    the ETA's curve starts a new segment."""
    shown = [e for e in etas if e.get("eta_s") is not None]
    if shown:
        x = [e["train_s"] for e in shown]
        ax.plot(x, [e["train_s"] + e["eta_s"] for e in shown], "o-", ms=3, label="estimated time to target")
        lo = [e["train_s"] + e["band_s"][0] if e.get("band_s") else np.nan for e in shown]
        hi = [e["train_s"] + e["band_s"][1] if e.get("band_s") and e["band_s"][1] is not None else np.nan
              for e in shown]
        ax.fill_between(x, lo, hi, alpha=0.2, label="band")
    if actual_s is not None:
        ax.axhline(actual_s, color="green", lw=0.8, label="actual")
    for k, c in enumerate(in_place):
        ax.axvline(c["train_s"], color="C3", lw=0.6, ls=":", label="change in place" if k == 0 else None)
    ax.set(xlabel="training time (s)", ylabel="seconds", title="live ETA" if shown else "live ETA (none recorded)")
    ax.legend(fontsize=8)


def plot_tuning(ax, pauses: list[dict], in_place: list[dict], plan, end_s: float) -> None:
    """The learning rate (and momentum, on the right) the run trained at: the plan's (or the
    first pause's setting before it), then each pause's decision and each change in place
    (metrics.jsonl's change rows, marked and named by why), in order of training time; where the
    batches changed, their sum is written beside it."""
    if plan is None:
        ax.set(title="tuning (no plan to start from)")
        return
    first = pauses[0]["before"] if pauses else {}
    steps = sorted([(p["train_s"], p["after"], "pause", p["before"].get("batch_size")) for p in pauses]
                   + [(c["train_s"], c, c.get("why", "change"), None) for c in in_place], key=lambda x: x[0])
    times = [0.0] + [t for t, *_ in steps] + [end_s]
    lrs = [first.get("lr", plan.spec.lr)] + [v["lr"] for _, v, *_ in steps]
    moms = [first.get("momentum", plan.spec.momentum)] + [v["momentum"] for _, v, *_ in steps]
    batch = sum(first.get("batch_size", plan.spec.batch_size).values())
    ax.step(times, lrs + lrs[-1:], where="post", label="learning rate")
    for (at, values, why, before), lr in zip(steps, lrs[1:]):
        if why != "pause":
            ax.plot([at], [lr], "v", color="C3", ms=5)
            ax.annotate(why, (at, lr), fontsize=6, rotation=30)
        elif before is None:       # a pause recorded before batches were tried: none changed
            continue
        now = sum(values.get("batch_size", {}).values()) or batch
        if now != (sum(before.values()) if before else batch):
            ax.annotate(f"batch {now}", (at, lr), fontsize=7, va="top")
        batch = now
    ax.set(xlabel="training time (s)", ylabel="learning rate", yscale="log",
           title=f"tuning: {len(pauses)} pause(s), {len(in_place)} change(s) in place")
    right = ax.twinx()
    right.step(times, moms + moms[-1:], where="post", color="C1", label="momentum")
    right.set(ylabel="momentum")
    ax.legend(loc="upper left", fontsize=8)
    right.legend(loc="upper right", fontsize=8)


def report(path: Path) -> Path:
    """A run dir gives RUN_DIR/report.png; a plan file gives PLAN.png beside it."""
    if path.is_dir():
        if not (path / "summary.json").is_file():
            raise UserError(f"{path}: not a run dir (no summary.json)")
        return plot_run(path, path / "report.png")
    return plot_plan(plan_mod.load(path), path.with_suffix(".png"))
