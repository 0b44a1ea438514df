"""Profiles kept between commands, so that `omnitune train` on a machine it measured before
starts training without profiling again: a profile is most of what a user waits for before a
minutes-long job trains (docs/decisions.md, cache).

A profile is kept under omnitune's cache (env.cache_dir()/profiles) when `profile` or `train`
measures this machine (no cluster spec), keyed by all that changes what it measures: the
workload file's contents and its data folder, the profile's settings (`--quick`,
`--max-batch`), this host (its name, cores, platform, Python, torch, GPUs), the cluster omnitune
makes of it (which follows the cores this process may use) and omnitune's version and profile
schema. `train` uses a kept profile up to MAX_AGE_S old; `train --fresh-profile` measures anew.
What no key sees is the machine's load: a profile measured while other jobs ran is as wrong
kept as it was fresh, and `--fresh-profile` is the remedy for both.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from datetime import datetime, timezone
from pathlib import Path

from omnitune.core import env, profile as profile_mod
from omnitune.core.cluster import local_cluster
from omnitune.core.errors import UserError
from omnitune.core.files import to_dict
from omnitune.core.profile import Profile
from omnitune.core.version import VERSION
from omnitune.runtime import workload as workload_mod
from omnitune.runtime.host import host_facts

MAX_AGE_S = 7 * 24 * 3600.0     # a kept profile older than this is measured again


def path(workload: str, data_dir: str | None, quick: bool, max_batch: int | None) -> Path | None:
    """Where this machine's profile of `workload` with these settings is kept; None where the
    cache is off (OMNITUNE_CACHE_DIR=off)."""
    root = env.cache_dir()
    if root is None:
        return None
    wl = workload_mod.load(workload)
    key = {"schema": profile_mod.SCHEMA_VERSION, "omnitune": VERSION, "workload": wl.digest,
           "data_dir": str(Path(data_dir).resolve()) if data_dir else None, "quick": quick, "max_batch": max_batch,
           "host": dataclasses.asdict(host_facts()), "cluster": to_dict(local_cluster())}
    digest = hashlib.sha256(json.dumps(key, sort_keys=True, default=str).encode()).hexdigest()[:16]
    return root / "profiles" / f"{wl.path.stem}-{digest}.json"


def kept(workload: str, data_dir: str | None, quick: bool, max_batch: int | None,
         now: datetime | None = None) -> tuple[Path, Profile] | None:
    """The kept profile for these settings on this machine, and its file; None where there is
    none, it cannot be read, or it was measured more than MAX_AGE_S before `now`."""
    where = path(workload, data_dir, quick, max_batch)
    if where is None or not where.is_file():
        return None
    try:
        prof = profile_mod.load(where)
        measured = datetime.fromisoformat(prof.measured_at)
    except (UserError, ValueError):
        return None
    now = now or datetime.now(timezone.utc)
    if measured.tzinfo is None or (now - measured).total_seconds() > MAX_AGE_S:
        return None
    return where, prof


def keep(prof: Profile, data_dir: str | None, quick: bool, max_batch: int | None) -> Path | None:
    """Keep a profile just measured on this machine (atomically); its file, or None where the
    cache is off or cannot be written (that only costs the next `train` a profile)."""
    try:
        where = path(prof.workload, data_dir, quick, max_batch)
        if where is None:
            return None
        where.parent.mkdir(parents=True, exist_ok=True)
        profile_mod.save(prof, where)
        return where
    except OSError:
        return None
