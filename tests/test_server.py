"""The parameter server's arithmetic, driven in-process against a reference computed by hand."""

import numpy as np
import pytest
import torch
from torch import nn

from omnitune.core.protocols import Groups, SoftSync
from omnitune.runtime.checkpoint import Start, make_optimizer
from omnitune.runtime.flat import get_buffers, get_params, num_buffers, num_params
from omnitune.runtime.server import ParameterServer


def model() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(3, 4), nn.BatchNorm1d(4), nn.Linear(4, 2))


@pytest.mark.parametrize("variant", [Groups(g=3), SoftSync(learners=3, n=1), SoftSync(learners=3, n=3),
                                     SoftSync(learners=4, n=2, scale_lr_by_staleness=False)])
def test_the_servers_models_follow_the_reference(variant):
    """Random gradients and BatchNorm changes arrive with random clocks; after every update the
    server's weights and statistics equal heavy-ball SGD on the (staleness-scaled) mean gradient,
    computed here from the same messages."""
    lr, mu = 0.1, -0.3                             # a negative momentum, as asynchrony may ask for
    m = model()
    ps = ParameterServer(m, make_optimizer(m, lr, mu, Start()), variant)
    P, B = num_params(m), num_buffers(m)
    w, stats = get_params(m, torch.empty(P)).double().numpy(), get_buffers(m, torch.empty(B)).double().numpy()
    v, clock, gathered = None, 0, []
    rng = np.random.default_rng(1)
    for step in range(40):
        grad, change = rng.normal(size=P), rng.normal(size=B) * 0.1
        used = clock - rng.integers(0, 4) if clock else 0            # weights 0..3 updates old
        msg = torch.tensor(np.concatenate([grad, change, [1.0, 8.0, used]]), dtype=torch.float32)
        ps.receive(msg, src=1 + step % variant.groups)
        sigma = clock - used
        scale = 1 / max(sigma, 1) if variant.scales_lr_by_staleness else 1.0
        gathered.append((scale * grad, change))
        if not ps.ready(variant.groups):
            continue
        ps.update()
        k = len(gathered)
        g = sum(s for s, _ in gathered) / k
        v = g if v is None else mu * v + g
        w = w - lr * v
        stats = stats + sum(c for _, c in gathered) / k
        gathered, clock = [], clock + 1
        assert ps.clock == clock
        np.testing.assert_allclose(get_params(m, torch.empty(P)).numpy(), w, rtol=1e-4, atol=1e-5)
        np.testing.assert_allclose(get_buffers(m, torch.empty(B)).numpy(), stats, rtol=1e-4, atol=1e-5)
    assert clock == 40 // variant.gradients_per_update
    assert sum(ps.staleness.values()) == 40


def test_the_reply_carries_weights_statistics_stop_and_clock():
    m = model()
    ps = ParameterServer(m, make_optimizer(m, 0.1, 0.0, Start()), Groups(g=1))
    P, B = num_params(m), num_buffers(m)
    reply = ps.reply(torch.zeros(P + B + 2), stopping=True)
    assert torch.equal(reply[:P], get_params(m, torch.empty(P)))
    assert torch.equal(reply[P:P + B], get_buffers(m, torch.empty(B)))
    assert reply[-2] == 1.0 and reply[-1] == 0
