"""docs/development.md lists every module of benchmarks/: each benchmark as a row of its table,
and the modules that are no benchmark in the line under it, so that a new module is documented
with what it answers and how long its full run takes."""

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BENCHMARKS = ROOT / "benchmarks"
PAGE = ROOT / "docs" / "development.md"
HEADER = "| module | what it answers | what it measures | full run (2-core VM) |"
NOT_BENCHMARKS = "Not benchmarks: "


def modules(root: Path = BENCHMARKS) -> set[str]:
    """The modules of benchmarks/ (its workload files in benchmarks/workloads/ are no modules)."""
    return {p.stem for p in root.glob("*.py") if p.name != "__init__.py"}


def listed(text: str) -> tuple[dict[str, list[str]], set[str]]:
    """The table's rows (module -> its cells) and the modules named in the line under it."""
    lines = text.splitlines()
    start = lines.index(HEADER)
    rows = {}
    for line in lines[start + 2:]:
        if not line.startswith("|"):
            break
        cells = [c.strip() for c in line.strip("|").split(" | ")]
        rows[cells[0].strip("`")] = cells[1:]
    others = next(line for line in lines[start:] if line.startswith(NOT_BENCHMARKS))
    return rows, {name for name in re.findall(r"`(\w+)\.py`", others)}


def test_every_module_of_benchmarks_is_listed():
    rows, others = listed(PAGE.read_text())
    missing = sorted(modules() - set(rows) - others)
    assert not missing, (f"benchmarks/ has modules that docs/development.md does not list: {missing}; add each "
                         f"benchmark as a row of its table, or name it in the line '{NOT_BENCHMARKS}...'")


def test_the_page_lists_no_module_that_is_gone_and_none_twice():
    rows, others = listed(PAGE.read_text())
    assert set(rows) | others <= modules(), f"listed but not in benchmarks/: {sorted((set(rows) | others) - modules())}"
    assert not set(rows) & others, f"both a benchmark and not: {sorted(set(rows) & others)}"


def test_each_benchmark_row_says_what_it_answers_and_how_long_it_takes():
    rows, _ = listed(PAGE.read_text())
    for name, cells in rows.items():
        assert len(cells) == 3 and all(cells), f"{name}'s row needs a question, what it measures and its full run"
        assert cells[0].endswith("?"), f"{name}'s row should say what it answers, as a question"


def test_each_benchmark_runs_as_a_module():
    rows, _ = listed(PAGE.read_text())
    for name in rows:
        source = (BENCHMARKS / f"{name}.py").read_text()
        assert "def main(" in source and '__name__ == "__main__"' in source, f"benchmarks/{name}.py has no main()"
