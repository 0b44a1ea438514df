"""Timing a configuration with a real job before it may win (omnitune/probing/timing.py)."""

import dataclasses

from typer.testing import CliRunner

from omnitune.cli.commands import app
from omnitune.core import profile as profile_mod
from omnitune.probing import timing
from omnitune.runtime import host
from tests.conftest import DATA, make_spec


def test_a_profile_of_another_machine_is_not_timed_here_and_says_why():
    h200 = profile_mod.load(DATA / "profile-h200-shapes-resnet.json")
    assert "16 cores and NVIDIA H200" in timing.here(h200)


def test_a_profile_of_a_machine_like_this_one_is_timed_here(sample_profile):
    mine = dataclasses.replace(sample_profile, host=host.host_facts())
    assert timing.here(mine) == ""
    far = dataclasses.replace(mine.cluster.devices[0], host="10.0.0.2")
    other = dataclasses.replace(mine, cluster=dataclasses.replace(mine.cluster, devices=(far,) + mine.cluster.devices[1:]))
    assert timing.here(other) == "the cluster spans other hosts"


def test_a_real_job_times_a_configuration_without_training_to_its_target(tmp_path):
    spec = make_spec("sync", [["cpu0", "cpu1"]], target=0.5)
    sec = timing.time_spec(spec, seconds=0.5)
    assert sec is not None and 0 < sec < 0.5


def test_a_plan_from_a_gpu_machines_profile_says_where_its_figures_come_from(tmp_path):
    out = tmp_path / "plan.json"
    r = CliRunner().invoke(app, ["plan", "--profile", str(DATA / "profile-h200-shapes-resnet.json"), "--workload",
                                 "shapes-resnet", "--target-accuracy", "0.9", "--protocol", "sync", "--batch-size",
                                 "64", "--lr", "0.1", "--budget-s", "1", "--out", str(out)])
    assert r.exit_code == 0, r.output
    assert "planning for a machine you are not on" in r.output and "comes from the profile" in " ".join(r.output.split())
    assert out.is_file()
