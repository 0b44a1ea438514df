import json

import pytest

from omnitune import plan
from omnitune.errors import UserError
from tests.conftest import DATA


def test_every_sample_plan_loads():
    for path in DATA.glob("plan-v*.json"):
        p = plan.load(path)
        assert p.processes == len(p.devices) + (p.protocol != "sync")


@pytest.mark.parametrize("mutate, needle", [
    (lambda d: d.update(target_accuracy=-0.5), "target_accuracy must be in"),
    (lambda d: d.update(lr=0), "lr must be positive"),
    (lambda d: d.update(protocol="magic"), "protocol: must be one of"),
    (lambda d: d["batch_size"].update({k: 0 for k in d["batch_size"]}), "batch_size needs a value >= 1"),
    (lambda d: d.update(groups=[[]]), "must split the devices"),
    (lambda d: d.update(groups=[[x] for x in d["batch_size"]] + [["ghost"]]), "must split the devices"),
    (lambda d: d.update(schema_version=0), "schema_version 0"),
])
def test_bad_plans(tmp_path, mutate, needle):
    data = json.loads((DATA / "plan-v1.json").read_text())
    mutate(data)
    (tmp_path / "plan.json").write_text(json.dumps(data))
    with pytest.raises(UserError, match=needle):
        plan.load(tmp_path / "plan.json")
