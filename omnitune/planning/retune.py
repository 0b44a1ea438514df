"""Re-tuning during a run, as Omnivore's optimizer does at every epoch (Hadjis et al. 2016, §4):
the run pauses at a checkpoint, short probes from it compare learning rates (and, with
asynchrony, momenta; where their step times are known, batches and protocols), and the run goes
on with the winner. Pure: the probes are run by
probing/pause.py, the pauses by runtime/job.py.

When: runtime/job.py pauses the run (`next_stop`): phases double, and re-tuning costs at
most a tenth of the training time so far, so a short run is never paused.

What: the current learning rate and ×3, ÷3, ×10, ÷10 of it at the current momentum (×10 and ÷10
read only where ×3 or ÷3 read better than the current rate: `further`); with
asynchrony, the current rate at Omnivore's momenta as well; where the hardware model gives their
step times, twice and half the batch at twice and half the rate (`candidates`). A batch is read
after as many updates as fit in the current setting's time (probing/pause.py): the hardware
efficiency is in the comparison. Its rate follows the batch (linear scaling, Goyal et al. 2017),
so that the gradient's noise per sample stays and short-horizon bias (below) neither favours
nor blocks it. Omnivore's other axis, the protocol on the same devices, is a candidate where a
real job timed its shape and the model gives it more than Rules.protocol_gain more samples a second
(`faster_protocols`), at the momentum that keeps the run's total: whether the asynchrony costs
more in statistical efficiency than it gains in speed is what its reading at equal time says.

Which: each candidate trains the same batches from the checkpoint (its velocity scaled by the
old rate over the candidate's: runtime/optim.py's momentum correction, which the run applies
when it switches too), then cools down: half as many updates again at a tenth of its rate
(`cooldown`, Rules.cool_rate). It is read on a fixed validation subset twice (paired comparisons):
after its updates (raw) and after its cool-down.
Each reading alone misleads, against each rate's iterations to the target from the same
checkpoint (docs/decisions.md, retune.Rules.cool_rate). Raw, the lower rates look better: after 30
updates they sit closer to the minimum's noise floor, whatever progress the higher ones made
(short-horizon bias), and a run that follows them trains longer. Cooled, a rate too high to keep
can look best: three times a rate that reaches the target can score best cooled and never reach it
at a constant rate. So the run switches only when a candidate beats the current setting on both
readings by more than the noise, the spread of either one's readings over repeats on other batches
(`decide`: hysteresis).

That is not enough against short-horizon bias, which runs one way: towards lower rates (Wu et al.
2018). A third of the rate can read better than the rate itself raw and cooled, after 30, 100 and
300 updates alike, and still take almost twice the iterations to the target (docs/decisions.md,
retune.Rules.cool_rate and retune.Rules.cool_share). So a pause lowers the rate only where the run's own
readings say it is stuck (`stalled` with no recent pace that gets to the target, or off pace, too
slow to reach its target within its time limit, past half its way: runtime/job.py,
runtime/monitor.py) or the cool-down reaches the target; otherwise it may raise it. A stall lowers
it one step, to a third at most (`lowest`): an early stall can read a tenth as better, and a run
that takes it falls short (docs/decisions.md, retune.Rules.stall_step).
A stall on the way is checked for a plateau instead (`plateau`), as is a run off pace: the
current rate and a third of it train Rules.plateau_updates times a pause's updates each, and the rate
drops a step only where the third reads Rules.plateau_gain lower. A rate too high to settle sits in its
noise and gains that much at once; but so, early on, do some runs that reach their target at
their rate (`plateau`): the check tells the two apart only late in a run.
A pause of a run that is not stalled reads only the settings it may switch to
(`spec_candidates`), none of a lower rate per sample (a sync plan whose batches the profile
prices: 6 readings, the repeats counted and ×10 passed over, not 9). One whose current setting
diverged reads none of a larger rate and momentum (`below`, Omnivore's rule).

The batch also grows by its goodput (`grown`, efficiency/goodput.py), as Pollux re-sizes
batches: the gradient noise scale, measured at the pause, grows as the loss falls, and where two
or four times the batch trains Rules.goodput_gain more goodput by the hardware model, it is read at
AdaScale's rate and taken unless its readings are worse than the current setting's beyond that
setting's own noise (`vetoed`). A probe before the run sees only its start, where the noise
scale is small.

When the chosen setting's cool-down reaches the target on the validation subset, the run goes
on at the cooled rate: a rate that sits on a plateau below the target while a lower one would
cross it is the case re-tuning is for. Where the winner's momentum is zero or below, asynchrony
already gives more momentum than is wanted, and the run falls back to less of it (`retuned`).
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass, replace
from typing import NamedTuple

from omnitune.core import protocols
from omnitune.core.protocols import Variant
from omnitune.core.runspec import RunSpec
from omnitune.efficiency import goodput
from omnitune.planning.hardware import StepTime
from omnitune.planning.space import OMNIVORE_MOMENTA

@dataclass(frozen=True)
class Rules:
    """The re-tuning pause's constants (docs/decisions.md, retune.*)."""
    lr_steps: tuple[float, ...] = (1.0, 3.0, 1 / 3, 10.0, 0.1)     # candidates' learning rates, times the current one
    near_step: tuple[tuple[float, float], ...] = ((10.0, 3.0), (0.1, 1 / 3))   # (far, near): a far rate is read only where the near one before it won (`further`)
    noise_floor: float = 0.01       # scores closer than this fraction of the current one are a tie
    stall_step: float = 1 / 3       # a stalled run's pause lowers the rate per sample at most to this share (`lowest`)
    rounding: float = 0.01          # rates per sample this close are the same: `rate` keeps 3 digits (0.04 / 3 = 0.0133)
    cool_rate: float = 0.1          # a candidate's cool-down rate, times its own
    cool_share: float = 0.5         # its cool-down's updates, times those at its rate

    plateau_updates: int = 10       # a plateau check reads the current rate and a third of it this many times a pause's updates
    plateau_gain: float = 0.12      # and lowers the rate where the third's validation loss is this much lower (`plateau`)

    batch_steps: tuple[float, ...] = (2.0, 0.5)   # candidates' batches, times the current ones (where their step times are known)
    protocol_gain: float = 0.1      # another protocol is a candidate where it trains this much more samples a second
    protocols: int = 2              # and at most this many, the fastest
    growth: tuple[float, ...] = (2.0, 4.0)      # batch scales the goodput may grow to (`grown`), where the hardware model prices them
    goodput_gain: float = 0.10      # and only for this much more goodput (Pollux re-configures for ~5%: its batches thrashed without)


