"""Each protocol's emulation against a reference: on a quadratic, a minibatch's gradient is
A (w - mean of its centres), so the update sequence of every protocol is written here in numpy
from its definition (the runtime's loops) and the same minibatches, and the emulator must follow it."""

import itertools
import math
from pathlib import Path

import numpy as np
import pytest
import torch

from omnitune.core.protocols import Gossip, Groups, HPSGD, SoftSync, Sync, matching
from omnitune.efficiency.statmodel import ProbeConfig
from omnitune.probing.emulator import emulator, equal_speed_schedule
from omnitune.runtime import workload

WL = workload.load(str(Path(__file__).parent / "workloads" / "quadratic.py"))
TRAIN, _ = WL.build_datasets(None, 0)
A = WL.module.A.double().numpy()
LR, MU, SEED, STEPS = 0.1, 0.5, 3, 30


def start() -> np.ndarray:
    torch.manual_seed(SEED)
    return WL.build_model().w.detach().double().numpy()


def stream(batch: int, shard: int = 0, shards: int = 1):
    """The centres' means of the minibatches a worker reads (as every emulator and runtime worker)."""
    for x, _ in workload.batches(TRAIN, batch, SEED, shard, shards):
        yield x.double().numpy().mean(0)


def grad(w: np.ndarray, centre: np.ndarray) -> np.ndarray:
    return A @ (w - centre)


def emulated(cfg: ProbeConfig) -> list[np.ndarray]:
    emu = emulator(WL, TRAIN, cfg, SEED)
    out = []
    for _ in range(STEPS):
        emu.step()
        out.append(emu.current_model().w.detach().double().numpy().copy())
    return out


def check(cfg: ProbeConfig, reference: list[np.ndarray]) -> None:
    for t, (got, want) in enumerate(zip(emulated(cfg), reference)):
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5, err_msg=f"iteration {t + 1}")


def test_sync_steps_on_one_averaged_gradient():
    """Each device reads its own shard, as the runtime's workers do; the gradient is their average."""
    w, v, data = start(), np.zeros(3), [stream(8, 0, 2), stream(8, 1, 2)]
    ref = []
    for _ in range(STEPS):
        v = MU * v + grad(w, (next(data[0]) + next(data[1])) / 2)
        w = w - LR * v
        ref.append(w)
    check(ProbeConfig(Sync(), ((8, 8),), LR, MU), ref)


def test_groups_apply_each_gradient_g_minus_one_updates_late():
    """g groups of equal speed take turns: the m-th gradient of group j is update m g + j, read
    after the group's previous update, so g - 1 updates old (j on the first round)."""
    g = 3
    data = [stream(4, j, g) for j in range(g)]
    versions, v = [start()], np.zeros(3)
    for k in range(STEPS):
        m, j = divmod(k, g)
        read = 0 if m == 0 else (m - 1) * g + j + 1
        v = MU * v + grad(versions[read], next(data[j]))
        versions.append(versions[-1] - LR * v)
    check(ProbeConfig(Groups(g=g), ((4,),) * g, LR, MU), versions[1:])


@pytest.mark.parametrize("n, scaled", [(2, True), (2, False), (4, True), (1, True)])
def test_softsync_sums_its_gradients_and_scales_each_by_staleness(n, scaled):
    """4 learners, ceil(4/n) gradients per update, all read after their previous update: in round
    r, update k = r·q + u (q = 4 / that) holds learners u·p … u·p + p - 1, which read version
    (r - 1)·q + u + 1; each step divided by its staleness when scaled (Rudra)."""
    learners = 4
    variant = SoftSync(learners=learners, n=n, scale_lr_by_staleness=scaled)
    p = variant.gradients_per_update
    q = learners // p
    data = [stream(4, i, learners) for i in range(learners)]
    versions, v = [start()], np.zeros(3)
    for k in range(STEPS):
        r, u = divmod(k, q)
        read = 0 if r == 0 else (r - 1) * q + u + 1
        sigma = k - read
        scale = 1 / max(sigma, 1) if scaled else 1.0
        total = sum(scale * grad(versions[read], next(data[i])) for i in range(u * p, u * p + p))
        v = MU * v + total / p
        versions.append(versions[-1] - LR * v)
    check(ProbeConfig(variant, ((4,),) * learners, LR, MU), versions[1:])


