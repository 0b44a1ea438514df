"""docs/gpu.md from the benchmark JSON: what a machine with a GPU gets, as last measured.

    python -m benchmarks.docs

Reads benchmarks/results/gpu.json (or gpu-quick.json when there is no full run) and the
overhead results; writes docs/gpu.md. The page's figures are only those files' figures.
"""

from __future__ import annotations

import json

from benchmarks.common import RESULTS, write_page

INTRO = """# omnitune on a machine with a GPU

On a machine with CUDA GPUs, `omnitune profile` offers these layouts beside the CPU-only ones:
the GPUs alone (`gpus`), and the GPUs beside CPU workers on the cores their processes leave free,
one core per GPU (`gpus+per-core`: one single-thread worker per free core; `gpus+one-worker`:
one worker, `cpu-rest`, on all of them). A GPU is timed without CPU workers running beside it,
its batch doubled past `--max-batch` while its throughput rises by more than 5% (or until its
memory runs out, which ends its range with a message, not an error). The mixed layouts are
timed as they run, in sync jobs with balanced batches, each layout's jobs at batches its own
steps allow; the calibration jobs share about 8 s, and no protocol starts its jobs past 10 s.
CPU workers of fewer threads than the widest (the layouts between one worker per core and one
on all of them, and `cpu-rest`) are not timed: their steps are modelled from the one-per-core
workers' and the widest's, their throughput per thread interpolated in log threads, and marked
`modelled` in the profile. No calibration job runs the layouts of a few such workers, so a setup
on one is timed by a real job before it may win; `cpu-rest` is in its mixed layout's jobs.
The profile's progress lines name what each of its parts took.

`omnitune plan` scores every setup with the hardware model, in which a GPU's process takes a
core, CPU threads that crowd it stretch the CPU workers' steps, and gloo pays the copy between a
GPU and its host. Before any probe, the setups the model puts above every measured one, while no
calibration job ran their shape, are timed by a short real job (about a second, plus its
processes' start), and a leader still unmeasured after the search is timed before it may win;
the plan records the measured figure and the model's (`hardware_model: "measured"`). A profile taken on a GPU
machine can be planned on any machine: the probes train on that machine's CPU, the hardware
figures come from the profile, and `plan` says so. The run goes on from the chosen probe's
checkpoint and makes the updates the probe would have made next (its weights, momentum and
minibatches; bit for bit on the CPU), so it differs from a start from scratch only in its draw
of data; its clock counts the probe's iterations at the plan's predicted speed (at most the
probe's own time): a GPU's plan probed on the CPU leaves the slower CPU's time in planning.

On a GPU alone the runtime's loop does not wait for each step: it reads the training losses
back in batches and takes each batch's indices from an epoch's order kept on the GPU. Every
process updates with torch's multi-tensor SGD or AdamW arithmetic, a few kernels for the whole
model, and sets gradients to None rather than zeroing them.

Figures below come from `python -m benchmarks.gpu` (and `benchmarks.overhead --device cuda`),
written by `python -m benchmarks.docs`.
"""


def load(name: str) -> dict | None:
    path = RESULTS / f"{name}.json"
    return json.loads(path.read_text()) if path.exists() else None


def ms(x) -> str:
    return "–" if x is None else f"{1e3 * x:.2f}"


def secs(x) -> str:
    return "–" if x is None else f"{x:.1f}"