RULES = Rules()


class Setting(NamedTuple):
    """What a pause compares: a learning rate and momentum, at the current batches times `batch`,
    on the current protocol or `variant`."""
    lr: float
    momentum: float
    batch: float = 1.0
    variant: Variant | None = None

    @property
    def noise(self) -> float:
        """The rate per sample of batch (its gradient noise's temperature): lower is what short
        horizons favour."""
        return self.lr / self.batch


def candidates(lr: float, momentum: float, asynchronous: bool, batches: tuple[float, ...] = (),
               protocols: tuple[tuple[Variant, float, float], ...] = ()) -> list[Setting]:
    """The settings a pause compares, the current one first; `batches`: the batch scales whose
    step times the hardware model gives, each at its scaled rate; `protocols`: other variants
    with their rate and momentum (`faster_protocols`)."""
    out = [Setting(rate(lr, f), momentum) for f in RULES.lr_steps]
    if asynchronous:
        out += [Setting(lr, m) for m in OMNIVORE_MOMENTA]
    out += [Setting(rate(lr, f), momentum, f) for f in batches]
    out += [Setting(v_lr, m, 1.0, v) for v, v_lr, m in protocols]
    return list(dict.fromkeys(out))


def spec_candidates(spec: RunSpec, step_s: StepTime | None, stalled: bool = True) -> list[Setting]:
    """`candidates` for a running spec: with asynchrony, the momenta; with the hardware model,
    the batches and protocols it prices; `readable` of them, as the run is `stalled` or not."""
    return readable(candidates(spec.lr, spec.momentum, spec.variant.implicit_momentum() > 0,
                               batch_scales(spec, step_s), faster_protocols(spec, step_s)), stalled)


