"""A discrete-event simulator of the runtime's protocols (simpy), for clusters that cannot run here.

It answers what the hardware model answers, seconds per iteration, and what only a schedule
shows: updates per group and the staleness distribution the probes replay. Each protocol runs as
the runtime runs it (runtime/worker.py, server.py, peer.py):
    sync      every device steps; after the slowest, a ring all-reduce; every replica steps
    groups    each group: its members' steps (the slowest decides), an all-reduce inside, the
              leader's gradient to the one parameter server, which takes one message at a time,
              applies it and sends the weights back; the group shares them (an all-reduce's time)
    softsync  one learner per group; the server applies one update per ceil(learners / n)
              gradients, and each learner waits for the update its gradient joins
    hpsgd     step k's change is all-reduced while step k+1 computes; a device merges it before
              it sends step k+1's
    gossip    every `every` steps a worker waits for its partner of the runtime's seeded random
              matching, and the two swap their models (both directions at once)

Notation (seconds, bytes):
    t_d = m_d exp(sigma_d z)   one step of device d: the profile's median m_d at its batch and the
                               log-spread sigma_d of its repeats; z ~ N(0, 1), drawn per step
    L(m) = alpha + beta m      one message of m bytes over a link class (alpha its latency, beta
                               1/bandwidth): one class within a node, one across nodes
    A_k(m) = 2(k-1) L'(m/k)    a ring all-reduce among k processes (reduce-scatter, then
                               all-gather), over the slowest link class the ring crosses; L' is
                               the class's ring step, which may cost more than a message (gloo
                               reduces and copies each chunk): measured where a profile timed it
    o                          the runtime's own work per iteration beside the step and its
                               messages (flattening gradients, bookkeeping), per device
    u                          the server applying one update
    M                          the model's bytes
Closed forms that tests check (o = 0): a device alone takes m per iteration; sync on k devices without
spread takes m + A_k(M); g groups whose server is the bottleneck get one update per
L(M) + u + L(M) (receive, apply, reply).
Pure: no torch, processes, files or environment reads.
"""

from __future__ import annotations

import math
import statistics
from collections import Counter, defaultdict
from dataclasses import dataclass, replace
from typing import Callable

import numpy as np
import simpy

from omnitune.core import protocols
from omnitune.core.profile import Profile
from omnitune.core.protocols import Variant
from omnitune.efficiency.perfmodel import Cores, Linear, Shape, calibration_shape, compute_models


ITERATIONS = 200      # what planning simulates of each configuration


@dataclass(frozen=True)
class Link:
    """One link class: L(m) = alpha + beta m."""
    latency_s: float            # alpha
    bytes_per_s: float          # 1 / beta

    def __post_init__(self):
        if not (self.latency_s >= 0 and math.isfinite(self.latency_s)):
            raise ValueError(f"link latency must be >= 0 seconds, got {self.latency_s}")
        if not self.bytes_per_s > 0:
            raise ValueError(f"link bandwidth must be > 0 bytes/s, got {self.bytes_per_s}")

    def send_s(self, nbytes: float) -> float:
        return self.latency_s + nbytes / self.bytes_per_s


@dataclass(frozen=True)
class Network:
    intra: Link                 # between processes of one node
    inter: Link                 # between nodes
    intra_ring: Link | None = None    # L': a ring all-reduce's step within a node (None: a message's)
    inter_ring: Link | None = None    # ... across nodes

    def link(self, nodes) -> Link:
        """The slowest class a set of processes' messages cross."""
        return self.intra if len(set(nodes)) <= 1 else self.inter

    def allreduce_s(self, nodes: list[int], nbytes: float) -> float:
        """A_k(m) = 2(k-1) L'(m/k): a ring all-reduce among k processes on these nodes."""
        k = len(nodes)
        if k <= 1:
            return 0.0
        ring = self.intra_ring if len(set(nodes)) <= 1 else self.inter_ring
        return 2 * (k - 1) * (ring or self.link(nodes)).send_s(nbytes / k)


