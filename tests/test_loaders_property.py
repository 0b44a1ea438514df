"""Property tests of the three file loaders: any malformed file gives one clear UserError.

For every input, `load_cluster`, `profile.load` and `plan.load` either return an object or raise
`UserError` whose message is one line naming the file; never another exception, and never a
change to the directory. What loads is sane (every number finite, every time positive, …) and
survives save-then-load unchanged. LOADER_EXAMPLES=2000 searches harder (150 by default).
"""

import copy
import dataclasses
import json
import math
import os
import tempfile
from pathlib import Path

import pytest
import yaml
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from omnitune.core import plan, profile
from omnitune.core.cluster import load_cluster
from omnitune.core.errors import UserError
from tests.conftest import DATA

EXAMPLES = settings(max_examples=int(os.environ.get("LOADER_EXAMPLES", 150)), deadline=None,
                    suppress_health_check=[HealthCheck.too_slow])

LOADERS = {
    "cluster": (load_cluster, DATA / "cluster-v1.yaml"),
    "profile": (profile.load, DATA / "profile-v1.json"),
    "profile-calibrated": (profile.load, DATA / "profile-v1-calibrated.json"),
    "profile-v3": (profile.load, DATA / "profile-v3.json"),
    "plan": (plan.load, DATA / "plan-v1.json"),
    "plan-v2": (plan.load, DATA / "plan-v2.json"),
}


def sample(name: str):
    path = LOADERS[name][1]
    return yaml.safe_load(path.read_text()) if path.suffix == ".yaml" else json.loads(path.read_text())


# --- what every load must satisfy ----------------------------------------------------------------

def _listing(directory: Path) -> dict[str, bytes | None]:
    """Names and contents of the files in `directory` (None for a subdirectory)."""
    return {p.name: None if p.is_dir() else p.read_bytes() for p in sorted(directory.iterdir())}


def _numbers(obj, field=""):
    """(field, value) of every int and float in a loaded dataclass tree; field: the dataclass field."""
    if dataclasses.is_dataclass(obj):
        for f in dataclasses.fields(obj):
            yield from _numbers(getattr(obj, f.name), f"{type(obj).__name__}.{f.name}")
    elif isinstance(obj, (list, tuple)):
        for v in obj:
            yield from _numbers(v, field)
    elif isinstance(obj, dict):
        for v in obj.values():
            yield from _numbers(v, field)
    elif isinstance(obj, (int, float)) and not isinstance(obj, bool):
        yield field, obj


COUNTS = {"batch_size", "max_batch", "groups", "group_size", "threads", "cpu_count", "bytes", "model_params",
          "model_bytes", "g", "learners", "n", "every"}


def _is_time(name: str) -> bool:
    """A duration or a rate: sec_per_step, seconds, round_trip_s, samples_per_s, …"""
    return name.startswith("sec_") or name == "seconds" or name.endswith("_s")


def assert_sane(obj) -> None:
    """Every number finite; ints within int64; counts at least 1; times and rates positive;
    a profile's calibrations name layouts of its cluster (else PerfModel.from_profile crashes).

    A plan's predicted times may be 0; measured ones may not.
    """
    for field, value in _numbers(obj):
        name = field.split(".")[-1]
        assert math.isfinite(value), f"{field} = {value!r} got through"
        if isinstance(value, int):
            assert -2 ** 63 <= value < 2 ** 63, f"{field} = {value!r} got through"
        if name in COUNTS:
            assert value >= 1, f"{field} = {value!r}: a count must be at least 1"
        if _is_time(name):
            measured = not field.startswith(("Prediction.", "Candidate."))
            assert value > 0 if measured else value >= 0, f"{field} = {value!r}: a time must be positive"
    if isinstance(obj, profile.Profile):       # what PerfModel.from_profile relies on
        for cal in obj.calibration:
            assert 1 <= cal.groups <= len(obj.cluster.layouts.get(cal.layout, ())), f"{cal} does not fit"


def check_load(name: str, path: Path):
    """Load `path` with the loader `name`: the object, or the UserError (checked) it raised."""
    loader = LOADERS[name][0]
    before = _listing(path.parent)
    try:
        obj = loader(path)
    except UserError as e:
        msg = str(e)
        assert msg.splitlines() == [msg], f"message is not one line: {msg!r}"
        assert str(path) in msg, f"message does not name the file: {msg!r}"
        assert e.__cause__ is None
        obj = e
    else:
        assert_sane(obj)
    assert _listing(path.parent) == before, "loading changed the directory"
    return obj


def write_and_load(name: str, data: bytes, suffix: str):
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / f"input{suffix}"
        path.write_bytes(data)
        obj = check_load(name, path)
    # For --hypothesis-show-statistics: how often the input loads.
    event("rejected" if isinstance(obj, UserError) else "loaded")
    return obj


