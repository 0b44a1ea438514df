"""Each protocol's emulation against a reference: on a quadratic, a minibatch's gradient is
A (w - mean of its centres), so the update sequence of every protocol is written here in numpy
from its definition (the runtime's loops) and the same minibatches, and the emulator must follow it.
Every protocol is checked under both recipes: SGD with heavy-ball momentum at a constant rate, and
AdamW with weight decay, gradient clipping and a warm-up then cosine schedule, whose arithmetic is
written out here as well (torch's AdamW, Loshchilov & Hutter)."""

import itertools
import math
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
import torch

from omnitune.core.protocols import Gossip, Groups, HPSGD, SoftSync, Sync, matching
from omnitune.core.recipe import Recipe
from omnitune.efficiency.statmodel import ProbeConfig
from omnitune.probing.emulator import emulator, equal_speed_schedule
from omnitune.runtime import workload

WL = workload.load(str(Path(__file__).parent / "workloads" / "quadratic.py"))
TRAIN, _ = WL.build_datasets(None, 0)
A = WL.module.A.double().numpy()
LR, MU, SEED, STEPS = 0.1, 0.5, 3, 30
ADAMW = Recipe(optimizer="adamw", weight_decay=0.1, beta2=0.9, schedule="cosine", warmup=0.2, floor=0.1,
               clip_grad_norm=1.0)
HORIZON = 20                       # shorter than STEPS: the rate also sits at its floor for a while
RECIPES = {"sgd": (Recipe(), LR), "adamw": (ADAMW, 0.05)}


class SGDRef:
    """v <- mu v + g; w <- w - lr v (v from zero: the first v is the first gradient)."""

    def __init__(self):
        self.v = np.zeros(3)

    def __call__(self, w: np.ndarray, g: np.ndarray) -> np.ndarray:
        self.v = MU * self.v + g
        return w - LR * self.v


class AdamWRef:
    """Clip g to norm 1; the rate at step t (from 1): warm-up (t / 4) over the first 4 of 20
    iterations, then cosine from 1 to 0.1 until iteration 20, then 0.1; decay w by lr * wd; Adam's
    moments with bias correction, beta1 = MU."""

    def __init__(self):
        self.m, self.v, self.t = np.zeros(3), np.zeros(3), 0

    def __call__(self, w: np.ndarray, g: np.ndarray) -> np.ndarray:
        it, self.t = self.t, self.t + 1
        g = g * min(1.0, 1.0 / (np.linalg.norm(g) + 1e-6))
        if it < 4:
            share = (it + 1) / 4
        else:
            share = 0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * min(1.0, (it - 4) / 16)))
        lr = 0.05 * share
        w = w * (1 - lr * 0.1)
        self.m = MU * self.m + (1 - MU) * g
        self.v = 0.9 * self.v + 0.1 * g * g
        m_hat, v_hat = self.m / (1 - MU ** self.t), self.v / (1 - 0.9 ** self.t)
        return w - lr * m_hat / (np.sqrt(v_hat) + 1e-8)


REFS = {"sgd": SGDRef, "adamw": AdamWRef}
both = pytest.mark.parametrize("recipe", list(RECIPES))


def start() -> np.ndarray:
    torch.manual_seed(SEED)
    return WL.build_model().w.detach().double().numpy()


def stream(batch: int, shard: int = 0, shards: int = 1):
    """The centres' means of the minibatches a worker reads (as every emulator and runtime worker)."""
    for x, _ in workload.batches(TRAIN, batch, SEED, shard, shards):
        yield x.double().numpy().mean(0)


def grad(w: np.ndarray, centre: np.ndarray) -> np.ndarray:
    return A @ (w - centre)


def config(recipe: str, variant, batches) -> ProbeConfig:
    return ProbeConfig(variant, batches, RECIPES[recipe][1], MU)


def emulated(cfg: ProbeConfig, recipe: str = "sgd") -> list[np.ndarray]:
    emu = emulator(replace(WL, recipe=RECIPES[recipe][0]), TRAIN, cfg, SEED, horizon=HORIZON)
    out = []
    for _ in range(STEPS):
        emu.step()
        out.append(emu.current_model().w.detach().double().numpy().copy())
    return out


def check(cfg: ProbeConfig, reference: list[np.ndarray], recipe: str = "sgd") -> None:
    for t, (got, want) in enumerate(zip(emulated(cfg, recipe), reference)):
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5, err_msg=f"iteration {t + 1}")


@both
def test_sync_steps_on_one_averaged_gradient(recipe):
    """Each device reads its own shard, as the runtime's workers do; the gradient is their average."""
    w, step, data = start(), REFS[recipe](), [stream(8, 0, 2), stream(8, 1, 2)]
    ref = []
    for _ in range(STEPS):
        w = step(w, grad(w, (next(data[0]) + next(data[1])) / 2))
        ref.append(w)
    check(config(recipe, Sync(), ((8, 8),)), ref, recipe)


