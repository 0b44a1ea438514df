"""Shared by the benchmarks: writing results and printing them as a table."""

from __future__ import annotations

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


def write_results(name: str, data: dict) -> Path:
    """benchmarks/results/NAME.json; NAME-quick.json for a --quick run's data, so that a quick run
    never replaces the full run's figures the README quotes."""
    if data.get("quick") and not name.endswith("-quick"):
        name += "-quick"
    path = RESULTS / f"{name}.json"
    atomic_write_json(path, data)
    return path


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
