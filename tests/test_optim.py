"""The recipe's updates: HeavyBall is torch's SGD, AdamW torch's AdamW, with clipping and the
schedule as torch's own pieces apply them; the state layouts are torch's; neither is a
torch.optim.Optimizer."""

import math
import subprocess
import sys

import pytest
import torch

from omnitune.core.recipe import Recipe
from omnitune.runtime.optim import AdamW, HeavyBall, optimizer


def _model(seed=0):
    torch.manual_seed(seed)
    return torch.nn.Sequential(torch.nn.Linear(5, 4), torch.nn.Tanh(), torch.nn.Linear(4, 2))


def _train(model, opt, steps=5, seed=1):
    g = torch.Generator().manual_seed(seed)
    for _ in range(steps):
        x, y = torch.randn(8, 5, generator=g), torch.randint(0, 2, (8,), generator=g)
        opt.zero_grad()
        torch.nn.functional.cross_entropy(model(x), y).backward()
        opt.step()


def test_matches_torch_sgd():
    ours, theirs = _model(), _model()
    _train(ours, HeavyBall(ours.parameters(), lr=0.1, momentum=0.9))
    _train(theirs, torch.optim.SGD(theirs.parameters(), lr=0.1, momentum=0.9))
    for a, b in zip(ours.parameters(), theirs.parameters()):
        torch.testing.assert_close(a, b)


def test_negative_momentum_reverses_the_buffer():
    w = torch.nn.Parameter(torch.zeros(1))
    opt = HeavyBall([w], lr=1.0, momentum=-0.5)
    for _ in range(2):
        w.grad = torch.ones(1)
        opt.step()
    # v1 = 1, w = -1; v2 = -0.5 + 1 = 0.5, w = -1.5
    assert float(w.detach()) == pytest.approx(-1.5)


def test_state_moves_between_torch_sgd_and_heavyball():
    """A checkpoint of either continues in the other exactly."""
    a, b = _model(), _model()
    sgd = torch.optim.SGD(a.parameters(), lr=0.1, momentum=0.9)
    _train(a, sgd)
    b.load_state_dict(a.state_dict())
    ours = HeavyBall(b.parameters(), lr=0.1, momentum=0.9)
    ours.load_state_dict(sgd.state_dict())
    _train(a, sgd, seed=2)
    _train(b, ours, seed=2)
    for p, q in zip(a.parameters(), b.parameters()):
        torch.testing.assert_close(p, q)
    back = torch.optim.SGD(_model().parameters(), lr=0.1, momentum=0.9)
    back.load_state_dict(ours.state_dict())
    assert back.state_dict()["state"].keys() == ours.state_dict()["state"].keys()


def test_state_of_another_model_is_refused():
    opt = HeavyBall(_model().parameters(), lr=0.1, momentum=0.9)
    other = HeavyBall(torch.nn.Linear(3, 3).parameters(), lr=0.1, momentum=0.9)
    with pytest.raises(ValueError, match="another model"):
        opt.load_state_dict(other.state_dict())


def test_bad_settings_are_refused():
    with pytest.raises(ValueError, match="lr"):
        HeavyBall(_model().parameters(), lr=0.0, momentum=0.9)
    with pytest.raises(ValueError, match="momentum"):
        HeavyBall(_model().parameters(), lr=0.1, momentum=1.0)


def test_does_not_import_dynamo():
    """The reason it is not a torch.optim.Optimizer: that import costs each process seconds."""
    code = ("import sys, torch; from omnitune.runtime.optim import HeavyBall, AdamW; "
            "m = torch.nn.Linear(2, 2); m(torch.ones(1, 2)).sum().backward(); "
            "HeavyBall(m.parameters(), lr=0.1, momentum=0.9).step(); AdamW(m.parameters(), 0.1, 0.9).step(); "
            "print('torch._dynamo' in sys.modules)")
    assert subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          check=True).stdout.strip() == "False"


RECIPE = Recipe(optimizer="adamw", weight_decay=0.1, beta2=0.95, schedule="cosine", warmup=0.2, floor=0.1,
                clip_grad_norm=0.5)


def _torch_recipe(model, steps: int, horizon: int, seed=1):
    """What the recipe means, in torch's own pieces: AdamW, clip_grad_norm_ and LambdaLR."""
    opt = torch.optim.AdamW(model.parameters(), lr=0.01, betas=(0.8, 0.95), weight_decay=0.1)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda it: RECIPE.lr_factor(it, horizon))
    g = torch.Generator().manual_seed(seed)
    for _ in range(steps):
        x, y = torch.randn(8, 5, generator=g), torch.randint(0, 2, (8,), generator=g)
        opt.zero_grad()
        torch.nn.functional.cross_entropy(model(x), y).backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 0.5)
        opt.step()
        sched.step()
    return opt


def test_adamw_with_clipping_and_schedule_matches_torch():
    ours, theirs = _model(), _model()
    opt = AdamW(ours.parameters(), lr=0.01, momentum=0.8, recipe=RECIPE, horizon=8)
    _train(ours, opt, steps=10)
    torch_opt = _torch_recipe(theirs, 10, horizon=8)
    for a, b in zip(ours.parameters(), theirs.parameters()):
        torch.testing.assert_close(a, b)
    mine, torch_state = opt.state_dict()["state"], torch_opt.state_dict()["state"]
    assert set(mine) == set(torch_state)
    for i in mine:
        for k in ("step", "exp_avg", "exp_avg_sq"):
            torch.testing.assert_close(mine[i][k], torch_state[i][k])