def readable(settings: list[Setting], stalled: bool) -> list[Setting]:
    """The `settings` (the current one first) a pause reads: for a run that is not stalled, none
    of a lower rate per sample of batch, which `challenger` passes over (short-horizon bias); of
    a sync plan's 7 candidates where the profile prices its batches, 5. A stalled run's pause
    reads them all: a stall may be a rate too high to settle or one too low to move, which sits
    at chance (docs/decisions.md, retune.readable)."""
    if stalled:
        return settings
    return [c for c in settings if c.noise >= settings[0].noise * (1 - RULES.rounding)]


def below(settings: list[Setting], current: Setting) -> list[Setting]:
    """The `settings` a pause reads once `current` diverged (in the run, or from the checkpoint):
    none whose learning rate and momentum are both at least its own, as Omnivore's optimizer
    skips them after a divergence (Hadjis et al. 2016). The larger rates, twice the batch at twice
    the rate and the goodput's batch at AdaScale's rate among them. After a divergence neither
    three times the rate nor twice the batch reads best, and the best reading is what a diverged
    setting's pause takes (`decide`), so reading them only lengthens the pause (docs/decisions.md,
    retune.below)."""
    return [s for s in settings
            if not (s.lr >= current.lr * (1 - RULES.rounding) and s.momentum >= current.momentum)]


def further(setting: Setting, current: Setting, readings: dict[Setting, list[Reading]]) -> bool:
    """Whether a pause reads `setting` after `readings`: a rate ten times or a tenth of the
    current one (RULES.near_step's far rates) only where the step before it (three times, a third) read
    lower than the current setting on both losses; any other setting, always. Ten times the rate
    reads better only where three times does, and a tenth only where a third does, so the far
    reading, one of a pause's 6-9, decides nothing that the near one has not (docs/decisions.md,
    retune.further)."""
    for far, near in RULES.near_step:
        if Setting(*setting) == Setting(rate(current.lr, far), current.momentum):
            step = Setting(rate(current.lr, near), current.momentum)
            if step not in readings:
                return False
            # a setting with a reading that is not finite reads worse than any that is
            raw, cooled = means(readings, "raw"), means(readings, "cooled")
            return all(x.get(step, math.inf) < x.get(current, math.inf) for x in (raw, cooled))
    return True


def batch_scales(spec: RunSpec, step_s: StepTime | None) -> tuple[float, ...]:
    """The RULES.batch_steps a pause may try: those that change a batch and whose step time the
    hardware model gives (none without one)."""
    if step_s is None or not step_s(spec):
        return ()
    return tuple(f for f in RULES.batch_steps if scaled(spec, f).batch_size != spec.batch_size and step_s(scaled(spec, f)))


def grown(spec: RunSpec, step_s: StepTime | None, phi: float) -> tuple[Setting, float] | None:
    """The larger batch with the most goodput at the gradient noise scale `phi` (goodput.py), at
    AdaScale's rate, and its goodput over the current batch's; None where no scale of RULES.growth the
    hardware model prices gains RULES.goodput_gain. The batch only grows: phi grows over a run, tenfold
    and more (docs/decisions.md, retune.Rules.growth and retune.Rules.goodput_gain), and a pause's short
    readings favour small batches."""
    now = throughput(spec, step_s)
    if now is None or math.isnan(phi):
        return None
    m0 = spec.variant.samples_per_update(spec.group_batches)
    speeds = {1.0: now}
    for f in RULES.growth:
        other = scaled(spec, f)
        if other.batch_size != spec.batch_size and (x := throughput(other, step_s)) is not None:
            speeds[f] = x
    scale, ratio = goodput.best_scale(phi, m0, speeds)
    if scale <= 1.0 or ratio < 1 + RULES.goodput_gain:
        return None
    return Setting(rate(spec.lr, goodput.gain(phi, m0, scale * m0)), spec.momentum, scale), ratio


