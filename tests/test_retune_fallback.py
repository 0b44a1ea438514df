import pytest

from omnitune.core.protocols import Gossip, Groups, SoftSync, Sync
"""Where re-tuning's winner has momentum zero or below, the run falls back to less asynchrony
(planning/retune.retuned)."""

from omnitune.planning.retune import retuned
from tests.conftest import make_spec

FOUR = [["cpu0"], ["cpu1"], ["cpu2"], ["cpu3"]]


def test_a_winner_keeps_the_groups_and_zero_momentum_drops_them():
    spec = make_spec("groups", [["cpu0"], ["cpu1"]], lr=0.1, momentum=0.4)
    keep = retuned(spec, (0.05, 0.3))
    assert (keep.lr, keep.momentum, keep.groups) == (0.05, 0.3, spec.groups)
    fewer = retuned(spec, (0.1, 0.0))          # two groups at 0: a total of 0.5, which sync keeps
    assert fewer.variant == Sync() and fewer.groups == (("cpu0", "cpu1"),) and fewer.momentum == 0.5


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
    """Best momentum zero: less asynchrony by the variant's own rule, at the momentum that keeps
    the winner's total, and a valid run spec (RunSpec validates on construction: softsync once
    crashed here with multi-device groups)."""
    spec = make_spec(protocol, groups, momentum=0.3, **extra)
    new = retuned(spec, (spec.lr, 0.0))
    assert new.variant == after
    total = spec.variant.implicit_momentum()
    assert new.momentum == (0.0 if after == spec.variant else pytest.approx(total - after.implicit_momentum(), abs=1e-4))
