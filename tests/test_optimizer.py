import math

import pytest

from omnitune import optimizer
from omnitune.errors import UserError
from omnitune.statmodel import ProbeConfig, ProbeResult


class FakeProber:
    """Iterations to target grow with staleness and shrink with the update batch, like real SGD."""

    def __init__(self):
        self.calls: list[tuple[ProbeConfig, int]] = []

    def __call__(self, cfg: ProbeConfig, max_iters: int) -> ProbeResult:
        self.calls.append((cfg, max_iters))
        iters = 4000 / math.sqrt(cfg.batch) * (1 + 0.5 * (cfg.groups - 1)) * (1 + abs(cfg.lr - 0.05) * 10)
        reached = iters <= max_iters
        return ProbeResult(cfg, iters if reached else None, reached, ((int(min(iters, max_iters)), 0.9),),
                           cfg.groups - 1.0, 0.0, "reached" if reached else "stopped")


def test_enumeration_respects_pins_and_the_momentum_rule(sample_profile):
    space = optimizer.Space(protocols=("groups",), batch_sizes=(16,), lrs=(0.05,))
    configs = optimizer.enumerate_configs(sample_profile, space)
    assert configs and all(c.protocol == "groups" and c.g >= 2 and c.batch == 16 for c in configs)
    assert all(c.momentum == pytest.approx(0.9 - (1 - 1 / c.g)) for c in configs)
    synced = optimizer.enumerate_configs(sample_profile, optimizer.Space(protocols=("sync",), momentum=0.5))
    assert all(c.g == 1 and c.momentum == 0.5 for c in synced)


def test_groups_split_devices_evenly():
    assert optimizer.split(("a", "b", "c", "d"), 2) == (("a", "b"), ("c", "d"))
    assert optimizer.split(("a", "b", "c", "d"), 4) == (("a",), ("b",), ("c",), ("d",))


def test_search_ranks_by_predicted_time_and_caps_probes(sample_profile):
    prober = FakeProber()
    scored = optimizer.search(sample_profile, optimizer.Space(), prober)
    times = [s.time_to_target_s for s in scored if s.time_to_target_s is not None]
    assert times == sorted(times) and scored[0].time_to_target_s == times[0]
    # Each probe is capped at what could still beat the best so far: caps never grow after the first.
    caps = [cap for _, cap in prober.calls]
    assert all(b <= caps[0] for b in caps[1:])
    # Every configuration appears once, probed or not.
    assert len(scored) == len(optimizer.enumerate_configs(sample_profile, optimizer.Space()))
    # The winner beats every probed alternative, by construction of the product.
    best = scored[0]
    assert best.time_to_target_s == pytest.approx(best.sec_per_iter * best.iters)


def test_no_reachable_target_is_a_clear_error(sample_profile):
    def never(cfg, max_iters):
        return ProbeResult(cfg, None, False, ((max_iters, 0.1),), 0.0, 0.0, "not reached in 10 iterations")
    scored = optimizer.search(sample_profile, optimizer.Space(lrs=(0.05,), batch_sizes=(16,)), never)
    with pytest.raises(UserError, match="no probe reached it.*not reached in 10 iterations"):
        optimizer.build_plan(scored, sample_profile, "p.json", "lenet-digits", None, 0.99, 0, "now")


def test_plan_from_search_is_valid(sample_profile):
    scored = optimizer.search(sample_profile, optimizer.Space(), FakeProber())
    plan = optimizer.build_plan(scored, sample_profile, "p.json", "lenet-digits", None, 0.9, 0, "now")
    assert plan.prediction.time_to_target_s == pytest.approx(scored[0].time_to_target_s)
    assert len(plan.candidates) == len(scored)
    assert plan.implicit_momentum == pytest.approx(1 - 1 / len(plan.groups))


def test_same_seed_same_plan_with_real_probes(sample_profile, digits):
    from omnitune.probe import make_prober
    wl, _, _ = digits
    space = optimizer.Space(batch_sizes=(16, 32), lrs=(0.05,))
    plans = []
    for _ in range(2):
        scored = optimizer.search(sample_profile, space, make_prober(wl, None, 0.9, seed=7), max_probe_iters=400)
        plans.append(optimizer.build_plan(scored, sample_profile, "p.json", "lenet-digits", None, 0.9, 7, "now"))
    assert plans[0] == plans[1]
