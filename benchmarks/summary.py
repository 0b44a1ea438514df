"""docs/benchmarks.md from benchmarks/results/*.json: each benchmark's goals, figures and run.

    python -m benchmarks.summary        (or `make docs`, which also writes docs/commands.md and docs/gpu.md)

One section per benchmark (the module benchmarks/NAME.py), from NAME.json, or NAME-quick.json
when there is no full run; its other files (NAME-SOMETHING.json) are named at the section's end.
The goals are the module docstring's "Goal..." sentence (read with `ast`: nothing is imported)
and the JSON's `goal`, `goals` and `goals_met`. The figures: one small table of the headline
numbers (TABLES, or PIVOTS, or scale's crossover), then the JSON's top-level scalars. The run's
date, machine, card and commit come from the JSON's `recorded` (common.write_results adds it),
else from the older fields some benchmarks wrote, else "not recorded". These are the docs' only
figures, beside docs/gpu.md (benchmarks.docs, from the same files).
"""

from __future__ import annotations

import ast
import json
import re
from pathlib import Path

from benchmarks.common import RESULTS, profile_planning_frac, write_page

BENCHMARKS = Path(__file__).resolve().parent
NOT_RECORDED = "not recorded"

# name -> [(the list in the JSON, its columns)]; "a.b" reads b of the row's dict a.
TABLES = {
    "end_to_end": [("workloads", ["workload", "target_accuracy", "plan.protocol", "plan.layout",
                                  "predicted_sec_per_iter", "measured_sec_per_iter",
                                  "predicted_time_to_target_s", "measured_time_to_target_s", "reached_target"])],
    "calibration": [("rows", ["workload", "arm", "profile_s", "configurations", "median_abs_err_pct",
                              "p90_abs_err_pct"])],
    "eta": [("shares", ["model", "share", "runs_of", "runs", "estimates", "median_error", "median_ratio", "held",
                        "median_width"])],
    "faults": [("rows", ["scenario", "iterations_lost", "train_s_lost", "recovery_s", "reached_target"]),
               ("stuck", ["scenario", "timeout_s", "stops_after_s"])],
    "gpu": [("rows", ["config", "layout", "protocol", "measured_sec_per_iter", "iterations", "time_to_target_s",
                      "spread_s"])],
    "heterogeneous": [("summary", ["cluster", "workload", "plan_s", "best_alternative", "plan_over_best_alternative",
                                   "all_sync_equal_over_plan", "plan_layout"])],
    "momentum": [("rows", ["workload", "groups", "implicit_momentum_measured", "implicit_momentum_theory",
                           "best_explicit_momentum", "rule_explicit_momentum"])],
    "network": [("rows", ["rate_mbit", "plan.protocol", "plan.batch", "plan_link_bytes_per_sample",
                          "default_link_bytes_per_sample", "plan_runs.median_s", "default_runs.median_s"])],
    "overhead": [("rows", ["workload", "device", "runtime_ms", "plain_ms", "ratio", "ratio_min", "ratio_max",
                           "goal_met"])],
    "plan_quality": [("workloads", ["name", "long", "held_out", "plan_time_to_target_s", "oracle_time_to_target_s",
                                    "default_time_to_target_s", "default_reached", "plan_over_oracle",
                                    "default_over_plan", "planning_overhead_frac", "profile_planning_frac",
                                    "retune_frac", "planning_s", "profile_s", "measured"])],
    "profile_noise": [("rows", ["workload", "setting", "profile_s", "steps_median_ratio", "steps_max_ratio",
                                "calibration_median_ratio", "setups_median_ratio", "setups_max_ratio"])],
    "protocols": [("plan_vs_best", ["workload", "cluster", "best_protocol", "best_time_to_target_s", "plan_choice",
                                    "plan_time_to_target_s", "plan_over_best"])],
    "retune_proxy": [("picks", ["workload", "checkpoint", "fastest_lr", "fastest_iters", "raw_30", "cooled_30", "rule_30",
                                "rule_30_stalled", "raw_300", "cooled_300", "rule_300"])],
    "tiny_job": [("rows", ["seed", "plan_s", "run_s", "total_s", "predicted_s", "time_to_target_s", "reached",
                           "one_command_s", "one_command_reached"])],
    "retune": [("rows", ["workload", "config", "median_s", "spread_s", "reached", "pauses", "pause_s", "lrs",
                         "batches", "retuned_over_pinned", "batches_over_rates_only"])],
}
# name -> (the list, the columns that name a row, the column spread across, the value)
PIVOTS = {"emulation": ("rows", ["variant", "learners", "lr_scaled_by_staleness"], "workload", "ratio_median")}
# Top-level fields that are the run's or the file's, not figures.
META = {"quick", "version", "schema_version", "date", "measured_at", "commit", "note", "notes", "recorded",
        "machine", "host", "cuda_device", "cuda_device_count", "cpu_count", "torch", "goal", "goals", "goals_met"}
