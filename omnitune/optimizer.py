"""Choose the configuration with the least predicted time to target: Omnivore's optimizer.

time_to_target = sec_per_iter (hardware efficiency, perfmodel) × iters_to_target (statistical
efficiency, probes). Every configuration is scored for hardware efficiency at once in numpy.
Probes then follow Omnivore's loop (Hadjis et al. 2016, §4): start synchronous (g = 1) and tune
the learning rate; for each larger g, tune momentum and learning rate around the previous
optimum, skipping settings larger than it (optimal values shrink as staleness grows; the update
batch too, Rudra's rule) and settings at least as large as one that diverged; stop adding groups
when seconds per iteration stop improving by 10%. Each probe is capped at the iterations that
could still beat the best time so far, and runs as an optuna trial (ask/tell) whose pruner stops
it when it lags the others at the same predicted training time. Probing is injected (`Prober`),
so this module starts no process and imports no torch.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, replace
from typing import Callable

import numpy as np

from omnitune import protocols, statmodel
from omnitune.balance import equal_time_batches
from omnitune.errors import UserError
from omnitune.files import from_dict, to_dict
from omnitune.perfmodel import PerfModel, Shape
from omnitune.plan import SCHEMA_VERSION, Candidate, Plan, Prediction
from omnitune.profile import Profile
from omnitune.protocols import Variant
from omnitune.runspec import RunSpec
from omnitune.statmodel import ProbeConfig, ProbeResult

# (config, max_iters, on_eval) -> result; on_eval(iteration, accuracy) returns True to stop (prune)
Prober = Callable[[ProbeConfig, int, Callable[[int, float], bool]], ProbeResult]
DEFAULT_LRS = (0.1, 0.05, 0.02)
DEFAULT_BATCHES = (8, 16, 32, 64, 128)
MU_STAR = 0.9    # the synchronous optimum Omnivore starts from
OMNIVORE_MOMENTA = (0.0, 0.3, 0.6, 0.9)   # the momentum grid Omnivore searches for g > 1
STOP_GAIN = 0.10  # add groups only while seconds per iteration improve by at least this much


@dataclass(frozen=True)
class Space:
    """What to search. A field given a single value pins it (the CLI's --protocol etc.)."""
    protocols: tuple[str, ...] = protocols.NAMES
    groups: tuple[int, ...] | None = None          # None: every g that splits the devices evenly
    batch_sizes: tuple[int, ...] = DEFAULT_BATCHES
    lrs: tuple[float, ...] = DEFAULT_LRS
    momentum: float | None = None                  # None: the rule MU_STAR - implicit, and OMNIVORE_MOMENTA
    layouts: tuple[str, ...] | None = None
    implicit: dict[int, float] | None = None       # measured implicit momentum by g; else 1 - 1/g


@dataclass(frozen=True)
class Config:
    layout: str
    variant: Variant
    groups: tuple[tuple[str, ...], ...]
    batch: int                                     # per device (before balancing)
    lr: float
    momentum: float

    @property
    def g(self) -> int:
        return len(self.groups)

    def probe_config(self) -> ProbeConfig:
        """What the probe must emulate: one update's batch, the step size, the asynchrony."""
        return self.variant.emulation(self.batch * len(self.groups[0]), self.lr, self.momentum)


@dataclass(frozen=True)
class Scored:
    config: Config
    sec_per_iter: float
    probe: ProbeResult | None = None

    @property
    def iters(self) -> float | None:
        return self.probe.iters_to_target if self.probe else None

    @property
    def time_to_target_s(self) -> float | None:
        return None if self.iters is None else self.iters * self.sec_per_iter


def enumerate_configs(profile: Profile, space: Space) -> list[Config]:
    out = []
    for layout, devices in profile.cluster.layouts.items():
        if space.layouts is not None and layout not in space.layouts:
            continue
        batches = _batch_sizes(profile, devices, space)
        for v in protocols.admitted(len(devices), space.protocols, heterogeneous(profile, devices)):
            if space.groups is not None and v.groups not in space.groups:
                continue
            out += [Config(layout, v, v.group(devices), b, lr, mu)
                    for mu in _momenta(space, v.asynchrony) for b in batches for lr in space.lrs]
    return out


def heterogeneous(profile: Profile, devices: tuple[str, ...], margin: float = 0.1) -> bool:
    """Whether the devices' best throughputs differ by more than `margin`."""
    speeds = [profile.device(d).best.samples_per_s for d in devices]
    return len(speeds) > 1 and min(speeds) < (1 - margin) * max(speeds)


def device_batches(perf: PerfModel, c: Config) -> dict[str, int]:
    """Per-device batch sizes: equal, or balanced so that every member's step takes as long."""
    if not c.variant.balanced:
        return {d: c.batch for g in c.groups for d in g}
    out = {}
    for group in c.groups:
        # t_d(b) near the nominal batch, as a line through t_d(b/2) and t_d(2b).
        lo, hi = max(c.batch / 2, 1.0), 2.0 * c.batch
        beta = [max(float(perf.compute[d](hi) - perf.compute[d](lo)) / (hi - lo), 1e-12) for d in group]
        alpha = [max(float(perf.compute[d](c.batch)) - b * c.batch, 0.0) for d, b in zip(group, beta)]
        out.update(zip(group, equal_time_batches(alpha, beta, c.batch * len(group))))
    return out


def _batch_sizes(profile: Profile, devices: tuple[str, ...], space: Space) -> list[int]:
    """The space's batch sizes, less those beyond what every device of the layout was profiled at."""
    largest = min(profile.device(d).max_batch for d in devices)
    return [b for b in space.batch_sizes if b <= largest]


def _momenta(space: Space, g: int) -> list[float]:
    """Explicit momenta to consider for g groups: the rule's value first, then Omnivore's grid."""
    if space.momentum is not None:
        return [space.momentum]
    rule = round(statmodel.explicit_momentum(MU_STAR, g, (space.implicit or {}).get(g)), 4)
    return [rule] if g == 1 else list(dict.fromkeys([rule, *OMNIVORE_MOMENTA]))


def shape_of(perf: PerfModel, c: Config) -> Shape:
    return Shape(c.groups, device_batches(perf, c), c.variant, c.layout)


def hardware_scores(perf: PerfModel, configs: list[Config]) -> np.ndarray:
    """Predicted seconds per iteration of every configuration."""
    return np.array([perf.sec_per_iter(shape_of(perf, c)) for c in configs])


def search(profile: Profile, space: Space, prober: Prober, max_probe_iters: int = 3000,
           budget_s: float = 120.0, study=None, log: Callable[[str], None] = lambda m: None) -> list[Scored]:
    """Score every configuration; probe statistical efficiency where it could still win.

    `study` is an optuna study (in memory when None); probes it already holds are reused, so an
    interrupted search resumes. Returns all configurations, best predicted time to target first
    (unprobed ones last).
    """
    configs = enumerate_configs(profile, space)
    if not configs:
        raise ValueError(f"no configuration fits the pinned options (protocols {space.protocols}, groups "
                         f"{space.groups}, batch sizes {space.batch_sizes}) and the profile's devices")
    sec = hardware_scores(PerfModel.from_profile(profile), configs)
    # Configurations that share a probe configuration share statistical efficiency.
    fastest: dict[ProbeConfig, float] = {}
    for c, t in zip(configs, sec):
        pc = c.probe_config()
        fastest[pc] = min(fastest.get(pc, math.inf), float(t))
    loop = OmnivoreLoop(fastest, prober, study or new_study(), max_probe_iters, budget_s, log)
    results = loop.run()
    scored = [Scored(c, float(t), results.get(c.probe_config())) for c, t in zip(configs, sec)]
    return sorted(scored, key=lambda s: (s.time_to_target_s is None, s.time_to_target_s or 0.0, s.sec_per_iter))


def new_study(storage: str | None = None, name: str = "omnitune"):
    """An optuna study for probes: minimise predicted time, median pruning at equal training time."""
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    pruner = optuna.pruners.MedianPruner(n_startup_trials=3, n_warmup_steps=2)
    return optuna.create_study(storage=storage, study_name=name, direction="minimize", pruner=pruner,
                               load_if_exists=True)


class OmnivoreLoop:
    """Omnivore's search over g, with capped, prunable probes recorded in an optuna study."""

    def __init__(self, fastest: dict[ProbeConfig, float], prober: Prober, study, max_probe_iters: int,
                 budget_s: float, log: Callable[[str], None]):
        self.fastest, self.prober, self.study = fastest, prober, study
        self.max_iters, self.budget_s, self.log = max_probe_iters, budget_s, log
        self.results: dict[ProbeConfig, ProbeResult] = stored_results(study)
        self.best = math.inf
        self.diverged: list[ProbeConfig] = []
        self.start = time.perf_counter()
        # Probes report accuracy on a shared clock of predicted training time (for the pruner).
        self.tick_s = min(fastest.values()) * 50

    def run(self) -> dict[ProbeConfig, ProbeResult]:
        prev: ProbeConfig | None = None          # the best configuration of the previous g
        for g in sorted({pc.groups for pc in self.fastest}):
            mine = [pc for pc in self.fastest if pc.groups == g and (prev is None or not larger(pc, prev))]
            if not mine:
                break
            if prev is not None:
                g_sec, prev_sec = min(self.fastest[pc] for pc in mine), self.fastest[prev]
                if g_sec > (1 - STOP_GAIN) * prev_sec:
                    self.log(f"g={g}: {g_sec * 1e3:.2f} ms/iteration is not {STOP_GAIN:.0%} better than "
                             f"{prev_sec * 1e3:.2f} ms at g={prev.groups}: stop adding groups")
                    break
            prev = self.tune(g, mine) or prev
        return self.results

    def tune(self, g: int, candidates: list[ProbeConfig]) -> ProbeConfig | None:
        """Probe g's candidates, highest throughput first; return the best one that reached."""
        for pc in sorted(candidates, key=lambda pc: -pc.batch / self.fastest[pc]):
            if time.perf_counter() - self.start > self.budget_s:
                self.log(f"planning budget of {self.budget_s:.0f}s spent; stopping the search")
                break
            if any(not larger(d, pc) and d.lr <= pc.lr and d.momentum <= pc.momentum for d in self.diverged):
                continue                       # at least as large as a setting that diverged
            r = self.results.get(pc) or self.probe(pc)
            if r is None:
                continue
            if r.note == "diverged":
                self.diverged.append(pc)
            if r.iters_to_target is not None:
                self.best = min(self.best, r.iters_to_target * self.fastest[pc])
        done = [pc for pc in candidates if pc in self.results and self.results[pc].iters_to_target is not None]
        return min(done, key=lambda pc: self.results[pc].iters_to_target * self.fastest[pc], default=None)

    def probe(self, pc: ProbeConfig) -> ProbeResult | None:
        cap = self.max_iters if math.isinf(self.best) else int(min(self.max_iters, self.best / self.fastest[pc]))
        if cap < 1:
            return None
        trial = self._ask(pc)
        reported = {"step": -1}

        def on_eval(iteration: int, accuracy: float) -> bool:
            step = int(iteration * self.fastest[pc] / self.tick_s)
            if step <= reported["step"]:
                return False
            for s in range(reported["step"] + 1, step + 1):        # carry forward over skipped ticks
                trial.report(1.0 - accuracy, s)
            reported["step"] = step
            return trial.should_prune()
        r = self.prober(pc, cap, on_eval)
        if r.note == "pruned":
            r = replace(r, iters_to_target=None, note="pruned: lagging the median")
        elif cap < self.max_iters and not r.reached and r.note != "diverged" \
                and (r.iters_to_target is None or r.iters_to_target > cap):
            r = replace(r, iters_to_target=None, note=f"cannot beat {self.best:.2f}s in {cap} iterations")
        self._tell(trial, pc, r)
        self.results[pc] = r
        self.log(f"probe g={pc.groups} batch={pc.batch} lr={pc.lr} momentum={pc.momentum}: {r.note}")
        return r

    def _ask(self, pc: ProbeConfig):
        """A trial whose parameters are this probe's (enqueued, so the sampler draws nothing)."""
        self.study.enqueue_trial(probe_params(pc))
        return self.study.ask(probe_distributions())

    def _tell(self, trial, pc: ProbeConfig, r: ProbeResult) -> None:
        from optuna.trial import TrialState

        trial.set_user_attr("probe", to_dict(r))
        if r.note.startswith("pruned"):
            self.study.tell(trial, state=TrialState.PRUNED)
        else:
            time_s = r.iters_to_target * self.fastest[pc] if r.iters_to_target is not None else NOT_REACHED
            self.study.tell(trial, time_s)


NOT_REACHED = 1e9     # the study's value for a probe that gives no estimate


def larger(pc: ProbeConfig, ref: ProbeConfig) -> bool:
    """Any of learning rate, momentum or update batch above `ref`'s (values only shrink with g)."""
    return pc.lr > ref.lr or pc.momentum > ref.momentum or pc.batch > ref.batch


def probe_distributions() -> dict:
    from optuna.distributions import FloatDistribution, IntDistribution
    return {"batch": IntDistribution(1, 1 << 24), "lr": FloatDistribution(1e-9, 1e3, log=True),
            "momentum": FloatDistribution(-0.999, 0.999), "groups": IntDistribution(1, 1 << 16)}


def probe_params(pc: ProbeConfig) -> dict:
    return {"batch": pc.batch, "lr": pc.lr, "momentum": pc.momentum, "groups": pc.groups}


def stored_results(study) -> dict[ProbeConfig, ProbeResult]:
    """Probe results an earlier (perhaps interrupted) search left in the study."""
    out = {}
    for t in study.get_trials(deepcopy=False):
        if "probe" in t.user_attrs:
            r = from_dict(ProbeResult, t.user_attrs["probe"], f"study trial {t.number}")
            out[r.config] = r
    return out


def candidate_rows(scored: list[Scored], implicit: dict[int, float] | None = None) -> tuple[Candidate, ...]:
    """The plan file's record of every configuration considered."""
    return tuple(Candidate(
        layout=s.config.layout, variant=s.config.variant, batch_size=s.config.batch, lr=s.config.lr,
        momentum=s.config.momentum, implicit_momentum=s.config.variant.implicit_momentum(implicit),
        sec_per_iter=s.sec_per_iter, iters_to_target=s.iters, time_to_target_s=s.time_to_target_s,
        note=s.probe.note if s.probe else "not probed",
        iters_band=tuple(s.probe.interval) if s.probe and s.probe.interval and s.iters else ()) for s in scored)


def build_plan(scored: list[Scored], profile: Profile, profile_path: str, workload: str,
               data_dir: str | None, target: float, seed: int, created_at: str,
               implicit: dict[int, float] | None = None) -> Plan:
    """The winning configuration as a Plan; a clear error when no probe reached the target."""
    best = scored[0]
    if best.time_to_target_s is None:
        notes = sorted({s.probe.note for s in scored if s.probe})
        raise UserError(f"--target-accuracy {target}: no probe reached it or could extrapolate to it "
                        f"(probe outcomes: {', '.join(notes) or 'none run'}); try a lower target, "
                        "a larger --probe-iters or other --lr values")
    c = best.config
    cluster = profile.cluster
    spec = RunSpec(workload=workload, data_dir=data_dir, variant=c.variant,
                   devices=tuple(cluster.device(d) for g in c.groups for d in g), groups=c.groups,
                   batch_size=device_batches(PerfModel.from_profile(profile), c), lr=c.lr, momentum=c.momentum,
                   seed=seed, target_accuracy=target, rendezvous=cluster.rendezvous,
                   server_host=cluster.server_host, server_node=cluster.server_node)
    return Plan(
        schema_version=SCHEMA_VERSION, spec=spec, layout=c.layout,
        implicit_momentum=c.variant.implicit_momentum(implicit),
        prediction=Prediction(best.sec_per_iter, best.iters, best.time_to_target_s,
                              tuple((float(i), float(a)) for i, a in best.probe.curve)),
        candidates=candidate_rows(scored, implicit), profile=profile_path, created_at=created_at)
