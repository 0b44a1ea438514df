"""HeavyBall: torch's SGD update and state layout, without being a torch.optim.Optimizer."""

import subprocess
import sys

import pytest
import torch

from omnitune.runtime.optim import HeavyBall


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
    code = ("import sys, torch; from omnitune.runtime.optim import HeavyBall; "
            "HeavyBall(torch.nn.Linear(2, 2).parameters(), lr=0.1, momentum=0.9).step(); "
            "print('torch._dynamo' in sys.modules)")
    assert subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          check=True).stdout.strip() == "False"
