"""The protocol module: each variant's rules, in one place (pure)."""

import dataclasses

import pytest

from omnitune.core import protocols
from omnitune.core.protocols import Costs, Gossip, Groups, HPSGD, SoftSync, Sync


def test_every_protocol_is_listed_once_in_the_planners_order():
    assert protocols.NAMES == ("sync", "groups", "softsync", "hpsgd", "gossip")
    assert [k.protocol for k in protocols.Variant.kinds().values()] == list(protocols.NAMES)


def test_the_variants_n_devices_admit():
    labels = [(v.label, v.groups) for v in protocols.admitted(4)]
    assert labels == [("sync", 1), ("groups", 2), ("groups", 4), ("softsync (n=1)", 4), ("softsync (n=2)", 4),
                      ("softsync (n=4)", 4), ("hpsgd", 1), ("gossip (every=1)", 1), ("gossip (every=4)", 1)]
    assert [v.label for v in protocols.admitted(1)] == ["sync"]       # nothing to be asynchronous with
    # Unequal speeds: every variant also balanced (across asynchronous groups too), and every g,
    # since groups formed by speed differ in size anyway.
    het = [(v.label, v.groups) for v in protocols.admitted(4, heterogeneous=True)]
    assert het[:8] == [("sync", 1), ("sync (balanced)", 1), ("groups", 2), ("groups (balanced)", 2), ("groups", 3),
                       ("groups (balanced)", 3), ("groups", 4), ("groups (balanced)", 4)]
    assert len(het) == 2 * (len(labels) + 1)
    assert [v.label for v in protocols.admitted(4, ("groups",))] == ["groups", "groups"]


@pytest.mark.parametrize("variant, sizes, needle", [
    (Sync(), (1, 1), "takes 1 group"),
    (HPSGD(), (2, 2), "takes 1 group"),
    (Groups(g=2), (2,), "takes 2 group"),
    (SoftSync(learners=2), (2,), "takes 2 group"),
    (SoftSync(learners=2), (2, 1), "one device per group"),
])
def test_validation_names_what_is_wrong(variant, sizes, needle):
    with pytest.raises(ValueError, match=needle):
        variant.validate(sizes)


@pytest.mark.parametrize("make, needle", [
    (lambda: SoftSync(learners=2, n=3), "n must be in 1..2"),
    (lambda: Groups(g=0), "g must be at least 1"),
    (lambda: Gossip(every=0), "every must be at least 1"),
])
def test_bad_parameters_are_refused(make, needle):
    with pytest.raises(ValueError, match=needle):
        make()


def test_server_and_gradients_per_update():
    assert [v.has_server for v in (Sync(), Groups(), SoftSync(), HPSGD(), Gossip())] == [False, True, True, False, False]
    assert [SoftSync(learners=5, n=n).gradients_per_update for n in (1, 2, 5)] == [5, 3, 1]
    assert Groups(g=4).gradients_per_update == 1 and not Groups().scales_lr_by_staleness
    assert SoftSync().scales_lr_by_staleness and not SoftSync(scale_lr_by_staleness=False).scales_lr_by_staleness


def test_hardware_equations():
    c = Costs(group_steps=(1.0, 2.0), compute=0.5, allreduce=0.8, round_trip=0.4, server_service=0.1)
    assert Sync().sec_per_update(c) == 1.0
    assert Groups(g=2).sec_per_update(c) == pytest.approx(1 / (1 / 1.0 + 1 / 2.0))   # both groups send
    assert Groups(g=2).sec_per_update(dataclasses.replace(c, server_service=5.0)) == 5.0   # saturated server
    assert SoftSync(learners=2, n=1).sec_per_update(c) == 2.0                        # waits for the slowest
    assert SoftSync(learners=2, n=2).sec_per_update(c) == Groups(g=2).sec_per_update(c)
    assert HPSGD().sec_per_update(c) == 0.8                                          # max(compute, all-reduce)
    assert Gossip(every=4).sec_per_update(c) == pytest.approx(0.5 + 0.4 / 4)


def test_the_momentum_rule():
    assert Groups(g=4).implicit_momentum() == 0.75 and Groups(g=4).rule_momentum(0.9) == 0.15
    assert Groups(g=12).rule_momentum(0.9) < 0                     # the rule may ask for negative momentum
    assert Sync().rule_momentum(0.9) == 0.9 and Gossip(every=4).implicit_momentum() == 0
    # Asynchrony never lowers implicit momentum.
    ladder = [Groups(g=g).implicit_momentum() for g in (1, 2, 4, 8, 16)]
    assert ladder == sorted(ladder)


def test_samples_per_iteration_and_rudras_base_rate():
    assert Sync().samples_per_update(((8, 8),)) == 16 and HPSGD().samples_per_update(((8, 8),)) == 16
    assert Groups(g=2).samples_per_update(((8,), (8,))) == 8        # one group's gradient per update
    assert SoftSync(learners=4, n=2).samples_per_update(((8,),) * 4) == 16
    assert SoftSync(learners=4, n=4).lr_gain == 3                   # each step divided by staleness about 3
    assert SoftSync(learners=4, n=4, scale_lr_by_staleness=False).lr_gain == 1 == Groups(g=4).lr_gain


def test_ladders_order_each_protocol_by_asynchrony():
    root, ladders = protocols.ladders(protocols.admitted(4, heterogeneous=True))
    assert root == [Sync(), Sync(balanced=True)]
    labels = [[[v.label for v in rung] for rung in ladder] for ladder in ladders]
    assert labels[0] == [["groups", "groups (balanced)"]] * 3          # g = 2, 3, 4
    assert [[v.groups for v in rung] for rung in ladders[0]] == [[2, 2], [3, 3], [4, 4]]
    assert [[v.n for v in rung] for rung in ladders[1]] == [[1, 1], [2, 2], [4, 4]]
    assert labels[2] == [["hpsgd", "hpsgd (balanced)"]] and len(labels[3][0]) == 4


def test_less_asynchrony_ends_where_none_is_left():
    chain, v = [], Groups(g=12, balanced=True)
    while v is not None:
        chain.append(v)
        v = v.less_asynchronous(12)
    assert [x.groups for x in chain] == [12, 6, 4, 3, 2, 1] and isinstance(chain[-1], Sync)
    assert all(x.balanced for x in chain)
    assert SoftSync(learners=4, n=4).less_asynchronous(4) == SoftSync(learners=4, n=2)
    assert SoftSync(learners=4, n=1).less_asynchronous(4) is None
    assert HPSGD().less_asynchronous(2) == Sync() and Sync().less_asynchronous(2) is None


def test_keys_and_v1_fields_name_the_same_variants():
    for v in protocols.admitted(4):
        assert protocols.from_key(v.key, v.groups) == v
        assert protocols.from_detail(v.protocol, v.groups, v.detail) == v
    with pytest.raises(ValueError, match="protocol: must be one of"):
        protocols.from_fields("magic", 1)
