"""The Python API (omnitune/api.py): the README's example runs as written, requests check
themselves, and importing the package loads no torch until an API name is used."""

import re
import subprocess
import sys

import pytest

import omnitune
from omnitune.core.errors import UserError
from tests.conftest import DATA, ROOT


def readme_example() -> str:
    """The README's Python example: the code block after the "From Python" heading."""
    text = (ROOT / "README.md").read_text()
    section = text[text.index("## From Python"):]
    return re.search(r"```python\n(.*?)```", section, re.S).group(1)


def test_the_readme_example_profiles_plans_and_runs(tmp_path):
    """Fails if the README's example is not valid code, if any of omnitune.profile, plan or run
    is missing or takes other arguments, or if the run does not reach the plan's target."""
    code = readme_example()
    assert code.count("\n") <= 8
    done = subprocess.run([sys.executable, "-c", code + "\nassert summary.reached_target, summary\n"],
                          cwd=tmp_path, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    assert (tmp_path / "plan.json").is_file() and (tmp_path / "runs" / "demo" / "summary.json").is_file()


@pytest.mark.parametrize("fields, option", [
    (dict(target_accuracy=1.5), "--target-accuracy"),
    (dict(protocol="ring"), "--protocol"),
    (dict(groups=0), "--groups"),
    (dict(lr=0.0), "--lr"),
    (dict(momentum=1.0), "--momentum"),
    (dict(weight_decay=-0.1), "--weight-decay"),
    (dict(budget_s=-1.0), "--budget-s"),
    (dict(hardware_model="guess"), "--hardware-model"),
    (dict(cluster="c.yaml"), "one of --profile"),
])
def test_a_plan_request_names_the_option_it_refuses(fields, option):
    """Fails if a PlanRequest accepts a value the CLI refuses, or its message names another option."""
    with pytest.raises(UserError, match=re.escape(option)):
        omnitune.PlanRequest(**{"workload": "lenet-digits", "target_accuracy": 0.9, "profile": "p.json", **fields})


@pytest.mark.parametrize("fields, option", [
    (dict(max_time_s=0), "--max-time-s"), (dict(eval_every_s=-1), "--eval-every-s"),
    (dict(checkpoint_every_s=0), "--checkpoint-every-s"), (dict(max_restarts=-1), "--max-restarts"),
    (dict(replan_every_s=0), "--replan-every-s"), (dict(replan_probe_iters=0), "--replan-probe-iters"),
    (dict(stop_on_stall=True, replan_every_s=1.0), "--stop-on-stall"),
])
def test_run_options_name_the_option_they_refuse(fields, option):
    with pytest.raises(UserError, match=re.escape(option)):
        omnitune.RunOptions(**fields)


@pytest.mark.parametrize("fields, needle", [
    (dict(quick=True), "--quick"), (dict(fresh_profile=True), "--fresh-profile"),
    (dict(profile_path=DATA / "profile-h200-shapes-resnet.json"), "not of this machine"),
])
def test_train_refuses_a_profile_it_cannot_use_before_it_writes_anything(tmp_path, fields, needle):
    """Fails if omnitune.train, given a profile, would measure one anyway or run on another
    machine's, or if it refuses only after making its folder."""
    out_dir = tmp_path / "train"
    with pytest.raises(UserError, match=re.escape(needle)):
        omnitune.train("lenet-digits", out_dir, 0.9, **{"profile_path": DATA / "profile-v1.json", **fields})
    assert not out_dir.exists()


def test_importing_the_package_loads_no_torch_until_the_api_is_used():
    """Fails if omnitune/__init__ imports the API (and so torch) eagerly, or if omnitune.plan is
    anything but the API's function once asked for."""
    code = ("import sys, omnitune; before = 'torch' in sys.modules; f = omnitune.plan; "
            "print(before, 'torch' in sys.modules, f.__module__)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT)
    assert out.stdout.split() == ["False", "True", "omnitune.api"]


def test_a_runs_pauses_price_other_batches_from_the_plans_profile_where_it_is_at_hand(tmp_path):
    """api.pause_step_s: the plan's profile (a path as given, or beside the plan) gives the
    pauses their hardware model; a profile that is not at hand, or a simulated fleet's, gives
    none, and the pauses then compare rates and momenta only: the run says so where the profile
    is missing (api.retuner's notice), not for a simulated fleet, which has none to find."""
    from dataclasses import replace

    from omnitune import api
    from omnitune.core import plan as plan_mod
    from tests.conftest import DATA

    plan = plan_mod.load(DATA / "plan-v1.json")
    step_s = api.pause_step_s(plan, DATA / "plan-v1.json")
    assert step_s(plan.spec) > 0
    said = []
    api.retuner(DATA / "plan-v1.json", 30, notice=said.append)
    assert said == []
    for changed, told in (({"profile": "nowhere.json"}, 1), ({"simulated_cluster": "4x cpu"}, 1)):     # so far
        plan_mod.save(replace(plan, **changed), tmp_path / "plan.json")
        assert api.pause_step_s(plan_mod.load(tmp_path / "plan.json"), tmp_path / "plan.json") is None
        api.retuner(tmp_path / "plan.json", 30, notice=said.append)
        assert len(said) == told and all("nowhere.json" in s for s in said)


def test_a_plan_names_its_profile_from_its_own_folder_so_a_run_from_anywhere_prices_batches(tmp_path, monkeypatch):
    """api.profile_entry: `plan --profile w/p.json --out plans/x.json` records ../w/p.json, which a
    run started from another folder finds beside the plan; without --out the path stays as
    given. Fails if the plan records the path as given (relative to where `plan` ran: a run
    elsewhere priced no batch at its pauses, 2026-11-28)."""
    import shutil
    from dataclasses import replace
    from pathlib import Path

    from omnitune import api
    from omnitune.core import plan as plan_mod
    from tests.conftest import DATA

    plan = plan_mod.load(DATA / "plan-v1.json")
    (tmp_path / "w").mkdir()
    (tmp_path / "plans").mkdir()
    shutil.copy(DATA / Path(plan.profile).name, tmp_path / "w" / "p.json")
    monkeypatch.chdir(tmp_path)
    assert api.profile_entry("w/p.json", "plans/x.json") == "../w/p.json"
    assert api.profile_entry("w/p.json", None) == "w/p.json"
    plan_mod.save(replace(plan, profile=api.profile_entry("w/p.json", "plans/x.json")), tmp_path / "plans" / "x.json")
    (tmp_path / "elsewhere").mkdir()
    monkeypatch.chdir(tmp_path / "elsewhere")
    step_s = api.pause_step_s(plan_mod.load(tmp_path / "plans" / "x.json"), tmp_path / "plans" / "x.json")
    assert step_s is not None and step_s(plan.spec) > 0


def test_a_runs_first_pause_is_priced_by_what_its_workload_reads(tmp_path, monkeypatch):
    """api.retuner hands the runtime the first pause's estimate of the plan's own workload: an
    AdamW recipe weighs no goodput (no reads of its batch, noise scale or timing) and a test set
    of 40 cached samples is all its candidates are scored on. Fails if the estimate takes SGD or
    512 samples whatever the workload."""
    from dataclasses import replace

    from omnitune import api
    from omnitune.core import plan as plan_mod, profile
    from omnitune.planning import hardware
    from omnitune.probing.pause import pause_cost_s
    from omnitune.runtime import workload
    from tests.conftest import DATA, tiny_cached_workload

    path = tiny_cached_workload(tmp_path, monkeypatch, "{'optimizer': 'adamw'}")
    wl = workload.load(str(path))
    wl.build_datasets(None, 0)                                      # in the cache, as after a profile
    plan = plan_mod.load(DATA / "plan-v1.json")
    plan = replace(plan, spec=replace(plan.spec, workload=str(path)))
    plan_mod.save(plan, tmp_path / "plan.json")
    _, cost = api.retuner(tmp_path / "plan.json", 30)
    step_s = hardware.spec_step_s(profile.load(DATA / "profile-v1.json"), plan.layout)
    sec = plan.prediction.sec_per_iter
    assert cost == pytest.approx(pause_cost_s(plan.spec, 30, step_s, sec, wl, 40))
    assert cost < pause_cost_s(plan.spec, 30, step_s, sec, None, 40) < pause_cost_s(plan.spec, 30, step_s, sec)
