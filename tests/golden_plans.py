"""Golden plans: what the planner picks for fixed inputs, with fake probers and a fake clock.

    python -m tests.golden_plans > tests/data/golden_plans.json

`plans()` runs the planner's public entry points, the ones benchmarks.plan_quality and
benchmarks.prediction call (planning.search, planning.predict, planning.build_plan,
planning.spec_of, planning.profiled), on the profiles in tests/data, and returns, for each case,
the plan's salient fields, its ranked candidates and the probes the search asked for, as JSON
values (`describe`). No probe trains: the probers here are functions of the configuration alone
(batches, protocol and g, rate, momentum, weight decay, iterations), and planning's clock
(time.perf_counter in omnitune.planning) advances only by what each fake probe says it took, so
the same code gives the same output on any machine and under any load.
tests/test_golden_plans.py compares it with tests/data/golden_plans.json.

The cases, for each profile:
  accuracy      everything searchable (plan_quality's `Space().for_recipe(...)` of an SGD recipe),
                an accuracy target, probes that reach it or extrapolate (ranked by time), a job
                of seconds (a quick search);
  accuracy-full the same on a job of tens of seconds (a full search, its budget a share of it);
  accuracy-long the same on a job of minutes, whose probes' estimates lie beyond their evidence
                (ranked by training loss);
  one-device    the same on a layout of one device;
  sgd-decay     an SGD recipe with weight decay: the decay grid;
  timed         accuracy-full with a timer (a real job's seconds per iteration, here the
                model's times a factor of the setup) for setups no calibration job measured,
                as plan_quality passes for a profile of another machine;
  loss-adamw    charlm-stdlib's recipe (AdamW, decay 0.1) and a test-loss target, probes that
                never reach it (ranked by training loss, a final round from hand-offs), then
                plan --predict-s 30 (planning.predict), as plan_quality's first seed;
  small-budget  the same held to 6 s (plan_quality --small-budget-s 6);
  blind         probes that learn little beyond the labels' frequencies (the guess);
the same on the sample profile with groups calibrated fast (v1-fast-groups); on an H200
machine's profile (its layout of the GPU beside one CPU worker), accuracy, timed and
loss-adamw; and, on the profiles with their layouts, benchmarks.prediction --quick's pinned
configurations (each searched, predicted 30 s longer, planned) and plan_quality --quick's grid
(the run spec and modelled seconds per iteration of each fixed configuration, and of the
default).

It runs unchanged on the planner from commit 52f1c9d on (it uses no name that is not there).
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import math
import sys
import time
from collections import Counter
from pathlib import Path

from omnitune import planning
from omnitune.core import profile as profile_mod
from omnitune.core.files import to_dict
from omnitune.core.profile import Calibration
from omnitune.core.protocols import Groups, Sync
from omnitune.core.recipe import Recipe
from omnitune.core.target import Target
from omnitune.efficiency.perfmodel import Shape
from omnitune.efficiency.statmodel import ProbeResult, ProbeStatus

DATA = Path(__file__).resolve().parent / "data"
PROFILES = {
    "v1": DATA / "profile-v1.json",                            # the tests' sample_profile
    "v1-calibrated": DATA / "profile-v1-calibrated.json",
    "v3": DATA / "profile-v3.json",                            # a cluster spec's layout
}
# A GPU machine's profile, searched on one of its layouts only (the GPU beside one CPU worker):
# every layout's setups take a second or more to simulate. (Not benchmarks/results/gpu-profile.json:
# benchmarks.gpu writes it again.)
GPU_PROFILES = {
    "h200": (DATA / "profile-h200-shapes-resnet.json", ("one-worker",)),
}
BEST_STEP = 0.003              # the fake workload's best step per sample (no grid holds it)
BEST_DECAY = 0.01              # and its best weight decay (None, the recipe's, counts as 0.1)
STEP_S = 2e-5                  # a fake probe's seconds per sample trained: the fake clock's tick
ADAMW = Recipe(optimizer="adamw", weight_decay=0.1, beta2=0.95, schedule="cosine", warmup=0.05, floor=0.1,
               clip_grad_norm=1.0)                             # charlm-stdlib's RECIPE
SGD_DECAY = Recipe(optimizer="sgd", weight_decay=5e-4)
PREDICT_S = 30.0               # plan --predict-s, as both benchmarks
SMALL_BUDGET_S = 6.0           # plan_quality --small-budget-s 6
# benchmarks.prediction's QUICK configurations: (target, layout, protocol, g, batch per device, lr)
PREDICTION_QUICK = [(0.95, "one-worker", "sync", 1, 32, 0.05), (0.95, "one-per-core", "sync", 1, 16, 0.05),
                    (0.95, "one-per-core", "groups", 2, 32, 0.05), (0.8, "one-worker", "sync", 1, 64, 0.1),
                    (0.8, "one-per-core", "groups", 2, 32, 0.05), (0.8, "one-per-core", "groups", 2, 64, 0.05)]
GRID_LRS, GRID_BATCHES, DEFAULT = (0.01, 0.03, 0.1), (16, 64), (32, 0.01, 0.9)   # plan_quality's lenet-digits


class Clock:
    """Planning's clock: it moves only when a fake probe trains."""

    def __init__(self):
        self.t = 1000.0

    def perf_counter(self) -> float:
        return self.t

    def __getattr__(self, name):
        return getattr(time, name)