def suffixes(name: str) -> list[str]:
    return [".yaml", ".json"] if name == "cluster" else [".json"]


def dump(value, suffix: str) -> bytes:
    if suffix == ".yaml":
        return yaml.safe_dump(value).encode()
    return json.dumps(value, allow_nan=True).encode()


# --- strategies ----------------------------------------------------------------------------------

SPECIAL_NUMBERS = [0, -1, 1, 2, -0.0, 1e-300, 2 ** 63, -(2 ** 63), 10 ** 400, -(10 ** 400), 1e308,
                   math.nan, math.inf, -math.inf]
atoms = (st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=12)
         | st.sampled_from(SPECIAL_NUMBERS + ["", "cpu0", "cpu-all", "one-worker", "sync", "cuda", "a\nb"]))
json_values = st.recursive(
    atoms, lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=20)

# YAML mappings may have keys of any scalar type.
yaml_values = st.recursive(
    atoms, lambda inner: st.lists(inner, max_size=4) | st.dictionaries(
        st.text(max_size=8) | st.integers() | st.none() | st.booleans() | st.floats(allow_nan=False), inner,
        max_size=4), max_leaves=20)

# Pieces of JSON and YAML syntax, to build text that gets past the first character of a parser.
TOKENS = ['{', '}', '[', ']', ':', ',', ' ', '\n', '  ', '- ', '"', '"nodes"', '"a"', 'nodes:', 'host: ',
          'cpu_workers: ', 'gpus: ', '"schema_version": 1', 'schema_version: 1', '1', '-1', '0.5', '1e400',
          'NaN', 'Infinity', '-Infinity', '.nan', '.inf', 'null', '~', 'true', 'yes', '2020-13-01',
          '2020-01-01', '&a ', '*a', '!!binary ', '!!set ', '!!python/object:os.system ', '? ', '<<: ',
          '#', '%YAML 1.1\n', '---\n', '\t', '\x00', '\ufeff', '\u2028', '9' * 5000, '0x' + 'f' * 4000,
          '[' * 3000, '{"a": ' * 3000, '- ' * 2000]
syntax_text = st.lists(st.sampled_from(TOKENS) | st.text(max_size=5), max_size=30).map("".join)


def _paths(value, prefix=()):
    """Every path (a tuple of keys and indices) into a JSON value, the root () included."""
    yield prefix
    if isinstance(value, dict):
        for k, v in value.items():
            yield from _paths(v, prefix + (k,))
    elif isinstance(value, list):
        for i, v in enumerate(value):
            yield from _paths(v, prefix + (i,))


def _get(value, path):
    for key in path:
        value = value[key]
    return value


def _confusions(old) -> list:
    """Values of a neighbouring type, or out of range, for `old`."""
    out = [None, [], {}, "", [old], {"x": old}, str(old), True]
    if isinstance(old, (int, float)) and not isinstance(old, bool):
        out += [-old, 0, -1, math.nan, math.inf, -math.inf, 2 ** 63, 10 ** 400, 1e308]
        if isinstance(old, int) and abs(old) < 2 ** 63:
            out.append(float(old))
        if isinstance(old, float) and math.isfinite(old):
            out.append(int(old))
    if isinstance(old, list):
        out += [old[:1], old * 2, old[::-1], {str(i): v for i, v in enumerate(old)}]
    if isinstance(old, dict):
        out += [list(old.values()), list(old), {k: None for k in old}]
    return out


LITERALS = {"cpu", "cuda", "sync", "groups", "softsync"}   # values of Literal fields and tags, kept as they are


def _rename_strings(value, suffix: str, names: set[str]):
    """`value` with every string in `names`, as a value or a dict key, suffixed: ids stay consistent."""
    if isinstance(value, dict):
        return {k + suffix if k in names else k: _rename_strings(v, suffix, names) for k, v in value.items()}
    if isinstance(value, list):
        return [_rename_strings(v, suffix, names) for v in value]
    return value + suffix if isinstance(value, str) and value in names else value


@st.composite
def mutations(draw, name: str):
    """The sample file of `name` with one to three keys deleted, values replaced or keys added.

    Sometimes every id and name in the file first gets odd characters (a newline, a quote, a
    dot), consistently, so that a message quoting one must escape it to stay on one line.
    """
    doc = copy.deepcopy(sample(name))
    if draw(st.booleans()):
        names = {v for p in _paths(doc) if isinstance(v := _get(doc, p), str)} - LITERALS
        doc = _rename_strings(doc, draw(st.sampled_from(["\n", "\r'", ".x\u2028", "\x00"])), names)
    for _ in range(draw(st.integers(1, 3))):
        paths = list(_paths(doc))[1:]                   # not the root: test_arbitrary_json_values does that
        if not paths:
            break
        path = draw(st.sampled_from(paths))
        target = _get(doc, path)
        parent = _get(doc, path[:-1])
        op = draw(st.sampled_from(["delete", "replace", "add"]))
        if op == "delete":
            del parent[path[-1]]
        elif op == "add" and isinstance(target, dict):
            key = draw(st.text(max_size=8) | st.sampled_from(["extra", "schema_version", "id", "a\nb"]))
            target[key] = draw(json_values)
        elif op == "add" and isinstance(target, list):
            target.append(copy.deepcopy(draw(json_values | st.sampled_from(target or [None]))))
        else:
            others = [_get(doc, p) for p in paths]            # a value from elsewhere in the file
            new = draw(st.sampled_from(_confusions(target)) | json_values | st.sampled_from(others))
            parent[path[-1]] = copy.deepcopy(new)
    return doc


