"""Does a re-tuning pause's score pick the rate that reaches the target first?

    python -m benchmarks.retune_proxy [--quick] [--only NAME] [--repick]

A pause (planning/retune.py) reads every candidate rate from the run's checkpoint: 30 updates
and the validation loss after them (`raw`), then a cool-down at a tenth of the rate and the loss
after it (`cooled`). The run goes on with the rate that scores best. The thing that score stands
for is the time to target from the checkpoint, and this benchmark measures it: from each
checkpoint, each candidate rate trains on, kept constant, until the full test set reaches the
target (the probes' emulation, validated against the runtime: benchmarks.emulation). One worker,
so iterations are time.

For each case: sync on one worker at its batch and rate, trained from its seed to checkpoints part
of the way to the target. From each checkpoint, every candidate rate (retune.candidates) gets its
iterations to target (None: not within the cap) and its pause readings at 30, 100 and 300
updates (two batch orders each). Rows: each checkpoint and rate; then per checkpoint the fastest
rate, the rate each reading picks alone, and the rate the pause's rule (retune.decide) goes on
with, at each length, for a healthy run and for a stalled one.

Cases: teacher-mlp at lr 0.04 and batch 256 to 0.985, the setup whose re-tuned runs switched down
and trained longer (CHANGELOG, issue 37), checkpoints at 3,000 and 7,500 iterations;
lenet-digits-high, lenet-digits at lr 0.15 (a rate that levels off below 0.97 at a constant rate:
a plateau the pause should leave), checkpoint at 300; with --only, teacher-mlp-b128-late, batch
128 at lr 0.01 from 18,000 and 24,000 iterations (where a plan's runs stalled late), with the
goodput's arm too: 4x the batch at AdaScale's rate for the noise scale measured there
(`growth_row`, the JSON's `growth`); gru-count (held out: benchmarks/workloads/gru_count.py), batch
64 at lr 0.03 from 1,000 iterations. Each checkpoint's picks include `tuner.largest_stable`'s
(`stable_N`) and whether its rate reaches the target within 10% of the fastest's iterations.
--quick: lenet-digits at lr 0.05, batch 32, to 0.97, one
checkpoint. Writes benchmarks/results/retune_proxy.json (retune_proxy-quick.json with --quick,
retune_proxy-NAME.json with --only NAME).
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

import torch

from benchmarks.common import RESULTS, print_rows, write_results
from omnitune.core.cluster import Device
from omnitune.core.protocols import Sync
from omnitune.core.runspec import RunSpec
from omnitune.planning import retune as retune_mod
from omnitune.probing.emulator import emulator
from omnitune.efficiency import goodput
from omnitune.efficiency.tuner import largest_stable
from omnitune.probing.pause import RETUNE_VALIDATION, gradient_noise, pause_reading
from omnitune.probing.probe import probe_config
from omnitune.runtime import workload as workload_mod
from omnitune.runtime.workload import evaluate, first

PAUSE_ITERS = (30, 100, 300)    # the runtime's pause (RunOptions.replan_probe_iters), and longer ones
COLUMNS = ["workload", "checkpoint", "lr", "iters_to_target", "raw_30", "cooled_30", "raw_300", "cooled_300"]


@dataclass(frozen=True)
class Case:
    batch: int
    lr: float
    target: float
    checkpoints: tuple[int, ...]     # iterations from the seed
    cap: int                         # the truth's iterations from a checkpoint, at most
    eval_every: int                  # the truth's evaluations, on the full test set
    workload: str = ""               # "": the case's name less "-high"
    growth: bool = False             # also the goodput's arm (growth_row)


CASES = {"teacher-mlp": Case(256, 0.04, 0.985, (3000, 7500), 30000, 100),
         "lenet-digits": Case(32, 0.05, 0.97, (40,), 3000, 5),
         "lenet-digits-high": Case(32, 0.15, 0.97, (300,), 3000, 10),
         # A batch-128 plan's runs stalled at 53% and 73% of their way (about 30,000 iterations to
         # the target), and the pause took a third of the rate (CHANGELOG, 2026-11-28).
         "teacher-mlp-b128-late": Case(128, 0.01, 0.985, (18000, 24000), 30000, 100, "teacher-mlp", True),
         # Held out from the chooser's margin (tuner.largest_stable): the GRU of
         # benchmarks/workloads/gru_count.py at the rate and batch of plan_quality's oracle.
         "gru-count": Case(64, 0.03, 0.9, (1000,), 5000, 100,
                           str(Path(__file__).resolve().parent / "workloads" / "gru_count.py"))}
QUICK = ("lenet-digits",)
FULL = ("teacher-mlp", "lenet-digits-high")


GROWTH = 4      # the growth arm's batch, times the case's (what the goodput chose at teacher-mlp's pauses)
# Its pause readings: the updates of 4x the batch that fit in the time of the pause's 30 of the
# case's, at the runtime's steps of teacher-mlp (3.05 ms at batch 128, 10.05 at 512, 2026-11-28);
# the JSON's `raw` and `cooled` beside the case's rate's `raw_30` and `cooled_30` (same batches).
GROWTH_UPDATES = 9


def spec_of(name: str, case: Case, lr: float, batch: int | None = None) -> RunSpec:
    return RunSpec(workload=case.workload or name, data_dir=None, variant=Sync(), devices=(Device("cpu0", "cpu"),),
                   groups=(("cpu0",),), batch_size={"cpu0": batch or case.batch}, lr=lr, momentum=0.9,
                   target_accuracy=case.target)


def growth_row(name: str, wl, train, test, held, case: Case, state: dict, point: int, seed: int) -> dict:
    """The goodput's arm from a checkpoint: GROWTH times the batch at AdaScale's rate for the
    noise scale measured there (pause.gradient_noise), kept to the target; its iterations and
    samples to the target beside the case's rate's, which a reader turns into time with each
    batch's step (the pause priced them by the profile; its readings, 10 updates against 30,
    refused the growth at 8 of 14 pauses of a batch-128 plan, 2026-11-28); and its own pause
    readings (GROWTH_UPDATES updates, the same two batch orders as the rows')."""
    phi = gradient_noise(wl, train, state["model"], case.batch, seed + 3)[0]
    lr = retune_mod.rate(case.lr, goodput.gain(phi, case.batch, GROWTH * case.batch))
    spec = spec_of(wl.name, case, lr, GROWTH * case.batch)
    iters = iters_to_target(wl, train, test, spec, state, point, case)
    readings = [pause_reading(wl, train, held, spec, state, (lr, 0.9), seed + k, GROWTH_UPDATES) for k in (1, 2)]
    return {"workload": name, "checkpoint": point, "batch": GROWTH * case.batch, "lr": lr, "noise_scale": phi,
            "iters_to_target": iters, "samples_to_target": None if iters is None else iters * GROWTH * case.batch,
            "updates": GROWTH_UPDATES, "readings": [vars(r) for r in readings],
            **{field: statistics.fmean(getattr(r, field) for r in readings) for field in ("raw", "cooled")}}


def train_to(wl, train, spec: RunSpec, state: dict | None, start: int, iters: int, seed: int):
    """The emulation of `spec` from `state` (None: from the seed) for `iters` updates."""
    emu = emulator(wl, train, probe_config(spec, spec.lr, spec.momentum), seed,
                   None if state is None else state["model"], None if state is None else state["optimizer"],
                   start_iteration=start)
    for _ in range(iters):
        emu.step()
    return emu


def iters_to_target(wl, train, test, spec: RunSpec, state: dict, start: int, case: Case) -> int | None:
    """Updates from `state` at `spec`'s constant rate until the full test set reaches the target."""
    emu = emulator(wl, train, probe_config(spec, spec.lr, spec.momentum), spec.seed, state["model"],
                   state["optimizer"], start_iteration=start)
    for done in range(1, case.cap + 1):
        if not math.isfinite(emu.step()):
            return None
        if done % case.eval_every == 0 and evaluate(wl, emu.current_model(), test, torch.device("cpu"))[1] >= spec.target_accuracy:
            return done
    return None


def bench(name: str, case: Case, grown: list[dict]) -> list[dict]:
    """Each checkpoint's candidate rates (rows); the growth arm's rows appended to `grown`."""
    torch.set_num_threads(1)
    wl = workload_mod.load(case.workload or name.removesuffix("-high"))
    train, test = wl.build_datasets(None, 0)
    held = first(test, RETUNE_VALIDATION)
    base = spec_of(wl.name, case, case.lr)
    rows, state, at = [], None, 0
    for point in case.checkpoints:
        emu = train_to(wl, train, base, state, at, point - at, base.seed)
        state, at = emu.checkpoint_state(), point
        for lr in (c.lr for c in retune_mod.candidates(case.lr, 0.9, False)):
            spec = spec_of(wl.name, case, lr)
            row = {"workload": name, "checkpoint": point, "lr": lr,
                   "iters_to_target": iters_to_target(wl, train, test, spec, state, point, case)}
            for iters in PAUSE_ITERS:
                row[f"readings_{iters}"] = [pause_reading(wl, train, held, spec, state, (lr, 0.9), base.seed + k, iters)
                                            for k in (1, 2)]
                for field in ("raw", "cooled"):
                    row[f"{field}_{iters}"] = statistics.fmean(getattr(r, field) for r in row[f"readings_{iters}"])
            rows.append(row)
            print({k: v for k, v in row.items() if not k.startswith("readings")}, flush=True)
        if case.growth:
            grown.append(growth_row(name, wl, train, test, held, case, state, point, base.seed))
            print(grown[-1], flush=True)
    return rows


def picks(rows: list[dict], target: dict[str, float]) -> list[dict]:
    """Per checkpoint: the fastest rate to the target; per pause length, the rate each reading
    picks alone and what the pause's rule (retune.decide, both readings, two repeats each) does."""
    out = []
    for name, point in sorted({(r["workload"], r["checkpoint"]) for r in rows}):
        here = [r for r in rows if (r["workload"], r["checkpoint"]) == (name, point)]
        reached = [r for r in here if r["iters_to_target"] is not None]
        fastest = min(reached, key=lambda r: r["iters_to_target"]) if reached else None
        row = {"workload": name, "checkpoint": point, "fastest_lr": fastest["lr"] if fastest else None,
               "fastest_iters": fastest["iters_to_target"] if fastest else None}
        for iters in PAUSE_ITERS:
            for field in ("raw", "cooled"):
                row[f"{field}_{iters}"] = min(here, key=lambda r: r[f"{field}_{iters}"])["lr"]
            row[f"stable_{iters}"] = largest_stable({r["lr"]: r[f"raw_{iters}"] for r in here})
            row[f"stable_{iters}_within_10pct"] = within(here, row[f"stable_{iters}"], fastest)
            readings = {(r["lr"], 0.9): r[f"readings_{iters}"] for r in here}
            for stalled in (False, True):
                rule = retune_mod.decide((here[0]["lr"], 0.9), readings, target[name], stalled)
                row[f"rule_{iters}" + ("_stalled" if stalled else "")] = rule.setting[0]
        out.append(row)
    return out


def within(here: list[dict], lr: float, fastest: dict | None, share: float = 0.10) -> bool | None:
    """Whether the rate `lr` reaches the target from this checkpoint within `share` more
    iterations than the fastest rate (None: no rate reached it)."""
    if fastest is None:
        return None
    iters = next(r["iters_to_target"] for r in here if r["lr"] == lr)
    return iters is not None and iters <= (1 + share) * fastest["iters_to_target"]


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--only", choices=sorted(CASES))
    ap.add_argument("--repick", action="store_true",
                    help="re-derive the picks of the saved results with the current rule, training nothing")
    args = ap.parse_args(argv)
    names = (args.only,) if args.only else (QUICK if args.quick else FULL)
    stem = f"retune_proxy-{args.only}" if args.only else f"retune_proxy{'-quick' if args.quick else ''}"
    saved = {}
    if args.repick:
        saved = json.loads((RESULTS / f"{stem}.json").read_text())
        rows = [{k: ([retune_mod.Reading(**r) for r in v] if k.startswith("readings") else v) for k, v in row.items()}
                for row in saved["rows"]]
        names = tuple(dict.fromkeys(r["workload"] for r in rows))
    else:
        grown = []
        rows = [r for name in names for r in bench(name, CASES[name], grown)]
    print_rows("pause scores and the time to target from each checkpoint", rows, COLUMNS)
    grown = saved.get("growth", []) if args.repick else grown
    if grown:
        print_rows(f"the goodput's {GROWTH}x batch at AdaScale's rate from each checkpoint", grown,
                   [k for k in grown[0] if k != "readings"])
    chosen = picks(rows, {name: CASES[name].target for name in names})
    print_rows("the rate each score picks", chosen, list(chosen[0]))
    write_results(stem.removesuffix("-quick"), {
        "quick": args.quick,
        "measured_at": saved["measured_at"] if args.repick else datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "picks_by": "the rule at the commit recorded (--repick)" if args.repick else "the rule of the run",
        "pause_iters": PAUSE_ITERS, "cool_rate": retune_mod.RULES.cool_rate, "cool_share": retune_mod.RULES.cool_share,
        "rows": [{k: ([vars(r) for r in v] if k.startswith("readings") else v) for k, v in row.items()} for row in rows],
        "picks": chosen, "growth": grown, **({"recorded": saved["recorded"]} if saved.get("recorded") else {})})


if __name__ == "__main__":
    main()
