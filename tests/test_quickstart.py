"""The README's quickstart runs as written: every `$ omnitune ...` line of its code block, in
order, in an empty folder. Its profile is the full one a user takes (about 15 s): with `--quick`
(batches up to 64) teacher-mlp's plan could be batch 64 at lr 0.1, whose accuracy levels off
near 0.91, below the quickstart's 0.95, and the test then turned on which rate the probes
favoured (CHANGELOG, 2026-11-29)."""

import shlex
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def quickstart_commands() -> list[list[str]]:
    text = (ROOT / "README.md").read_text()
    section = text.split("\n## Quickstart", 1)[1].split("\n## ", 1)[0]
    return [shlex.split(line[2:]) for line in section.splitlines() if line.startswith("$ omnitune ")]


def test_the_quickstart_has_the_three_steps():
    assert [c[1] for c in quickstart_commands()] == ["profile", "plan", "run"]


@pytest.mark.slow
def test_the_readme_quickstart_runs_as_written(tmp_path):
    """Fails if a command of the quickstart is refused, fails, or the run misses its target (exit 1)."""
    command = Path(sys.executable).parent / "omnitune"
    for args in quickstart_commands():
        args = args[1:]
        r = subprocess.run([str(command), *args], cwd=tmp_path, capture_output=True, text=True, timeout=600)
        assert r.returncode == 0, (args, r.stdout[-3000:], r.stderr[-3000:])
    assert (tmp_path / "runs" / "demo" / "summary.json").is_file()