def faster_protocols(spec: RunSpec, step_s: StepTime | None) -> tuple[tuple[Variant, float, float], ...]:
    """Omnivore's other axis, where the hardware model predicts a gain: the variants the run's
    devices admit (balanced as the current one is) that train more than RULES.protocol_gain more samples
    a second than it, by step times a real job measured (StepTime gives no others), at most
    RULES.protocols of them, fastest first. Each comes with its rate (Rudra's gain carried over) and the
    explicit momentum that keeps the run's total momentum (the rule, Mitliagkas et al. 2016)."""
    now = throughput(spec, step_s)
    if now is None:
        return ()
    total = spec.momentum + spec.variant.implicit_momentum()
    found = []
    for v in protocols.admitted(len(spec.devices)):
        v = replace(v, balanced=spec.variant.balanced)
        if v == spec.variant:
            continue
        other = throughput(shaped(spec, Setting(spec.lr, spec.momentum, 1.0, v)), step_s)
        if other is not None and other > now * (1 + RULES.protocol_gain):
            found.append((other, v))
    found.sort(key=lambda x: -x[0])
    return tuple((v, rate(spec.lr, v.lr_gain / spec.variant.lr_gain), v.rule_momentum(total))
                 for _, v in found[:RULES.protocols])


def throughput(spec: RunSpec, step_s: StepTime | None) -> float | None:
    """Samples a second the hardware model gives the spec; None where it gives no step time."""
    t = step_s(spec) if step_s is not None else None
    if not t:
        return None
    return spec.variant.samples_per_update(spec.group_batches) / t


def timed(step_s: StepTime, spec: RunSpec, seconds: dict[float, float]) -> StepTime:
    """The hardware model with the batch scales a pause timed in place of its ratios: a timed
    scale's step (`seconds[scale]`, seconds a step at that scale of the run's batch; 1.0 the run's
    own) is the model's at the run's batch times the timed ratio, so that figures of other shapes
    stay on the model's footing; a scale the model does not price stays unpriced. A profile's
    curve, timed once apart from the run, can be a fifth off at a point: enough to hide the
    goodput's gain (docs/decisions.md, pause.timed_scales)."""
    base, key = step_s(spec), lambda s: (tuple(sorted(s.batch_size.items())), s.variant, s.groups)
    by_shape = {key(scaled(spec, f)): s / seconds[1.0] for f, s in seconds.items()}

    def step(other: RunSpec) -> float | None:
        own = step_s(other)
        ratio = by_shape.get(key(other))
        return base * ratio if own and base and ratio is not None else own
    return step


def pace(spec: RunSpec, setting: Setting, step_s: StepTime | None) -> float:
    """Updates of `setting` that fit in the time of one of the current spec's (1 where it trains
    the same shape): a pause reads every candidate after equal training time."""
    other = shaped(spec, setting)
    if (other.batch_size, other.variant) == (spec.batch_size, spec.variant):
        return 1.0
    return step_s(spec) / step_s(other)


def rate(lr: float, factor: float) -> float:
    return float(f"{lr * factor:.3g}")


@dataclass(frozen=True)
class Decision:
    setting: Setting         # what the run goes on with
    switched: bool
    margin: float            # what a challenger had to beat the current score by
    reason: str


@dataclass(frozen=True)
class Reading:
    """One candidate read at a pause, on one set of batches: its validation loss after its
    updates (`raw`), after its cool-down (`cooled`), and the target's score after it."""
    raw: float
    cooled: float
    score: float


def cooldown(iters: int) -> int:
    """Updates of a candidate's cool-down after `iters` at its rate."""
    return max(1, round(iters * RULES.cool_share))


