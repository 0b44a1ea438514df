"""Training protocols: each one a frozen value that knows everything the planner and the runtime
need of it. No other module compares protocol names.

A variant is a protocol with its shape: how many compute groups (Omnivore), Rudra's n, gossip's
period, and whether per-device batches follow measured speed (Ji et al. 2019). Each class holds
one protocol's whole story:
    validate(group_sizes)      which groupings of devices it takes
    has_server                 whether a parameter-server process joins the workers
    gradients_per_update       how many gradients the server sums into one update
    samples_per_update(b)      the samples one iteration (the runtime's unit) consumes
    sec_per_update(costs)      its hardware-efficiency equation (perfmodel supplies the costs)
    asynchrony                 the g of Omnivore's rule for explicit momentum, mu* - (1 - 1/g)
    less_asynchronous(n)       what re-planning falls back to when asynchrony gives too much momentum
and `admitted(n, names)` lists the variants that n devices admit. Pure: no torch, files or processes.

Notation (seconds):
    T_i   one minibatch of compute group i: compute, its all-reduce and, with a server, its exchange
    c     the slowest device's compute step
    A     an all-reduce of the model among all devices
    R     a point-to-point round trip of the model
    s     the server's time per update (service time)
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, replace
from typing import ClassVar

import numpy as np

GOSSIP_PERIODS = (1, 4)        # the periods the planner tries


@dataclass(frozen=True)
class Costs:
    """What one configuration's pieces take on the hardware, in seconds (see the notation)."""
    group_steps: tuple[float, ...]     # T_i
    compute: float                     # c
    allreduce: float                   # A
    round_trip: float                  # R
    server_service: float              # s


def split(device_ids: tuple[str, ...], g: int) -> tuple[tuple[str, ...], ...]:
    """g groups of sizes as equal as they can be (Omnivore: equal), consecutive devices together
    (on a cluster of several nodes, a group stays on its node where it can); larger groups first."""
    k, extra = divmod(len(device_ids), g)
    starts = [i * k + min(i, extra) for i in range(g + 1)]
    return tuple(tuple(device_ids[a:b]) for a, b in zip(starts, starts[1:]))


def by_speed(device_ids: tuple[str, ...], speeds: dict[str, float], g: int, balanced: bool) \
        -> tuple[tuple[str, ...], ...]:
    """g groups of devices of unequal speed. With equal batches a group steps at its slowest
    member's pace, so devices of like speed go together (consecutive in order of speed, fastest
    first). With balanced batches a group's speed is its members' sum, so each device, fastest
    first, joins the group with the least speed so far (the fewest members on a tie): groups of
    near-equal speed, however many members that takes."""
    order = sorted(device_ids, key=lambda d: -speeds[d])
    if not balanced:
        return split(tuple(order), g)
    groups: list[list[str]] = [[] for _ in range(g)]
    for d in order:
        min(groups, key=lambda m: (sum(speeds[x] for x in m), len(m))).append(d)
    return tuple(tuple(m) for m in groups)


def same_groups(a: tuple[tuple[str, ...], ...], b: tuple[tuple[str, ...], ...]) -> bool:
    """Whether two groupings put the same devices together, whatever their order."""
    return {frozenset(g) for g in a} == {frozenset(g) for g in b}


def sample_weights(batches: list[int]) -> list[float]:
    """Each replica's share of an average weighted by the samples it trained on (hpsgd's merged
    change, a gossip pair's mean): equal for equal batches."""
    return [b / sum(batches) for b in batches]


def _server_rate(c: Costs, per_update: int) -> float:
    """Updates per second when groups send at their own pace, 1/T_i each, and the server applies
    one update per `per_update` gradients, unless it saturates at 1/s (a queueing bound)."""
    return min(sum(1.0 / t for t in c.group_steps) / per_update, 1.0 / c.server_service)


