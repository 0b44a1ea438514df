"""Hardware efficiency: predicted seconds per iteration of a configuration, from a profile.

Notation (all times in seconds, sizes in bytes):
    b          batch size of one device
    t_d(b)     one training step of device d at batch b, interpolated log-log between the
               profiled batch sizes and extrapolated linearly beyond them
    A_k(m)     all-reduce of m bytes among k processes:  A_k(m) = a_k + c_k * m   (fitted)
    R(m)       point-to-point round trip of m bytes:      R(m)   = r_0 + r_1 * m   (fitted)
    u          the server applying one update to the model (profiled)
    M          model size in bytes
A group of k devices takes T = max_d t_d(b_d) + A_k(M) per minibatch. With a parameter server,
the leader's exchange adds R(M) and the group's broadcast of new weights another A_k(M); g groups
share one server whose service time is s = u + R(M), so the server saturates at 1/s updates/s:
    sec_per_iter = max(T / g, s)       (a queueing bound, not a sum)
softsync waits for ceil(learners/n) gradients per update; hpsgd overlaps its all-reduce with the
next step, max(compute, A); gossip adds one round trip every `gossip_every` steps.
That analytic model misses what only a real job shows: stragglers waiting at the all-reduce,
wake-up latency, processes sharing cores with the server. The profile therefore also times short
real jobs of the runtime (calibration) for each layout, protocol and g at a few batch sizes, and
    sec_per_iter_calibrated(b) = a + c * sec_per_iter(b)      (a, c >= 0, fitted per layout/protocol/g)
where such measurements exist. Pure: no processes, files or environment reads.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

import numpy as np

from omnitune.profile import DeviceProfile, Network, Profile


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
class ComputeModel:
    """t_d(b) for one device.

    Within the profiled batch sizes: log-log interpolation of the measurements. Measured CPU
    step times are bumpy (kernels change with the batch), and a 2- or 3-parameter curve misses
    measured points by up to ~25%, so the measurements themselves are the model there. Beyond
    the largest profiled batch: t(b) = alpha + beta * b, fitted to the upper half of the points
    (`tail`), as Pollux/AdaptDL model compute time.
    """
    batches: np.ndarray
    seconds: np.ndarray

    @classmethod
    def from_profile(cls, dp: DeviceProfile) -> "ComputeModel":
        steps = sorted(dp.steps, key=lambda s: s.batch_size)
        return cls(np.array([s.batch_size for s in steps], float), np.array([s.sec_per_step for s in steps]))

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
        beyond = self.seconds[-1] + tail.slope * (b - self.batches[-1])
        return np.where(b > self.batches[-1], beyond, inside)


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


CalibrationKey = tuple[str, str, int]     # (layout, protocol key, g)
SERVER_PROTOCOLS = ("groups", "softsync")


def protocol_key(protocol: str, softsync_n: int = 1, gossip_every: int = 1) -> str:
    """The protocol with the parameter that changes its speed: "softsync/n=2", "gossip/every=4"."""
    if protocol == "softsync":
        return f"softsync/n={softsync_n}"
    if protocol == "gossip":
        return f"gossip/every={gossip_every}"
    return protocol


@dataclass(frozen=True)
class Shape:
    """What the hardware model needs of a configuration."""
    groups: tuple[tuple[str, ...], ...]       # device ids of each compute group
    batch: dict[str, int]                     # per device
    protocol: str = "sync"
    layout: str | None = None                 # names the calibration to use
    softsync_n: int = 1
    gossip_every: int = 1

    @property
    def key(self) -> CalibrationKey:
        return (self.layout, protocol_key(self.protocol, self.softsync_n, self.gossip_every), len(self.groups))


@dataclass(frozen=True)
class PerfModel:
    compute: dict[str, ComputeModel]
    network: NetworkModel
    model_bytes: int
    calibration: dict[CalibrationKey, Linear] = field(default_factory=dict)

    @classmethod
    def from_profile(cls, profile: Profile) -> "PerfModel":
        analytic = cls({d.device_id: ComputeModel.from_profile(d) for d in profile.devices},
                       NetworkModel.from_profile(profile.network), profile.model_bytes)
        return replace(analytic, calibration=analytic.fit_calibration(profile))

    def fit_calibration(self, profile: Profile) -> dict[CalibrationKey, Linear]:
        """(a, c) per layout/protocol/g from the profile's real jobs: measured = a + c * analytic."""
        points: dict[CalibrationKey, list[tuple[float, float]]] = {}
        for cal in profile.calibration:
            shape = calibration_shape(profile, cal)
            points.setdefault(shape.key, []).append((self.analytic_s(shape), cal.sec_per_iter))
        fits = {}
        for key, pts in points.items():
            x, y = zip(*pts)
            # One point fixes only a ratio; two or more fix overhead and slope.
            fits[key] = Linear.fit(x, y) if len(pts) > 1 else Linear(0.0, y[0] / x[0])
        return fits

    def compute_s(self, devices, batch: dict[str, int]) -> float:
        """The slowest member's compute step."""
        return max(float(self.compute[d](batch[d])) for d in devices)

    def group_step_s(self, devices, batch: dict[str, int], server: bool) -> float:
        """T: one minibatch of one compute group, including its communication."""
        k = len(devices)
        t = self.compute_s(devices, batch) + self.network.allreduce_s(k, self.model_bytes)
        if server:
            t += self.network.round_trip(self.model_bytes) + self.network.allreduce_s(k, self.model_bytes)
        return float(t)

    def server_service_s(self) -> float:
        """s: the server's time per update, during which other groups wait."""
        return float(self.network.server_update_s + self.network.round_trip(self.model_bytes))

    def analytic_s(self, shape: Shape) -> float:
        """Seconds per model update from the profile's measurements alone."""
        server = shape.protocol in SERVER_PROTOCOLS
        step = [self.group_step_s(g, shape.batch, server) for g in shape.groups]
        M, devices = self.model_bytes, [d for g in shape.groups for d in g]
        if shape.protocol == "sync":
            return step[0]
        if shape.protocol == "hpsgd":        # the all-reduce runs during the next step's compute
            return max(self.compute_s(devices, shape.batch), self.network.allreduce_s(len(devices), M))
        if shape.protocol == "gossip":       # a pairwise exchange every `gossip_every` steps
            return self.compute_s(devices, shape.batch) + self.network.round_trip(M) / shape.gossip_every
        if shape.protocol == "softsync" and shape.softsync_n == 1:
            return max(step)                 # every learner waits for the slowest
        # Groups update once per their own step; together at sum(1/T_i) gradients/s, one update
        # per `per_update` gradients, unless the server is the bottleneck at 1/s.
        per_update = -(-len(shape.groups) // shape.softsync_n) if shape.protocol == "softsync" else 1
        rate = min(sum(1.0 / t for t in step) / per_update, 1.0 / self.server_service_s())
        return 1.0 / rate

    def sec_per_iter(self, shape: Shape) -> float:
        """Seconds per model update: calibrated where the profile timed such a job, else analytic."""
        analytic = self.analytic_s(shape)
        fit = self.calibration.get(shape.key)
        return float(fit(analytic)) if fit is not None else analytic


def calibration_shape(profile: Profile, cal) -> Shape:
    """The configuration a calibration job ran: its layout split into equal groups."""
    ids = profile.cluster.layouts[cal.layout]
    k = len(ids) // cal.groups
    groups = tuple(tuple(ids[i * k:(i + 1) * k]) for i in range(cal.groups))
    protocol, _, param = cal.protocol.partition("/")
    n = int(param.split("=")[1]) if protocol == "softsync" else 1
    every = int(param.split("=")[1]) if protocol == "gossip" else 1
    return Shape(groups, {d: cal.batch_size for d in ids}, protocol, cal.layout, n, every)