NAMES = list(LOADERS)


# --- properties ----------------------------------------------------------------------------------

@pytest.mark.parametrize("name", NAMES)
def test_samples_load(name):
    loader, path = LOADERS[name]
    assert_sane(loader(path))


@pytest.mark.parametrize("name", NAMES)
@EXAMPLES
@given(data=st.binary(max_size=200), suffix_index=st.integers(0, 1))
def test_arbitrary_bytes(name, data, suffix_index):
    ss = suffixes(name)
    write_and_load(name, data, ss[suffix_index % len(ss)])


@pytest.mark.parametrize("name", NAMES)
@EXAMPLES
@given(text=st.text(max_size=200) | syntax_text, suffix_index=st.integers(0, 1))
def test_arbitrary_text(name, text, suffix_index):
    ss = suffixes(name)
    write_and_load(name, text.encode("utf-8", "surrogatepass"), ss[suffix_index % len(ss)])


@pytest.mark.parametrize("name", NAMES)
@EXAMPLES
@given(value=json_values | st.dictionaries(st.sampled_from(["schema_version", "nodes", "devices", "cluster",
                                                            "groups", "extra"]), json_values, max_size=4),
       suffix_index=st.integers(0, 1))
def test_arbitrary_json_values(name, value, suffix_index):
    ss = suffixes(name)
    suffix = ss[suffix_index % len(ss)]
    write_and_load(name, dump(value, suffix), suffix)


@EXAMPLES
@given(value=yaml_values, top=st.dictionaries(st.integers() | st.none() | st.sampled_from(["nodes", "extra"]),
                                               yaml_values, max_size=3))
def test_arbitrary_yaml_values(value, top):
    write_and_load("cluster", dump(value, ".yaml"), ".yaml")
    write_and_load("cluster", dump(top, ".yaml"), ".yaml")


@pytest.mark.parametrize("name", NAMES)
@settings(EXAMPLES, max_examples=EXAMPLES.max_examples + 50)
@given(data=st.data(), suffix_index=st.integers(0, 1))
def test_mutated_samples(name, data, suffix_index):
    doc = data.draw(mutations(name))
    ss = suffixes(name)
    suffix = ss[suffix_index % len(ss)]
    obj = write_and_load(name, dump(doc, suffix), suffix)
    if not isinstance(obj, UserError) and name != "cluster":      # a mutation that loads also round-trips
        assert_round_trip(obj)


MODULES = {profile.Profile: profile, plan.Plan: plan}


def assert_round_trip(obj) -> None:
    """save(obj) then load gives `obj` back, and save leaves no temporary file behind."""
    module = MODULES[type(obj)]
    with tempfile.TemporaryDirectory() as tmp:
        module.save(obj, Path(tmp) / "saved.json")
        assert module.load(Path(tmp) / "saved.json") == obj
        assert [p.name for p in Path(tmp).iterdir()] == ["saved.json"]


@pytest.mark.parametrize("name", ["profile", "profile-calibrated", "plan", "plan-v2"])
def test_round_trip(name):
    loader, path = LOADERS[name]
    assert_round_trip(loader(path))


@pytest.mark.parametrize("name", NAMES)
def test_missing_file_and_directory(name, tmp_path):
    for suffix in suffixes(name):
        (tmp_path / f"dir{suffix}").mkdir()
        for path in (tmp_path / f"nope{suffix}", tmp_path / f"dir{suffix}"):
            assert isinstance(check_load(name, path), UserError)


HUGE = "0x" + "f" * 4000        # PyYAML reads it; Python will not print an int of its 4800 digits


@pytest.mark.parametrize("text", [f"schema_version: {HUGE}\nnodes: [{{}}]", f"nodes: [{{host: {HUGE}}}]",
                                  f"nodes: [{{cpu_workers: [{HUGE}]}}]", f"nodes: [{{gpus: [{HUGE}]}}]",
                                  f"nodes: []\n{HUGE}: 1", f"nodes: [{{host: [{HUGE}]}}]"])
def test_yaml_integer_too_large_to_print(text, tmp_path):
    (tmp_path / "c.yaml").write_text(text)
    assert isinstance(check_load("cluster", tmp_path / "c.yaml"), UserError)