@dataclass(frozen=True)
class SimDevice:
    id: str
    node: int
    step_s: float               # m_d: the median step at this device's batch
    spread: float = 0.0         # sigma_d: the standard deviation of log step times

    def __post_init__(self):
        if not (self.step_s > 0 and math.isfinite(self.step_s)) or self.spread < 0:
            raise ValueError(f"device {self.id!r}: needs step_s > 0 and spread >= 0")


@dataclass(frozen=True)
class Scenario:
    """One configuration on one cluster: what to simulate."""
    variant: Variant
    groups: tuple[tuple[SimDevice, ...], ...]
    network: Network
    model_bytes: float
    server_update_s: float = 0.0   # u
    server_node: int = 0
    overhead_s: float = 0.0        # o

    def __post_init__(self):
        self.variant.validate(tuple(len(g) for g in self.groups))

    @property
    def devices(self) -> tuple[SimDevice, ...]:
        return tuple(d for g in self.groups for d in g)


@dataclass(frozen=True)
class Outcome:
    sec_per_iter: float                 # simulated time / iterations (the runtime's unit)
    iterations: int
    updates_per_group: tuple[int, ...]  # gradients each group contributed (server), or steps
    staleness: tuple[int, ...]          # staleness[t]: updates that used information t steps old

    @property
    def mean_staleness(self) -> float:
        n = sum(self.staleness)
        return sum(t * k for t, k in enumerate(self.staleness)) / n if n else 0.0


def histogram(counts: Counter) -> tuple[int, ...]:
    return tuple(counts.get(t, 0) for t in range(max(counts, default=-1) + 1))


class _Sim:
    """What every protocol's simulation shares: the clock, the draws, the costs."""

    def __init__(self, sc: Scenario, seed: int):
        self.sc, self.seed, self.env = sc, seed, simpy.Environment()
        self.rng = np.random.default_rng(seed)
        self.staleness: Counter = Counter()

    def step_s(self, d: SimDevice) -> float:
        return d.step_s * math.exp(d.spread * self.rng.standard_normal()) if d.spread else d.step_s

    def compute_s(self, devices) -> float:
        """Devices step side by side; the group's step ends with its slowest."""
        return max(self.step_s(d) for d in devices) + self.sc.overhead_s

    def allreduce_s(self, devices) -> float:
        return self.sc.network.allreduce_s([d.node for d in devices], self.sc.model_bytes)

    def send_s(self, nodes) -> float:
        return self.sc.network.link(nodes).send_s(self.sc.model_bytes)


def _sync(sim: _Sim, iterations: int) -> Outcome:
    devices = sim.sc.devices

    def replicas():
        for _ in range(iterations):
            yield sim.env.timeout(sim.compute_s(devices) + sim.allreduce_s(devices))
    sim.env.process(replicas())
    sim.env.run()
    return Outcome(sim.env.now / iterations, iterations, (iterations,), (iterations,))


class _Server:
    """The parameter server's loop (runtime/server.py): receive a gradient; once an update's
    gradients are in, apply it and send the new weights to each sender in turn. One message at
    a time: a gradient that arrives meanwhile waits."""

    def __init__(self, sim: _Sim, per_update: int, iterations: int):
        self.sim, self.per_update, self.iterations = sim, per_update, iterations
        self.port = simpy.Resource(sim.env, capacity=1)
        self.clock = 0
        self.waiting: list[tuple[simpy.Event, float]] = []    # senders of the update being gathered
        self.done = sim.env.event()

    def exchange(self, leader: SimDevice, read: int):
        """The leader's gradient, computed on weights of clock `read`; returns the clock of the
        weights it gets back."""
        sim = self.sim
        message = sim.send_s({leader.node, sim.sc.server_node})
        answer = sim.env.event()
        with self.port.request() as turn:
            yield turn
            yield sim.env.timeout(message)
            sim.staleness[self.clock - read] += 1
            self.waiting.append((answer, message))
            if len(self.waiting) == self.per_update:
                yield sim.env.timeout(sim.sc.server_update_s)
                self.clock += 1
                waiting, self.waiting = self.waiting, []
                for event, reply_s in waiting:
                    yield sim.env.timeout(reply_s)
                    event.succeed(self.clock)
                if self.clock == self.iterations:
                    self.done.succeed()
        return (yield answer)


