from dataclasses import replace

from omnitune.runtime.topology import Node, group_ranks, nodes, roles
from tests.conftest import make_spec


def make(protocol, groups):
    spec = make_spec(protocol, groups)
    return replace(spec, batch_size={d: 8 + i for i, d in enumerate(spec.device_ids)})


def test_sync_has_no_server():
    p = make("sync", (("cpu0", "cpu1", "cpu2", "cpu3"),))
    rs = roles(p)
    assert [r.kind for r in rs] == ["worker"] * 4 and p.processes == 4
    assert rs[0].coordinator and rs[0].leader and not rs[1].leader
    assert [r.shard for r in rs] == [0, 1, 2, 3]


def test_groups_put_the_server_at_rank_zero():
    p = make("groups", (("cpu0", "cpu1"), ("cpu2", "cpu3")))
    rs = roles(p)
    assert rs[0].kind == "server" and rs[0].coordinator and p.processes == 5
    assert group_ranks(p) == [(1, 2), (3, 4)]
    assert [r.leader for r in rs[1:]] == [True, False, True, False]
    assert [r.batch_size for r in rs[1:]] == [8, 9, 10, 11]
    assert [r.device.id for r in rs[1:]] == ["cpu0", "cpu1", "cpu2", "cpu3"]


def test_nodes_run_their_own_ranks_in_rank_order():
    """Two nodes on one host, the server on node 1: each node's local ranks map to the plan's ranks."""
    p = make("groups", (("cpu0", "cpu1"), ("cpu2", "cpu3")))
    devices = tuple(replace(d, node=i % 2) for i, d in enumerate(p.devices))
    p = replace(p, devices=devices, server_node=1)
    assert nodes(p) == (Node(0, "127.0.0.1", (1, 3)), Node(1, "127.0.0.1", (0, 2, 4)))
    assert sorted(r for n in nodes(p) for r in n.ranks) == list(range(p.processes))


def test_sync_on_one_node_has_every_rank_there():
    p = make("sync", (("cpu0", "cpu1", "cpu2", "cpu3"),))
    assert nodes(p) == (Node(0, "127.0.0.1", (0, 1, 2, 3)),)
