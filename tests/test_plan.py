import json

import pytest

from omnitune.core import plan
from omnitune.core.errors import UserError
from omnitune.core.protocols import Gossip, SoftSync
from tests.conftest import DATA


def test_every_sample_plan_loads():
    paths = sorted(DATA.glob("plan-v*.json"))
    assert [p.name for p in paths] == ["plan-v1.json", "plan-v2.json"]
    for path in paths:
        p = plan.load(path)
        assert p.schema_version == plan.SCHEMA_VERSION
        assert p.spec.processes == len(p.spec.devices) + p.spec.variant.has_server


def test_a_version_1_plan_upgrades_field_by_field(tmp_path):
    """Its flat protocol fields become the run spec's variant; its candidates' details theirs."""
    data = json.loads((DATA / "plan-v1.json").read_text())
    data.update(protocol="softsync", groups=[[d] for d in data["batch_size"]], softsync_n=1, rebalance=False,
                scale_lr_by_staleness=False)
    data["candidates"][0].update(protocol="gossip", detail="every=4, balanced")
    (tmp_path / "plan.json").write_text(json.dumps(data))
    p = plan.load(tmp_path / "plan.json")
    assert p.spec.variant == SoftSync(learners=1, n=1, scale_lr_by_staleness=False)
    assert p.candidates[0].variant == Gossip(every=4, balanced=True)
    assert (p.spec.lr, p.spec.momentum, p.spec.target_accuracy) == (data["lr"], data["momentum"], data["target_accuracy"])


@pytest.mark.parametrize("mutate, needle", [
    (lambda d: d.update(target_accuracy=-0.5), "target_accuracy must be in"),
    (lambda d: d.update(lr=0), "lr must be positive"),
    (lambda d: d.update(protocol="magic"), "protocol: must be one of"),
    (lambda d: d["batch_size"].update({k: 0 for k in d["batch_size"]}), "batch_size needs a value >= 1"),
    (lambda d: d.update(groups=[[]]), "must split the devices"),
    (lambda d: d.update(protocol="groups", groups=[[x] for x in d["batch_size"]] + [["ghost"]]),
     "must split the devices"),
    (lambda d: d.update(schema_version=0), "schema_version 0"),
])
def test_bad_version_1_plans(tmp_path, mutate, needle):
    assert_refused(tmp_path, "plan-v1.json", mutate, needle)


def _spec(data):
    return data["spec"]


@pytest.mark.parametrize("mutate, needle", [
    (lambda d: _spec(d).update(target_accuracy=None), "a plan needs a target"),
    (lambda d: _spec(d).update(momentum=-1.0), "momentum must be in \\(-1, 1\\)"),
    (lambda d: _spec(d)["variant"].update(protocol="magic"), "variant.protocol: must be one of"),
    (lambda d: _spec(d)["variant"].update(n=9), "n must be in 1..2"),
    (lambda d: _spec(d)["variant"].update(every=2), "unknown key 'every'"),
    (lambda d: _spec(d).update(groups=[sum(_spec(d)["groups"], [])]), "takes 2 group"),
    (lambda d: d["candidates"][0]["variant"].pop("protocol"), "variant.protocol: must be one of"),
    (lambda d: d.update(schema_version=3), "schema_version 3 is not one of \\[1, 2\\]"),
])
def test_bad_version_2_plans(tmp_path, mutate, needle):
    assert_refused(tmp_path, "plan-v2.json", mutate, needle)


PLANNING = {"seconds": 5.0, "probes": 3, "budget_s": 6.0, "full": True, "reason": "a fixed budget"}   # as plans had it
BY_LOSS = plan.RANKED_BY_LOSS


def test_a_plan_whose_planning_predates_the_label_loss_loads(tmp_path):
    data = json.loads((DATA / "plan-v2.json").read_text())
    data["planning"] = dict(PLANNING)
    (tmp_path / "plan.json").write_text(json.dumps(data))
    loaded = plan.load(tmp_path / "plan.json").planning
    assert loaded.label_loss is None and loaded.blind is False


@pytest.mark.parametrize("planning, needle", [
    ({**PLANNING, "label_loss": -0.5}, "label_loss must be a loss"),
    ({**PLANNING, "ranked_by": BY_LOSS, "blind": True}, "blind needs a label_loss"),
    ({**PLANNING, "label_loss": 2.3, "blind": True}, "blind needs a label_loss and a ranking by training loss"),
])
def test_a_planning_that_calls_its_ranking_a_guess_must_have_ranked_by_loss_against_a_label_loss(tmp_path, planning,
                                                                                                needle):
    assert_refused(tmp_path, "plan-v2.json", lambda d: d.update(planning=planning), needle)


def assert_refused(tmp_path, sample: str, mutate, needle: str) -> None:
    data = json.loads((DATA / sample).read_text())
    mutate(data)
    (tmp_path / "plan.json").write_text(json.dumps(data))
    with pytest.raises(UserError, match=needle):
        plan.load(tmp_path / "plan.json")