@contextlib.contextmanager
def fake_clock():
    """omnitune.planning's modules read `time.perf_counter()` from this Clock while it is open."""
    clock = Clock()
    patched = [m for name, m in list(sys.modules.items())
               if name.startswith("omnitune.planning") and getattr(m, "time", None) is time]
    for m in patched:
        m.time = clock
    try:
        yield clock
    finally:
        for m in patched:
            m.time = time


def samples(cfg) -> int:
    """Samples a probe iteration computes: every replica's batch, in one process."""
    return sum(sum(g) for g in cfg.batches)


def distance(cfg) -> float:
    """How far (in decades, with asynchrony and momentum) a configuration is from the best."""
    step = cfg.lr / cfg.variant.lr_gain / cfg.samples_per_update * 32
    decay = 0.1 if cfg.weight_decay is None else cfg.weight_decay
    return (1 + 2 * abs(math.log10(step / BEST_STEP))) * (1 + 0.5 * (cfg.variant.asynchrony - 1)) \
        * (1 + abs(cfg.momentum - 0.6)) * (1 + 0.3 * abs(math.log10(max(decay, 1e-6) / BEST_DECAY)))


def call(cfg, max_iters: int, start) -> list:
    return [cfg.variant.label, [list(g) for g in cfg.batches], cfg.lr, cfg.momentum, cfg.weight_decay, max_iters,
            None if start is None else start.iterations]


class Handoff:
    def __init__(self, iterations: int):
        self.iterations = iterations


