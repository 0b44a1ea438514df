"""Hardware efficiency: predicted seconds per iteration of a configuration, from a profile.

Notation (all times in seconds, sizes in bytes):
    b          batch size of one device
    t_d(b)     one training step of device d at batch b, interpolated log-log between the
               profiled batch sizes (a lone spike taken out: ComputeModel.despiked) and
               extrapolated linearly beyond them
    A_k(m)     all-reduce of m bytes among k processes:  A_k(m) = a_k + c_k * m   (fitted)
    R(m)       point-to-point round trip of m bytes:      R(m)   = r_0 + r_1 * m   (fitted)
    u          the server applying one update to the model (profiled)
    M          model size in bytes
    k_d        a CPU worker's stretch beside GPUs on its node: ceil(threads asked / cores) when
               the GPUs' processes (a core each) and the CPU workers' threads ask for more
               than the node's cores, else 1 (Cores.slowdown)
    C(M)       a GPU's gradient copied to its host and back, where gloo carries it
A group of k devices takes T = max_d k_d t_d(b_d) + A_k(M) (+ C(M) with a GPU) per minibatch.
A GPU's t_d(b) is taken monotone in b (ComputeModel.monotone). With a parameter server,
the leader's exchange adds R(M) and the group's broadcast of new weights another A_k(M); g groups
share one server whose service time is s = u + R(M), so the server saturates at 1/s updates/s.
Each protocol combines these pieces by its own equation (protocols.Variant.sec_per_update): for
Omnivore's groups, sec_per_iter = max(T / g, s), a queueing bound, not a sum.
That analytic model misses what only a real job shows: stragglers waiting at the all-reduce,
wake-up latency, processes sharing cores with the server. The profile therefore also times short
real jobs of the runtime (calibration) for each layout, protocol and g at a few batch sizes, and
    sec_per_iter_calibrated(b) = a + c * sec_per_iter(b)      (a, c >= 0, per layout/protocol/g)
where such measurements exist, (a, c) through the two calibrated batches either side of b (the
nearest two beyond them): real jobs bend where the analytic model is straight, so one line
through the calibrated batches would misjudge the batches between and beyond them.
Pure: no processes, files or environment reads.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass, field, replace

import numpy as np

from omnitune.core import protocols
from omnitune.core.profile import DeviceProfile, Network, Profile
from omnitune.core.protocols import Costs, Sync, Variant


@dataclass(frozen=True)
class Linear:
    """y = intercept + slope * x, fitted by least squares with both terms kept non-negative."""
    intercept: float
    slope: float

    @classmethod
    def fit(cls, x, y) -> "Linear":
        from scipy.optimize import nnls
        x, y = np.asarray(x, float), np.asarray(y, float)
        # Relative error: weight each point by 1/y so small messages count as much as large.
        design = np.stack([np.ones_like(x), x], axis=1) / y[:, None]
        (a, c), _ = nnls(design, np.ones_like(y))
        return cls(float(a), float(c))

    def __call__(self, x):
        return self.intercept + self.slope * np.asarray(x, float)


@dataclass(frozen=True)
class Piecewise:
    """Through measured (x, y) points: between two neighbours, the Linear through them; beyond
    the ends, the Linear through the nearest two; one point fixes only a ratio."""
    x: tuple[float, ...]
    pieces: tuple[Linear, ...]          # pieces[i] from x[i] to x[i + 1]

    @classmethod
    def fit(cls, points) -> "Piecewise":
        by_x: dict[float, list[float]] = {}
        for x, y in points:
            by_x.setdefault(float(x), []).append(float(y))
        xs = sorted(by_x)
        ys = [statistics.median(by_x[x]) for x in xs]
        if len(xs) == 1:
            return cls((xs[0],), (Linear(0.0, ys[0] / xs[0]),))
        return cls(tuple(xs), tuple(Linear.fit(xs[i:i + 2], ys[i:i + 2]) for i in range(len(xs) - 1)))

    def __call__(self, x: float) -> float:
        i = min(max(int(np.searchsorted(self.x, x)) - 1, 0), len(self.pieces) - 1)
        return float(self.pieces[i](x))


BEYOND_GAIN = 2.0       # most a device's throughput may grow past its profiled batches
SPIKE = 1.5             # a step this many times off its neighbours' line is the host's spell (despiked)


@dataclass(frozen=True)
class ComputeModel:
    """t_d(b) for one device.

    Within the profiled batch sizes: log-log interpolation of the measurements. Measured CPU
    step times are bumpy (kernels change with the batch), and a 2- or 3-parameter curve misses
    measured points by up to ~25%, so the measurements themselves are the model there. Beyond
    the largest profiled batch: t(b) = alpha + beta * b, fitted to the upper half of the points
    (`tail`), as Pollux/AdaptDL model compute time. Its slope is at least 1/BEYOND_GAIN of the
    best measured seconds per sample, so throughput past the profile at most BEYOND_GAIN-folds
    the best measured: a curve flat at its end (a CPU worker timed beside busy others can read
    the same step time at two batch sizes) would otherwise make any batch free.
    """
    batches: np.ndarray
    seconds: np.ndarray

    @classmethod
    def from_profile(cls, dp: DeviceProfile) -> "ComputeModel":
        steps = sorted(dp.steps, key=lambda s: s.batch_size)
        return cls(np.array([s.batch_size for s in steps], float), np.array([s.sec_per_step for s in steps])).despiked()

    def despiked(self) -> "ComputeModel":
        """t(b) with its spikes taken out: a measured step more than SPIKE times off the log-log
        line through its two neighbours, where neither neighbour is itself so far off its own,
        is a slow (or fast) spell of the host, not the device, and that line replaces it: left in,
        one such step can make a larger batch read slower than a smaller one, and a pause's
        goodput misjudge growth (docs/decisions.md, perfmodel.SPIKE). Bumps within SPIKE stay:
        they are the device's kernels."""
        if len(self.batches) < 3:
            return self
        lb, lt = np.log(self.batches), np.log(self.seconds)
        weight = (lb[1:-1] - lb[:-2]) / (lb[2:] - lb[:-2])
        line = lt[:-2] + weight * (lt[2:] - lt[:-2])
        off = np.zeros(len(lt), bool)
        off[1:-1] = np.abs(lt[1:-1] - line) > math.log(SPIKE)
        alone = off & ~np.roll(off, 1) & ~np.roll(off, -1)
        if not alone.any():
            return self
        seconds = self.seconds.copy()
        seconds[1:-1] = np.where(alone[1:-1], np.exp(line), seconds[1:-1])
        return replace(self, seconds=seconds)

    def monotone(self) -> "ComputeModel":
        """t(b) = min over b' >= b of the measured t(b'): a GPU's step does no less work at a
        larger batch, so a step slower than a larger one's is interference, not the device (as
        from busy CPU workers beside it)."""
        return replace(self, seconds=np.minimum.accumulate(self.seconds[::-1])[::-1].copy())

    def scaled(self, factor: float) -> "ComputeModel":
        return self if factor == 1.0 else replace(self, seconds=self.seconds * factor)

    @property
    def tail(self) -> Linear:
        """t(b) = alpha + beta * b over the upper half of the profiled batch sizes."""
        if len(self.batches) < 2:
            return Linear(0.0, float(self.seconds[0] / self.batches[0]))
        upper = slice(len(self.batches) // 2, None) if len(self.batches) > 3 else slice(None)
        return Linear.fit(self.batches[upper], self.seconds[upper])

    def __call__(self, b) -> np.ndarray:
        b = np.asarray(b, float)
        inside = np.exp(np.interp(np.log(b), np.log(self.batches), np.log(self.seconds)))
        tail = self.tail
        # Continue from the last measurement at the fitted slope, so t(b) stays continuous.
        slope = max(tail.slope, self.best_sec_per_sample / BEYOND_GAIN)
        beyond = self.seconds[-1] + slope * (b - self.batches[-1])
        return np.where(b > self.batches[-1], beyond, inside)

    @property
    def best_sec_per_sample(self) -> float:
        return float(np.min(self.seconds / self.batches))


def compute_models(profile: Profile) -> dict[str, ComputeModel]:
    """t_d(b) of every profiled device (`pooled`), a CUDA device's made monotone in b."""
    models = pooled(list(profile.devices))
    cuda = {d.id for d in profile.cluster.devices if d.kind == "cuda"}
    return {d: m.monotone() if d in cuda else m for d, m in models.items()}


# Copying a gradient between a GPU and its host, as gloo needs when a GPU works beside CPU
# workers or talks to the server: C(M) = 2 * (COPY_LATENCY_S + M / COPY_BYTES_PER_S), one copy
# each way per update (pageable host memory over PCIe moves about 10 GB/s).
COPY_LATENCY_S = 20e-6
COPY_BYTES_PER_S = 10e9


def host_copy_s(nbytes: float) -> float:
    return 2 * (COPY_LATENCY_S + nbytes / COPY_BYTES_PER_S)


@dataclass(frozen=True)
class Cores:
    """Which processes share a host's cores: each CPU worker's threads, and one core for each GPU's
    process, which launches its kernels and feeds it data."""
    cores: int                          # of each node (the profiled host's; nodes alike)
    threads: dict[str, int]             # a device's process: a CPU worker's threads, 1 for a GPU
    node: dict[str, int]
    cuda: frozenset[str]

    @classmethod
    def from_profile(cls, profile: Profile) -> "Cores":
        devs = profile.cluster.devices
        return cls(max(profile.host.cpu_count, 1), {d.id: d.threads if d.kind == "cpu" else 1 for d in devs},
                   {d.id: d.node for d in devs}, frozenset(d.id for d in devs if d.kind == "cuda"))

    def slowdown(self, devices) -> dict[str, float]:
        """Each device's step stretch when GPUs and CPU workers run side by side on a node:
        threads that ask for more than its cores time-share them, and a CPU worker's parallel
        region waits for its slowest thread, so its step takes ceil(threads / cores) times as long.
        A CPU-only set is taken as the cluster lays it out (its layouts fit the cores)."""
        out = {d: 1.0 for d in devices}
        for n in {self.node[d] for d in devices}:
            mine = [d for d in devices if self.node[d] == n]
            asked = sum(self.threads[d] for d in mine)
            if any(d in self.cuda for d in mine) and any(d not in self.cuda for d in mine) and asked > self.cores:
                out.update((d, float(math.ceil(asked / self.cores))) for d in mine if d not in self.cuda)
        return out


NOISE_Z = 3.0         # devices differ in speed when their throughputs differ by this many standard errors
FIXED_MARGIN = 0.10   # or, for profiles without the repeats' spread, by this fraction
MAD_TO_SD = 1.4826    # a normal sample's standard deviation over its median absolute deviation


def slower(fast: DeviceProfile, other: DeviceProfile, z: float = NOISE_Z) -> bool:
    """Whether `other` is slower than `fast` beyond the profile's noise: the median over common
    batch sizes of the log throughput ratio against z standard errors of it, taken from the
    spread of the repeats (the median of the pair's summed variances) or, where larger, from the
    ratio's own scatter over the batch sizes (`scatter`), over the number of batch sizes.
    Identical devices can measure far apart at one batch size, and which is faster can change
    from one size to the next: a slow spell of the
    host moves a whole size, which the repeats' spread within it does not see, and with the
    spread alone identical cores read unequal (docs/decisions.md, perfmodel.NOISE_Z). Profiles
    without spreads (schema 1-2) use FIXED_MARGIN."""
    a, b = ({s.batch_size: s for s in d.steps} for d in (fast, other))
    common = sorted(set(a) & set(b))
    if not common:
        return False
    ratios = [math.log(a[k].samples_per_s / b[k].samples_per_s) for k in common]
    noise = [a[k].spread ** 2 + b[k].spread ** 2 for k in common]
    if not any(noise):
        return statistics.median(ratios) > -math.log(1 - FIXED_MARGIN)
    return statistics.median(ratios) > z * max(math.sqrt(statistics.median(noise)), scatter(common, ratios)) \
        / math.sqrt(len(common))


def scatter(batches: list[int], ratios: list[float]) -> float:
    """The noise of log throughput ratios over batch sizes: the median absolute deviation (as a
    standard deviation) of their residuals from a straight line in log batch, so that a ratio that
    changes with the batch (a GPU against a CPU core) is a difference, not noise."""
    if len(ratios) < 3:
        return 0.0
    x = np.log(np.asarray(batches, float))
    slope, intercept = np.polyfit(x, ratios, 1)
    residuals = list(np.asarray(ratios) - (intercept + slope * x))
    middle = statistics.median(residuals)
    return MAD_TO_SD * statistics.median(abs(r - middle) for r in residuals)


def unequal(devices: list[DeviceProfile], z: float = NOISE_Z) -> bool:
    """Whether some device is slower than the fastest (by best throughput) beyond the noise."""
    if len(devices) < 2:
        return False
    fastest = max(devices, key=lambda d: d.best.samples_per_s)
    return any(slower(fastest, d, z) for d in devices if d is not fastest)


def alike(x: DeviceProfile, y: DeviceProfile) -> bool:
    """Neither measurably slower than the other."""
    return not slower(x, y) and not slower(y, x)


def pooled(devices: list[DeviceProfile]) -> dict[str, ComputeModel]:
    """Each device's t_d(b), devices alike within the profile's noise sharing one: the geometric
    mean of their steps at each batch size all of them measured. Otherwise noise alone would give
    identical devices unequal balanced batches."""
    classes: list[list[DeviceProfile]] = []
    for d in devices:
        mine = next((c for c in classes if alike(c[0], d)), None)
        if mine is None:
            classes.append([d])
        else:
            mine.append(d)
    out = {}
    for c in classes:
        common = sorted(set.intersection(*({s.batch_size for s in d.steps} for d in c)))
        if len(c) == 1 or len(common) < 2:
            out.update((d.device_id, ComputeModel.from_profile(d)) for d in c)
            continue
        batches = np.array(common, float)
        seconds = np.exp(np.mean([np.log(ComputeModel.from_profile(d)(batches)) for d in c], axis=0))
        out.update((d.device_id, ComputeModel(batches, seconds)) for d in c)
    return out


@dataclass(frozen=True)
class NetworkModel:
    allreduce: dict[int, Linear]    # A_k for each profiled group size k
    round_trip: Linear              # R
    server_update_s: float          # u

    @classmethod
    def from_profile(cls, net: Network | None) -> "NetworkModel":
        if net is None:                       # one device: nothing to communicate with
            return cls({}, Linear(0.0, 0.0), 0.0)
        sizes = sorted({a.group_size for a in net.allreduce})
        allreduce = {k: Linear.fit([a.bytes for a in net.allreduce if a.group_size == k],
                                   [a.seconds for a in net.allreduce if a.group_size == k]) for k in sizes}
        rt = Linear.fit([p.bytes for p in net.p2p], [p.round_trip_s for p in net.p2p])
        return cls(allreduce, rt, net.server_update_s)

    def allreduce_s(self, k: int, nbytes: float) -> float:
        if k <= 1:
            return 0.0
        if k in self.allreduce:
            return float(self.allreduce[k](nbytes))
        if not self.allreduce:
            raise ValueError("the profile has no all-reduce measurements")
        # Unprofiled group size: ring all-reduce moves 2(k-1)/k of the data per process.
        k0 = max(self.allreduce)
        fit = self.allreduce[k0]
        scale = (2 * (k - 1) / k) / (2 * (k0 - 1) / k0)
        return float(fit.intercept * (k - 1) / (k0 - 1) + fit.slope * scale * nbytes)


CalibrationKey = tuple[str, str, int, int]     # (layout, variant key, number of groups, of devices)


@dataclass(frozen=True)
class Shape:
    """What the hardware model needs of a configuration."""
    groups: tuple[tuple[str, ...], ...]       # device ids of each compute group
    batch: dict[str, int]                     # per device
    variant: Variant = Sync()
    layout: str | None = None                 # names the calibration to use

    @property
    def key(self) -> CalibrationKey:
        """A calibration job answers only for its own devices: one of a layout's 17 does not run
        like all 17 together."""
        return (self.layout, self.variant.key, len(self.groups), sum(map(len, self.groups)))


@dataclass(frozen=True)
class PerfModel:
    compute: dict[str, ComputeModel]
    network: NetworkModel
    model_bytes: int
    calibration: dict[CalibrationKey, Piecewise] = field(default_factory=dict)
    cores: Cores | None = None          # None: no contention between devices (a bare model)

    @classmethod
    def from_profile(cls, profile: Profile) -> "PerfModel":
        analytic = cls(compute_models(profile), NetworkModel.from_profile(profile.network), profile.model_bytes,
                       cores=Cores.from_profile(profile))
        return replace(analytic, calibration=analytic.fit_calibration(profile))

    @property
    def cuda(self) -> frozenset[str]:
        """The GPUs among the devices."""
        return self.cores.cuda if self.cores else frozenset()

    def contended(self, devices) -> dict[str, ComputeModel]:
        """t_d(b) of these devices as they run side by side (Cores.slowdown)."""
        slow = self.cores.slowdown(devices) if self.cores else {}
        return {d: self.compute[d].scaled(slow.get(d, 1.0)) for d in devices}

    def fit_calibration(self, profile: Profile) -> dict[CalibrationKey, Piecewise]:
        """Per layout/protocol/g, from the profile's real jobs: measured against analytic."""
        points: dict[CalibrationKey, list[tuple[float, float]]] = {}
        for cal in profile.calibration:
            shape = calibration_shape(profile, cal)
            points.setdefault(shape.key, []).append((self.analytic_s(shape), cal.sec_per_iter))
        return {key: Piecewise.fit(pts) for key, pts in points.items()}

    def compute_s(self, devices, batch: dict[str, int], everyone=None) -> float:
        """The slowest member's compute step, beside `everyone` (default: these devices)."""
        compute = self.contended(tuple(everyone or devices))
        return max(float(compute[d](batch[d])) for d in devices)

    def group_step_s(self, devices, batch: dict[str, int], server: bool, everyone=None) -> float:
        """T: one minibatch of one compute group, including its communication; a GPU's gradient
        crosses to its host where gloo carries it (beside CPU workers, or to the server)."""
        k = len(devices)
        t = self.compute_s(devices, batch, everyone) + self.network.allreduce_s(k, self.model_bytes)
        if server:
            t += self.network.round_trip(self.model_bytes) + self.network.allreduce_s(k, self.model_bytes)
        if any(d in self.cuda for d in devices) and (server or any(d not in self.cuda for d in devices)):
            t += host_copy_s(self.model_bytes)
        return float(t)

    def server_service_s(self) -> float:
        """s: the server's time per update, during which other groups wait."""
        return float(self.network.server_update_s + self.network.round_trip(self.model_bytes))

    def costs(self, shape: Shape) -> Costs:
        """The pieces a protocol's equation combines (protocols.Costs)."""
        server = shape.variant.has_server
        devices = [d for g in shape.groups for d in g]
        return Costs(group_steps=tuple(self.group_step_s(g, shape.batch, server, devices) for g in shape.groups),
                     compute=self.compute_s(devices, shape.batch),
                     allreduce=self.network.allreduce_s(len(devices), self.model_bytes),
                     round_trip=float(self.network.round_trip(self.model_bytes)),
                     server_service=self.server_service_s())

    def analytic_s(self, shape: Shape) -> float:
        """Seconds per model update from the profile's measurements alone."""
        return shape.variant.sec_per_update(self.costs(shape))

    def sec_per_iter(self, shape: Shape) -> float:
        """Seconds per model update: calibrated where the profile timed such a job, else analytic."""
        analytic = self.analytic_s(shape)
        fit = self.calibration.get(shape.key)
        return float(fit(analytic)) if fit is not None else analytic


def calibration_shape(profile: Profile, cal) -> Shape:
    """The configuration a calibration job ran: its groups formed by speed where it records them,
    else its layout split into equal groups in order, every device at its batch size."""
    variant = protocols.from_key(cal.protocol, cal.groups)
    if cal.members:
        batch = {d: b for g, bs in zip(cal.members, cal.batches) for d, b in zip(g, bs)}
        return Shape(cal.members, batch, variant, cal.layout)
    ids = profile.cluster.layouts[cal.layout]
    return Shape(variant.group(ids), {d: cal.batch_size for d in ids}, variant, cal.layout)
