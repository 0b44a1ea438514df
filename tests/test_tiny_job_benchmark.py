"""benchmarks.tiny_job: plan + run as a user runs them, timed from outside (the commands faked at
the process seam)."""

import json
import os

import pytest

from benchmarks import common, tiny_job as bench


def fake_omnitune(seconds: dict, reached: bool = True):
    """`omnitune CMD ...` as a function: writes what the command would, returns its wall time."""
    def run(*args):
        cmd = args[0]
        if cmd == "plan":
            out = args[args.index("--out") + 1]
            json.dump({"prediction": {"time_to_target_s": 0.2}}, open(out, "w"))
        elif cmd in ("run", "train"):
            out = args[args.index("--out-dir") + 1]
            os.makedirs(out, exist_ok=True)
            json.dump({"reached_target": reached, "time_to_target_s": 0.25}, open(f"{out}/summary.json", "w"))
        return seconds[cmd]
    return run


@pytest.mark.parametrize("plan_s,run_s,reached,met", [(8.0, 5.0, True, True), (9.0, 7.0, True, False),
                                                      (8.0, 5.0, False, False)])
def test_the_goal_is_plan_and_run_within_15_s_and_every_run_reaching(tmp_path, monkeypatch, plan_s, run_s, reached,
                                                                       met):
    """Fails if the total leaves out either command, or a run that missed its target meets the goal."""
    monkeypatch.setattr(bench, "omnitune", fake_omnitune({"profile": 17.0, "plan": plan_s, "run": run_s,
                                                                  "train": plan_s + run_s - 3}, reached))
    monkeypatch.setattr(common, "RESULTS", tmp_path)
    bench.main(["--repeats", "2"])
    d = json.loads((tmp_path / "tiny_job.json").read_text())
    assert d["median_total_s"] == pytest.approx(plan_s + run_s) and d["profile_s"] == 17.0
    assert d["goals_met"]["plan_and_run_within_15s"] is met and d["goals_met"]["plan_within_10s"]
    assert d["median_one_command_s"] == pytest.approx(plan_s + run_s - 3)
    assert d["goals_met"]["one_command_within_15s"] is (plan_s + run_s - 3 <= 15 and reached)
    assert [r["seed"] for r in d["rows"]] == [1, 2]