# The README's one table of results: plan_quality's plan against the oracle and the default.
HEADLINE = ("plan_quality", "workloads", ["name", "held_out", "plan_time_to_target_s", "oracle_time_to_target_s",
                                          "default_time_to_target_s", "default_reached", "plan_over_oracle",
                                          "default_over_plan", "planning_overhead_frac",
                                          "profile_planning_frac", "measured"])
# Columns worked out from a row: how many of the default's runs reached the target (where none
# did, its time is the cap, and default / plan a floor), and the profile's and planning's seconds
# together over the plan's training (issue 37's goal counts both; planning_overhead_frac counts
# planning alone, as a profile serves every plan of its machine and workload).
DERIVED = {"default_reached": lambda row: reached(row.get("default")),
           "profile_planning_frac": profile_planning_frac,
           "measured": lambda row: measured(row.get("recorded"))}
HEAD_START = "<!-- headline results: generated by `python -m benchmarks.summary` from benchmarks/results; do not edit -->"
HEAD_END = "<!-- end of headline results -->"
README = BENCHMARKS.parent / "README.md"
LINKS = {"gpu": "docs/gpu.md gives this run in full.", "overhead": "docs/gpu.md gives the CUDA run (overhead-cuda.json)."}


def fmt(v) -> str:
    if v is None:
        return "–"
    if isinstance(v, bool):
        return "yes" if v else "no"
    if isinstance(v, float):
        return f"{v:,.0f}" if abs(v) >= 1000 else f"{v:.3g}"
    if isinstance(v, list):
        return ", ".join(fmt(x) for x in v) or "–"
    if isinstance(v, dict):
        return ", ".join(f"{k} {fmt(x)}" for k, x in v.items()) or "–"
    return str(v).replace("|", "\\|").replace("\n", " ")


def reached(runs: dict | None) -> str | None:
    """'k of n' runs that reached the target, of a measured configuration's `runs`."""
    if not isinstance(runs, dict) or not isinstance(runs.get("runs"), list):
        return None
    return f"{sum(bool(r.get('reached')) for r in runs['runs'])} of {len(runs['runs'])}"


def measured(rec: dict | None) -> str | None:
    """A row's own `recorded` (plan_quality's rows span sessions and machines) as its date and the
    machine's kernel release, which names the VM: "2026-11-30, 6.18.44-fc-v657"; None where the row
    has none (measured before rows recorded theirs)."""
    if not isinstance(rec, dict) or not rec.get("date"):
        return None
    # `machine` begins with platform.platform(): "Linux-<release>-<arch>[-with-<libc>]"
    platform_ = str(rec.get("machine", "")).split(",")[0].split("-with-")[0]
    kernel = platform_.removeprefix("Linux-").rsplit("-", 1)[0] if "-" in platform_ else ""
    return f"{str(rec['date'])[:10]}, {kernel or NOT_RECORDED}"


def get(row: dict, key: str):
    if key in DERIVED:
        return DERIVED[key](row)
    for part in key.split("."):
        row = row.get(part) if isinstance(row, dict) else None
    if "spread" in key and isinstance(row, list) and len(row) == 2:     # [min, max]
        return f"{fmt(row[0])}–{fmt(row[1])}"
    return row


