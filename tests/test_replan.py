import pytest

from omnitune.core.protocols import Gossip, Groups, SoftSync, Sync
from omnitune.planning import replan
from omnitune.planning import MU_STAR
from tests.conftest import make_spec

FOUR = [["cpu0"], ["cpu1"], ["cpu2"], ["cpu3"]]


def scores(grid, best):
    return [(lr, m, 0.5 if (lr, m) == best else 1.0) for lr, m in grid]


def test_retuning_picks_the_lowest_loss_and_drops_groups_at_zero_momentum():
    spec = make_spec("groups", [["cpu0"], ["cpu1"]], lr=0.1, momentum=0.4)
    grid = replan.retune_grid(spec.lr, spec.momentum)
    assert (0.1, 0.4) in grid and (0.05, 0.0) in grid and len(grid) == 10
    keep = replan.retuned(spec, scores(grid, (0.05, 0.3)))
    assert (keep.lr, keep.momentum, keep.groups) == (0.05, 0.3, spec.groups)
    fewer = replan.retuned(spec, scores(grid, (0.1, 0.0)))
    assert fewer.variant == Sync() and fewer.groups == (("cpu0", "cpu1"),) and fewer.momentum == MU_STAR


@pytest.mark.parametrize("protocol, groups, extra, after", [
    ("groups", FOUR, {}, Groups(g=2)),                                # next smaller g that splits 4 devices
    ("softsync", FOUR, {"softsync_n": 4}, SoftSync(learners=4, n=2)),  # fewer updates per round, not bigger groups
    ("softsync", FOUR, {"softsync_n": 1}, SoftSync(learners=4, n=1)),  # as synchronous as softsync gets
    ("hpsgd", [["cpu0", "cpu1"]], {}, Sync()),
    ("gossip", [["cpu0", "cpu1"]], {"gossip_every": 4}, Gossip(every=2)),
    ("gossip", [["cpu0", "cpu1"]], {"gossip_every": 1}, Gossip(every=1)),
    ("sync", [["cpu0", "cpu1"]], {}, Sync()),
])
def test_every_protocol_falls_back_to_a_spec_the_runtime_takes(protocol, groups, extra, after):
    """Best momentum zero: less asynchrony by the variant's own rule, and a valid run spec
    (RunSpec validates on construction: softsync once crashed here with multi-device groups)."""
    spec = make_spec(protocol, groups, momentum=0.3, **extra)
    new = replan.retuned(spec, scores(replan.retune_grid(spec.lr, spec.momentum), (spec.lr, 0.0)))
    assert new.variant == after
    assert new.momentum == (0.0 if after == spec.variant else
                            pytest.approx(MU_STAR - after.implicit_momentum(), abs=1e-4))
