"""Profiles kept between commands (profiling/cache.py): `train` uses one again only where it
was measured on this machine, of the same workload file and settings, and recently."""

import dataclasses
import json
from datetime import datetime, timedelta, timezone

from omnitune.profiling import cache


def fresh(sample_profile, workload="lenet-digits"):
    now = datetime.now(timezone.utc).isoformat(timespec="seconds")
    return dataclasses.replace(sample_profile, workload=workload, measured_at=now)


def test_a_kept_profile_comes_back_for_the_same_settings_only(sample_profile, tmp_path, monkeypatch):
    monkeypatch.setenv("OMNITUNE_CACHE_DIR", str(tmp_path))
    prof = fresh(sample_profile)
    where = cache.keep(prof, None, True, None)
    assert where is not None and where.parent == tmp_path / "profiles"
    found = cache.kept("lenet-digits", None, True, None)
    assert found is not None and found[0] == where and found[1].measured_at == prof.measured_at
    assert cache.kept("lenet-digits", None, False, None) is None          # not --quick: another profile
    assert cache.kept("lenet-digits", None, True, 128) is None            # another --max-batch
    assert cache.kept("lenet-digits", str(tmp_path), True, None) is None  # another data folder
    assert cache.kept("cnn1d-mnist1d", None, True, None) is None


def test_an_old_or_unreadable_profile_is_measured_again(sample_profile, tmp_path, monkeypatch):
    monkeypatch.setenv("OMNITUNE_CACHE_DIR", str(tmp_path))
    prof = fresh(sample_profile)
    where = cache.keep(prof, None, True, None)
    measured = datetime.fromisoformat(prof.measured_at)
    assert cache.kept("lenet-digits", None, True, None, now=measured + timedelta(days=6)) is not None
    assert cache.kept("lenet-digits", None, True, None, now=measured + timedelta(days=8)) is None
    where.write_text(json.dumps({"schema_version": 99}))
    assert cache.kept("lenet-digits", None, True, None) is None
    where.write_text("{")
    assert cache.kept("lenet-digits", None, True, None) is None


def test_a_changed_workload_file_is_profiled_again(sample_profile, tmp_path, monkeypatch):
    monkeypatch.setenv("OMNITUNE_CACHE_DIR", str(tmp_path / "cache"))
    source = (tmp_path / "mine.py")
    source.write_text("from omnitune.workloads.lenet_digits import *\n")
    cache.keep(fresh(sample_profile, str(source)), None, False, None)
    assert cache.kept(str(source), None, False, None) is not None
    source.write_text("from omnitune.workloads.lenet_digits import *\n# edited\n")
    assert cache.kept(str(source), None, False, None) is None


def test_no_cache_keeps_nothing(sample_profile, monkeypatch):
    monkeypatch.setenv("OMNITUNE_CACHE_DIR", "off")
    assert cache.keep(fresh(sample_profile), None, True, None) is None
    assert cache.kept("lenet-digits", None, True, None) is None