def table(header: list[str], rows: list[list]) -> list[str]:
    return ["| " + " | ".join(header) + " |", "|" + "---|" * len(header),
            *("| " + " | ".join(fmt(v) for v in r) + " |" for r in rows), ""]


def rows_table(d: dict, key: str, columns: list[str]) -> list[str]:
    rows = d.get(key)
    if not isinstance(rows, list) or not rows:
        return []
    columns = [c for c in columns if any(get(r, c) is not None for r in rows)]
    return table(columns, [[get(r, c) for c in columns] for r in rows])


def pivot_table(d: dict, key: str, index: list[str], across: str, value: str) -> list[str]:
    cells: dict[tuple, dict] = {}
    for r in d.get(key) or []:
        cells.setdefault(tuple(r.get(c) for c in index), {})[r.get(across)] = r.get(value)
    heads = list(dict.fromkeys(r.get(across) for r in d.get(key) or []))
    return table([*index, *(f"{value}: {h}" for h in heads)],
                 [[*k, *(v.get(h) for h in heads)] for k, v in cells.items()]) if cells else []


def scale_table(d: dict) -> list[str]:
    """scale.json: per link and size, the fastest protocol and sync's time over the best asynchronous."""
    rows = []
    for link, c in (d.get("crossover") or {}).items():
        for n, fastest in (c.get("fastest") or {}).items():
            vs = (c.get("sync_vs_async") or {}).get(n, {})
            rows.append([link, n, fastest, vs.get("asynchronous"), vs.get("sync_over_async")])
    return table(["link", "workers", "fastest", "best asynchronous", "sync / asynchronous"], rows) if rows else []


def scalars(d: dict) -> list[str]:
    """The top-level numbers and words, and those of a top-level `summary` dict; beside each, its
    goal where the JSON's `goals` names it."""
    found = [(k, v) for k, v in d.items() if k not in META and isinstance(v, (int, float, str))]
    if isinstance(d.get("summary"), dict):
        found += [(f"summary.{k}", v) for k, v in d["summary"].items() if isinstance(v, (int, float, str))]
    goals = d["goals"] if isinstance(d.get("goals"), dict) else {}
    if any(k in goals for k, _ in found):
        return table(["field", "value", "goal"], [[k, v, goals.get(k)] for k, v in found])
    return table(["field", "value"], [list(kv) for kv in found]) if found else []


def figures(name: str, d: dict) -> list[str]:
    lines = []
    for key, columns in TABLES.get(name, []):
        lines += rows_table(d, key, columns)
    if name in PIVOTS:
        lines += pivot_table(d, *PIVOTS[name])
    if name == "scale":
        lines += scale_table(d)
    return lines + scalars(d)


def run_of(d: dict) -> dict[str, str]:
    """Date, machine, card and commit: `recorded`, else the fields older results hold."""
    rec = d.get("recorded") or {}
    m = d.get("machine") if isinstance(d.get("machine"), dict) else d.get("host") or {}
    cpus = m.get("cpu_count") or d.get("cpu_count")
    machine = ", ".join(x for x in (m.get("platform"), cpus and f"{cpus} CPUs") if x)
    card = d.get("cuda_device") or m.get("cuda_device") or m.get("cuda_devices")
    if card is None and "cuda_device" in m:
        card = "none"
    date = rec.get("date") or d.get("measured_at") or d.get("date")
    return {"date": date and date[:16].replace("T", " "), "machine": rec.get("machine") or machine or None,
            "card": rec.get("card") or (card and fmt(card)), "commit": rec.get("commit") or d.get("commit")}


def module_text(name: str) -> tuple[str, str]:
    """The benchmark module's docstring: its first paragraph, and its "Goal: ..." sentence."""
    path = BENCHMARKS / f"{name}.py"
    doc = ast.get_docstring(ast.parse(path.read_text())) if path.exists() else None
    if not doc:
        return "", ""
    goal = re.search(r"\bGoals?\b[^:.]*:\s*(.*?\.)(?=\s|$)", doc, re.S)
    goal = " ".join(goal.group(1).split()) if goal else ""
    return " ".join(doc.split("\n\n")[0].split()), goal[:1].upper() + goal[1:]


