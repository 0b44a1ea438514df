"""Clusters of node types and counts: the spec's errors, the cluster it adds up to, and plans
that are simulated and refused by `run`."""

import math
import shutil

import pytest

from omnitune import planning
from omnitune.core import plan as plan_mod
from omnitune.core.errors import UserError
from omnitune.core.protocols import Groups, Sync
from omnitune.efficiency import fleet
from omnitune.efficiency.perfmodel import Shape
from omnitune.runtime import job
from tests.conftest import DATA
from tests.test_planning import FakeProber


def spec(tmp_path, text: str):
    shutil.copy(DATA / "profile-v1.json", tmp_path / "node.json")
    path = tmp_path / "fleet.yaml"
    path.write_text(text)
    return path


GOOD = "node_types:\n  - {name: box, count: 16, profile: node.json, layout: one-per-core}\n" \
       "inter_node: {gbit_s: 10, latency_us: 20}\n"


@pytest.mark.parametrize("text, needle", [
    ("node_types:\n  - {name: box, count: 0, profile: node.json}\n", "node_types[0].count: must be at least 1"),
    ("node_types:\n  - {name: box, count: 2, profile: nowhere.json}\ninter_node: {gbit_s: 10}\n",
     "node_types[0].profile: no profile at"),
    ("node_types:\n  - {name: box, count: 2, profile: node.json}\ninter_node: {gbit_s: 0}\n",
     "inter_node: needs gbit_s > 0"),
    ("node_types:\n  - {name: box, count: 2, profile: node.json}\ninter_node: {gbit_s: -5}\n",
     "inter_node: needs gbit_s > 0"),
    ("node_types:\n  - {name: box, count: 2, profile: node.json}\n", "inter_node: a cluster of several nodes"),
    ("node_types:\n  - {name: box, count: 1, profile: node.json, layout: nope}\n", "node_types[0].layout: 'nope'"),
    ("node_types:\n  - {name: a, count: 1, profile: node.json}\n  - {name: a, count: 1, profile: node.json}\n"
     "inter_node: {gbit_s: 1}\n", "node_types[1].name"),
    ("node_types: []\n", "at least one node type"),
    ("nodes:\n  - {host: 127.0.0.1}\n", "nodes lists machines to profile"),
    ("node_types:\n  - {name: box, count: 2, profile: node.json, speed: 3}\n", "unknown key 'speed'"),
])
def test_bad_specs_name_the_field(tmp_path, text, needle):
    with pytest.raises(UserError) as e:
        fleet.load(spec(tmp_path, text))
    assert needle in str(e.value) and str(e.value).startswith(str(tmp_path / "fleet.yaml"))


def test_a_fleet_adds_up_to_one_cluster(tmp_path):
    f = fleet.load(spec(tmp_path, GOOD))
    prof = f.profile
    assert f.nodes == 16 and len(prof.devices) == 16 * 2          # the sample's one-per-core has two workers
    assert {d.node for d in prof.cluster.devices} == set(range(16))
    assert prof.cluster.layouts == {"cluster": tuple(d.id for d in prof.cluster.devices)}
    assert prof.device("box3-cpu1").steps == f.profiles["box"].device("cpu1").steps


def test_the_default_layout_is_the_fastest(tmp_path):
    f = fleet.load(spec(tmp_path, "node_types:\n  - {name: box, count: 1, profile: node.json}\n"))
    prof = f.profiles["box"]
    speed = {name: sum(prof.device(d).best.samples_per_s for d in ids) for name, ids in prof.cluster.layouts.items()}
    assert f.layouts["box"] == max(speed, key=speed.get)


def test_a_slower_link_between_nodes_slows_sync(tmp_path):
    fast = fleet.load(spec(tmp_path, GOOD.replace("gbit_s: 10", "gbit_s: 100")))
    slow = fleet.load(spec(tmp_path, GOOD.replace("gbit_s: 10", "gbit_s: 0.1")))
    ids = fast.profile.cluster.layouts["cluster"]
    shape = Shape((ids,), {d: 32 for d in ids}, Sync(), "cluster")
    assert slow.hardware(shape, 32)[0] > 2 * fast.hardware(shape, 32)[0]


def test_groups_replay_the_simulated_staleness(tmp_path):
    f = fleet.load(spec(tmp_path, GOOD))
    ids = f.profile.cluster.layouts["cluster"]
    v = Groups(g=8)
    sec, staleness = f.hardware(Shape(v.group(ids), {d: 32 for d in ids}, v, "cluster"), 32)
    mean = sum(t * k for t, k in enumerate(staleness)) / sum(staleness)
    assert sec > 0 and math.isclose(mean, 7, abs_tol=0.5)            # equal groups: about g - 1


def test_a_simulated_plan_is_marked_and_run_refuses_it(tmp_path):
    f = fleet.load(spec(tmp_path, GOOD))
    found = planning.search(f.profile, planning.Space(batch_sizes=(16, 32)), FakeProber(), hardware=f.hardware)
    plan = planning.build_plan(found, f.profile, f.path, "lenet-digits", None, 0.9, 0, "now", f.description)
    assert plan.hardware_model == plan_mod.SIMULATED and plan.simulated_cluster == "16 × box"
    assert len(plan.spec.devices) <= 32
    plan_mod.save(plan, tmp_path / "plan.json")
    assert plan_mod.load(tmp_path / "plan.json") == plan
    with pytest.raises(UserError, match="planned by simulation for a cluster of 16 × box"):
        job.run(str(tmp_path / "plan.json"), str(tmp_path / "run"))


def test_a_profiled_cluster_may_be_scored_by_the_simulator():
    """--hardware-model simulated: the simulator on the profile's own measurements, the
    calibration jobs' staleness kept; the plan stays runnable (no simulated cluster)."""
    from omnitune.core import profile as profile_mod

    prof = profile_mod.load(DATA / "profile-v3.json")
    space = planning.Space(protocols=("sync", "groups"), batch_sizes=(32,))
    analytic = planning.enumerate_setups(prof, space)
    simulated = planning.enumerate_setups(prof, space, planning.profiled(prof, plan_mod.SIMULATED))
    assert [s.variant for s in analytic] == [s.variant for s in simulated]
    assert all(s.sec_per_iter > 0 for s in simulated)
    assert [s.staleness for s in analytic] == [s.staleness for s in simulated]       # measured, where measured
    found = planning.search(prof, space, FakeProber(), hardware=planning.profiled(prof, plan_mod.SIMULATED))
    plan = planning.build_plan(found, prof, "p.json", "lenet-digits", None, 0.9, 0, "now",
                                hardware_model=plan_mod.SIMULATED)
    assert plan.hardware_model == plan_mod.SIMULATED and plan.simulated_cluster == ""
