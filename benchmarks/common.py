"""Shared by the benchmarks: writing results and printing them as a table."""

from __future__ import annotations

import json
import os
import platform
import shutil
import subprocess
import sys
from datetime import datetime, timezone
from pathlib import Path

from rich.console import Console
from rich.table import Table

from omnitune.core.files import atomic_write_json

RESULTS = Path(__file__).parent / "results"


def band_holds(band, measured: float | None) -> bool | None:
    """Whether a band on iterations, (low, high), holds the measured iterations; None when there is
    no band, no measurement, or a band with no top ((low,): the target may never be reached),
    which cannot fail and so has not "held": counted apart, as no band."""
    if not band or len(band) < 2 or measured is None:
        return None
    return band[0] <= measured <= band[1]


def profile_planning_frac(row: dict) -> float | None:
    """(profile + planning) / the plan's time to target, of a plan_quality row; None where
    the row lacks one of them (a profile kept from before its time was recorded)."""
    try:
        return (row["profile_s"] + row["planning_s"]) / row["plan_time_to_target_s"]
    except (KeyError, TypeError, ZeroDivisionError):
        return None


def write_results(name: str, data: dict) -> Path:
    """benchmarks/results/NAME.json; NAME-quick.json for a --quick run's data, so that a quick run
    never replaces the full run's figures the README quotes. Adds `recorded`: the run's date, machine,
    card and commit (docs/benchmarks.md shows them)."""
    if data.get("quick") and not name.endswith("-quick"):
        name += "-quick"
    path = RESULTS / f"{name}.json"
    atomic_write_json(path, {**data, "recorded": data.get("recorded") or recorded()})
    return path


def recorded() -> dict:
    """When, where and from which commit a result was measured, for benchmarks.summary. Cheap, and
    never fails: a figure it cannot learn reads "unknown" (the card: "none")."""
    return {"date": datetime.now(timezone.utc).isoformat(timespec="seconds"), "machine": _machine(),
            "card": _card(), "commit": _commit()}


def _run(*cmd: str) -> subprocess.CompletedProcess | None:
    try:
        return subprocess.run(cmd, capture_output=True, text=True, timeout=10, cwd=Path(__file__).parent)
    except (OSError, subprocess.SubprocessError):
        return None


def _machine() -> str:
    try:
        memory = f", {os.sysconf('SC_PAGE_SIZE') * os.sysconf('SC_PHYS_PAGES') / 2**30:.0f} GiB"
    except (ValueError, OSError, AttributeError):
        memory = ""
    return f"{platform.platform()}, {os.cpu_count()} CPUs{memory}"


def _card() -> str:
    """The GPU the run used (torch's name for it, where this process initialized CUDA), else the
    machine's GPUs as nvidia-smi names them (which initializes nothing in this process), else "none"."""
    torch = sys.modules.get("torch")
    try:
        if torch is not None and torch.cuda.is_initialized():
            return torch.cuda.get_device_name()
    except Exception:       # a label must never fail a benchmark's results
        pass
    smi = shutil.which("nvidia-smi") and _run("nvidia-smi", "--query-gpu=name", "--format=csv,noheader")
    names = smi.stdout.split("\n") if smi and smi.returncode == 0 else []
    names = [n.strip() for n in names if n.strip()]
    return ", ".join(names) or "none"


def _commit() -> str:
    head = _run("git", "rev-parse", "--short", "HEAD")
    if head is None or head.returncode != 0:
        return "unknown"
    clean = _run("git", "diff", "--quiet", "HEAD")
    return head.stdout.strip() + ("" if clean and clean.returncode == 0 else " with uncommitted changes")


class Journal:
    """A long benchmark's finished measurements, one JSON line each in `path`, so that a run cut off
    (a session's end, a crash) goes on where it stopped when started again on the same folder: a
    measurement already in the journal is read back, not run again. Each line records the commit
    it was measured on; `commits` lists them, for the results to say when a row spans several.
    With no path the journal keeps nothing between runs."""

    def __init__(self, path: Path | None = None):
        self.path = path
        self.done: dict[str, dict] = {}
        self.commit = _commit()
        self.commits: set[str] = set()
        if path is not None and path.exists():
            text = path.read_text()
            if text and not text.endswith("\n"):     # cut off mid-line: the next line starts on its own
                with path.open("a") as f:
                    f.write("\n")
            for line in text.splitlines():
                try:
                    entry = json.loads(line)
                except json.JSONDecodeError:      # a line cut off as the run was killed
                    continue
                self.done[entry["key"]] = entry

    def get(self, key: str) -> dict | None:
        """The value measured under `key`, if a run before this one finished it."""
        entry = self.done.get(key)
        if entry is None:
            return None
        self.commits.add(entry["commit"])
        return entry["value"]

    def put(self, key: str, value: dict) -> dict:
        entry = {"key": key, "commit": self.commit, "value": value}
        self.done[key] = entry
        self.commits.add(self.commit)
        if self.path is not None:
            with self.path.open("a") as f:        # one whole line a write: a cut leaves the rest readable
                f.write(json.dumps(entry) + "\n")
        return value


DOCS = Path(__file__).resolve().parent.parent / "docs"


def write_page(name: str, text: str) -> None:
    """docs/NAME, generated from the results (benchmarks.docs, benchmarks.summary)."""
    DOCS.mkdir(exist_ok=True)
    (DOCS / name).write_text(text)
    print(f"wrote {DOCS / name}")


def print_rows(title: str, rows: list[dict], columns: list[str]) -> None:
    table = Table(title=title)
    for c in columns:
        table.add_column(c, justify="right")
    for r in rows:
        table.add_row(*(_fmt(r.get(c)) for c in columns))
    Console(width=200).print(table)


def _fmt(v) -> str:
    if v is None:
        return "-"
    if isinstance(v, float):
        return f"{v:.4g}"
    return str(v)