def gpu_section(d: dict) -> list[str]:
    plan, summary, prof = d["plan"], d["summary"], d["profile"]
    seeds = len(d["seeds"])
    lines = [f"## {d['workload']} to {d['target_accuracy']} ({d.get('measured_at', 'date not recorded')}, "
             f"{d['cuda_device']}, {d.get('cpu_count', '?')} cores, {seeds} seed{'s' * (seeds > 1)})", "",
             f"Profile: {secs(prof['wall_s'])} s. Planning: {secs(plan['planning_s'])} s "
             f"(budget {secs(summary.get('planning_budget_s'))} s). The plan: {plan['protocol']} on "
             f"`{plan['layout']}`, batches {plan['batches']}, lr {plan['lr']}, momentum {plan['momentum']}; "
             f"{ms(plan['predicted_sec_per_iter'])} ms an iteration predicted ({plan['hardware_model']}"
             + (f"; the model said {ms(plan.get('model_sec_per_iter'))}" if plan.get("model_sec_per_iter") else "")
             + ").", "",
             "| setup | layout | batches | ms/iter measured | iterations | time to target (s), median | min–max |",
             "|---|---|---|---|---|---|---|"]
    for r in d["rows"]:
        lo, hi = r["spread_s"]
        lines.append(f"| {r['config']} | `{r['layout']}` | {r['batches']} | {ms(r['measured_sec_per_iter'])} | "
                     f"{r['iterations']:.0f} | {r['time_to_target_s']:.1f} | {lo:.1f}–{hi:.1f} |")
    same = [r["config"] for r in d["rows"][1:] if same_setup(r, d["rows"][0]) and r["config"] != "plan-from-scratch"]
    lines += ["", f"The plan took {summary['plan_over_best_alternative']:.2f}× the best alternative "
              f"({summary['best_alternative']}); its predicted seconds per iteration were "
              f"{summary.get('predicted_over_measured_sec_per_iter', float('nan')):.2f}× the measured. "
              f"A run that misses its target counts as the time limit, {d['time_limit_s']:g} s."]
    handed = ((d["plan"].get("planning") or {}).get("handed_on_s") or 0.0)
    if same and handed:
        lines.append(f"The plan is the same setup as {', '.join(same)}, run from its probe's checkpoint: its "
                     f"clock counts the probe's {secs(handed)} s of training, the alternatives start from scratch.")
    elif same:
        lines.append(f"The plan is the same setup as {', '.join(same)}: the difference between those rows is "
                     "the spread of runs of one configuration.")
    if summary.get("handed_on_over_from_scratch") is not None:
        lines.append(f"From its probe's checkpoint the plan took {summary['handed_on_over_from_scratch']:.2f}× the "
                     f"time of its own setup from scratch (plan-from-scratch), in "
                     f"{summary['handed_on_over_from_scratch_iterations']:.2f}× the iterations.")
    if summary.get("planning_own_s") is not None:
        lines.append(f"Planning's own cost, less the training it handed on to the run: "
                     f"{secs(summary['planning_own_s'])} s.")
    if d.get("commit"):
        lines.append(f"Measured with: {d['commit']}.")
    lines.append("")
    if d.get("pytest_gpu"):
        lines += [f"`pytest -m gpu`: {d['pytest_gpu']['last_line']}", ""]
    return lines


def same_setup(a: dict, b: dict) -> bool:
    """Whether two rows ran the same configuration (a seed aside)."""
    keys = ("layout", "protocol", "batches", "lr", "momentum")
    return all(a.get(k) == b.get(k) for k in keys)


def cell(v) -> str:
    return f"{v:.3g}" if isinstance(v, float) else str(v)


def overhead_section(d: dict) -> list[str]:
    rows = d.get("rows") or []
    if not rows:
        return []
    keys = [k for k in rows[0] if not isinstance(rows[0][k], (list, dict))]
    m = d.get("machine", {})
    where = ", ".join(x for x in (m.get("cuda_device"), m.get("cpu_count") and f"{m['cpu_count']} cores",
                                  m.get("torch") and f"torch {m['torch']}") if x) or d.get("device", "?")
    lines = [f"## The runtime's step against a plain PyTorch loop ({d.get('date', '')[:10]}; {where})", "",
             "| " + " | ".join(keys) + " |", "|" + "---|" * len(keys)]
    lines += ["| " + " | ".join(cell(r.get(k)) for k in keys) + " |" for r in rows]
    return lines + (["", d["note"], ""] if d.get("note") else [""])


def render() -> str:
    lines = [INTRO]
    runs = [d for d in (load("gpu"), load("gpu-quick")) if d]
    for d in runs:
        lines += gpu_section(d)
    if not runs:
        lines += ["No run of `benchmarks.gpu` is recorded yet.", ""]
    for name in ("overhead-cuda", "overhead"):
        d = load(name)
        if d:
            lines += overhead_section(d)
    return "\n".join(lines)


def main() -> None:
    write_page("gpu.md", render())


if __name__ == "__main__":
    main()
