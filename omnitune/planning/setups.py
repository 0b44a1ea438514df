"""The setups a profile offers: every layout and the subsets of its devices worth a probe ×
admitted protocol variant × batch, each scored for hardware efficiency (hardware.py)."""

from __future__ import annotations

from dataclasses import replace
from typing import Callable

from omnitune.core import protocols
from omnitune.core.profile import Profile
from omnitune.efficiency.balance import device_batches, wasted
from omnitune.efficiency.perfmodel import PerfModel, Shape
from omnitune.planning.hardware import Hardware, heterogeneous, probe_cost, profiled, speeds
from omnitune.planning.space import DEFAULT_BATCHES, Setup, Space

# A layout's slowest devices are left out one at a time while that speeds some protocol up, at most
# this many: each subset is a full set of setups to score.
MAX_LEFT_OUT = 3


def enumerate_setups(profile: Profile, space: Space, hardware: Hardware | None = None) -> list[Setup]:
    """Every layout and its candidate subsets × admitted variant × batch, scored for hardware
    efficiency (by default the profile's calibrated model; a fleet's simulator for clusters that
    cannot run here)."""
    perf = PerfModel.from_profile(profile)
    hardware = hardware or profiled(profile)
    seen: set[frozenset[str]] = set()      # a set of devices is scored once (the GPUs alone, of every layout)

    def setups(name: str, ids: tuple[str, ...], idle: tuple[tuple[str, str], ...]) -> list[Setup]:
        if frozenset(ids) in seen:
            return []
        seen.add(frozenset(ids))
        return layout_setups(profile, space, perf, hardware, name, ids, idle)
    out = []
    for layout, devices in profile.cluster.layouts.items():
        if space.layouts is None or layout in space.layouts:
            out += subsets(profile, layout, devices, setups)
    return out


def layout_setups(profile: Profile, space: Space, perf: PerfModel, hardware: Hardware, layout: str,
                  devices: tuple[str, ...], idle: tuple[tuple[str, str], ...] = ()) -> list[Setup]:
    """Every admitted variant × batch on these devices. On devices of unequal speed (beyond the
    profile's noise), groups are formed by speed and may differ in size, and every variant also
    comes with balanced batches, unless they give a device under balance.MIN_BALANCED_SHARE of
    the nominal batch: it would be all but idle, and leaving it out is a subset of its own."""
    out = []
    het = heterogeneous(profile, devices)
    fast = speeds(profile, devices)
    for v in protocols.admitted(len(devices), space.protocols, het):
        if space.groups is not None and v.groups not in space.groups:
            continue
        groups = protocols.by_speed(devices, fast, v.groups, v.balanced) if het else v.group(devices)
        for b in batch_sizes(profile, devices, space):
            batch = device_batches(perf.contended(devices), v, groups, b)
            if wasted(v, batch, b):
                continue
            shape = Shape(groups, batch, v, layout)
            sec, staleness = hardware(shape, b)
            batches = tuple(tuple(batch[d] for d in g) for g in groups)
            out.append(Setup(layout, v, groups, b, batches, sec, staleness, probe_cost(perf, shape, batches),
                             idle))
    return out


def subsets(profile: Profile, layout: str, devices: tuple[str, ...],
            setups: Callable[[str, tuple[str, ...], tuple[tuple[str, str], ...]], list[Setup]]) -> list[Setup]:
    """The layout's setups, and those of the subsets of its devices worth a probe. The hardware
    model prunes: on devices of one kind but unequal speed the slowest is left out only if some
    protocol, at some batch, runs more samples per second without it, and so on while that holds
    (at most MAX_LEFT_OUT); with CPUs beside GPUs, each kind alone instead (the GPUs alone, the
    CPUs alone), unless a layout of that kind holds them already. Each subset's setups say which
    devices sit idle and why."""
    whole = setups(layout, devices, ())
    out = list(whole)
    kinds = {profile.cluster.device(d).kind for d in devices}
    if len(kinds) > 1:
        for kind in sorted(kinds):
            mine = tuple(d for d in devices if profile.cluster.device(d).kind == kind)
            if not within_another(profile, layout, mine):
                out += setups(f"{layout}: {kind} only", mine,
                              tuple((d, f"{kind} only") for d in devices if d not in mine))
        return out
    fast = speeds(profile, devices)
    current, idle, kept = devices, (), whole
    while len(current) > 1 and len(idle) < MAX_LEFT_OUT and heterogeneous(profile, current):
        slowest = min(current, key=fast.get)
        fewer = tuple(d for d in current if d != slowest)
        name = f"{layout} less {','.join([x for x, _ in idle] + [slowest])}"
        trial = setups(name, fewer, ())
        before = best_rates(kept)
        gain = max(((after / before[x], x) for x, after in best_rates(trial).items() if x in before),
                   default=(0.0, ""))
        if gain[0] <= 1.0:
            break
        idle += ((slowest, f"{fast[slowest]:,.0f} samples/s, the slowest: {gain[1]} runs {gain[0] - 1:.0%} "
                           "more samples per second without it"),)
        kept = [replace(s, idle=idle) for s in trial]
        out += kept
        current = fewer
    return out


def within_another(profile: Profile, layout: str, devices: tuple[str, ...]) -> bool:
    """Whether another layout of one kind holds all these devices (the GPUs alone; the CPU
    workers beside a GPU, which are one-per-core less the GPU's core): its own setups cover them."""
    kinds = {profile.cluster.device(d).kind for d in devices}
    return any(name != layout and set(devices) <= set(ids) and {profile.cluster.device(d).kind for d in ids} == kinds
               for name, ids in profile.cluster.layouts.items())


def best_rates(setups: list[Setup]) -> dict[str, float]:
    """The most samples per second of each protocol (balanced or not), over its shapes and batches:
    what a subset is compared on."""
    out: dict[str, float] = {}
    for s in setups:
        key = f"{s.variant.protocol}{' (balanced)' if s.variant.balanced else ''} at batch {s.batch}"
        out[key] = max(out.get(key, 0.0), s.samples_per_s)
    return out


def batch_sizes(profile: Profile, devices: tuple[str, ...], space: Space) -> list[int]:
    """The space's batch sizes, less those beyond what every device of the layout was profiled at;
    GPUs alone go on doubling the default sizes as far as their curve was measured (a GPU's
    throughput goes on rising past where a CPU's has levelled off)."""
    largest = min(profile.device(d).max_batch for d in devices)
    sizes = list(space.batch_sizes)
    if space.batch_sizes == DEFAULT_BATCHES and all(profile.cluster.device(d).kind == "cuda" for d in devices):
        while sizes[-1] * 2 <= largest:
            sizes.append(sizes[-1] * 2)
    return [b for b in sizes if b <= largest]
