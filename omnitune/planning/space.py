"""What the search chooses among: the space a user may pin (`Space`), a setup's hardware side
(`Setup`: where and how it runs, how fast), a configuration (`Config`: a setup with a learning
rate and momentum), and a scored configuration (`Scored`: its speed and its probe)."""

from __future__ import annotations

from dataclasses import dataclass, replace

from omnitune.core import protocols
from omnitune.core.protocols import Variant
from omnitune.core.recipe import Recipe
from omnitune.efficiency.statmodel import ProbeConfig, ProbeResult

DEFAULT_BATCHES = (8, 16, 32, 64, 128, 256)
LR_DECADES = (0.1, 0.01, 0.001, 0.0001)   # Omnivore's cold start
ADAMW_DECADES = (0.01, 0.001, 0.0001)     # AdamW's usual range: its steps are scaled by the gradients' size
MU_STAR = 0.9                             # the synchronous optimum Omnivore starts from
OMNIVORE_MOMENTA = (0.0, 0.3, 0.6, 0.9)   # the momentum grid Omnivore searches for g > 1


@dataclass(frozen=True)
class Space:
    """What to search. A field given a single value pins it (the CLI's --protocol etc.)."""
    protocols: tuple[str, ...] = protocols.NAMES
    groups: tuple[int, ...] | None = None          # None: every g that splits the devices evenly
    batch_sizes: tuple[int, ...] = DEFAULT_BATCHES
    lrs: tuple[float, ...] | None = None           # None: search decades, then refine
    momentum: float | None = None                  # None: the rule mu* - implicit, and OMNIVORE_MOMENTA
    layouts: tuple[str, ...] | None = None
    decades: tuple[float, ...] = LR_DECADES        # the cold start's rates, largest first (the recipe's)
    decays: tuple[float, ...] = ()                 # weight decays: the recipe's first, then the grid's; one pins it

    def for_recipe(self, recipe: Recipe) -> "Space":
        """The space for a workload's recipe: AdamW's cold start begins at its own rates, and a
        recipe with weight decay has it compared on a coarse grid (Recipe.decays), unless pinned."""
        decades = ADAMW_DECADES if recipe.optimizer == "adamw" else self.decades
        return replace(self, decades=decades, decays=self.decays or recipe.decays())


@dataclass(frozen=True)
class Config:
    layout: str
    variant: Variant
    groups: tuple[tuple[str, ...], ...]
    batch: int                                     # per device (before balancing)
    lr: float
    momentum: float
    idle: tuple[tuple[str, str], ...] = ()         # devices of the layout left out, and why
    weight_decay: float | None = None              # over the recipe's (None: the recipe's)

    @property
    def g(self) -> int:
        return len(self.groups)


@dataclass(frozen=True)
class Setup:
    """A configuration's hardware side: where and how it runs, and how fast (perfmodel)."""
    layout: str
    variant: Variant
    groups: tuple[tuple[str, ...], ...]
    batch: int                                     # per device (before balancing)
    batches: tuple[tuple[int, ...], ...]           # per group, each device's batch (balanced or not)
    sec_per_iter: float
    staleness: tuple[int, ...] = ()                # measured by the profile's calibration job
    probe_sec_per_iter: float = 0.0                # a probe's iteration: every replica's compute, in one process
    idle: tuple[tuple[str, str], ...] = ()         # devices of the layout left out, and why
    model_sec_per_iter: float | None = None        # set when a real job timed sec_per_iter: the model's figure

    def scored(self, lr: float, momentum: float, probe: ProbeResult | None = None, note: str = "",
               weight_decay: float | None = None) -> "Scored":
        return Scored(self.config(lr, momentum, weight_decay), self.sec_per_iter, probe, note, self.model_sec_per_iter)

    @property
    def samples_per_s(self) -> float:
        return self.variant.samples_per_update(self.batches) / self.sec_per_iter

    def config(self, lr: float, momentum: float, weight_decay: float | None = None) -> Config:
        return Config(self.layout, self.variant, self.groups, self.batch, lr, momentum, self.idle, weight_decay)

    def probe(self, lr: float, momentum: float, weight_decay: float | None = None) -> ProbeConfig:
        """What a probe of this setup trains: configurations alike in it share statistical efficiency."""
        return ProbeConfig(self.variant, self.batches, lr, momentum, self.staleness if self.variant.has_server else (),
                           weight_decay)


@dataclass(frozen=True)
class Scored:
    config: Config
    sec_per_iter: float
    probe: ProbeResult | None = None
    note: str = ""                                 # why it was not probed
    model_sec_per_iter: float | None = None        # set when a real job timed it: the model's figure

    @property
    def iters(self) -> float | None:
        return self.probe.iters_to_target if self.probe else None

    @property
    def time_to_target_s(self) -> float | None:
        return None if self.iters is None else self.iters * self.sec_per_iter

    @property
    def setup_key(self) -> tuple:
        c = self.config
        return (c.layout, c.variant, c.groups, c.batch)


def faster_twin(s: Setup, setups: list[Setup]) -> Setup | None:
    """The fastest setup that makes the same updates as `s` in less time, if any. Sync's update is
    one step on the gradient of all its devices' samples together, so sync setups with as many
    samples per update (one worker at batch 256, both cores at 128 each) need the same iterations
    and differ only in seconds per iteration: the slower is never worth a probe, and compared at
    equal training time it trains fewer iterations of the same updates, so a lead in loss would be
    noise."""
    if not isinstance(s.variant, protocols.Sync):
        return None
    samples = s.variant.samples_per_update(s.batches)
    twins = [t for t in setups if isinstance(t.variant, protocols.Sync) and t.sec_per_iter < s.sec_per_iter
             and t.variant.samples_per_update(t.batches) == samples]
    return min(twins, key=lambda t: t.sec_per_iter, default=None)