@dataclass(frozen=True, kw_only=True)
class Variant:
    """A protocol with its shape. Subclasses set `protocol`, and may name the field that counts
    their groups (SHAPE) and the parameter that changes their speed (PARAM)."""
    balanced: bool = False           # per-device batches follow measured speed (Ji et al. 2019)

    protocol: ClassVar[str]
    has_server: ClassVar[bool] = False
    SHAPE: ClassVar[str | None] = None     # the field holding the number of groups; None: one group
    PARAM: ClassVar[str | None] = None     # the field of the protocol's own parameter
    TAG: ClassVar[str] = "protocol"        # files name the class by this key
    _kinds: ClassVar[dict[str, type[Variant]]] = {}

    def __init_subclass__(cls, **kw):
        super().__init_subclass__(**kw)
        Variant._kinds[cls.protocol] = cls

    @classmethod
    def kinds(cls) -> dict[str, type[Variant]]:
        """Every protocol by name, in the order the planner tries them."""
        return dict(Variant._kinds)

    @property
    def groups(self) -> int:
        return getattr(self, self.SHAPE) if self.SHAPE else 1

    @property
    def gradients_per_update(self) -> int:
        return 1

    @property
    def scales_lr_by_staleness(self) -> bool:
        return False

    @property
    def key(self) -> str:
        """The protocol with the parameter that changes its speed: "softsync/n=2", "gossip/every=4"."""
        return f"{self.protocol}/{self.PARAM}={getattr(self, self.PARAM)}" if self.PARAM else self.protocol

    @property
    def detail(self) -> str:
        """The protocol's parameter and balancing, for tables: "n=2", "every=4, balanced"."""
        parts = [f"{self.PARAM}={getattr(self, self.PARAM)}"] if self.PARAM else []
        return ", ".join(parts + (["balanced"] if self.balanced else []))

    @property
    def label(self) -> str:
        return f"{self.protocol} ({self.detail})" if self.detail else self.protocol

    def validate(self, group_sizes: tuple[int, ...]) -> None:
        """Raise ValueError unless devices split into groups of these sizes can run this variant."""
        if len(group_sizes) != self.groups:
            raise ValueError(f"{self.label} takes {self.groups} group(s), got {len(group_sizes)}")
        if min(group_sizes, default=0) < 1:
            raise ValueError(f"{self.label}: every group needs a device")

    def group(self, device_ids: tuple[str, ...]) -> tuple[tuple[str, ...], ...]:
        """The devices (in rank order) split into this variant's groups."""
        return split(tuple(device_ids), self.groups)

    def sec_per_update(self, c: Costs) -> float:
        raise NotImplementedError

    def samples_per_update(self, batches: tuple[tuple[int, ...], ...]) -> float:
        """Samples one iteration consumes, from each group's per-device batches. An iteration is
        the runtime's unit: a model update, or with no server a step of every replica."""
        return float(sum(map(sum, batches)))

    @property
    def asynchrony(self) -> float:
        """The g of the rule 1 - 1/g: updates a gradient's information takes to arrive, plus one,
        in the steady state of equal speeds. Only the rule uses it; probes train the protocol."""
        return 1.0

    def implicit_momentum(self) -> float:
        """Momentum that asynchrony adds by the rule (Mitliagkas et al. 2016): 1 - 1/g."""
        return 1.0 - 1.0 / self.asynchrony

    def rule_momentum(self, mu_star: float) -> float:
        """The explicit momentum that keeps the total at the synchronous optimum mu*; may be zero
        or negative (Omnivore)."""
        return round(mu_star - self.implicit_momentum(), 4)

    @property
    def eval_period(self) -> int:
        """Iterations between the states that are evaluated: the model a run reports is the
        coordinator's right after such an iteration (gossip: its pairwise average), so the
        runtime and the probes evaluate it only there."""
        return 1

    @property
    def lr_gain(self) -> float:
        """How much larger the base learning rate is than the step a gradient actually gets:
        Rudra's rule divides each step by its staleness, so its base rate is tuned this much
        higher."""
        return 1.0

    def less_asynchronous(self, n_devices: int) -> Variant | None:
        """Omnivore's fall-back when re-tuning finds the best explicit momentum is zero: the same
        devices with less asynchrony, or None when there is none to remove."""
        return None

    @classmethod
    def admitted(cls, n_devices: int, heterogeneous: bool = False) -> list[Variant]:
        """This protocol's variants on n devices (unbalanced); on devices of unequal speed, also
        those whose groups must differ in size."""
        raise NotImplementedError


@dataclass(frozen=True, kw_only=True)
class Sync(Variant):
    """One group: every device computes a share of the minibatch, gradients are all-reduced and
    every replica steps."""
    protocol: ClassVar[str] = "sync"

    def sec_per_update(self, c: Costs) -> float:
        return c.group_steps[0]

    @classmethod
    def admitted(cls, n_devices: int, heterogeneous: bool = False) -> list[Variant]:
        return [cls()]