class ByTime:
    """Iterations to target shrink with the update batch and grow with the distance from the best
    (tests/test_planning.py's FakeProber, with weight decay); it evaluates evenly (so the pruner
    reads it), diverges where the total momentum (explicit and asynchrony's) or the step over
    (1 - momentum) is large, and extrapolates a probe cut short with a band and its distance
    past the probe's end. Its jobs are small (a quick search: budget.RULES.small_job_s)."""

    scale = 4000

    def __init__(self, clock: Clock):
        self.clock, self.calls = clock, []

    def __call__(self, cfg, max_iters, max_seconds, on_eval=lambda it, acc: False, evals=16, start=None):
        self.calls.append(call(cfg, max_iters, start))
        total_momentum = cfg.momentum + 1 - 1 / cfg.variant.asynchrony
        if total_momentum > 1.2 or cfg.lr / cfg.variant.lr_gain / (1 - cfg.momentum) > 2:
            trained = min(max_iters, 5)
            seconds = trained * samples(cfg) * STEP_S
            self.clock.t += seconds
            return ProbeResult(cfg, None, False, (), cfg.variant.asynchrony - 1.0, seconds, "diverged",
                               train_loss=None, iters=trained, status=ProbeStatus.DIVERGED)
        need = self.scale / math.sqrt(cfg.samples_per_update) * distance(cfg)
        end, pruned, curve = max(1, int(min(need, max_iters))), False, []
        for k in range(1, max(1, evals) + 1):
            it = max(1, end * k // max(1, evals))
            acc = 0.9 * min(1.0, it / need)
            curve.append((it, acc))
            if on_eval(it, acc):
                end, pruned = it, True
                break
        seconds = end * samples(cfg) * STEP_S
        self.clock.t += seconds
        loss = 2.3 * math.exp(-2 * end / need)
        if pruned:
            return ProbeResult(cfg, None, False, tuple(curve), 0.0, seconds, "pruned", train_loss=loss, iters=end,
                               start_loss=2.3, status=ProbeStatus.PRUNED)
        reached = need <= max_iters
        return ProbeResult(cfg, need, reached, tuple(curve), cfg.variant.asynchrony - 1.0, seconds,
                           "reached" if reached else "extrapolated", None if reached else (0.8 * need, 1.25 * need),
                           train_loss=loss, iters=end, start_loss=2.3, beyond=0.0 if reached else need / end - 1)


class FullByTime(ByTime):
    """ByTime's workload needing 7.5 times the iterations: a job of tens of seconds, a full
    search whose budget is a share of the job (budget.RULES.fraction), ranked by time."""

    scale = 30_000


class LongByTime(ByTime):
    """ByTime's workload needing 25 times the iterations: a job of minutes, whose short probes'
    extrapolations lie beyond their evidence (statmodel.EVIDENCE): ranked by training loss."""

    scale = 100_000


class Losses:
    """Probes that never reach the target within a search: a training loss that falls with the
    iterations trained and rises with the distance from the best; a longer probe (plan
    --predict-s) predicts the time, with a band. It knows the labels' loss."""

    label_loss = 2.3
    floor = 0.3

    def __init__(self, clock: Clock):
        self.clock, self.calls = clock, []

    def loss(self, cfg, iters: int) -> float:
        return self.floor + 0.15 * distance(cfg) + 30.0 / (iters + 20) * 32 / math.sqrt(cfg.samples_per_update * 32)

    def __call__(self, cfg, max_iters, max_seconds, on_eval=lambda it, acc: False, evals=16, start=None):
        self.calls.append(call(cfg, max_iters, start))
        done = start.iterations if start is not None else 0
        seconds = (max_iters - done) * samples(cfg) * STEP_S
        self.clock.t += seconds
        loss = self.loss(cfg, max_iters)
        curve = ((max_iters, max(0.0, 1 - loss / 2.3)),)
        if max_iters >= 2000:
            need = 6000 * distance(cfg) / math.sqrt(cfg.samples_per_update)
            return ProbeResult(cfg, need, False, curve, 0.0, seconds, "extrapolated", (0.8 * need, 1.3 * need),
                               train_loss=loss, iters=max_iters, start_loss=2.3, beyond=min(9.0, need / max_iters))
        return ProbeResult(cfg, None, False, curve, 0.0, seconds, "not reached", train_loss=loss, iters=max_iters,
                           start_loss=2.3)


class ByLoss(Losses):
    """Losses from a prober that keeps hand-offs: the final round goes on from them."""

    def __init__(self, clock: Clock):
        super().__init__(clock)
        self.handoffs = {}

    def __call__(self, cfg, max_iters, max_seconds, on_eval=lambda it, acc: False, evals=16, start=None):
        self.handoffs[cfg] = Handoff(max_iters)
        return super().__call__(cfg, max_iters, max_seconds, on_eval, evals, start)


class Blind(Losses):
    """Losses that learn little: every one above the labels' less 10% (the ranking is a guess)."""

    floor = 2.0


class Timer:
    """A real job's seconds per iteration: the model's times a factor of the setup."""

    def __init__(self, profile, hardware=None):
        self.profile, self.hardware, self.calls = profile, hardware or planning.profiled(profile), []

    def __call__(self, c: planning.Config) -> float | None:
        self.calls.append([c.layout, c.variant.label, [list(g) for g in c.groups], c.batch])
        sec, _ = self.hardware(shape_of(self.profile, c), c.batch)
        return sec * (1.4 if c.g > 1 else 0.9 if c.batch >= 64 else 1.1)


def shape_of(prof, c) -> Shape:
    spec = planning.spec_of(c, prof, "golden", None, 0.9, 0)
    return Shape(c.groups, dict(spec.batch_size), c.variant, c.layout)


def rounded(x):
    """Floats to 12 significant digits, so that the file reads the same on any platform's repr."""
    if isinstance(x, float):
        return x if not math.isfinite(x) else float(f"{x:.12g}")
    if isinstance(x, dict):
        return {k: rounded(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [rounded(v) for v in x]
    return x


UNPROBED = "not probed"


def describe(plan, prober, timer=None) -> dict:
    """The plan's salient fields, its ranked candidates (those probed in full, in their order; how
    many were not probed, by the reason) and the probes (and timing jobs) asked for."""
    s, p = plan.spec, plan.prediction
    out = {
        "layout": plan.layout, "protocol": s.variant.label, "variant": to_dict(s.variant),
        "devices": [d.id for d in s.devices], "groups": [list(g) for g in s.groups], "batch_size": dict(s.batch_size),
        "lr": s.lr, "momentum": s.momentum, "weight_decay": s.weight_decay, "horizon": s.horizon,
        "target_accuracy": s.target_accuracy, "target_loss": s.target_loss,
        "implicit_momentum": plan.implicit_momentum, "hardware_model": plan.hardware_model, "idle": dict(plan.idle),
        "prediction": {"sec_per_iter": p.sec_per_iter, "iters_to_target": p.iters_to_target,
                       "time_to_target_s": p.time_to_target_s, "model_sec_per_iter": p.model_sec_per_iter,
                       "curve": [list(x) for x in p.curve]},
        "planning": {k: v for k, v in to_dict(plan.planning).items() if k not in ("handed_on_s", "handed_on_iters")},
        "candidates": [[c.layout, c.variant.label, c.batch_size, c.lr, c.momentum, c.weight_decay, c.sec_per_iter,
                        c.iters_to_target, c.time_to_target_s, c.note, list(c.iters_band), c.model_sec_per_iter]
                       for c in plan.candidates if not c.note.startswith(UNPROBED)],
        "unprobed": dict(Counter(c.note for c in plan.candidates if c.note.startswith(UNPROBED))),
        "probes": prober.calls,
    }
    if timer is not None:
        out["timed"] = timer.calls
    return out


def planned(prof, space: planning.Space, make_prober, target, budget_s=None, timed=False,
            predict_s: float = 0.0, hardware=None) -> dict:
    """Search, predict (where `predict_s`), build: the plan's description. `hardware`: the
    profile's hardware model (planning.profiled), where the search is not to make its own."""
    with fake_clock() as clock:
        prober = make_prober(clock)
        timer = Timer(prof, hardware) if timed else None
        found = planning.search(prof, space, prober, budget_s=budget_s, timer=timer, hardware=hardware)
        if predict_s:
            found = planning.predict(found, prober, predict_s)
        plan = planning.build_plan(found, prof, "profile.json", "golden", None, target, 0, "now")
    return describe(plan, prober, timer)


def remembered(prof):
    """planning.profiled(prof), each answer computed once: the same figures, without simulating
    a profile's setups again for every search of it (most of the time a search takes here)."""
    hardware, seen = planning.profiled(prof), {}

    def remembering(shape: Shape, b: int):
        key = (shape.groups, tuple(sorted(shape.batch.items())), shape.variant, shape.layout, b)
        if key not in seen:
            seen[key] = hardware(shape, b)
        return seen[key]
    return remembering


def one_device_layout(prof) -> str | None:
    return next((name for name, ids in prof.cluster.layouts.items() if len(ids) == 1), None)


def fast_groups(prof):
    """tests/test_planning.py's: the sample profile with groups g = 2 calibrated fast."""
    return dataclasses.replace(prof, calibration=tuple(Calibration("one-per-core", "groups", 2, b, 1e-4)
                                                       for b in (8, 32)))


def profile_cases(name: str, prof, hardware) -> dict:
    """The cases of the module's docstring on one profile; the first as `plan` searches (its own
    hardware model), the others on `hardware` (`remembered`)."""
    acc, loss, space = Target(0.9), Target(1.7, on_loss=True), planning.Space()
    cases = {
        "accuracy": lambda: planned(prof, space.for_recipe(Recipe()), ByTime, acc),
        "accuracy-full": lambda: planned(prof, space.for_recipe(Recipe()), FullByTime, acc, hardware=hardware),
        "accuracy-long": lambda: planned(prof, space.for_recipe(Recipe()), LongByTime, acc, hardware=hardware),
        "sgd-decay": lambda: planned(prof, space.for_recipe(SGD_DECAY), ByTime, acc, hardware=hardware),
        "timed": lambda: planned(prof, space.for_recipe(Recipe()), FullByTime, acc, timed=True, hardware=hardware),
        "loss-adamw": lambda: planned(prof, space.for_recipe(ADAMW), ByLoss, loss, predict_s=PREDICT_S,
                                      hardware=hardware),
        "small-budget": lambda: planned(prof, space.for_recipe(ADAMW), ByLoss, loss, budget_s=SMALL_BUDGET_S,
                                        hardware=hardware),
        "blind": lambda: planned(prof, planning.Space(protocols=("sync",)), Blind, acc, hardware=hardware),
    }
    one = one_device_layout(prof)
    if one is not None:
        cases["one-device"] = lambda: planned(prof, planning.Space(layouts=(one,)).for_recipe(Recipe()), ByTime, acc,
                                              hardware=hardware)
    return {f"{name}/{case}": run() for case, run in cases.items()}


def gpu_cases(name: str, prof, layouts: tuple[str, ...]) -> dict:
    """A GPU machine's: everything searchable on `layouts` by time (with and without timing jobs)
    and by loss."""
    hardware, space = remembered(prof), planning.Space(layouts=layouts)
    return {
        f"{name}/accuracy": planned(prof, space.for_recipe(Recipe()), ByTime, Target(0.9), hardware=hardware),
        f"{name}/timed": planned(prof, space.for_recipe(Recipe()), FullByTime, Target(0.9), timed=True,
                                 hardware=hardware),
        f"{name}/loss-adamw": planned(prof, space.for_recipe(ADAMW), ByLoss, Target(1.7, on_loss=True),
                                      predict_s=PREDICT_S, hardware=hardware),
    }


def prediction_cases(name: str, prof, hardware) -> dict:
    """benchmarks.prediction --quick: each configuration pinned, searched, probed PREDICT_S longer."""
    out = {}
    for target, layout, protocol, g, batch, lr in PREDICTION_QUICK:
        if layout not in prof.cluster.layouts:
            continue
        space = planning.Space(protocols=(protocol,), groups=(g,), batch_sizes=(batch,), lrs=(lr,), layouts=(layout,))
        out[f"{name}/prediction/{layout}-{protocol}-g{g}-b{batch}-lr{lr:g}"] = \
            planned(prof, space, ByTime, Target(target), predict_s=PREDICT_S, hardware=hardware)
    return out


def grid_cases(name: str, prof, hardware) -> dict:
    """benchmarks.plan_quality --quick's grid and default: each fixed configuration's run spec
    (batches as the planner sets them) and its modelled seconds per iteration."""
    if "one-per-core" not in prof.cluster.layouts:
        return {}
    per_core = prof.cluster.layouts["one-per-core"]
    two = Groups(g=2)
    shapes = [("one-per-core", Sync(), (per_core,), 0.9),
              ("one-per-core", two, two.group(per_core), two.rule_momentum(planning.MU_STAR))]
    configs = [planning.Config(layout, v, groups, b, lr, mu) for layout, v, groups, mu in shapes
               for b in GRID_BATCHES for lr in GRID_LRS]
    configs.append(planning.Config("one-per-core", Sync(), (per_core,), *DEFAULT))
    rows = []
    for c in configs:
        spec = planning.spec_of(c, prof, "golden", None, Target(0.97), 0)
        sec, _ = hardware(Shape(c.groups, dict(spec.batch_size), c.variant, c.layout), c.batch)
        rows.append([c.variant.label, [list(g) for g in spec.groups], dict(spec.batch_size), spec.lr, spec.momentum,
                     sec])
    return {f"{name}/grid": rows}


def plans() -> dict:
    """Every case's plan description, by name (see the module's docstring)."""
    out = {}
    for name, path in PROFILES.items():
        prof = profile_mod.load(path)
        hardware = remembered(prof)
        out.update(profile_cases(name, prof, hardware))
        out.update(prediction_cases(name, prof, hardware))
        out.update(grid_cases(name, prof, hardware))
        if name == "v1":
            fast = fast_groups(prof)
            out.update(profile_cases("v1-fast-groups", fast, remembered(fast)))
    for name, (path, layouts) in GPU_PROFILES.items():
        out.update(gpu_cases(name, profile_mod.load(path), layouts))
    return rounded(out)


def dumps(out: dict) -> str:
    """JSON with a line per field of a case, and a line per row of its lists (candidates,
    probes): a change shows as the lines it changes."""
    def field(value) -> str:
        if isinstance(value, list) and value and all(isinstance(v, list) for v in value):
            return "[\n   " + ",\n   ".join(json.dumps(v) for v in value) + "]"
        return json.dumps(value)
    cases = []
    for name, case in out.items():
        if isinstance(case, dict):
            body = ",\n  ".join(f"{json.dumps(k)}: {field(v)}" for k, v in case.items())
            cases.append(f"{json.dumps(name)}: {{\n  {body}}}")
        else:
            cases.append(f"{json.dumps(name)}: {field(case)}")
    return "{\n" + ",\n".join(cases) + "\n}\n"


if __name__ == "__main__":
    sys.stdout.write(dumps(plans()))