def test_hpsgd_merges_the_average_change_one_step_late():
    n = 3
    data = [stream(4, i, n) for i in range(n)]
    L = [start() for _ in range(n)]
    v = [np.zeros(3) for _ in range(n)]
    G, change, sent = start(), None, None
    ref = []
    for _ in range(STEPS):
        for i in range(n):
            v[i] = MU * v[i] + grad(L[i], next(data[i]))
            L[i] = L[i] - LR * v[i]
        if change is not None:
            G = G + change
            L = [G + (L[i] - sent[i]) for i in range(n)]
        change = np.mean([L[i] - G for i in range(n)], axis=0)
        sent = [x.copy() for x in L]
        ref.append(G)
    check(ProbeConfig(HPSGD(), ((4, 4, 4),), LR, MU), ref)


@pytest.mark.parametrize("n, every", [(3, 1), (4, 2)])
def test_gossip_averages_pairs_of_the_seeded_matching(n, every):
    data = [stream(4, i, n) for i in range(n)]
    W = [start() for _ in range(n)]
    v = [np.zeros(3) for _ in range(n)]
    ref = []
    for t in range(1, STEPS + 1):
        for i in range(n):
            v[i] = MU * v[i] + grad(W[i], next(data[i]))
            W[i] = W[i] - LR * v[i]
        if t % every == 0:
            partner = matching(t // every - 1, n, SEED)
            W = [(W[i] + W[partner[i]]) / 2 if partner[i] >= 0 else W[i] for i in range(n)]
        ref.append(W[0])                         # the coordinator's replica is evaluated
    check(ProbeConfig(Gossip(every=every), ((4,) * n,), LR, MU), ref)


def test_gossip_between_two_workers_every_step_is_sync():
    """Averaging after every step keeps both replicas equal, and the average of two momentum
    steps from one point is the momentum step on the average gradient."""
    pair = emulated(ProbeConfig(Gossip(every=1), ((4, 4),), LR, MU))
    sync = emulated(ProbeConfig(Sync(), ((4, 4),), LR, MU))
    np.testing.assert_allclose(pair, sync, rtol=1e-5, atol=1e-6)


def test_the_equal_speed_schedule_takes_turns():
    groups = [tau for _, tau in (s for s, _ in zip(equal_speed_schedule(3, 1), range(9)))]
    assert groups == [0, 1, 2, 2, 2, 2, 2, 2, 2]
    waiting = [next(s) for s in [equal_speed_schedule(4, 4)] for _ in range(8)]
    assert [tau for _, tau in waiting] == [0] * 8                 # n = 1: every learner waits for all


def test_a_worker_three_times_slower_sends_a_third_as_many_gradients_three_updates_old():
    """Worker 0 takes 1 s from reading the weights to delivering its gradient, worker 1 takes 3 s;
    one gradient an update. Worker 0 delivers at 1, 2 and 3 s, each gradient fresh, its updates
    taking the clock from 0 to 3; worker 1, which read at clock 0, delivers at 3 s after it (a
    tie goes to the lower index): 3 updates old. It reads again at clock 4, so worker 0's
    gradient of 4 s, read at clock 3, is 1 old; its gradients of 5 and 6 s are fresh; worker 1
    delivers again at 6 s, at clock 7, 3 updates old.
    Every 3 s: three gradients of worker 0's to one of worker 1's, staleness 0, 0, 1 and 3, whose
    mean is g - 1 = 1.

    Fails if a worker's next delivery ignores its seconds (`now + seconds[j]` made `now + 1.0`),
    or if a worker reads the weights before the update its gradient joined (`read[j] = clock`
    before `clock += 1`)."""
    slow = list(itertools.islice(equal_speed_schedule(2, 1, [1.0, 3.0]), 12))
    assert slow[:8] == [(0, 0), (0, 0), (0, 0), (1, 3), (0, 1), (0, 0), (0, 0), (1, 3)]
    assert slow[8:] == slow[4:8]                                  # and so on, every 3 s
    assert [w for w, _ in slow].count(0) == 3 * [w for w, _ in slow].count(1)
    assert sum(tau for _, tau in slow[4:]) / len(slow[4:]) == 1.0


def test_a_measured_histogram_is_sampled():
    cfg = ProbeConfig(Groups(g=2), ((8,), (8,)), LR, MU, staleness=(0, 0, 10))    # always 2 updates old
    emu = emulator(WL, TRAIN, cfg, SEED)
    for _ in range(20):
        emu.step()
    assert set(emu.staleness) <= {0, 1, 2} and emu.staleness[2] >= 17 and math.isclose(emu.mean_staleness, 2, abs_tol=0.3)