def goals_of(name: str, d: dict, stated: str) -> str:
    parts = [stated] if stated else []
    g = d.get("goals", d.get("goal"))
    if isinstance(g, dict):
        said = []
        for k, v in g.items():
            if isinstance(v, dict):       # a goal's result per case
                missed = [c for c, ok in v.items() if not ok]
                said.append(f"`{k}` met on {len(v) - len(missed)} of {len(v)}"
                            + (f" (missed: {', '.join(missed)})" if missed else ""))
            else:
                said.append(f"`{k}` {fmt(v)}")
        parts.append("The JSON's goals: " + "; ".join(said) + ".")
    elif g is not None:
        parts.append(f"The JSON's goal: {fmt(g)}.")
    if "goals_met" in d:
        parts.append(f"Goals met: {fmt(d['goals_met'])}.")
    return " ".join(parts) or "None stated in the module or the JSON."


def pick(files: list[Path]) -> tuple[dict[str, Path], dict[str, list[Path]]]:
    """Per benchmark its file (NAME.json, else NAME-quick.json, else the first) and its others."""
    groups: dict[str, list[Path]] = {}
    for f in files:
        groups.setdefault(f.stem.split("-")[0], []).append(f)
    chosen = {}
    for name, fs in groups.items():
        by_stem = {f.stem: f for f in fs}
        chosen[name] = by_stem.get(name) or by_stem.get(f"{name}-quick") or fs[0]
    return chosen, {n: [f for f in fs if f != chosen[n]] for n, fs in groups.items()}


def section(name: str, path: Path, others: list[Path]) -> list[str]:
    d = json.loads(path.read_text())
    first, stated = module_text(name)
    run = run_of(d)
    lines = [f"## {name}", ""]
    if first:
        lines += [f"{first} (`python -m benchmarks.{name}`)", ""]
    lines += [f"From `benchmarks/results/{path.name}`" + (", a `--quick` run" if d.get("quick") else "") + ".",
              "", f"Goals: {goals_of(name, d, stated)}", "",
              "Run: " + "; ".join(f"{k} {v or NOT_RECORDED}" for k, v in run.items()) + ".", ""]
    lines += figures(name, d)
    for key in ("notes", "note"):
        if isinstance(d.get(key), str):
            lines += [f"Notes: {d[key]}", ""]
    if name in LINKS:
        lines += [LINKS[name], ""]
    if others:
        lines += ["Not shown here: " + ", ".join(f"`{f.name}`" for f in others) + ".", ""]
    return lines


def render(results: Path = RESULTS) -> str:
    chosen, others = pick(sorted(results.glob("*.json")))
    lines = ["# Benchmarks: goals and latest figures", "",
             "Generated from `benchmarks/results/*.json` by `python -m benchmarks.summary` (`make docs`); "
             "do not edit by hand. Each section gives the file it came from, and the run's date, machine, "
             "card and commit where the file records them.", ""]
    for name in sorted(chosen):
        lines += section(name, chosen[name], others[name])
    return "\n".join(lines).rstrip("\n") + "\n"


def headline(results: Path = RESULTS) -> str:
    """The README's table of results, from HEADLINE's file, with the run's date, machine and commit."""
    name, key, columns = HEADLINE
    path = results / f"{name}.json"
    d = json.loads(path.read_text())
    run = run_of(d)
    return "\n".join([*rows_table(d, key, columns),
                      f"From `benchmarks/results/{path.name}` (`python -m benchmarks.{name}`); run: "
                      + "; ".join(f"{k} {v or NOT_RECORDED}" for k, v in run.items()) + "."])


def with_headline(readme: str, block: str) -> str:
    """`readme` with the text between HEAD_START and HEAD_END replaced by `block`."""
    start, end = readme.index(HEAD_START) + len(HEAD_START), readme.index(HEAD_END)
    return readme[:start] + "\n" + block + "\n" + readme[end:]


def main() -> None:
    write_page("benchmarks.md", render())
    README.write_text(with_headline(README.read_text(), headline()))
    print(f"wrote the results table in {README}")


if __name__ == "__main__":
    main()
