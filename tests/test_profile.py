import json

import pytest

from omnitune.core import profile
from omnitune.core.errors import UserError
from tests.conftest import DATA


def test_every_sample_profile_loads():
    for path in DATA.glob("profile-v*.json"):
        p = profile.load(path)
        assert {d.device_id for d in p.devices} == {d.id for d in p.cluster.devices}


def test_save_load_round_trip(tmp_path, sample_profile):
    profile.save(sample_profile, tmp_path / "p.json")
    assert profile.load(tmp_path / "p.json") == sample_profile


@pytest.mark.parametrize("mutate, needle", [
    (lambda d: d.pop("model_bytes"), "missing key 'model_bytes'"),
    (lambda d: d.update(color="red"), "unknown key 'color'"),
    (lambda d: d["devices"][0]["steps"][0].update(sec_per_step=-1), "devices[0].steps[0]"),
    (lambda d: d["devices"].pop(), "no measurements for"),
    (lambda d: d["cluster"]["devices"][0].update(kind="tpu"), "kind: must be one of"),
])
def test_bad_profiles(tmp_path, mutate, needle):
    data = json.loads((DATA / "profile-v1.json").read_text())
    mutate(data)
    (tmp_path / "p.json").write_text(json.dumps(data))
    with pytest.raises(UserError) as e:
        profile.load(tmp_path / "p.json")
    assert needle in str(e.value) and "p.json" in str(e.value)
