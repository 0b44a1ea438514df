"""Choose the configuration with the least predicted time to target.

time_to_target = sec_per_iter (hardware efficiency, perfmodel) × iters_to_target (statistical
efficiency, probes). Every candidate is scored for hardware efficiency at once in numpy; probes
are spent by throughput, best first, and each probe is capped at the iterations that could still
beat the best time found so far, so candidates the model rules out cost nothing and lagging
probes stop early. Probing is injected (`Prober`), so this module starts no process.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, replace
from typing import Callable

import numpy as np

from omnitune import statmodel
from omnitune.perfmodel import PerfModel
from omnitune.profile import Profile
from omnitune.statmodel import ProbeConfig, ProbeResult

Prober = Callable[[ProbeConfig, int], ProbeResult]   # (config, max_iters) -> result
DEFAULT_LRS = (0.1, 0.05, 0.02)
DEFAULT_BATCHES = (8, 16, 32, 64, 128)
MU_STAR = 0.9    # the synchronous optimum Omnivore starts from


@dataclass(frozen=True)
class Space:
    """What to search. A field given a single value pins it (the CLI's --protocol etc.)."""
    protocols: tuple[str, ...] = ("sync", "groups")
    groups: tuple[int, ...] | None = None          # None: every g that splits the devices evenly
    batch_sizes: tuple[int, ...] = DEFAULT_BATCHES
    lrs: tuple[float, ...] = DEFAULT_LRS
    momentum: float | None = None                  # None: MU_STAR - implicit momentum of g groups
    layouts: tuple[str, ...] | None = None
    implicit: dict[int, float] | None = None       # measured implicit momentum by g; else 1 - 1/g


@dataclass(frozen=True)
class Config:
    layout: str
    protocol: str
    groups: tuple[tuple[str, ...], ...]
    batch: int                                     # per device
    lr: float
    momentum: float

    @property
    def g(self) -> int:
        return len(self.groups)

    def probe_config(self) -> ProbeConfig:
        """What the probe must emulate: one update's batch, the step size, the asynchrony."""
        return ProbeConfig(batch=self.batch * len(self.groups[0]), lr=self.lr,
                           momentum=self.momentum, groups=self.g)


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


def split(devices: tuple[str, ...], g: int) -> tuple[tuple[str, ...], ...]:
    """g groups of equal size (Omnivore), consecutive devices together."""
    k = len(devices) // g
    return tuple(devices[i * k:(i + 1) * k] for i in range(g))


def enumerate_configs(profile: Profile, space: Space) -> list[Config]:
    out = []
    for layout, devices in profile.cluster.layouts.items():
        if space.layouts is not None and layout not in space.layouts:
            continue
        batches = _batch_sizes(profile, devices, space)
        for protocol, g in _shapes(len(devices), space):
            mu = round(_momentum(space, g), 4)
            out += [Config(layout, protocol, split(devices, g), b, lr, mu) for b in batches for lr in space.lrs]
    return out


def _shapes(n: int, space: Space) -> list[tuple[str, int]]:
    """(protocol, g) pairs for n devices: sync is one group; groups splits n evenly, g >= 2."""
    shapes = [(p, 1) for p in space.protocols if p == "sync"]
    shapes += [(p, g) for p in space.protocols if p != "sync" for g in range(2, n + 1) if n % g == 0]
    return [(p, g) for p, g in shapes if space.groups is None or g in space.groups]


def _batch_sizes(profile: Profile, devices: tuple[str, ...], space: Space) -> list[int]:
    """The space's batch sizes, less those beyond what every device of the layout was profiled at."""
    largest = min(profile.device(d).max_batch for d in devices)
    return [b for b in space.batch_sizes if b <= largest]


def _momentum(space: Space, g: int) -> float:
    if space.momentum is not None:
        return space.momentum
    return statmodel.explicit_momentum(MU_STAR, g, (space.implicit or {}).get(g))


def hardware_scores(perf: PerfModel, configs: list[Config]) -> np.ndarray:
    """Predicted seconds per iteration of every configuration."""
    return np.array([perf.sec_per_iter([list(g) for g in c.groups],
                                       {d: c.batch for g in c.groups for d in g},
                                       server=c.protocol != "sync", layout=c.layout) for c in configs])


def search(profile: Profile, space: Space, prober: Prober, max_probe_iters: int = 3000,
           budget_s: float = 120.0, log: Callable[[str], None] = lambda m: None) -> list[Scored]:
    """Score every configuration; probe statistical efficiency where it could still win.

    Returns all configurations, best predicted time to target first (unprobed ones last).
    """
    configs = enumerate_configs(profile, space)
    if not configs:
        raise ValueError(f"no configuration fits the pinned options (protocols {space.protocols}, groups "
                         f"{space.groups}, batch sizes {space.batch_sizes}) and the profile's devices")
    sec = hardware_scores(PerfModel.from_profile(profile), configs)
    # Configurations that share a probe configuration share statistical efficiency.
    by_probe: dict[ProbeConfig, list[int]] = {}
    for i, c in enumerate(configs):
        by_probe.setdefault(c.probe_config(), []).append(i)
    # Highest throughput (samples per second) first: likeliest to win at a fixed sample count.
    order = sorted(by_probe, key=lambda pc: -pc.batch / min(sec[i] for i in by_probe[pc]))
    results: dict[ProbeConfig, ProbeResult] = {}
    best = math.inf
    start = time.perf_counter()
    for pc in order:
        if time.perf_counter() - start > budget_s:
            log(f"probe budget of {budget_s:.0f}s spent; {len(order) - len(results)} probes skipped")
            break
        fastest = min(sec[i] for i in by_probe[pc])
        cap = max_probe_iters if math.isinf(best) else int(min(max_probe_iters, best / fastest))
        if cap < 1:
            continue
        r = prober(pc, cap)
        results[pc] = r
        capped = cap < max_probe_iters and not r.reached and r.note != "diverged"
        if capped and (r.iters_to_target is None or r.iters_to_target > cap):
            results[pc] = replace(r, iters_to_target=None, note=f"cannot beat {best:.2f}s in {cap} iterations")
        if results[pc].iters_to_target is not None:
            best = min(best, results[pc].iters_to_target * fastest)
        log(f"probe b={pc.batch} lr={pc.lr} mu={pc.momentum} g={pc.groups}: {results[pc].note}"
            + (f", {results[pc].iters_to_target:.0f} iterations" if results[pc].iters_to_target else ""))
    scored = [Scored(c, float(sec[i]), results.get(c.probe_config())) for i, c in enumerate(configs)]
    return sorted(scored, key=lambda s: (s.time_to_target_s is None, s.time_to_target_s or 0.0, s.sec_per_iter))


def implicit_of(g: int, measured: dict[int, float] | None) -> float:
    return (measured or {}).get(g, statmodel.implicit_momentum(g))


def candidate_rows(scored: list[Scored], implicit: dict[int, float] | None = None):
    """The plan file's record of every configuration considered."""
    from omnitune.plan import Candidate

    return tuple(Candidate(
        layout=s.config.layout, protocol=s.config.protocol, groups=s.config.g, batch_size=s.config.batch,
        lr=s.config.lr, momentum=s.config.momentum, implicit_momentum=implicit_of(s.config.g, implicit),
        sec_per_iter=s.sec_per_iter, iters_to_target=s.iters, time_to_target_s=s.time_to_target_s,
        note=s.probe.note if s.probe else "not probed",
        iters_band=tuple(s.probe.interval) if s.probe and s.probe.interval and s.iters else ()) for s in scored)


def build_plan(scored: list[Scored], profile: Profile, profile_path: str, workload: str,
               data_dir: str | None, target: float, seed: int, created_at: str,
               implicit: dict[int, float] | None = None):
    """The winning configuration as a Plan; a clear error when no probe reached the target."""
    from omnitune.errors import UserError
    from omnitune.plan import Plan, Prediction

    best = scored[0]
    if best.time_to_target_s is None:
        notes = sorted({s.probe.note for s in scored if s.probe})
        raise UserError(f"--target-accuracy {target}: no probe reached it or could extrapolate to it "
                        f"(probe outcomes: {', '.join(notes) or 'none run'}); try a lower target, "
                        "a larger --probe-iters or other --lr values")
    c = best.config
    cluster = profile.cluster
    devices = tuple(cluster.device(d) for g in c.groups for d in g)
    return Plan(
        schema_version=1, workload=workload, data_dir=data_dir, target_accuracy=target, seed=seed,
        protocol=c.protocol, layout=c.layout, devices=devices, groups=c.groups,
        batch_size={d.id: c.batch for d in devices}, lr=c.lr, momentum=c.momentum,
        implicit_momentum=implicit_of(c.g, implicit),
        prediction=Prediction(best.sec_per_iter, best.iters, best.time_to_target_s),
        candidates=candidate_rows(scored, implicit), profile=profile_path, rendezvous=cluster.rendezvous,
        server_host=cluster.server_host, created_at=created_at)