def _server(sim: _Sim, iterations: int) -> Outcome:
    server = _Server(sim, sim.sc.variant.gradients_per_update, iterations)
    gradients = [0] * len(sim.sc.groups)

    def group(j: int, members: tuple[SimDevice, ...]):
        read = 0
        while True:
            yield sim.env.timeout(sim.compute_s(members) + sim.allreduce_s(members))
            read = yield from server.exchange(members[0], read)
            gradients[j] += 1
            yield sim.env.timeout(sim.allreduce_s(members))      # the leader shares the weights

    for j, members in enumerate(sim.sc.groups):
        sim.env.process(group(j, members))
    sim.env.run(until=server.done)
    return Outcome(sim.env.now / iterations, iterations, tuple(gradients), histogram(sim.staleness))


def _hpsgd(sim: _Sim, iterations: int) -> Outcome:
    devices = sim.sc.devices
    env, n = sim.env, len(devices)
    reduced = defaultdict(env.event)         # k -> the all-reduce of step k's change has finished
    joined = Counter()

    def all_reduce(k: int):
        yield env.timeout(sim.allreduce_s(devices))
        reduced[k].succeed()

    def device(d: SimDevice):
        for k in range(iterations):
            yield env.timeout(sim.step_s(d) + sim.sc.overhead_s)
            if k > 0:
                yield reduced[k - 1]         # merge the previous change before sending this one
            joined[k] += 1
            if joined[k] == n:               # the collective starts once every device has joined
                env.process(all_reduce(k))

    for d in devices:
        env.process(device(d))
    env.run(until=reduced[iterations - 1])
    return Outcome(env.now / iterations, iterations, (iterations,), (0, iterations - 1))


def _gossip(sim: _Sim, iterations: int) -> Outcome:
    devices = sim.sc.devices
    env, n, every = sim.env, len(devices), sim.sc.variant.every
    arrived = defaultdict(env.event)         # (round, worker) -> the worker is ready to swap
    matchings: dict[int, list[int]] = {}     # round -> partner of each worker
    finished = env.event()

    def worker(i: int, d: SimDevice):
        last, rnd = 0, 0
        for step in range(1, iterations + 1):
            yield env.timeout(sim.step_s(d) + sim.sc.overhead_s)
            if step % every:
                continue
            if rnd not in matchings:
                matchings[rnd] = protocols.matching(rnd, n, sim.seed)
            partner = matchings[rnd][i]
            if partner >= 0:
                arrived[rnd, i].succeed()
                yield arrived[rnd, partner]
                yield env.timeout(sim.send_s({d.node, devices[partner].node}))
                if i == 0:                   # the coordinator's drift between averagings
                    sim.staleness[step - last] += 1
                    last = step
            rnd += 1
        if i == 0:
            finished.succeed()

    for i, d in enumerate(devices):
        env.process(worker(i, d))
    env.run(until=finished)
    return Outcome(env.now / iterations, iterations, (iterations,), histogram(sim.staleness))


SIMULATIONS = {protocols.Sync: _sync, protocols.Groups: _server, protocols.SoftSync: _server,
               protocols.HPSGD: _hpsgd, protocols.Gossip: _gossip}


def simulate(sc: Scenario, iterations: int = 200, seed: int = 0) -> Outcome:
    """`iterations` of the scenario's protocol, from a cold start; seconds per iteration are the
    simulated time over the iterations, as the runtime measures training time over updates."""
    if iterations < 1:
        raise ValueError(f"iterations must be at least 1, got {iterations}")
    return SIMULATIONS[type(sc.variant)](_Sim(sc, seed), iterations)


