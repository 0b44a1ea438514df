"""The generated docs are current: docs/commands.md (Typer's docs of the CLI) and
docs/benchmarks.md (benchmarks.summary, from benchmarks/results/*.json)."""

import json
import os
import subprocess
import sys
from pathlib import Path

from benchmarks import summary

ROOT = Path(__file__).resolve().parent.parent
REGENERATE = "run `make docs` (or the command in the Makefile's docs target) and commit the result"


def test_the_command_reference_is_typers_docs_of_the_cli(tmp_path):
    out = tmp_path / "commands.md"
    # A narrow terminal: the docs must not depend on its width.
    subprocess.run([sys.executable, "-m", "typer", "omnitune.cli.commands", "utils", "docs", "--name", "omnitune",
                    "--output", str(out)], cwd=ROOT, check=True, capture_output=True,
                   env={**os.environ, "COLUMNS": "40"}, timeout=60)
    assert out.read_text() == (ROOT / "docs" / "commands.md").read_text(), \
        f"docs/commands.md is not what the CLI's docs are now: {REGENERATE}"


def test_the_benchmarks_page_is_the_results_as_they_are():
    assert summary.render() == (ROOT / "docs" / "benchmarks.md").read_text(), \
        f"docs/benchmarks.md is not what benchmarks/results/*.json say now: {REGENERATE}"


def test_the_summary_says_what_a_results_file_records_and_what_it_lacks(tmp_path):
    (tmp_path / "faults.json").write_text(json.dumps({
        "quick": False, "rows": [{"scenario": "worker killed", "recovery_s": 4.479, "reached_target": True}],
        "recorded": {"date": "2026-11-26T05:55:36+00:00", "machine": "Linux, 2 CPUs, 24 GiB", "card": "none",
                     "commit": "abc1234"}, "notes": "two cores, shared"}))
    (tmp_path / "faults-quick.json").write_text(json.dumps({"quick": True, "rows": []}))
    (tmp_path / "newbench-quick.json").write_text(json.dumps({"quick": True, "ratio": 1.2345, "goals": {"ratio": 1.1},
                                                              "goals_met": False}))
    text = summary.render(tmp_path)

    faults, newbench = text.split("## faults")[1].split("## newbench")
    assert "From `benchmarks/results/faults.json`." in faults
    assert "Not shown here: `faults-quick.json`." in faults
    assert "Run: date 2026-11-26 05:55; machine Linux, 2 CPUs, 24 GiB; card none; commit abc1234." in faults
    assert "| worker killed | 4.48 | yes |" in faults          # TABLES' columns, those the rows have
    assert "Notes: two cores, shared" in faults
    assert "Goals: None stated in the module or the JSON." in faults     # benchmarks/faults.py states none

    assert "From `benchmarks/results/newbench-quick.json`, a `--quick` run." in newbench
    assert "Run: date not recorded; machine not recorded; card not recorded; commit not recorded." in newbench
    assert "| ratio | 1.23 | 1.1 |" in newbench                # the generic table, with its goal
    assert "Goals met: no." in newbench


def test_write_results_records_the_run(tmp_path, monkeypatch):
    from benchmarks import common
    monkeypatch.setattr(common, "RESULTS", tmp_path)
    data = json.loads(common.write_results("faults", {"quick": False, "rows": []}).read_text())
    assert set(data["recorded"]) == {"date", "machine", "card", "commit"}
    assert all(isinstance(v, str) and v for v in data["recorded"].values())


def test_the_readmes_results_table_is_the_results_as_they_are():
    text = (ROOT / "README.md").read_text()
    assert summary.with_headline(text, summary.headline()) == text, \
        f"README.md's results table is not what benchmarks/results/plan_quality.json says now: {REGENERATE}"


def test_the_results_table_goes_between_its_markers_only():
    text = f"before\n{summary.HEAD_START}\nold table\n{summary.HEAD_END}\nafter\n"
    assert summary.with_headline(text, "new") == f"before\n{summary.HEAD_START}\nnew\n{summary.HEAD_END}\nafter\n"


def test_the_profile_and_planning_share_counts_both_over_the_plans_training():
    row = {"profile_s": 15.0, "planning_s": 5.0, "plan_time_to_target_s": 80.0}
    assert summary.get(row, "profile_planning_frac") == 0.25
    assert summary.get({"planning_s": 5.0, "plan_time_to_target_s": 80.0}, "profile_planning_frac") is None


def test_a_plan_quality_row_says_when_and_on_which_machine_it_was_measured():
    rec = {"date": "2026-11-30T14:32:46+00:00", "machine": "Linux-6.18.44-fc-v657-x86_64-with-glibc2.36, 2 CPUs, 24 GiB"}
    assert summary.get({"recorded": rec}, "measured") == "2026-11-30, 6.18.44-fc-v657"
    assert summary.get({"recorded": {"date": "2026-11-30T14:32:46+00:00"}}, "measured") == "2026-11-30, not recorded"
    arm = {"date": "2026-12-01T09:00:00+00:00", "machine": "Linux-6.8.0-1019-aws-aarch64-with-glibc2.39, 4 CPUs"}
    assert summary.get({"recorded": arm}, "measured") == "2026-12-01, 6.8.0-1019-aws"
    assert summary.get({}, "measured") is None       # a row from before rows recorded their own