@dataclass(frozen=True, kw_only=True)
class Groups(Variant):
    """Omnivore's compute groups: synchronous inside a group; each group's leader sends the
    group's gradient to a parameter server, which applies it on arrival (asynchronous across
    groups), and takes fresh weights back."""
    g: int = 2
    protocol: ClassVar[str] = "groups"
    has_server: ClassVar[bool] = True
    SHAPE: ClassVar[str] = "g"

    def __post_init__(self):
        if self.g < 1:
            raise ValueError(f"groups: g must be at least 1, got {self.g}")

    def sec_per_update(self, c: Costs) -> float:
        return 1.0 / _server_rate(c, 1)

    def samples_per_update(self, batches: tuple[tuple[int, ...], ...]) -> float:
        return sum(map(sum, batches)) / len(batches)         # one group's gradient per update

    @property
    def asynchrony(self) -> float:
        return float(self.g)                                # g - 1 updates between a read and its apply

    def less_asynchronous(self, n_devices: int) -> Variant | None:
        """The next smaller g that splits the devices evenly; g = 1 is sync."""
        if self.groups <= 1:
            return None
        g = max(k for k in range(1, self.groups) if n_devices % k == 0)
        return Groups(g=g, balanced=self.balanced) if g > 1 else Sync(balanced=self.balanced)

    @classmethod
    def admitted(cls, n_devices: int, heterogeneous: bool = False) -> list[Variant]:
        """Every g that splits the devices evenly; on devices of unequal speed every g, since
        groups formed by speed differ in size anyway."""
        return [cls(g=g) for g in range(2, n_devices + 1) if heterogeneous or n_devices % g == 0]