def test_a_rate_set_midway_steps_on_at_it():
    """A re-tuning pause's cool-down (Emulator.set_rate): sync at LR for 10 updates, then at LR / 10
    with the momentum buffer kept. Fails if set_rate misses the optimizer or resets its state."""
    w, v, data = start(), np.zeros(3), [stream(8, 0, 2), stream(8, 1, 2)]
    ref = []
    for t in range(STEPS):
        v = MU * v + grad(w, (next(data[0]) + next(data[1])) / 2)
        w = w - (LR if t < 10 else LR / 10) * v
        ref.append(w)
    emu = emulator(WL, TRAIN, config("sgd", Sync(), ((8, 8),)), SEED)
    for t in range(STEPS):
        if t == 10:
            emu.set_rate(LR / 10)
        emu.step()
        np.testing.assert_allclose(emu.current_model().w.detach().double().numpy(), ref[t], rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("variant, batches", [(Groups(g=2), ((4,), (4,))), (SoftSync(learners=2, n=2), ((4,), (4,))),
                                              (HPSGD(), ((4, 4, 4),)), (Gossip(every=1), ((4, 4),))])
def test_a_rate_set_midway_reaches_every_optimizer(variant, batches):
    """The server's optimizer, or every replica's: each steps on at the new rate, its momentum kept."""
    emu = emulator(WL, TRAIN, ProbeConfig(variant, batches, LR, MU), SEED)
    emu.step()
    emu.set_rate(LR / 10)
    n = sum(len(b) for b in batches) if isinstance(variant, (HPSGD, Gossip)) else 1
    assert len(emu.updates()) == n
    assert all(u.param_groups[0]["lr"] == LR / 10 and u.param_groups[0]["momentum"] == MU for u in emu.updates())


@both
def test_groups_apply_each_gradient_g_minus_one_updates_late(recipe):
    """g groups of equal speed take turns: the m-th gradient of group j is update m g + j, read
    after the group's previous update, so g - 1 updates old (j on the first round)."""
    g = 3
    data = [stream(4, j, g) for j in range(g)]
    versions, step = [start()], REFS[recipe]()
    for k in range(STEPS):
        m, j = divmod(k, g)
        read = 0 if m == 0 else (m - 1) * g + j + 1
        versions.append(step(versions[-1], grad(versions[read], next(data[j]))))
    check(config(recipe, Groups(g=g), ((4,),) * g), versions[1:], recipe)


@both
@pytest.mark.parametrize("n, scaled", [(2, True), (2, False), (4, True), (1, True)])
def test_softsync_sums_its_gradients_and_scales_each_by_staleness(n, scaled, recipe):
    """4 learners, ceil(4/n) gradients per update, all read after their previous update: in round
    r, update k = r·q + u (q = 4 / that) holds learners u·p … u·p + p - 1, which read version
    (r - 1)·q + u + 1; each step divided by its staleness when scaled (Rudra)."""
    learners = 4
    variant = SoftSync(learners=learners, n=n, scale_lr_by_staleness=scaled)
    p = variant.gradients_per_update
    q = learners // p
    data = [stream(4, i, learners) for i in range(learners)]
    versions, step = [start()], REFS[recipe]()
    for k in range(STEPS):
        r, u = divmod(k, q)
        read = 0 if r == 0 else (r - 1) * q + u + 1
        sigma = k - read
        scale = 1 / max(sigma, 1) if scaled else 1.0
        total = sum(scale * grad(versions[read], next(data[i])) for i in range(u * p, u * p + p))
        versions.append(step(versions[-1], total / p))
    check(config(recipe, variant, ((4,),) * learners), versions[1:], recipe)


@both
def test_hpsgd_merges_the_average_change_one_step_late(recipe):
    n = 3
    data = [stream(4, i, n) for i in range(n)]
    L = [start() for _ in range(n)]
    steps = [REFS[recipe]() for _ in range(n)]
    G, change, sent = start(), None, None
    ref = []
    for _ in range(STEPS):
        for i in range(n):
            L[i] = steps[i](L[i], grad(L[i], next(data[i])))
        if change is not None:
            G = G + change
            L = [G + (L[i] - sent[i]) for i in range(n)]
        change = np.mean([L[i] - G for i in range(n)], axis=0)
        sent = [x.copy() for x in L]
        ref.append(G)
    check(config(recipe, HPSGD(), ((4, 4, 4),)), ref, recipe)


@both
@pytest.mark.parametrize("n, every", [(3, 1), (4, 2)])
def test_gossip_averages_pairs_of_the_seeded_matching(n, every, recipe):
    data = [stream(4, i, n) for i in range(n)]
    W = [start() for _ in range(n)]
    steps = [REFS[recipe]() for _ in range(n)]
    ref = []
    for t in range(1, STEPS + 1):
        for i in range(n):
            W[i] = steps[i](W[i], grad(W[i], next(data[i])))
        if t % every == 0:
            partner = matching(t // every - 1, n, SEED)
            W = [(W[i] + W[partner[i]]) / 2 if partner[i] >= 0 else W[i] for i in range(n)]
        ref.append(W[0])                         # the coordinator's replica is evaluated
    check(config(recipe, Gossip(every=every), ((4,) * n,)), ref, recipe)


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


@pytest.mark.parametrize("variant, batches", [(Sync(), ((8, 8),)), (Groups(g=2), ((4,), (4,)))])
def test_a_probes_own_weight_decay_replaces_the_recipes(variant, batches):
    """A plan may choose another weight decay than the recipe's (ProbeConfig.weight_decay): a probe
    at it steps as the recipe with that decay does, on the workers' update and the server's alike;
    without it, at the recipe's own, the steps differ."""
    cfg = config("adamw", variant, batches)
    want = emulated(cfg, "adamw")                                     # the recipe's decay, 0.1
    heavy = replace(WL, recipe=replace(ADAMW, weight_decay=3.0))

    def trained(c: ProbeConfig) -> np.ndarray:
        emu = emulator(heavy, TRAIN, c, SEED, horizon=HORIZON)
        for _ in range(STEPS):
            emu.step()
        return emu.current_model().w.detach().double().numpy()
    np.testing.assert_allclose(trained(replace(cfg, weight_decay=ADAMW.weight_decay)), want[-1], rtol=1e-4, atol=1e-5)
    assert not np.allclose(trained(cfg), want[-1], rtol=1e-3, atol=1e-4)
