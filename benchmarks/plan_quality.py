"""Do omnitune's plans win? The plan against an oracle grid and a user's default, in real runs.

    python -m benchmarks.plan_quality [--quick] [--only NAME [--replan | --default-cap-s S]] [--seeds N]
                                      [--small-budget-s S] [--work-dir DIR]

On each workload: (a) omnitune's own profile + plan (timed apart) + run; (b) an oracle grid
over the planner's own space (layout and protocol, g, per-device batch, learning rate over a
decade, momentum); (c) what a user would pick by default: sync on every core, lr 0.01, momentum
0.9, batch 32 per device. Every time to target is a real run on the runtime. A workload whose
recipe schedules its rate (charlm-stdlib: warm-up, then cosine) runs the grid and the default with
the schedule spanning the workload's cap, as `omnitune run` spans a plan's that predicts no
iterations; the plan's own run spans its prediction. `omnitune run` re-fits that span at the
run's own pace 5% into its time limit (job.paced); the finalists' span is fitted at the pace their
screening measured.

Every grid point is screened once (seed 0); a screening run stops at 1.5× the best screening time
so far and then counts as at least that. The grid's best 4 (those that reached the target first),
the plan and the default then run
with seeds 1, 2, 3 (`--seeds N`: 1 to N), seed by seed across them (interleaved, so the
machine's drift falls on all alike): medians and min–max are reported. A run that misses the target counts as its
time limit, the workload's stated cap. Where the default missed that cap in every run, its
time is a floor; `--only NAME --default-cap-s S` runs the default alone again to S (its schedule
over S), beside the row's oracle configuration, and keeps the row's other figures.

The plan is omnitune's whole path with each seed: `plan` with that seed, then its run as
`omnitune run` runs it: from where the chosen probe stopped, re-tuned during the run. That probe's
training is counted in the run's time to target, not in planning: `planning_s` is the median of
planning's wall time less the training it handed on (`planning_overhead_frac` over the plan's
time to target; `profile_planning_frac` counts the profile's seconds too). The run's pauses to
re-tune (probes and restarts) are counted in its time too, and reported apart as `retune_frac`
(over its training). The plans' band on iterations comes from a 30 s longer probe of the first
seed's configuration (`plan --predict-s 30`), timed apart from planning. Writes
benchmarks/results/plan_quality.json (plan_quality-quick.json with --quick).

A row of a minutes-long workload takes hours (charlm-stdlib's, 5 seeds: about three). With
`--work-dir DIR` every finished measurement (the profile, each seed's plan, each screening run and
each run) goes to DIR/NAME.journal.jsonl as it ends, and the same command started again reads them
back and goes on from there: a row may span sessions. Each line records its commit; the row lists
them (`commits`).
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path

from benchmarks.common import RESULTS, Journal, band_holds, print_rows, profile_planning_frac, recorded, write_results
from benchmarks.harness import (PLAN_KEYS, SEEDS, WORKLOADS, Bench, describe_plan, fixed_spec, interleaved,
                                journaled_profile, measure, planned_with, said)
from omnitune import planning
from omnitune.core import plan as plan_mod
from omnitune.core.protocols import Groups, Sync
from omnitune.planning import Config


QUICK = {"lenet-digits": WORKLOADS["lenet-digits"]}
SCREEN_STOP = 1.5
BEST_OF_GRID = 4
PREDICT_S = 30.0          # the longer probe of the plan's configuration that gives its band
# Issue 37: in-run tuning should beat every fixed configuration, not just match one (1.10 before it).
# profile_planning_frac counts the profile too, as the goal does; one profile serves every plan
# of its machine and workload, so planning_overhead_frac, planning alone, is the cost of each plan.
GOALS = {"plan_over_oracle": 1.0, "default_over_plan": 2.0, "planning_overhead_frac": 0.10,
         "profile_planning_frac": 0.10, "retune_frac": 0.10}


def grid(prof, bench: Bench, quick: bool) -> list[Config]:
    """Layout, protocol and g, and momentum (four shapes; three on the long workloads, with a
    second sync momentum on charlm-stdlib) × batch × lr: 24 configurations (12 with --quick)."""
    per_core = prof.cluster.layouts["one-per-core"]
    one = prof.cluster.layouts.get("one-worker", per_core[:1])
    two = Groups(g=2)
    shapes = [("one-worker", Sync(), (one,), 0.9), ("one-per-core", Sync(), (per_core,), 0.9),
              ("one-per-core", two, two.group(per_core), two.rule_momentum(planning.MU_STAR)),
              ("one-per-core", two, two.group(per_core), 0.0)]
    if bench.long:
        shapes = shapes[:3]
    if quick:
        shapes = shapes[1:3]
    shapes += [("one-per-core", Sync(), (per_core,), mu) for mu in bench.sync_momenta if mu != 0.9]
    return [Config(layout, variant, groups, b, lr, mu) for layout, variant, groups, mu in shapes
            for b in bench.batches for lr in bench.lrs]


def default_config(prof, b: Bench) -> Config:
    per_core = prof.cluster.layouts["one-per-core"]
    return Config("one-per-core", Sync(), (per_core,), *b.default)


def describe(c: Config) -> dict:
    return {"layout": c.layout, "protocol": c.variant.label, "groups": c.g, "batch": c.batch, "lr": c.lr,
            "momentum": c.momentum}


def bench(name: str, b: Bench, quick: bool, work: Path, previous: dict | None = None, seeds=SEEDS,
          small_s: float | None = None, journal: Journal | None = None) -> dict:
    """One workload's row. With `previous` (its row from the last run, --replan): profile and plan
    again, keep the screening, and measure the plan beside the previous finalists in this session;
    the default and finalists are kept too where they missed the cap in every run (their time is the cap).
    With `small_s`, a second plan per seed, its search held to `small_s` seconds (`plan --budget-s`),
    runs beside the others: what a pre-run plan of that size costs in the run.
    With a `journal` on a folder kept between runs (--work-dir), what a run cut off had finished
    (the profile, each seed's plan, each screening and each run) is read back, not measured again."""
    journal = journal or Journal()
    prof, prof_path, profile_s = journaled_profile(journal, name, b, quick, work)
    seeds = seeds[:1] if quick else seeds
    plans = {seed: journaled_plan(journal, f"plan-s{seed}", prof, prof_path, name, b, seed, work,
                                  longer=seed == seeds[0]) for seed in seeds}
    small = {} if small_s is None else {seed: journaled_plan(journal, f"small-s{seed}", prof, prof_path, name, b,
                                                             seed, work, small_s) for seed in seeds}
    plan, longer = plans[seeds[0]]["plan"], plans[seeds[0]]["longer"]
    planning_s = statistics.median(p["spent_s"] for p in plans.values())

    configs = grid(prof, b, quick)
    if previous:
        screened = [{**s, "config": config_of(configs, s)} for s in previous["screening"]]
    else:
        screened, best = [], b.cap_s
        for i, c in enumerate(configs):
            limit = min(b.cap_s, SCREEN_STOP * best)
            if (row := journal.get(f"screen{i}")) is None:
                shutil.rmtree(work / f"{name}-grid{i}", ignore_errors=True)
                r = measure(fixed_spec(prof, b.spec(name), b.goal, c, b.cap_s), work, f"{name}-grid{i}", limit)
                row = journal.put(f"screen{i}", {**describe(c), **r, "at_least": not r["reached"]})
            elif not describe(c).items() <= row.items():
                raise SystemExit(f"{journal.path}: screen{i} was { {k: row.get(k) for k in describe(c)} }, the grid's point {i} is now {describe(c)}: "
                                 "start on a new --work-dir")
            best = min(best, row["time_s"]) if row["reached"] else best
            screened.append({**row, "config": c})
            print(f"{name} screen {i}: {describe(c)} {row['time_s']:.1f}s{'+' if not row['reached'] else ''}", flush=True)
    # Points that reached the target first: one stopped unreached at 1.5x the best so far beats
    # that best only through 50% noise (teacher-mlp, 2026-11-28: batch 256 at lr 0.3, stopped at
    # 91.7 s, went before batch 64 at lr 0.01's 94.3 s, and missed the 240-s cap in every seed).
    ranked = sorted(screened, key=lambda s: (not s["reached"], s["time_s"]))[:BEST_OF_GRID]
    chosen = [describe(s["config"]) for s in ranked]      # the journal's best0... are these
    if (was := journal.get("finalists")) is None:
        journal.put("finalists", chosen)
    elif was != chosen:
        raise SystemExit(f"{journal.path}: its finalists were {was}, they are now {chosen}: "
                         "start on a new --work-dir")
    # With --replan, a finalist or default that missed its cap in every run of the last session
    # is kept as it was (its time is the cap), not run again: matched by its configuration, which
    # an older row's ranking may have put at another place.
    kept = {} if not previous else {
        **{f"best{k}": f for k, c in enumerate(chosen) for f in previous["finalists"]
           if c.items() <= f.items() and not any(r["reached"] for r in f["runs"])},
        **({"default": previous["default"]} if not any(r["reached"] for r in previous["default"]["runs"]) else {})}
    specs = {"plan": {seed: p["path"] for seed, p in plans.items()},
             **({"small": {seed: p["path"] for seed, p in small.items()}} if small else {}),
             "default": fixed_spec(prof, b.spec(name), b.goal, default_config(prof, b), b.cap_s),
             **{f"best{k}": fixed_spec(prof, b.spec(name), b.goal, s["config"], b.cap_s, s.get("sec_per_iter"))
                for k, s in enumerate(ranked)}}
    done = interleaved({f"{name}-{tag}": spec for tag, spec in specs.items() if tag not in kept}, work, b.cap_s,
                       seeds, on_run=said, journal=journal)
    result = {tag: kept.get(tag) or done[f"{name}-{tag}"] for tag in specs}
    planned, default = result["plan"], result["default"]
    finalists = [{**describe(s["config"]), **result[f"best{k}"]} for k, s in enumerate(ranked)]
    oracle = min(finalists, key=lambda f: f["median_s"])
    band = longer["iters_band"]
    return {
        "name": name, "target_accuracy": None if b.on_loss else b.target, "target": str(b.goal), "cap_s": b.cap_s, "long": b.long,
        "held_out": b.held_out,
        "screening_kept": previous is not None,
        "commits": sorted(journal.commits),     # more than one: a run cut off went on (--work-dir) on newer code
        "plan": {**describe_plan(plan),
                 "predicted_time_to_target_s": plan.prediction.time_to_target_s,
                 "predicted_iters": plan.prediction.iters_to_target,
                 "longer_probe": {k: v for k, v in longer.items() if k != "iters_band"},
                 "iters_band": list(band), "planning": plan.planning.__dict__,
                 "per_seed": [{"seed": seed, **describe_plan(p["plan"]), "wall_s": p["wall_s"], "spent_s": p["spent_s"],
                               "handed_on_s": p["plan"].planning.handed_on_s,
                               "handed_on_iters": p["plan"].planning.handed_on_iters,
                               "predicted_s": p["plan"].prediction.time_to_target_s,
                               "probes": p["plan"].planning.probes, "budget_s": p["plan"].planning.budget_s,
                               "budget_reason": p["plan"].planning.reason, "log": p["log"]}
                              for seed, p in plans.items()],
                 **planned},
        "plan_time_to_target_s": planned["median_s"], "oracle_time_to_target_s": oracle["median_s"],
        "default_time_to_target_s": default["median_s"], "planning_s": planning_s, "profile_s": profile_s,
        "plan_over_oracle": planned["median_s"] / oracle["median_s"],
        # the user's whole wait, planning's own cost included, against the grid's best run alone
        "plan_total_over_oracle": (planning_s + planned["median_s"]) / oracle["median_s"],
        "planning_overhead_frac": planning_s / planned["median_s"],
        # in-run tuning's pauses (probes and restarts) over the plan's training, median over runs
        "retune_frac": statistics.median(r.get("retune_s", 0.0) / max(r.get("train_s", r["time_s"]), 1e-9)
                                         for r in planned["runs"]),
        "default_over_plan": default["median_s"] / planned["median_s"],
        "repeats": len(seeds),
        "spread": {"plan": planned["spread_s"], "oracle": oracle["spread_s"], "default": default["spread_s"]},
        "band_holds": holds_per_run(band, runs_of_the_first_plan(planned["runs"],
                                                                 [describe_plan(p["plan"]) for p in plans.values()])),
        "oracle": oracle, "default": default, "finalists": finalists,
        "screening": [{k: v for k, v in s.items() if k != "config"} for s in screened],
        **(small_row(small, result["small"], planned, planning_s, small_s) if small else {}),
        "recorded": recorded(),     # the row's own: a run of --only keeps the other rows of other sessions
    }


def default_again(name: str, b: Bench, previous: dict, work: Path, cap_s: float, seeds=SEEDS,
                  journal: Journal | None = None) -> dict:
    """`previous` (the workload's row) with its default measured again at a longer cap, `cap_s`,
    where it missed the row's cap in every run: its schedule spans `cap_s` as the grid's span theirs.
    The row's oracle configuration runs beside it, seed by seed, and is recorded apart
    (`default_check`): the default's ratio to the plan spans two sessions, its ratio to the oracle
    does not, and the oracle again says how far this session's machine drifted from the row's."""
    journal = journal or Journal()
    prof, _, _ = journaled_profile(journal, name, b, False, work)
    oracle = config_of(grid(prof, b, False), previous["oracle"])
    screened = next(s for s in previous["screening"] if describe(oracle).items() <= s.items())
    specs = {"default": fixed_spec(prof, b.spec(name), b.goal, default_config(prof, b), cap_s),
             "oracle": fixed_spec(prof, b.spec(name), b.goal, oracle, b.cap_s, screened.get("sec_per_iter"))}
    done = interleaved({f"{name}-{tag}": spec for tag, spec in specs.items()}, work, cap_s, seeds, on_run=said,
                       journal=journal)
    default, again = done[f"{name}-default"], done[f"{name}-oracle"]
    return {**previous, "default": {**default, "cap_s": cap_s}, "default_cap_s": cap_s,
            "default_time_to_target_s": default["median_s"],
            "default_over_plan": default["median_s"] / previous["plan_time_to_target_s"],
            "spread": {**previous["spread"], "default": default["spread_s"]},
            "default_check": {"commits": sorted(journal.commits), "recorded": recorded(), "oracle_again": again,
                              "oracle_before_s": previous["oracle_time_to_target_s"],
                              "default_over_oracle_again": default["median_s"] / again["median_s"]}}


def small_row(small: dict, measured: dict, planned: dict, full_planning_s: float, budget_s: float) -> dict:
    """The smaller pre-run plans' figures, beside the full plan's: what they chose, their own cost
    and their time to target, re-tuned during the run as the full plan's were."""
    planning_s = statistics.median(p["spent_s"] for p in small.values())
    return {"small": {"budget_s": budget_s, "planning_s": planning_s, **measured,
                      "per_seed": [{"seed": seed, **describe_plan(p["plan"]), "spent_s": p["spent_s"],
                                    "probes": p["plan"].planning.probes, "log": p["log"]}
                                   for seed, p in small.items()]},
            "small_time_to_target_s": measured["median_s"], "small_planning_s": planning_s,
            "small_over_plan": measured["median_s"] / planned["median_s"],
            # the user's whole wait (planning's own cost and the run) of the smaller plan over the full plan's
            "small_total_over_plan_total": (planning_s + measured["median_s"])
                                           / (full_planning_s + planned["median_s"])}


def journaled_plan(journal: Journal, key: str, prof, prof_path: Path, name: str, b: Bench, seed: int, work: Path,
                   budget_s: float | None = None, longer: bool = False) -> dict:
    """planned_with, or the plan a run before this one made and journaled (read back from its file).
    With `longer`, also the band on iterations from a longer probe of the plan's configuration
    (plan --predict-s, going on from its probe), timed apart from planning: it needs the search's
    prober, so it is journaled with the plan."""
    if (kept := journal.get(key)) is not None:
        return {**kept, "plan": plan_mod.load(kept["path"]), "path": Path(kept["path"])}
    p = planned_with(prof, prof_path, name, b, seed, work, budget_s)
    record = {k: p[k] for k in ("wall_s", "spent_s", "log")} | {"path": str(p["path"])}
    if longer:
        start = time.perf_counter()
        found = planning.build_plan(planning.predict(p["found"], p["prober"], PREDICT_S), prof, str(prof_path),
                                    b.spec(name), None, b.goal, 0, datetime.now(timezone.utc).isoformat())
        record["longer"] = {"seconds": time.perf_counter() - start,
                            "predicted_iters": found.prediction.iters_to_target,
                            "predicted_time_to_target_s": found.prediction.time_to_target_s,
                            "note": found.candidates[0].note, "iters_band": list(found.candidates[0].iters_band)}
    journal.put(key, record)
    return {**p, **record, "path": p["path"]}


def config_of(configs: list[Config], row: dict) -> Config:
    """The grid configuration a screening row describes."""
    return next(c for c in configs if describe(c).items() <= row.items())


def holds_per_run(band, runs: list[dict]) -> list[bool]:
    """Whether the plan's band held each run that reached the target; none without a band."""
    return [band_holds(band, r["iterations"]) for r in runs if r["reached"]] if band else []


def runs_of_the_first_plan(runs: list[dict], plans: list[dict]) -> list[dict]:
    """The runs, one per seed, of plans that chose the first seed's configuration: the band comes
    from a longer probe of that configuration and says nothing about another seed's."""
    return [r for r, p in zip(runs, plans) if p == plans[0]]


def results_name(quick: bool) -> str:
    """A quick run writes beside the full run's file, never over it."""
    return "plan_quality-quick.json" if quick else "plan_quality.json"


def kept_rows(quick: bool) -> list[dict]:
    """The rows of the last run of this kind, to keep beside a run of one workload."""
    path = RESULTS / results_name(quick)
    if not path.exists():
        return []
    data = json.loads(path.read_text())
    if data.get("version") != 2 or data.get("quick") != quick:
        return []
    return [{**r, "band_holds": holds_per_run(r["plan"]["iters_band"], kept_runs_of_the_first_plan(r["plan"]))}
            for r in data["workloads"]]


def kept_runs_of_the_first_plan(plan: dict) -> list[dict]:
    """runs_of_the_first_plan on a row read back from the JSON (all runs where it has no per-seed plans)."""
    if "per_seed" not in plan:
        return plan["runs"]
    return runs_of_the_first_plan(plan["runs"], [{k: s[k] for k in PLAN_KEYS} for s in plan["per_seed"]])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="lenet-digits only: quick profile, 12 grid points, "
                        "one seed")
    parser.add_argument("--only", choices=sorted(WORKLOADS), help="run only this workload; the others' rows "
                        "stay as the last run of the same kind (full or quick) left them")
    parser.add_argument("--replan", action="store_true", help="with --only, after a change to the planner: "
                        "profile and plan again and measure the plan beside the last run's finalists, keeping "
                        "its screening (and its default and finalists where they missed the cap in every run)")
    parser.add_argument("--small-budget-s", type=float, help="also run, beside the plan, a plan per seed whose "
                        "search is held to this many seconds (plan --budget-s), re-tuned during its run alike")
    parser.add_argument("--work-dir", type=Path, help="keep the runs, the plans and a journal of what finished "
                        "in this folder (not removed), so that the same command started again goes on where a "
                        "run cut off stopped; without it, a temporary folder")
    parser.add_argument("--seeds", type=int, default=len(SEEDS), help=f"repeats of the plan, the grid's best "
                        f"{BEST_OF_GRID} and the default, with seeds 1 to this (default {len(SEEDS)})")
    parser.add_argument("--default-cap-s", type=float, help="with --only: measure only the default again, to "
                        "this cap (its schedule spanning it), beside the row's oracle, where the row's cap was too "
                        "short for it to reach the target; the row's other figures are kept")
    args = parser.parse_args()
    if args.seeds < 1:
        parser.error(f"--seeds must be at least 1, got {args.seeds}")
    if args.replan and not args.only:
        parser.error("--replan needs --only NAME")
    if args.default_cap_s is not None and (not args.only or args.replan or args.quick):
        parser.error("--default-cap-s needs --only NAME, without --replan or --quick")
    chosen = QUICK if args.quick else WORKLOADS
    if args.only:
        chosen = {args.only: WORKLOADS[args.only]}
    rows = kept_rows(args.quick) if args.only else []
    if args.work_dir is not None:
        args.work_dir = args.work_dir.resolve()         # the journal's paths hold from any folder
        args.work_dir.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        work = args.work_dir or Path(tmp)
        for name, b in chosen.items():
            again = args.replan or args.default_cap_s is not None
            previous = next((r for r in rows if r["name"] == name), None) if again else None
            if again and previous is None:
                parser.error(f"--replan/--default-cap-s: no row for {name} in the last run to go on from")
            if args.default_cap_s is not None and args.default_cap_s <= b.cap_s:
                parser.error(f"--default-cap-s must be above {name}'s cap, {b.cap_s:g} s, got {args.default_cap_s:g}")
            journal = Journal(args.work_dir / f"{name}.journal.jsonl" if args.work_dir else None)
            options = {"quick": args.quick, "replan": args.replan, "small_budget_s": args.small_budget_s,
                       **({"default_cap_s": args.default_cap_s} if args.default_cap_s is not None else {})}
            started = journal.get("options")
            if started is None:
                journal.put("options", options)
            elif started != options:
                parser.error(f"--work-dir {args.work_dir}: its journal was started with {started}, not {options}: "
                             "use another folder")
            seeds = tuple(range(1, args.seeds + 1))
            row = (default_again(name, b, previous, work, args.default_cap_s, seeds, journal)
                   if args.default_cap_s is not None else
                   bench(name, b, args.quick, work, previous, seeds, args.small_budget_s, journal))
            rows = [r for r in rows if r["name"] != name] + [row]
            rows.sort(key=lambda r: list(WORKLOADS).index(r["name"]))
            write_results(results_name(args.quick)[:-5], {"version": 2, "quick": args.quick, "workloads": rows, "goals": GOALS})
    cols = ["name", "target", "plan_time_to_target_s", "oracle_time_to_target_s", "default_time_to_target_s",
            "profile_s", "planning_s", "plan_over_oracle", "planning_overhead_frac", "profile_planning_frac",
            "retune_frac", "default_over_plan",
            "repeats"] + (["small_planning_s", "small_over_plan", "small_total_over_plan_total"]
                          if any("small" in r for r in rows) else [])
    print_rows("plan quality (goals on minutes-long workloads: plan/oracle <= 1.0, default/plan >= 2, "
               "overhead <= 0.10, retune <= 0.10)",
               [{**r, "profile_planning_frac": profile_planning_frac(r)} for r in rows], cols)
    holds = [h for r in rows for h in r["band_holds"]]
    bounded = [h for h in holds if h is not None]
    print(f"the plan's band on iterations held the real run's in {sum(bounded)} of {len(bounded)} runs "
          f"(runs of plans with a band; {len(holds) - len(bounded)} more had a band with no top: no band)")
    print(f"wrote benchmarks/results/{results_name(args.quick)}")


if __name__ == "__main__":
    main()
