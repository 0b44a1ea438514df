import json
from dataclasses import dataclass

import pytest

from omnitune.core.errors import UserError
from omnitune.core.files import atomic_write_json, from_dict, load_versioned, read_json, to_dict


@dataclass(frozen=True)
class Inner:
    x: int
    y: float = 1.0


@dataclass(frozen=True)
class Outer:
    schema_version: int
    name: str
    inner: tuple[Inner, ...]
    maybe: float | None = None

    def __post_init__(self):
        if not self.name:
            raise ValueError("name must not be empty")


def test_round_trip(tmp_path):
    obj = Outer(1, "a", (Inner(1), Inner(2, 3.5)), None)
    atomic_write_json(tmp_path / "f.json", to_dict(obj))
    assert load_versioned(tmp_path / "f.json", Outer, (1,)) == obj
    assert [p.name for p in tmp_path.iterdir()] == ["f.json"]   # no temporary file left behind


@pytest.mark.parametrize("data, needle", [
    ({"schema_version": 1, "name": "a", "inner": [], "extra": 1}, "unknown key 'extra'"),
    ({"schema_version": 1, "inner": []}, "missing key 'name'"),
    ({"schema_version": 1, "name": "a", "inner": [{"x": "3"}]}, "inner[0].x: expected an integer"),
    ({"schema_version": 1, "name": "a", "inner": [{"x": True}]}, "inner[0].x: expected an integer"),
    ({"schema_version": 1, "name": "a", "inner": {}}, "inner: expected a list"),
    ({"schema_version": 1, "name": "", "inner": []}, "name must not be empty"),
    ({"schema_version": 9, "name": "a", "inner": []}, "schema_version 9"),
])
def test_bad_files_name_the_file_and_key(tmp_path, data, needle):
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(data))
    with pytest.raises(UserError) as e:
        load_versioned(path, Outer, (1,))
    assert needle in str(e.value) and str(path) in str(e.value)


def test_missing_and_malformed(tmp_path):
    with pytest.raises(UserError, match="file not found"):
        read_json(tmp_path / "nope.json")
    (tmp_path / "m.json").write_text("{not json")
    with pytest.raises(UserError, match="not valid JSON"):
        read_json(tmp_path / "m.json")


def test_failed_write_leaves_old_file(tmp_path):
    path = tmp_path / "f.json"
    atomic_write_json(path, {"a": 1})
    with pytest.raises(ValueError):
        atomic_write_json(path, {"a": float("nan")})       # JSON cannot hold NaN
    assert json.loads(path.read_text()) == {"a": 1}
    assert [p.name for p in tmp_path.iterdir()] == ["f.json"]


def test_from_dict_union():
    assert from_dict(Outer, {"schema_version": 1, "name": "n", "inner": [], "maybe": 2}, "w").maybe == 2.0


def test_written_files_have_a_plain_files_mode(tmp_path):
    """Not the private mode of the temporary file they were renamed from."""
    import os
    import stat

    from omnitune.core.files import atomic_write_json
    old = os.umask(0o022)
    try:
        atomic_write_json(tmp_path / "x.json", {"a": 1})
    finally:
        os.umask(old)
    assert stat.S_IMODE((tmp_path / "x.json").stat().st_mode) == 0o644