def noise(scores: list[float]) -> float:
    """The spread of one setting's scores over repeats on other batches (0 with one score)."""
    return max(scores) - min(scores) if len(scores) > 1 else 0.0


def means(readings: dict[Setting, list[Reading]], field: str) -> dict[Setting, float]:
    """Each setting's mean `field` over its repeats, where every one is finite."""
    out = {}
    for s, v in readings.items():
        xs = [getattr(r, field) for r in v]
        if xs and all(map(math.isfinite, xs)):
            out[s] = statistics.fmean(xs)
    return out


def challenger(current: Setting, readings: dict[Setting, list[Reading]], stalled: bool = False,
               off_pace: bool = False) -> Setting | None:
    """The candidate with the lowest cooled loss among those whose raw loss is below the current
    setting's too (both readings must favour a switch), and whose rate per sample is not below
    `lowest` of the current one's (short-horizon bias); None if there is none."""
    raw, cooled = means(readings, "raw"), means(readings, "cooled")
    mine, floor = raw.get(current, math.inf), Setting(*current).noise * lowest(stalled, off_pace) * (1 - RULES.rounding)
    rivals = [s for s in cooled if s != current and s in raw and raw[s] < mine and Setting(*s).noise >= floor]
    return min(rivals, key=cooled.get, default=None)


def lowest(stalled: bool, off_pace: bool = False) -> float:
    """The lowest rate per sample of batch a challenger may have, times the current one's: the
    current one's where the run is not `stalled`; RULES.stall_step of it where it is, one step, as a
    stall that persists pauses again; any where it is `off_pace` (staying is what fails). A
    stalled run's short readings can favour a tenth of the rate beyond the noise, and a run that
    takes it misses a target it reaches at its own rate, where a third costs it a little more
    time (docs/decisions.md, retune.Rules.stall_step)."""
    return 0.0 if off_pace else RULES.stall_step if stalled else 1.0


def decide(current: Setting, readings: dict[Setting, list[Reading]], target: float = math.inf,
           stalled: bool = False, diverged: bool = False, off_pace: bool = False,
           growth: Setting | None = None) -> Decision:
    """Switch to the `challenger` only when it beats the current setting by more than the noise
    on both the raw and the cooled loss: the larger spread of the two settings' repeats, and at
    least RULES.noise_floor of the current loss. The raw loss alone favours low rates (short-horizon
    bias), the cooled alone high ones that would need cooling soon; where they agree, the switch
    holds on either horizon. A lower rate is a rival only while the run is `stalled`, one step
    down at most unless it is `off_pace` (`lowest`). A setting
    whose loss is not finite never wins. Where the current setting diverged, from the checkpoint
    or in the run (`diverged`), it is no incumbent: the best cooled reading wins. Where the run
    is `off_pace` (runtime/monitor.py: at its pace it misses its target within its time limit),
    staying is what fails, so the repeats' spread does not guard it: the challenger wins where both
    its readings are lower by more than RULES.noise_floor of the current loss: the current rate's own
    swinging repeats, the trouble of such a run, would shield it, and with no floor at all gaps far
    inside the noise switch it, coin tosses (docs/decisions.md, retune.Rules.noise_floor). Where no
    challenger wins, the `growth` (`grown`: a larger batch the goodput favours) is taken unless its
    mean reading is worse than the current setting's beyond that setting's noise (`vetoed`): the
    goodput is the reason to switch, the readings only a check that the new batch and its rate
    train. Then, where the chosen setting's cool-down reached the `target` score on every repeat, go
    on cooled."""
    cooled = means(readings, "cooled")
    if current not in cooled or diverged:
        best = min(cooled, key=cooled.get, default=current)
        why = "from the checkpoint" if current not in cooled else "in the run"
        return cool(Decision(best, best != current, 0.0, f"the current setting diverged {why}: the best cooled "
                             f"reading wins"), readings, target)
    rival = challenger(current, readings, stalled or off_pace, off_pace)
    gaps = {f: gap(readings, current, rival, f) for f in ("raw", "cooled")} if rival else {}
    floors = {f: RULES.noise_floor * abs(statistics.fmean(getattr(r, f) for r in readings[current]))
              for f in ("raw", "cooled")}
    if rival and off_pace and all(gaps[f][0] > floors[f] for f in gaps):
        d = Decision(rival, True, floors["cooled"], "; ".join(f"{f} validation loss lower by {g:.4f} (noise {m:.4f})"
                                                   for f, (g, m) in gaps.items())
                     + f": the run is off pace, and the gaps pass {RULES.noise_floor:.0%} of the current loss")
    elif rival and all(g > m for g, m in gaps.values()):
        d = Decision(rival, True, gaps["cooled"][1],
                     "; ".join(f"{f} validation loss lower by {g:.4f}, beyond the noise {m:.4f}"
                               for f, (g, m) in gaps.items()))
    else:
        margin = gaps["cooled"][1] if rival else max(noise([r.cooled for r in readings[current]]), floors["cooled"])
        d = Decision(current, False, margin, f"no setting beat {cooled[current]:.4f} (cooled) and "
                                             "its raw loss by more than the noise")
    if not d.switched and growth is not None:
        why = vetoed(readings, current, growth)
        if not why:
            return cool(Decision(growth, True, gap(readings, current, growth, "cooled")[1],
                                 f"the goodput grows the batch {growth.batch:g}x at lr {growth.lr:g}; its readings "
                                 "are within the noise of the current setting's or better"), readings, target)
        d = replace(d, reason=f"{d.reason}; the batch {growth.batch:g}x the goodput favours {why}")
    return cool(d, readings, target)


