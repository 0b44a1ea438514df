"""`omnitune run PLAN --print-commands --format slurm`: the sbatch script, run by bash with stand-ins
for `srun` (each task started here, in parallel, with its SLURM_NODEID) and `omnitune` (records
its arguments), so no Slurm and no training."""

import os
import re
import subprocess

import pytest
from typer.testing import CliRunner

from omnitune.cli.commands import app
from omnitune.runtime import checkpoint
from tests.conftest import make_plan

runner = CliRunner()

SRUN = """#!/bin/bash
n=1
while [[ $1 == --* ]]; do
  case $1 in --ntasks=*) n=${1#--ntasks=} ;; esac
  shift
done
pids=()
for ((i = 0; i < n; i++)); do SLURM_NODEID=$i "$@" & pids+=($!); done
rc=0
for p in "${pids[@]}"; do wait "$p" || rc=1; done
exit $rc
"""

OMNITUNE = """#!/bin/bash
printf '%s\\n' "$@" > "$RECORDS/node-$SLURM_NODEID"
"""


def two_node_plan(tmp_path):          # as tests/test_cli.py's
    return make_plan(tmp_path / "plan.json", "groups", [["cpu0"], ["cpu1"]], nodes={"cpu1": 1},
                     rendezvous="127.0.0.1:29511")


def script(tmp_path, *options):
    plan = two_node_plan(tmp_path)
    result = runner.invoke(app, ["run", str(plan), "--out-dir", str(tmp_path / "run"), *options,
                                 "--print-commands", "--format", "slurm"])
    assert result.exit_code == 0, result.output
    return plan, result.output


def run_script(tmp_path, text, restart_count):
    """The script's arguments per node, from a run under the stand-ins."""
    bin_dir, records = tmp_path / "bin", tmp_path / f"records-{restart_count}"
    bin_dir.mkdir(exist_ok=True)
    records.mkdir()
    for name, body in (("srun", SRUN), ("omnitune", OMNITUNE)):
        (bin_dir / name).write_text(body)
        (bin_dir / name).chmod(0o755)
    (tmp_path / "job.sh").write_text(text)
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}", "RECORDS": str(records),
           "SLURM_RESTART_COUNT": str(restart_count)}
    env.pop("SLURM_NODEID", None)
    done = subprocess.run(["bash", str(tmp_path / "job.sh")], env=env, cwd=tmp_path, capture_output=True,
                          text=True, timeout=30)
    assert done.returncode == 0, done.stderr
    return {int(p.name.split("-")[1]): p.read_text().splitlines() for p in records.iterdir()}


def test_the_sbatch_directives(tmp_path):
    _, text = script(tmp_path)
    directives = re.findall(r"^#SBATCH (\S+)", text, re.M)
    assert {"--nodes=2", "--ntasks-per-node=1", "--requeue", "--job-name=omnitune-plan"} <= set(directives)
    assert not any(d.startswith(("--partition", "--account", "--nodelist")) for d in directives)
    assert "#SBATCH --partition=..." in text                  # a hint, commented out
    assert "Loopback hosts" in text and "no --checkpoint-every-s" in text
    lines = text.splitlines()
    first_command = next(i for i, line in enumerate(lines) if line and not line.startswith("#"))
    assert max(i for i, line in enumerate(lines) if line.startswith("#SBATCH")) < first_command   # sbatch reads them


def test_each_node_runs_its_command_and_resumes_once_requeued(tmp_path):
    plan, text = script(tmp_path, "--max-restarts", "2", "--checkpoint-every-s", "30")
    assert "no --checkpoint-every-s" not in text
    given = ["--out-dir", str(tmp_path / "run"), "--checkpoint-every-s", "30.0", "--max-restarts", "2"]
    assert run_script(tmp_path, text, 0) == {i: ["run", str(plan), "--node-rank", str(i), *given] for i in (0, 1)}
    # Requeued before the coordinator's first checkpoint: it starts over.
    assert run_script(tmp_path, text, 1) == {i: ["run", str(plan), "--node-rank", str(i), *given] for i in (0, 1)}
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / checkpoint.FILE).write_bytes(b"")
    assert run_script(tmp_path, text, 2) == {i: ["run", str(plan), "--node-rank", str(i), *given, "--resume"]
                                             for i in (0, 1)}


def test_a_plan_on_named_hosts_asks_slurm_for_them(tmp_path):
    """Hosts that are not loopback go to --nodelist; a GPU to --gres; nodes 0 and 2 of the spec
    are Slurm's 0 and 1."""
    from omnitune.core.cluster import Device

    devices = (Device("cpu0", "cpu", host="10.0.0.1", threads=4),
               Device("cuda0", "cuda", host="10.0.0.3", node=2, cuda_index=1))
    plan = make_plan(tmp_path / "plan.json", "groups", [["cpu0"], ["cuda0"]], devices=devices,
                     rendezvous="10.0.0.1:29400", server_host="10.0.0.1")
    result = runner.invoke(app, ["run", str(plan), "--out-dir", "run", "--print-commands", "--format", "slurm"])
    assert result.exit_code == 0, result.output
    directives = re.findall(r"^#SBATCH (\S+)", result.output, re.M)
    assert {"--nodes=2", "--nodelist=10.0.0.1,10.0.0.3", "--gres=gpu:2"} <= set(directives)
    assert "Loopback" not in result.output
    assert run_script(tmp_path, result.output, 0) == {0: ["run", str(plan), "--node-rank", "0", "--out-dir", "run"],
                                                      1: ["run", str(plan), "--node-rank", "2", "--out-dir", "run"]}


@pytest.mark.parametrize("args, needle", [
    (["--print-commands", "--format", "yaml"], "--format yaml: shell or slurm"),
    (["--format", "slurm"], "--format slurm: only with --print-commands"),
])
def test_a_bad_format_is_one_line(tmp_path, args, needle):
    result = runner.invoke(app, ["run", str(two_node_plan(tmp_path)), "--out-dir", str(tmp_path / "r"), *args])
    assert result.exit_code == 2 and result.output.strip() == f"error: {needle}", result.output