def test_adamw_resumes_from_its_state_dict_exactly():
    """A restart: the state and the schedule's position carry over, so 5 + 5 steps are 10."""
    whole, parted = _model(), _model()
    _train(whole, AdamW(whole.parameters(), 0.01, 0.8, RECIPE, horizon=8), steps=10)
    first = AdamW(parted.parameters(), 0.01, 0.8, RECIPE, horizon=8)
    _train(parted, first, steps=5)
    again = optimizer(parted.parameters(), 0.01, 0.8, RECIPE, horizon=8, iteration=5)
    again.load_state_dict(first.state_dict())
    g = torch.Generator().manual_seed(1)
    for _ in range(5):                                # the same batches as whole's first five
        torch.randn(8, 5, generator=g), torch.randint(0, 2, (8,), generator=g)
    for _ in range(5):
        x, y = torch.randn(8, 5, generator=g), torch.randint(0, 2, (8,), generator=g)
        again.zero_grad()
        torch.nn.functional.cross_entropy(parted(x), y).backward()
        again.step()
    for a, b in zip(whole.parameters(), parted.parameters()):
        torch.testing.assert_close(a, b)


def test_sgd_weight_decay_is_torchs():
    ours, theirs = _model(), _model()
    _train(ours, HeavyBall(ours.parameters(), lr=0.1, momentum=0.9, recipe=Recipe(weight_decay=0.01)))
    _train(theirs, torch.optim.SGD(theirs.parameters(), lr=0.1, momentum=0.9, weight_decay=0.01))
    for a, b in zip(ours.parameters(), theirs.parameters()):
        torch.testing.assert_close(a, b)


def test_the_schedule_warms_up_then_decays_to_its_floor():
    r = Recipe(schedule="cosine", warmup=0.1, floor=0.2)
    assert [round(r.lr_factor(i, 100), 3) for i in (0, 4, 9)] == [0.1, 0.5, 1.0]
    assert r.lr_factor(10, 100) == 1.0 and math.isclose(r.lr_factor(55, 100), 0.6)
    assert r.lr_factor(100, 100) == r.lr_factor(500, 100) == pytest.approx(0.2)
    assert r.lr_factor(7, 0) == Recipe().lr_factor(50, 100) == 1.0      # no horizon, or constant


def test_a_recipes_weight_decays_are_its_own_then_a_decade_either_side():
    """What the planner compares (Space.for_recipe): none where the recipe has no decay."""
    r = Recipe(optimizer="adamw", weight_decay=0.1)
    assert r.decays() == (0.1, 0.01, 1.0) and Recipe().decays() == ()
    assert r.decayed(None) is r and r.decayed(0.5).weight_decay == 0.5 and r.decayed(0.0).optimizer == "adamw"


def test_momentum_set_to_zero_drops_the_velocity():
    """A re-tuned run may go from momentum 0.9 to 0 and back: the velocity starts afresh then,
    as torch's SGD would, not from the one kept before the pause."""
    w = torch.nn.Parameter(torch.zeros(1))
    opt = HeavyBall([w], lr=1.0, momentum=0.9)
    for m, g in ((0.9, 10.0), (0.0, 1.0), (0.5, 1.0)):
        opt.set_hyper(1.0, m)
        w.grad = torch.full((1,), g)
        opt.step()
    # 0.9: v = 10, w = -10; 0: w = -11, no velocity kept; 0.5: v starts at the gradient, w = -12
    assert float(w.detach()) == pytest.approx(-12.0)


def test_a_switch_of_rate_keeps_the_step_going_at_its_speed():
    """Momentum correction (Goyal et al. 2017): resumed at 4x the rate, the first step moves the
    old velocity at the old rate plus the new gradient at the new one, not 4x the old velocity;
    set_hyper alone (a pause's cool-down) scales the old velocity at once."""
    def after_switch(switch: bool) -> float:
        w = torch.nn.Parameter(torch.zeros(1))
        opt = HeavyBall([w], lr=0.01, momentum=0.9)
        w.grad = torch.full((1,), 10.0)
        opt.step()                                   # v = 10, w = -0.1
        resumed = HeavyBall([w], lr=0.04, momentum=0.9)
        resumed.load_state_dict(opt.state_dict())
        (resumed.switch if switch else resumed.set_hyper)(0.04, 0.9)
        w.grad = torch.full((1,), 1.0)
        resumed.step()
        return float(w.detach())
    # corrected: v = 10 * 0.01 / 0.04 = 2.5, then 0.9 * 2.5 + 1 = 3.25; w = -0.1 - 0.04 * 3.25 = -0.23
    assert after_switch(True) == pytest.approx(-0.23)
    # uncorrected: v = 0.9 * 10 + 1 = 10; w = -0.1 - 0.04 * 10 = -0.5
    assert after_switch(False) == pytest.approx(-0.5)


def test_a_switch_leaves_adamws_state_and_an_unchanged_rate_alone():
    model = _model()
    opt = AdamW(model.parameters(), lr=0.01, momentum=0.9)
    _train(model, opt)
    before = {i: {k: v.clone() for k, v in s.items()} for i, s in opt.state.items()}
    opt.switch(0.04, 0.9)
    for i, s in opt.state.items():
        for k, v in s.items():
            torch.testing.assert_close(v, before[i][k])
    sgd = HeavyBall(model.parameters(), lr=0.01, momentum=0.9)
    _train(model, sgd)
    kept = [s["momentum_buffer"].clone() for s in sgd.state.values()]
    sgd.switch(0.01, 0.5)
    for s, v in zip(sgd.state.values(), kept):
        torch.testing.assert_close(s["momentum_buffer"], v)