def plateau(current: Setting, readings: dict[Setting, list[Reading]]) -> Decision:
    """A pause of a run that stalled while its recent pace still gets to the target (a "plateau"
    pause, runtime/job.py), or of one off pace, reads `current` and a third of its rate (`step_down`), long
    (RULES.plateau_updates times a pause's updates, no cool-down). The run takes the third where its raw
    validation loss is lower by more than RULES.plateau_gain of the current one's and more than the
    third's spread over its repeats: a rate that sits in its own noise. The current rate's own
    spread is no shield (as in `vetoed`): readings that swing are what a rate too high to settle
    gives, and a run shielded by them stays and misses its target. On a plateau a third of the rate
    reads about a fifth lower; on a run still climbing late on its way, a few percent lower, which
    is short-horizon bias and stays under RULES.plateau_gain. Early in runs that reach their target at
    their rate it reads as much lower as on a plateau, so there the check lowers healthy runs
    (docs/decisions.md, retune.Rules.plateau_gain; job.LOWER_FROM)."""
    lower = step_down(current)
    raw = means(readings, "raw")
    if current not in raw or lower not in raw:
        return Decision(current, False, 0.0, "plateau check: a reading was not finite; no change")
    lower_by = raw[current] - raw[lower]
    need = max(noise([r.raw for r in readings[lower]]), RULES.plateau_gain * raw[current])
    if lower_by > need:
        return Decision(lower, True, need, f"plateau: a third of the rate read validation loss {lower_by:.4f} lower "
                        f"after {RULES.plateau_updates}x a pause's updates, beyond {RULES.plateau_gain:.0%} of the current loss "
                        f"and the noise ({need:.4f})")
    return Decision(current, False, need, f"no plateau: a third of the rate read validation loss {lower_by:.4f} "
                    f"lower after {RULES.plateau_updates}x a pause's updates, within {need:.4f}")


def step_down(current: Setting) -> Setting:
    """`current` at a third of its rate (RULES.stall_step), its batch and momentum as they are."""
    return Setting(*current)._replace(lr=rate(current.lr, RULES.stall_step))


