"""Performance-aware batch sizes: the arithmetic, shared by the planner and the workers (pure)."""

from __future__ import annotations

from typing import Mapping

from omnitune.core import protocols
from omnitune.core.profile import DeviceProfile
from omnitune.core.protocols import Variant
import omnitune.efficiency.perfmodel as perfmodel
from omnitune.efficiency.perfmodel import ComputeModel, Linear

# A balanced batch below this share of the nominal batch keeps its device only to wait for it:
# every step still waits for its all-reduce, so such a setup can train slower than the fastest
# device alone. Its rate can also match that of the subset without the device, which then is not
# offered (`subsets` compares rates), and the planner would choose the wasteful setup.
MIN_BALANCED_SHARE = 0.1


def wasted(v: Variant, batch: Mapping[str, int], nominal: int) -> bool:
    """Balanced batches that give some device under MIN_BALANCED_SHARE of the nominal batch: the
    planner does not offer them and the profile does not calibrate them."""
    return v.balanced and min(batch.values()) < MIN_BALANCED_SHARE * nominal


def apportion(shares: list[float], total: int) -> list[int]:
    """Whole batch sizes of at least 1, in proportion to `shares`, adding up to `total`."""
    x = [max(s, 1.0) for s in shares]
    x = [v * total / sum(x) for v in x]
    out = [max(1, int(v)) for v in x]
    by_remainder = sorted(range(len(x)), key=lambda j: x[j] - int(x[j]), reverse=True)
    for j in by_remainder[:max(total - sum(out), 0)]:
        out[j] += 1
    return out


def step_time_line(history: dict[int, float], batch: int) -> tuple[float, float]:
    """(alpha, beta) of t(b) = alpha + beta * b through the two most recent batch sizes."""
    sizes = list(history)
    if len(sizes) >= 2:
        (b1, t1), (b2, t2) = [(b, history[b]) for b in sizes[-2:]]
        beta = (t2 - t1) / (b2 - b1)
        if beta > 0:
            return max(t2 - beta * b2, 0.0), beta
    return 0.0, history[batch] / batch


def equal_time_batches(alpha: list[float], beta: list[float], total: int) -> list[int]:
    """Batches b_i that make every member's step t_i(b) = alpha_i + beta_i * b take the same time T,
    adding up to `total`: b_i = (T - alpha_i) / beta_i with T = (total + sum alpha/beta) / sum 1/beta.

    Shares proportional to measured speed would instead starve a slow member: its small batch
    runs less efficiently, so it measures slower still, and the shares run away.
    """
    T = (total + sum(a / b for a, b in zip(alpha, beta))) / sum(1 / b for b in beta)
    return apportion([(T - a) / b for a, b in zip(alpha, beta)], total)


class GroupBalancer:
    """Performance-aware batches across asynchronous groups (Ji et al. 2019), as the parameter
    server sees them: it times each group between two of its gradients (a step and an exchange)
    and, every `period` gradients, gives each group the total batch that makes every group's step
    take as long, keeping the sum. Each group's line t(b) = alpha + beta * b comes from the last
    two totals it ran (step_time_line), as a synchronous group's members' do."""

    RECENT = 20     # intervals kept per group and batch: their median times the group

    def __init__(self, totals: dict[int, int], period: int):
        self.totals, self.period = dict(totals), period
        self.last: dict[int, float] = {}                           # when each group's last gradient came
        self.times: dict[int, dict[int, list[float]]] = {g: {} for g in totals}

    def heard(self, group: int, batch: int, now: float) -> None:
        if group in self.last:
            recent = self.times[group].setdefault(batch, [])
            recent.append(now - self.last[group])
            del recent[:-self.RECENT]
        self.last[group] = now

    def rebalance(self) -> dict[int, int]:
        """New totals per group, once every group has been timed at its current total."""
        history = {g: {b: sorted(ts)[len(ts) // 2] for b, ts in self.times[g].items()} for g in self.totals}
        if any(self.totals[g] not in history[g] for g in self.totals):
            return self.totals
        groups = list(self.totals)
        lines = [step_time_line(history[g], self.totals[g]) for g in groups]
        new = equal_time_batches([a for a, _ in lines], [b for _, b in lines], sum(self.totals.values()))
        self.totals = dict(zip(groups, new))
        return self.totals


def device_batches(compute: Mapping[str, ComputeModel], variant: Variant, groups: tuple[tuple[str, ...], ...],
                   batch: int) -> dict[str, int]:
    """Per-device batch sizes: equal, or balanced (Ji et al. 2019) so that every device's step
    takes as long, the total kept at `batch` per device: inside a synchronous group its members
    finish together, and across asynchronous groups each group updates as often."""
    devices = [d for g in groups for d in g]
    if not variant.balanced:
        return {d: batch for d in devices}
    alpha, beta = zip(*(step_line(compute[d], batch) for d in devices))
    return dict(zip(devices, equal_time_batches(list(alpha), list(beta), batch * len(devices))))


def speed_calibrations(devices: list[DeviceProfile], batch: int) \
        -> list[tuple[Variant, tuple[tuple[str, ...], ...], dict[str, int]]]:
    """On devices of unequal speed (beyond the noise), the server protocols' shapes that the
    planner forms (groups by speed, balanced batches or not; as layout_setups) and the in-order
    calibration jobs do not run, at `batch` per device: calibration jobs of these measure the
    staleness of groups of unequal speed. None on devices alike within the noise. Only g a power
    of two or g = n (`timed_g`): the g between are left to the model, and timed if one leads."""
    if not perfmodel.unequal(devices):
        return []
    ids = tuple(d.device_id for d in devices)
    fast = {d.device_id: d.best.samples_per_s for d in devices}
    compute = perfmodel.pooled(devices)
    out = []
    for v in protocols.admitted(len(ids), heterogeneous=True):
        if not v.has_server or not timed_g(v.groups, len(ids)):
            continue
        groups = protocols.by_speed(ids, fast, v.groups, v.balanced)
        in_order = len(ids) % v.groups == 0 and protocols.same_groups(groups, v.group(ids))
        batches = device_batches(compute, v, groups, batch)
        if (v.balanced or not in_order) and not wasted(v, batches, batch):
            out.append((v, groups, batches))
    return out


def timed_g(g: int, n: int) -> bool:
    """Whether the profile times groups formed by speed at g of n devices: at a power of two or at n.
    Timing every g costs a machine of many cores half its calibration jobs, and between the powers
    of two log seconds per update interpolate well in log g (docs/decisions.md, balance.timed_g)."""
    return g == n or g & (g - 1) == 0


def step_line(compute, batch: int) -> tuple[float, float]:
    """t_d(b) = alpha + beta b near the nominal batch: least squares (relative error, both terms
    at least 0) over the profile's batch sizes within 4× of it, through the step at the batch
    itself. Bumpy measurements can give a line through two points a slope near zero, and then
    a device's balanced share runs away; the slope is kept at a tenth of the step's mean per
    sample or more."""
    near = (compute.batches >= batch / 4) & (compute.batches <= batch * 4)
    t = float(compute(batch))
    if near.sum() >= 2:
        slope = Linear.fit(compute.batches[near], compute.seconds[near]).slope
    else:
        lo, hi = max(batch / 2, 1.0), 2.0 * batch
        slope = float(compute(hi) - compute(lo)) / (hi - lo)
    slope = max(slope, 0.1 * t / batch)
    return max(t - slope * batch, 0.0), slope