@dataclass(frozen=True, kw_only=True)
class SoftSync(Variant):
    """Rudra's n-softsync: every device is a learner; the server applies one update per
    ceil(learners / n) gradients, each gradient's step divided by its staleness (at least 1).
    n = 1 waits for every learner; n = learners updates on each gradient."""
    learners: int = 2
    n: int = 1
    scale_lr_by_staleness: bool = True
    protocol: ClassVar[str] = "softsync"
    has_server: ClassVar[bool] = True
    SHAPE: ClassVar[str] = "learners"
    PARAM: ClassVar[str] = "n"

    def __post_init__(self):
        if not 1 <= self.n <= self.learners:
            raise ValueError(f"softsync: n must be in 1..{self.learners} (the learners), got {self.n}")

    @property
    def gradients_per_update(self) -> int:
        return math.ceil(self.learners / self.n)

    @property
    def scales_lr_by_staleness(self) -> bool:
        return self.scale_lr_by_staleness

    def validate(self, group_sizes: tuple[int, ...]) -> None:
        super().validate(group_sizes)
        if any(size != 1 for size in group_sizes):
            raise ValueError("softsync takes one device per group (each a learner)")

    def sec_per_update(self, c: Costs) -> float:
        if self.n == 1:                  # every learner waits for the slowest
            return max(c.group_steps)
        return 1.0 / _server_rate(c, self.gradients_per_update)

    def samples_per_update(self, batches: tuple[tuple[int, ...], ...]) -> float:
        return self.gradients_per_update * sum(map(sum, batches)) / len(batches)

    @property
    def asynchrony(self) -> float:
        return self.learners / self.gradients_per_update    # updates in one round of every learner

    @property
    def lr_gain(self) -> float:
        return max(1.0, self.asynchrony - 1.0) if self.scale_lr_by_staleness else 1.0

    def less_asynchronous(self, n_devices: int) -> Variant | None:
        """Half as many updates per round of gradients (smaller n); n = 1 is as synchronous as
        softsync gets."""
        return replace(self, n=self.n // 2) if self.n > 1 else None

    @classmethod
    def admitted(cls, n_devices: int, heterogeneous: bool = False) -> list[Variant]:
        if n_devices < 2:
            return []
        return [cls(learners=n_devices, n=k) for k in sorted({1, max(1, n_devices // 2), n_devices})]


@dataclass(frozen=True, kw_only=True)
class HPSGD(Variant):
    """Hierarchical parallel SGD: each worker commits local steps to a replica while the
    all-reduce of the previous step's change runs during the next forward and backward pass; the
    average change is merged into the global model (gradients one step stale)."""
    protocol: ClassVar[str] = "hpsgd"

    def sec_per_update(self, c: Costs) -> float:
        return max(c.compute, c.allreduce)      # the all-reduce hides behind the next step

    @property
    def asynchrony(self) -> float:
        return 2.0                              # the others' changes arrive one step late

    def less_asynchronous(self, n_devices: int) -> Variant | None:
        return Sync(balanced=self.balanced)

    @classmethod
    def admitted(cls, n_devices: int, heterogeneous: bool = False) -> list[Variant]:
        return [cls()] if n_devices >= 2 else []


@dataclass(frozen=True, kw_only=True)
class Gossip(Variant):
    """Gossip SGD (Jin et al. 2016): no server and no barrier; every `every` steps each worker
    averages its weights with one peer of a seeded random perfect matching."""
    every: int = 1
    protocol: ClassVar[str] = "gossip"
    PARAM: ClassVar[str] = "every"

    def __post_init__(self):
        if self.every < 1:
            raise ValueError(f"gossip: every must be at least 1, got {self.every}")

    def sec_per_update(self, c: Costs) -> float:
        return c.compute + c.round_trip / self.every     # a pairwise exchange every `every` steps

    @property
    def eval_period(self) -> int:
        return self.every          # between averagings a replica drifts alone and reads worse

    def less_asynchronous(self, n_devices: int) -> Variant | None:
        return replace(self, every=self.every // 2) if self.every > 1 else None

    @classmethod
    def admitted(cls, n_devices: int, heterogeneous: bool = False) -> list[Variant]:
        return [cls(every=e) for e in GOSSIP_PERIODS] if n_devices >= 2 else []


def matching(round_: int, n: int, seed: int) -> list[int]:
    """Gossip's random perfect matching of n workers for one round, the same on every worker:
    partner[i], or -1 for the one left out when n is odd."""
    order = np.random.default_rng([seed, round_]).permutation(n)
    partner = [-1] * n
    for a, b in zip(order[0::2], order[1::2]):
        partner[a], partner[b] = int(b), int(a)
    return partner


NAMES = tuple(Variant.kinds())


def admitted(n_devices: int, names: tuple[str, ...] = NAMES, heterogeneous: bool = False) -> list[Variant]:
    """The variants n devices admit, for the protocols named; on devices of unequal speed every
    variant also comes balanced, right after it (Ji et al.: batches from measured speed, within a
    group and across asynchronous groups alike)."""
    out: list[Variant] = []
    for name in names:
        for v in Variant.kinds()[name].admitted(n_devices, heterogeneous):
            out.append(v)
            if heterogeneous and n_devices > 1:
                out.append(replace(v, balanced=True))
    return out


def ladders(variants: list[Variant]) -> tuple[list[Variant], list[list[list[Variant]]]]:
    """Omnivore's search order: the synchronous variants (the root), then for each other
    protocol its rungs, from least to most asynchronous, each rung holding the variants of
    equal asynchrony (balanced or not)."""
    root = [v for v in variants if isinstance(v, Sync)]
    out = []
    for kind in Variant.kinds().values():
        mine = [v for v in variants if type(v) is kind and kind is not Sync]
        levels = sorted({v.asynchrony for v in mine})
        if mine:
            out.append([[v for v in mine if v.asynchrony == a] for a in levels])
    return root, out


def from_key(key: str, groups: int) -> Variant:
    """The variant a calibration record names: its key ("softsync/n=2") and number of groups."""
    name, _, param = key.partition("/")
    kind = Variant.kinds()[name]
    fields = {kind.SHAPE: groups} if kind.SHAPE else {}
    if kind.PARAM:
        fields[kind.PARAM] = int(param.partition("=")[2])
    return kind(**fields)


def from_fields(protocol: str, groups: int, softsync_n: int = 1, gossip_every: int = 1, balanced: bool = False,
                scale_lr_by_staleness: bool = True) -> Variant:
    """A variant from the flat fields of a version-1 plan (and its candidates)."""
    kind = Variant.kinds().get(protocol)
    if kind is None:
        raise ValueError(f"protocol: must be one of {', '.join(map(repr, NAMES))}, got {protocol!r}")
    fields = {kind.SHAPE: groups} if kind.SHAPE else {}
    fields.update({"n": softsync_n, "scale_lr_by_staleness": scale_lr_by_staleness} if kind is SoftSync else {})
    fields.update({"every": gossip_every} if kind is Gossip else {})
    v = kind(balanced=balanced, **fields)
    if v.groups != groups:
        raise ValueError(f"{v.label} takes {v.groups} group(s), got {groups}")
    return v


def from_detail(protocol: str, groups: int, detail: str) -> Variant:
    """A variant from a version-1 candidate row: protocol, groups and its detail ("n=2, balanced")."""
    def number(name: str) -> int:
        found = re.search(rf"\b{name}=(\d+)", detail)
        return int(found.group(1)) if found else 1
    return from_fields(protocol, groups, softsync_n=number("n"), gossip_every=number("every"),
                       balanced=bool(re.search(r"\bbalanced\b", detail)))
