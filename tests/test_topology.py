from dataclasses import replace

from omnitune import plan as plan_mod
from omnitune.cluster import Device
from omnitune.runtime.topology import group_ranks, roles
from tests.conftest import DATA


def make(protocol, groups):
    base = plan_mod.load(DATA / "plan-v1.json")
    devices = tuple(Device(f"cpu{i}", "cpu") for i in range(4))
    return replace(base, protocol=protocol, devices=devices, groups=groups,
                   batch_size={d.id: 8 + i for i, d in enumerate(devices)})


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