def profile_links(profile: Profile) -> tuple[Link, Link | None]:
    """The link a profile measured, for a message (half its fitted round trip R(m) = r_0 + r_1 m)
    and for a ring all-reduce's step (from its all-reduce among the fewest devices k, fitted
    A_k(m) = a + c m = 2(k-1) alpha' + 2(k-1)/k beta' m)."""
    net = profile.network
    if net is None:                     # one device: nothing crosses a link
        return Link(0.0, math.inf), None
    rt = Linear.fit([p.bytes for p in net.p2p], [p.round_trip_s for p in net.p2p])
    message = Link(rt.intercept / 2, 2 / rt.slope if rt.slope > 0 else math.inf)
    k = min((a.group_size for a in net.allreduce), default=0)
    if not k:
        return message, None
    ar = Linear.fit([a.bytes for a in net.allreduce if a.group_size == k],
                    [a.seconds for a in net.allreduce if a.group_size == k])
    steps = 2 * (k - 1)
    return message, Link(ar.intercept / steps, steps / k / ar.slope if ar.slope > 0 else math.inf)


def step_spread(profile: Profile, device_id: str, batch: int) -> float:
    """sigma_d: the log-spread the profile measured at the batch nearest this one."""
    steps = profile.device(device_id).steps
    return min(steps, key=lambda s: abs(math.log(s.batch_size / batch))).spread


def from_profile(profile: Profile, shape: Shape, network: Network | None = None,
                 overhead_s: float | None = None, compute: dict | None = None) -> Scenario:
    """A configuration of a profiled cluster: each device's step at its batch (the profile's
    measurements, interpolated as perfmodel does, `compute` when given, stretched where GPUs and
    CPU workers crowd a node's cores: perfmodel.Cores), the profile's link for both classes unless
    `network` is given, its server update, and the runtime's overhead o (by default from the
    profile's calibration jobs, `runtime_overhead`)."""
    if network is None:
        message, ring = profile_links(profile)
        network = Network(message, message, ring, ring)
    cluster, net = profile.cluster, profile.network
    everyone = [d for g in shape.groups for d in g]
    slow = Cores.from_profile(profile).slowdown(everyone)
    compute = compute or compute_models(profile)
    groups = tuple(tuple(SimDevice(d, cluster.device(d).node, float(compute[d](shape.batch[d])) * slow[d],
                                   step_spread(profile, d, shape.batch[d])) for d in g) for g in shape.groups)
    return Scenario(shape.variant, groups, network, profile.model_bytes, net.server_update_s if net else 0.0,
                    cluster.server_node,
                    runtime_overhead(profile, shape.variant) if overhead_s is None else overhead_s)


def overheads(profile: Profile) -> Callable[[Variant], float]:
    """runtime_overhead of the profile, worked out once per variant key."""
    known: dict[str, float] = {}

    def overhead(variant: Variant) -> float:
        if variant.key not in known:
            known[variant.key] = runtime_overhead(profile, variant)
        return known[variant.key]
    return overhead


def runtime_overhead(profile: Profile, variant: Variant) -> float:
    """o for a variant: the median, over the profile's calibration jobs of the same protocol and
    parameter (else the same protocol), of the o at which the simulation takes the job's measured
    seconds per iteration; 0 when there are none. The loops differ in what they do beside the
    step (a sync step flattens gradients and checks the monitor; a gossip step only steps), so
    each protocol has its own. o is solved in the simulation's own terms (with g groups taking
    turns, o per step adds about o/g per update). A fit to the profile's own calibration jobs,
    so the real runs the simulator is checked against stay out of sample."""
    def fits(match) -> list[float]:
        out = []
        for cal in profile.calibration:
            shape = calibration_shape(profile, cal)
            if match(shape.variant):
                bare_sc = from_profile(profile, shape, overhead_s=0.0)
                bare = simulate(bare_sc, 50).sec_per_iter
                # Same seed, same draws: the slope of seconds per iteration in o, o near its size.
                slope = (simulate(replace(bare_sc, overhead_s=bare), 50).sec_per_iter - bare) / bare
                out.append((cal.sec_per_iter - bare) / slope if slope > 0 else 0.0)
        return out
    found = fits(lambda v: v.key == variant.key) or fits(lambda v: type(v) is type(variant))
    return max(statistics.median(found), 0.0) if found else 0.0
