"""Strict, versioned JSON files written atomically.

Every file omnitune writes is a frozen dataclass turned into JSON with a `schema_version`.
Loading rejects unknown or missing keys and wrong types with a `UserError` that names the
file and the key, so a bad file never gets as far as a traceback.
"""

from __future__ import annotations

import dataclasses
import enum
import json
import math
import os
import tempfile
import types
import typing
from pathlib import Path
from typing import Any

from omnitune.core.errors import UserError


def atomic_write_bytes(path: str | os.PathLike, data: bytes) -> None:
    """Write `data` to a temporary file beside `path`, then rename it over `path`."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        os.fchmod(fd, 0o666 & ~_umask())          # mkstemp makes it private; give it a plain file's mode
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def atomic_write_json(path: str | os.PathLike, obj: Any) -> None:
    atomic_write_bytes(path, (json.dumps(obj, indent=2, allow_nan=False) + "\n").encode())


def append_jsonl(path: str | os.PathLike, obj: Any) -> None:
    """Add one JSON line to a log (metrics, re-plans, restarts): whole lines, each a record."""
    with open(path, "a") as f:
        f.write(json.dumps(obj) + "\n")


def _finite(text: str) -> float:
    """A JSON number as a float; omnitune never writes one that overflows (1e400), so refuse it."""
    value = float(text)
    if not math.isfinite(value):
        raise ValueError(f"number {text} is out of range")
    return value


def _no_constant(name: str) -> float:
    raise ValueError(f"{name} is not a number JSON allows")


def read_json(path: str | os.PathLike) -> Any:
    """Read a JSON file, turning a missing or malformed file into a UserError."""
    try:
        text = Path(path).read_text()
    except FileNotFoundError:
        raise UserError(f"{path}: file not found") from None
    except (OSError, UnicodeDecodeError) as e:
        raise UserError(f"{path}: cannot read ({e.__class__.__name__})") from None
    try:
        return json.loads(text, parse_float=_finite, parse_constant=_no_constant)
    except json.JSONDecodeError as e:
        raise UserError(f"{path}: not valid JSON (line {e.lineno}: {e.msg})") from None
    except RecursionError:
        raise UserError(f"{path}: not valid JSON (nested too deeply)") from None
    except ValueError as e:      # NaN, 1e400, or an integer of more than 4300 digits
        raise UserError(f"{path}: not valid JSON ({str(e).split(';')[0]})") from None


def to_dict(obj: Any) -> Any:
    """A dataclass tree as plain JSON values (tuples become lists). A dataclass of a tagged family
    (one that sets TAG, e.g. protocols.Variant) also records its tag, so loading finds its class."""
    if dataclasses.is_dataclass(obj):
        tag = getattr(obj, "TAG", None)
        head = {tag: getattr(obj, tag)} if tag else {}
        return head | {f.name: to_dict(getattr(obj, f.name)) for f in dataclasses.fields(obj)}
    if isinstance(obj, (list, tuple)):
        return [to_dict(v) for v in obj]
    if isinstance(obj, dict):
        return {str(k): to_dict(v) for k, v in obj.items()}
    if isinstance(obj, enum.Enum):
        return obj.value
    return obj


def _show(value: Any) -> str:
    """repr(value) for an error message: one line, cut short."""
    try:
        text = repr(value)
    except ValueError:           # Python will not print an integer of more than 4300 digits
        return f"a {type(value).__name__} too large to show"
    return text if len(text) <= 80 else text[:77] + "..."


def from_dict(cls: type, data: Any, where: str) -> Any:
    """Build dataclass `cls` from JSON values, strictly.

    Args:
        cls: a (frozen) dataclass whose fields are annotated with JSON-able types.
        data: the parsed JSON.
        where: how to name this value in an error, e.g. "profile.json: devices[0]".
    """
    return _convert(cls, data, where)


def _convert(tp: Any, value: Any, where: str) -> Any:
    origin = typing.get_origin(tp)
    args = typing.get_args(tp)
    if tp is Any:
        return value
    if origin in (typing.Union, types.UnionType):
        if value is None and type(None) in args:
            return None
        inner = [a for a in args if a is not type(None)]
        if len(inner) == 1:
            return _convert(inner[0], value, where)
        for a in inner:
            try:
                return _convert(a, value, where)
            except UserError:
                continue
        raise UserError(f"{where}: unexpected value {_show(value)}")
    if typing.get_origin(tp) is typing.Literal:
        if value not in args:
            raise UserError(f"{where}: must be one of {', '.join(map(repr, args))}, got {_show(value)}")
        return value
    if dataclasses.is_dataclass(tp):
        return _convert_dataclass(tp, value, where)
    if isinstance(tp, type) and issubclass(tp, enum.Enum):
        try:
            return tp(value)
        except ValueError:
            raise UserError(f"{where}: must be one of {', '.join(repr(m.value) for m in tp)}, "
                            f"got {_show(value)}") from None
    if origin in (list, tuple):
        if not isinstance(value, list):
            raise UserError(f"{where}: expected a list, got {type(value).__name__}")
        if origin is tuple and args and args[-1] is not Ellipsis:     # fixed length, e.g. tuple[int, float]
            if len(value) != len(args):
                raise UserError(f"{where}: expected {len(args)} items, got {len(value)}")
            return tuple(_convert(t, v, f"{where}[{i}]") for i, (t, v) in enumerate(zip(args, value)))
        item = args[0] if args else Any
        return tuple(_convert(item, v, f"{where}[{i}]") for i, v in enumerate(value))
    if origin is dict:
        if not isinstance(value, dict):
            raise UserError(f"{where}: expected an object, got {type(value).__name__}")
        return {k: _convert(args[1], v, f"{where}[{k!r}]") for k, v in value.items()}
    if tp is float:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise UserError(f"{where}: expected a number, got {_show(value)}")
        try:
            return float(value)
        except OverflowError:
            raise UserError(f"{where}: number out of range, got {_show(value)}") from None
    if tp is int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise UserError(f"{where}: expected an integer, got {_show(value)}")
        if not -2 ** 63 <= value < 2 ** 63:
            raise UserError(f"{where}: integer out of range, got {_show(value)}")
        return value
    if tp in (str, bool):
        if not isinstance(value, tp):
            raise UserError(f"{where}: expected {tp.__name__}, got {_show(value)}")
        return value
    raise TypeError(f"unsupported annotation {tp!r} at {where}")


def _convert_dataclass(cls: type, value: Any, where: str) -> Any:
    if not isinstance(value, dict):
        raise UserError(f"{where}: expected an object, got {type(value).__name__}")
    if getattr(cls, "TAG", None):
        cls, value = _tagged(cls, value, where)
    hints = typing.get_type_hints(cls)
    fields = {f.name: f for f in dataclasses.fields(cls)}
    unknown = sorted(set(value) - set(fields), key=repr)     # YAML keys need not be strings
    if unknown:
        raise UserError(f"{where}: unknown key {_show(unknown[0])}")
    kwargs = {}
    for name, f in fields.items():
        if name in value:
            kwargs[name] = _convert(hints[name], value[name], f"{where}.{name}")
        elif f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
            raise UserError(f"{where}: missing key {name!r}")
    try:
        return cls(**kwargs)
    except ValueError as e:
        raise UserError(f"{where}: {e}") from None


def _tagged(cls: type, value: dict, where: str) -> tuple[type, dict]:
    """The member of the tagged family `cls` that `value` names by its tag, and the other keys.
    The family's base class lists its members by tag: cls.kinds() -> {tag value: class}."""
    kinds = {name: kind for name, kind in cls.kinds().items() if issubclass(kind, cls)}
    name = value.get(cls.TAG)
    if not isinstance(name, str) or name not in kinds:
        raise UserError(f"{where}.{cls.TAG}: must be one of {', '.join(map(repr, kinds))}, got {_show(name)}")
    return kinds[name], {k: v for k, v in value.items() if k != cls.TAG}


def load_versioned(path: str | os.PathLike, cls: type, supported: tuple[int, ...],
                   legacy: dict[int, type] | None = None) -> Any:
    """Load a dataclass file whose top level carries `schema_version`.

    `legacy` maps older versions to the dataclasses that read them; each has an `upgrade()`
    method returning the current `cls`.
    """
    legacy = legacy or {}
    data = read_json(path)
    if not isinstance(data, dict):
        raise UserError(f"{path}: expected a JSON object at the top level")
    version = data.get("schema_version")
    if version not in (*legacy, *supported) or isinstance(version, bool):
        raise UserError(f"{path}: schema_version {_show(version)} is not one of {sorted({*legacy, *supported})}")
    if version in legacy:
        old = from_dict(legacy[version], data, str(path))
        try:
            return old.upgrade()
        except ValueError as e:
            raise UserError(f"{path}: {e}") from None
    return from_dict(cls, data, str(path))