def vetoed(readings: dict[Setting, list[Reading]], current: Setting, growth: Setting) -> str:
    """Why the readings refuse the goodput's larger batch ("" if they do not): no finite reading
    of it, or a raw or cooled validation loss above the current setting's by more than the noise:
    the current setting's spread over its repeats, at least RULES.noise_floor of its loss. The larger
    batch's own spread is no shield: repeats that swing are a batch and rate that do not train
    steadily from here, and a margin of the wider of the two spreads lets such a batch shield
    itself and wreck the run (docs/decisions.md, retune.vetoed)."""
    if growth not in means(readings, "cooled") or growth not in means(readings, "raw"):
        return "diverged in its reading"
    for field in ("raw", "cooled"):
        lower, margin = gap(readings, current, growth, field, rivals_noise=False)
        if -lower > margin:
            return f"read {field} validation loss {-lower:.4f} higher, beyond the noise {margin:.4f}"
    return ""


def gap(readings: dict[Setting, list[Reading]], current: Setting, rival: Setting, field: str,
        rivals_noise: bool = True) -> tuple[float, float]:
    """How much lower `rival`'s mean `field` loss is than `current`'s, and the noise it must beat:
    the larger spread of the two settings' repeats (only `current`'s without `rivals_noise`), at
    least RULES.noise_floor of the current loss."""
    mine = [getattr(r, field) for r in readings[current]]
    theirs = [getattr(r, field) for r in readings[rival]]
    margin = max(noise(mine), noise(theirs) if rivals_noise else 0.0, RULES.noise_floor * abs(statistics.fmean(mine)))
    return statistics.fmean(mine) - statistics.fmean(theirs), margin


def cool(d: Decision, readings: dict[Setting, list[Reading]], target: float) -> Decision:
    """`d`, at its rate times RULES.cool_rate where its cool-down reached `target` on every repeat."""
    mine = readings.get(d.setting, [])
    if not mine or not all(r.score >= target for r in mine):
        return d
    return Decision(Setting(*d.setting)._replace(lr=rate(d.setting[0], RULES.cool_rate)), True, d.margin,
                    f"{d.reason}; cooled to {RULES.cool_rate:g}x its rate it reaches the target on the validation "
                    f"subset (score {min(r.score for r in mine):.4f} >= {target:.4f}): going on cooled")


def scaled(spec: RunSpec, batch: float) -> RunSpec:
    """The spec with every device's batch times `batch` (at least 1)."""
    if batch == 1.0:
        return spec
    return replace(spec, batch_size={d: max(1, round(b * batch)) for d, b in spec.batch_size.items()})


def shaped(spec: RunSpec, setting: Setting) -> RunSpec:
    """The spec at the setting's batches and protocol (its rate and momentum aside)."""
    s = Setting(*setting)
    spec = scaled(spec, s.batch)
    if s.variant is None or s.variant == spec.variant:
        return spec
    return replace(spec, variant=s.variant, groups=s.variant.group(spec.device_ids))


def retuned(spec: RunSpec, setting: Setting) -> RunSpec:
    """The spec at this setting; with less asynchrony when the momentum is zero or below
    (Omnivore: asynchrony already supplies more momentum than is wanted), at the explicit momentum
    that keeps the winner's total (explicit and implicit, by the rule), which its reading chose.
    Falling back to the synchronous optimum instead (MU_STAR) put a held-out workload's run, whose
    winner was two groups at momentum 0 (total 0.5; 0.9 read worst), on sync at 0.9, never read,
    and it diverged 25 s later. A setting of another protocol keeps the momentum it came with
    (`faster_protocols`: the rule's, which may be below zero)."""
    spec, (lr, momentum, _, variant) = shaped(spec, setting), Setting(*setting)
    fewer = spec.variant.less_asynchronous(len(spec.devices)) if momentum <= 0 and variant is None else None
    if fewer is None:
        return replace(spec, lr=lr, momentum=momentum)
    return replace(spec, variant=fewer, groups=fewer.group(spec.device_ids), lr=lr,
                   momentum=fewer.rule_momentum(momentum + spec.variant.implicit_momentum()))
