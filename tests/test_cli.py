"""The command line: bad input gives one line and exit 2; the whole path runs."""

import json
from pathlib import Path
import tempfile

import pytest
from typer.testing import CliRunner

from omnitune.cli.commands import app
from omnitune.core.errors import UserError
from omnitune.runtime.summary import RunSummary, save as save_summary
from tests.conftest import DATA, make_plan, make_spec

runner = CliRunner()


def fails_cleanly(args, needle):
    result = runner.invoke(app, args)
    text = result.output
    assert result.exit_code == 2, text
    assert "Traceback" not in text and needle in text, text
    assert len([ln for ln in text.splitlines() if ln.strip()]) <= 2     # one message (may wrap once)


@pytest.fixture
def bad_profile(tmp_path):
    data = json.loads((DATA / "profile-v1.json").read_text())
    data["surprise"] = 1
    (tmp_path / "p.json").write_text(json.dumps(data))
    return tmp_path / "p.json"


PLAN = ["plan", "--workload", "lenet-digits", "--out", "/tmp/never-written.json"]


@pytest.mark.parametrize("extra, needle", [
    (["--profile", "missing.json", "--target-accuracy", "0.9"], "missing.json: file not found"),
    (["--profile", str(DATA / "profile-v1.json"), "--target-accuracy", "-1"], "--target-accuracy"),
    (["--profile", str(DATA / "profile-v1.json"), "--target-accuracy", "0.9", "--groups", "9"], "--groups 9"),
    (["--profile", str(DATA / "profile-v1.json"), "--target-accuracy", "0.9", "--batch-size", "0"],
     "--batch-size must be at least 1"),
    (["--profile", str(DATA / "profile-v1.json"), "--target-accuracy", "0.9", "--protocol", "x"], "--protocol"),
    (["--profile", str(DATA / "profile-v1.json"), "--target-accuracy", "0.9", "--lr", "-0.1"], "--lr"),
    (["--profile", str(DATA / "profile-v1.json"), "--target-accuracy", "0.9", "--predict-s", "-1"],
     "--predict-s must not be negative"),
    (["--profile", str(DATA / "profile-v1.json"), "--target-accuracy", "0.9", "--hardware-model", "guess"],
     "--hardware-model must be analytic or simulated"),
    (["--profile", str(DATA / "profile-v1.json")], "give one target: --target-accuracy or --target-loss"),
    (["--profile", str(DATA / "profile-v1.json"), "--target-accuracy", "0.9", "--target-loss", "0.3"],
     "give one target"),
    (["--profile", str(DATA / "profile-v1.json"), "--target-loss", "-1"], "--target-loss must be positive"),
])
def test_plan_bad_input(extra, needle):
    fails_cleanly(PLAN + extra, needle)


def test_plan_unknown_key_and_workload(bad_profile):
    fails_cleanly(PLAN + ["--profile", str(bad_profile), "--target-accuracy", "0.9"], "unknown key 'surprise'")
    fails_cleanly(["plan", "--workload", "nope", "--out", "x.json", "--profile", str(DATA / "profile-v1.json"),
                   "--target-accuracy", "0.9"], "unknown workload 'nope'")


def test_run_bad_input(tmp_path):
    (tmp_path / "plan.json").write_text("{")
    fails_cleanly(["run", str(tmp_path / "plan.json"), "--out-dir", str(tmp_path / "r")], "not valid JSON")
    fails_cleanly(["run", str(DATA / "plan-v1.json"), "--out-dir", str(tmp_path / "r"), "--max-time-s", "0"],
                  "--max-time-s")


def test_report_bad_input(tmp_path):
    fails_cleanly(["report", str(tmp_path)], "not a run dir")
    fails_cleanly(["report", str(tmp_path / "nope.json")], "file not found")


def test_profile_bad_input(tmp_path, monkeypatch):
    monkeypatch.setenv("TMPDIR", str(tmp_path / "tmp"))         # where the worker-log folder goes
    (tmp_path / "tmp").mkdir()
    tempfile.tempdir = None
    try:
        fails_cleanly(["profile", "--workload", "nope", "--out", str(tmp_path / "p.json")], "unknown workload")
        (tmp_path / "c.yaml").write_text("nodes: []\n")
        fails_cleanly(["profile", "--workload", "lenet-digits", "--cluster", str(tmp_path / "c.yaml"),
                       "--out", str(tmp_path / "p.json")], "at least one node")
    finally:
        tempfile.tempdir = None
    assert not (tmp_path / "p.json").exists()
    assert not list((tmp_path / "tmp").iterdir())              # no empty log folder left behind


def test_run_asks_the_launcher_for_every_process(tmp_path, monkeypatch):
    """The launcher replaced at its seam: `run` asks for one process per device plus the server."""
    calls = []

    def fake_launch(entrypoint, args, nprocs, log_dir, **kw):
        calls.append((entrypoint.__name__, nprocs, kw))
        job = args[0]
        summary = RunSummary(
            schema_version=1, reached_target=True, time_to_target_s=1.0, wall_to_target_s=1.1, iterations=10,
            final_accuracy=0.95, target_accuracy=0.9, predicted_time_to_target_s=1.0, predicted_sec_per_iter=0.01,
            measured_sec_per_iter=0.01, wall_s=1.2, eval_s=0.1, plan=job.plan_path, protocol="groups",
            processes=nprocs, updates_per_group=(5, 5, 0), mean_staleness=1.0, evaluations=3)
        save_summary(summary, f"{job.run_dir}/summary.json")
        return {0: None}

    monkeypatch.setattr("omnitune.runtime.launch.launch", fake_launch)
    plan = make_plan(tmp_path / "plan.json", "groups", [["cpu0"], ["cpu1"], ["cpu2"]])
    result = runner.invoke(app, ["run", str(plan), "--out-dir", str(tmp_path / "r")])
    assert result.exit_code == 0, result.output
    (name, nprocs, kw), = calls
    assert (name, nprocs) == ("main", 4)
    assert (kw["rendezvous"], kw["max_restarts"], kw["nodes"], kw["local_addr"], kw["is_host"]) == \
        ("127.0.0.1:0", 0, 1, "127.0.0.1", None)
    assert "reached 0.9" in result.output


def two_node_plan(tmp_path):
    return make_plan(tmp_path / "plan.json", "groups", [["cpu0"], ["cpu1"]], nodes={"cpu1": 1},
                     rendezvous="127.0.0.1:29511")


def test_print_commands_gives_each_node_its_command(tmp_path):
    plan = two_node_plan(tmp_path)
    result = runner.invoke(app, ["run", str(plan), "--out-dir", "runs/x", "--max-restarts", "2", "--print-commands"])
    assert result.exit_code == 0, result.output
    lines = result.output.strip().splitlines()
    assert lines[0] == "# node 0 on 127.0.0.1: parameter server, cpu0 (the coordinator: metrics, checkpoint and " \
                       "summary are written here)"
    assert lines[1] == f"omnitune run {plan} --node-rank 0 --out-dir runs/x --max-restarts 2"
    assert lines[2] == "# node 1 on 127.0.0.1: cpu1"
    assert lines[3] == f"omnitune run {plan} --node-rank 1 --out-dir runs/x --max-restarts 2"


@pytest.mark.parametrize("args, needle", [
    ([], "2 nodes: run the command on each with --node-rank I (I in [0, 1])"),
    (["--node-rank", "2"], "has processes on nodes [0, 1]"),
    (["--node-rank", "1", "--replan-every-s", "1"], "--replan-every-s: re-planning runs on one node only"),
])
def test_a_plan_on_two_nodes_needs_a_node_rank(tmp_path, args, needle):
    result = runner.invoke(app, ["run", str(two_node_plan(tmp_path)), "--out-dir", str(tmp_path / "r"), *args])
    assert result.exit_code == 2 and needle in result.output and "Traceback" not in result.output


def test_an_error_quoting_torch_prints_as_text(tmp_path, monkeypatch):
    """torch's messages hold "[/path/pair.cc:561]", which rich would read as a closing tag."""
    def failing(*args, **kw):
        raise UserError("a worker process failed: RuntimeError: [/__w/pytorch/gloo/pair.cc:561] Connection reset")

    monkeypatch.setattr("omnitune.runtime.launch.launch", failing)
    plan = make_plan(tmp_path / "plan.json", "sync", [["cpu0"]])
    result = runner.invoke(app, ["run", str(plan), "--out-dir", str(tmp_path / "r")])
    assert result.exit_code == 2, result.output
    assert "RuntimeError: [/__w/pytorch/gloo/pair.cc:561] Connection reset" in result.output


def test_a_node_without_the_coordinator_launches_its_own_processes(tmp_path, monkeypatch):
    calls = []
    monkeypatch.setattr("omnitune.runtime.launch.launch", lambda entry, args, nprocs, log_dir, **kw:
                        calls.append((args[0], nprocs, kw)))
    result = runner.invoke(app, ["run", str(two_node_plan(tmp_path)), "--out-dir", str(tmp_path / "r"),
                                 "--node-rank", "1"])
    assert result.exit_code == 0, result.output
    (job_args, nprocs, kw), = calls
    assert (job_args.node, job_args.store_port, nprocs) == (1, 29512, 1)
    assert (kw["nodes"], kw["is_host"], kw["rendezvous"]) == (2, False, "127.0.0.1:29511")
    assert "summary and checkpoint are in the run dir of node 0" in result.output


@pytest.mark.slow
def test_whole_path_profile_plan_run(tmp_path):
    prof, plan, run_dir = tmp_path / "p.json", tmp_path / "plan.json", tmp_path / "run"
    r = runner.invoke(app, ["profile", "--workload", "lenet-digits", "--quick", "--out", str(prof)])
    assert r.exit_code == 0, r.output
    data = json.loads(prof.read_text())
    assert all(len(d["steps"]) >= 4 for d in data["devices"])
    if data["network"] is not None:                     # two or more devices: links and real jobs timed
        assert data["network"]["allreduce"] and data["calibration"]
        # The one-worker layout's runtime is timed too, not only its device's steps.
        alone = {name for name, ids in data["cluster"]["layouts"].items() if len(ids) == 1}
        assert alone <= {c["layout"] for c in data["calibration"]}
    r = runner.invoke(app, ["plan", "--profile", str(prof), "--workload", "lenet-digits", "--target-accuracy",
                            "0.9", "--lr", "0.05", "--out", str(plan), "--budget-s", "30"])
    assert r.exit_code == 0, r.output
    written = json.loads(plan.read_text())
    assert "time (s)" in r.output and written["candidates"]
    # The run starts where the chosen probe stopped, unless that probe reached the target; its clock
    # counts that probe's training.
    handed = written["planning"]["handed_on_s"]
    reached = written["candidates"][0]["note"] == "reached"
    assert (written["start"], (tmp_path / "plan.start.pt").is_file(), handed > 0) == \
        (("", False, False) if reached else ("plan.start.pt", True, True))
    r = runner.invoke(app, ["run", str(plan), "--out-dir", str(run_dir), "--max-time-s", "60"])
    assert r.exit_code == 0, r.output
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["reached_target"] and summary["predicted_time_to_target_s"] > 0
    assert summary["started_at_s"] == pytest.approx(handed)
    assert summary["iterations"] >= written["planning"]["handed_on_iters"]
    assert summary["time_to_target_s"] >= handed
    assert summary["first_pause_at_s"] is None        # tuned in place by default: a pause only as insurance
    made = [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines() if '"change"' in x]
    assert ("change(s) in place, no process restarted" in r.output) == bool(made)
    r = runner.invoke(app, ["run", str(plan), "--out-dir", str(tmp_path / "fresh"), "--max-time-s", "60",
                            "--from-scratch"])
    assert r.exit_code == 0, r.output
    assert json.loads((tmp_path / "fresh" / "summary.json").read_text())["started_at_s"] == 0
    for target, png in ((plan, plan.with_suffix(".png")), (run_dir, run_dir / "report.png")):
        r = runner.invoke(app, ["report", str(target)])
        assert r.exit_code == 0, r.output
        assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert plan.with_suffix(".study.jsonl").is_file()       # the probes, kept for a resumed `plan`


def test_train_profiles_plans_and_runs_in_one_command(tmp_path, monkeypatch):
    monkeypatch.setenv("OMNITUNE_CACHE_DIR", str(tmp_path / "cache"))     # no profile kept from another test
    r = runner.invoke(app, ["train", "--workload", "lenet-digits", "--target-accuracy", "0.9", "--quick",
                            "--budget-s", "4", "--max-time-s", "60", "--out-dir", str(tmp_path)])
    assert r.exit_code == 0, r.output
    prof, plan = json.loads((tmp_path / "profile.json").read_text()), json.loads((tmp_path / "plan.json").read_text())
    assert prof["workload"] == "lenet-digits" and prof["quick"]
    assert plan["profile"] == "profile.json"          # planned on the profile it measured, beside it
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["reached_target"] and summary["predicted_time_to_target_s"] == plan["prediction"]["time_to_target_s"]
    assert f"wrote {tmp_path / 'profile.json'}" in r.output.replace("\n", "")
    # On the profile it measured, a run that misses its target exits with 1, as `run` does.
    r = runner.invoke(app, ["train", "--workload", "lenet-digits", "--target-loss", "1e-6", "--budget-s", "1",
                            "--max-time-s", "2", "--profile", str(tmp_path / "profile.json"),
                            "--out-dir", str(tmp_path / "missed")])
    assert r.exit_code == 1, r.output
    assert not json.loads((tmp_path / "missed" / "summary.json").read_text())["reached_target"]
    # Without --profile, the next `train` of the workload uses the profile the first measured, from the cache.
    r = runner.invoke(app, ["train", "--workload", "lenet-digits", "--target-loss", "1e-6", "--quick", "--budget-s",
                            "1", "--max-time-s", "2", "--out-dir", str(tmp_path / "again")])
    assert r.exit_code == 1, r.output
    said = " ".join(r.output.split())
    assert "from omnitune's cache" in said and f"wrote {tmp_path / 'again' / 'profile.json'}" not in said
    assert json.loads((tmp_path / "again" / "profile.json").read_text())["measured_at"] == prof["measured_at"]


@pytest.mark.parametrize("args, needle", [
    ([], "give one target"),
    (["--target-accuracy", "0.9", "--max-time-s", "0"], "--max-time-s must be positive"),
    (["--target-accuracy", "0.9", "--profile", "missing.json"], "missing.json: file not found"),
    (["--target-accuracy", "0.9", "--profile", str(DATA / "profile-h200-shapes-resnet.json")], "not of this machine"),
    (["--target-accuracy", "0.9", "--profile", str(DATA / "profile-v1.json"), "--quick"], "--quick"),
    (["--target-accuracy", "0.9", "--profile", str(DATA / "profile-v1.json"), "--fresh-profile"], "--fresh-profile"),
    (["--target-accuracy", "0.9", "--out-dir", "FILE"], "--out-dir"),
])
def test_train_checks_its_options_before_it_profiles(tmp_path, args, needle):
    """Each bad option ends the command before the profile's seconds are spent."""
    (tmp_path / "file").write_text("")
    args = [str(tmp_path / "file") if a == "FILE" else a for a in args]
    out_dir = [] if "--out-dir" in args else ["--out-dir", str(tmp_path)]
    fails_cleanly(["train", "--workload", "lenet-digits", *out_dir, *args], needle)
    assert not (tmp_path / "profile.json").exists()


def test_run_names_a_missing_start_checkpoint(tmp_path):
    plan = make_plan(tmp_path / "plan.json", "sync", [["cpu0"]])
    data = json.loads(plan.read_text())
    plan.write_text(json.dumps({**data, "start": "plan.start.pt"}))
    fails_cleanly(["run", str(plan), "--out-dir", str(tmp_path / "r")], "plan.start.pt, is missing")


def test_plan_for_node_types_bad_input(tmp_path):
    (tmp_path / "fleet.yaml").write_text("node_types:\n  - {name: box, count: 0, profile: p.json}\n")
    target = ["--target-accuracy", "0.9"]
    fails_cleanly(PLAN + target, "give one of --profile")
    fails_cleanly(PLAN + target + ["--profile", str(DATA / "profile-v1.json"), "--cluster", str(tmp_path / "fleet.yaml")],
                  "give one of --profile")
    fails_cleanly(PLAN + target + ["--cluster", str(tmp_path / "fleet.yaml")], "node_types[0].count: must be at least 1")
    fails_cleanly(["profile", "--cluster", str(tmp_path / "fleet.yaml"), "--workload", "lenet-digits", "--out",
                   str(tmp_path / "x.json")], "node_types describes a cluster to plan for by simulation")


def test_run_refuses_a_simulated_plan(tmp_path):
    from dataclasses import replace

    from omnitune.core import plan as plan_mod
    p = replace(plan_mod.load(DATA / "plan-v2.json"), hardware_model=plan_mod.SIMULATED, simulated_cluster="64 × box")
    plan_mod.save(p, tmp_path / "plan.json")
    fails_cleanly(["run", str(tmp_path / "plan.json"), "--out-dir", str(tmp_path / "r")],
                  "planned by simulation for a cluster of 64 × box")


def test_plan_for_node_types_prints_a_simulated_plan(tmp_path):
    import shutil
    shutil.copy(DATA / "profile-v3.json", tmp_path / "node.json")
    (tmp_path / "fleet.yaml").write_text("node_types:\n  - {name: box, count: 4, profile: node.json}\n"
                                         "inter_node: {gbit_s: 10, latency_us: 20}\n")
    r = runner.invoke(app, ["plan", "--cluster", str(tmp_path / "fleet.yaml"), "--workload", "lenet-digits",
                            "--target-accuracy", "0.9", "--protocol", "groups", "--batch-size", "16", "--lr", "0.05",
                            "--budget-s", "5", "--out", str(tmp_path / "plan.json")])
    assert r.exit_code == 0, r.output
    assert "simulated plan for 4 × box (4 nodes)" in r.output
    plan = json.loads((tmp_path / "plan.json").read_text())
    assert plan["hardware_model"] == "simulated" and plan["spec"]["variant"]["protocol"] == "groups"


@pytest.mark.slow
def test_a_recipe_that_warms_up_hands_no_probe_on(tmp_path):
    """A probe trains at a constant rate; a recipe with a warm-up (charlm-stdlib's AdamW, 5%) never
    reaches that state, and its run went on worse from it: hand_on leaves such a plan to start from
    scratch, whatever probe stopped short. Fails if the warm-up is not checked."""
    from dataclasses import replace
    from types import SimpleNamespace

    from omnitune.core import plan as plan_mod
    from omnitune.core.plan import Planning
    from omnitune.probing import probe

    path = make_plan(tmp_path / "plan.json", "sync", [["cpu0"]], lr=0.003, workload="charlm-stdlib", target=None,
                     target_loss=1.7)
    plan = replace(plan_mod.load(path), planning=Planning(20.0, 3, 30.0, True, "test"))
    assert probe.warms_up(plan.spec)
    cfg = probe.probe_config(plan.spec, plan.spec.lr, plan.spec.momentum)
    short = SimpleNamespace(curve=((20, -2.9),), state={}, iterations=20, train_s=2.0)
    assert probe.hand_on(plan, SimpleNamespace(handoffs={cfg: short}), path) == plan
    assert not (tmp_path / "plan.start.pt").exists()
    assert not probe.warms_up(make_spec("sync", [["cpu0"]]))          # lenet-digits: SGD at a constant rate


def test_a_run_goes_on_from_where_its_probe_stopped_short(tmp_path):
    """probe.hand_on: a probe stopped short of the target hands its state on, and the run's clock
    and iterations go on from there; a probe that reached the target hands nothing on."""
    from dataclasses import replace
    from types import SimpleNamespace

    from omnitune.core import plan as plan_mod
    from omnitune.probing import probe
    from omnitune.runtime import workload
    from omnitune.core.plan import Planning

    path = make_plan(tmp_path / "plan.json", "sync", [["cpu0"]], lr=0.05)
    plan = replace(plan_mod.load(path), planning=Planning(20.0, 3, 30.0, True, "test"))
    wl = workload.load(plan.spec.workload)
    train, test = wl.build_datasets(None, plan.spec.seed)
    cfg = probe.probe_config(plan.spec, plan.spec.lr, plan.spec.momentum)
    _, reached = probe.run_probe(wl, train, test, cfg, plan.spec.target_accuracy, 400, 30, seed=plan.spec.seed)
    _, short = probe.run_probe(wl, train, test, cfg, 1.1, 40, 30, seed=plan.spec.seed)
    assert probe.hand_on(plan, SimpleNamespace(handoffs={cfg: reached}), path) == plan
    # A plan faster than the probe's emulation here: the run's clock counts the iterations at its speed.
    fast = replace(plan, prediction=replace(plan.prediction, sec_per_iter=1e-4))
    assert probe.hand_on(fast, SimpleNamespace(handoffs={cfg: short}), path).planning.handed_on_s == pytest.approx(40e-4)
    handed = probe.hand_on(plan, SimpleNamespace(handoffs={cfg: short}), path)
    assert (handed.start, handed.planning.handed_on_iters) == ("plan.start.pt", 40)
    assert handed.planning.handed_on_s == pytest.approx(min(short.train_s, 40 * plan.prediction.sec_per_iter))
    plan_mod.save(handed, path)
    r = runner.invoke(app, ["run", str(path), "--out-dir", str(tmp_path / "r"), "--max-time-s", "60"])
    assert r.exit_code == 0, r.output
    summary = json.loads((tmp_path / "r" / "summary.json").read_text())
    assert summary["reached_target"] and summary["iterations"] > 40
    assert summary["started_at_s"] == pytest.approx(handed.planning.handed_on_s) and summary["started_at_s"] > 0


def test_a_handed_on_run_makes_the_updates_its_probe_would_have_made_next(tmp_path):
    """The run from hand_on's checkpoint is its probe going on: a real job's first updates from
    it are, bit for bit, those the probe's emulator makes next (the weights, the momentum carried
    over, the minibatches of seed + iterations). A handed-on start then differs from a start
    from scratch only in its chance draw of data, whatever the runs' iterations to target read.
    Fails if the checkpoint loses the optimizer's state, or the run reads other minibatches."""
    from dataclasses import replace
    from types import SimpleNamespace

    import torch

    from omnitune.core import plan as plan_mod
    from omnitune.core.plan import Planning
    from omnitune.probing import probe
    from omnitune.probing.emulator import emulator
    from omnitune.runtime import job, workload
    from omnitune.runtime.flat import get_params, num_params

    handed_iters, steps = 30, 6
    path = make_plan(tmp_path / "plan.json", "sync", [["cpu0"]], lr=0.05)
    plan = replace(plan_mod.load(path), planning=Planning(20.0, 3, 30.0, True, "test"))
    wl = workload.load(plan.spec.workload)
    train, test = wl.build_datasets(None, plan.spec.seed)
    cfg = probe.probe_config(plan.spec, plan.spec.lr, plan.spec.momentum)
    _, short = probe.run_probe(wl, train, test, cfg, 1.1, handed_iters, 30, seed=plan.spec.seed)
    assert short.state["optimizer"]["state"]             # momentum buffers to carry over
    handed = probe.hand_on(plan, SimpleNamespace(handoffs={cfg: short}), path)

    threads = torch.get_num_threads()
    torch.set_num_threads(1)                             # as the run's one-thread worker sums
    try:
        emu = emulator(wl, train, cfg, plan.spec.seed, short.state["model"], short.state["optimizer"], short.iterations)
        net, expected = emu.current_model(), []
        for _ in range(steps):
            emu.step()
            expected.append(get_params(net, torch.empty(num_params(net))))
    finally:
        torch.set_num_threads(threads)
    s = job.run_spec(handed.spec, str(tmp_path / "r"), max_time_s=60, start_from=tmp_path / handed.start,
                     eval_every_iters=1 << 40, max_iters=handed_iters + steps, trajectory=steps)
    assert s.iterations == handed_iters + steps
    got = torch.load(tmp_path / "r" / "trajectory.pt", weights_only=True)
    assert torch.equal(got, torch.stack(expected))


@pytest.mark.slow
def test_a_plan_and_run_to_a_target_loss_with_adamw(tmp_path):
    """An AdamW workload planned and run to a test loss: the search covers AdamW's rates, the
    plan's schedule spans its predicted iterations, and the run stops on the loss."""
    workload = str(Path(__file__).parent / "workloads" / "adamw_digits.py")
    plan_path = tmp_path / "plan.json"
    r = runner.invoke(app, ["plan", "--profile", str(DATA / "profile-v1.json"), "--workload", workload,
                            "--target-loss", "0.3", "--protocol", "sync", "--budget-s", "8", "--out", str(plan_path)])
    assert r.exit_code == 0, r.output
    plan = json.loads(plan_path.read_text())
    assert plan["spec"]["target_loss"] == 0.3 and plan["spec"]["target_accuracy"] is None
    # The rate is one the search probed, starting from AdamW's decades; a winning edge is carried
    # upward (on this small MLP 0.1 can reach the target first), so no ceiling is asserted.
    probed = {c["lr"] for c in plan["candidates"] if c["note"] != "not probed"}
    assert plan["spec"]["lr"] in probed
    # The schedule spans the predicted iterations; a plan that predicts none (a loaded machine's
    # short probes) leaves it to the run's time limit.
    assert (plan["spec"]["horizon"] > 0) == (plan["prediction"]["iters_to_target"] is not None)
    assert 0.01 in probed and 0.001 in probed
    r = runner.invoke(app, ["run", str(plan_path), "--out-dir", str(tmp_path / "run"), "--max-time-s", "60"])
    assert r.exit_code == 0, r.output
    assert "reached test loss 0.3" in r.output
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert summary["reached_target"] and summary["final_loss"] <= 0.3


def test_the_reports_tuning_panel_marks_a_pause_that_changed_the_batch():
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from omnitune.cli.report import plot_tuning
    from omnitune.core import plan as plan_mod
    from tests.conftest import DATA

    plan = plan_mod.load(DATA / "plan-v1.json")
    same = {"lr": 0.1, "momentum": 0.9, "batch_size": {"cpu0": 32}}
    pauses = [{"train_s": 30.0, "before": same, "after": same},
              {"train_s": 60.0, "before": same, "after": {**same, "lr": 0.2, "batch_size": {"cpu0": 64}}},
              {"train_s": 90.0, "before": {}, "after": same}]               # written before batches were tried
    fig, ax = plt.subplots()
    plot_tuning(ax, pauses, [], plan, 120.0)
    assert [t.get_text() for t in ax.texts] == ["batch 64"]
    plt.close(fig)


def test_the_reports_tuning_panel_starts_at_the_rate_before_the_first_pause():
    """A re-tuned run's summary names its last plan, at the last pause's rate (0.033 here); the
    panel starts at the rate the run trained at before its first pause (0.1), then steps down.
    Fails if the panel draws the last plan's rate from the start."""
    from dataclasses import replace

    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from omnitune.cli.report import plot_tuning
    from omnitune.core import plan as plan_mod

    plan = plan_mod.load(DATA / "plan-v1.json")
    last = replace(plan, spec=replace(plan.spec, lr=0.033))
    pauses = [{"train_s": 35.0, "before": {"lr": 0.1, "momentum": 0.9}, "after": {"lr": 0.033, "momentum": 0.9}}]
    fig, ax = plt.subplots()
    plot_tuning(ax, pauses, [], last, 70.0)
    assert list(ax.lines[0].get_ydata()) == [0.1, 0.033, 0.033]
    plt.close(fig)


def test_the_reports_tuning_panel_draws_the_changes_in_place_between_the_pauses():
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from omnitune.cli.report import plot_tuning
    from omnitune.core import plan as plan_mod

    plan = plan_mod.load(DATA / "plan-v1.json")
    same = {"lr": 0.1, "momentum": 0.9, "batch_size": {"cpu0": 32}}
    pauses = [{"train_s": 30.0, "before": same, "after": {**same, "lr": 0.05}}]
    changes = [{"event": "change", "why": "unstable", "train_s": 10.0, "lr": 0.2, "momentum": 0.9,
                "batch_size": {"cpu0": 32}},
               {"event": "change", "why": "noise scale", "train_s": 40.0, "lr": 0.1, "momentum": 0.9,
                "batch_size": {"cpu0": 64}}]
    fig, ax = plt.subplots()
    plot_tuning(ax, pauses, changes, plan, 70.0)
    assert list(ax.lines[0].get_ydata()) == [0.1, 0.2, 0.05, 0.1, 0.1]     # from the rate the run began at
    assert [t.get_text() for t in ax.texts] == ["unstable", "noise scale", "batch 64"]
    assert "1 pause(s), 2 change(s) in place" in ax.get_title()
    plt.close(fig)


def test_the_run_says_what_its_eta_said_at_a_quarter_of_the_run(tmp_path):
    from types import SimpleNamespace

    from omnitune.cli.commands import _eta_recap

    def estimate(train_s, eta_s, band=(1.0, 2.0)):
        return {"train_s": train_s, "iteration": int(train_s * 100), "accuracy": 0.5, "eta_s": eta_s,
                "band_s": list(band) if band else None, "note": ""}
    reached = SimpleNamespace(reached_target=True, time_to_target_s=40.0)
    assert _eta_recap(tmp_path, reached) is None                     # no eta.jsonl: a run too short for one
    lines = [estimate(2.0, None, None), estimate(4.0, 30.0, (15.0, 60.0)), estimate(9.0, 25.0, (12.0, 50.0)),
             estimate(12.0, 30.0), estimate(40.0, 0.0, (0.0, 0.0))]
    (tmp_path / "eta.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))
    text = _eta_recap(tmp_path, reached)
    assert "at 9.0s of training put the target at 34s (band 21–59s); it came at 40.0s" in text    # last by 10 s
    early = SimpleNamespace(reached_target=True, time_to_target_s=8.0)
    assert "at 4.0s of training" in _eta_recap(tmp_path, early)     # none by 2 s: the first estimate
    assert _eta_recap(tmp_path, SimpleNamespace(reached_target=False, time_to_target_s=None)) is None
    (tmp_path / "eta.jsonl").write_text(json.dumps(estimate(40.0, 0.0)) + "\n")
    assert _eta_recap(tmp_path, reached) is None                     # only "reached": nothing it foretold
    (tmp_path / "eta.jsonl").write_text(json.dumps(estimate(9.0, 25.0, (12.0, None))) + "\n{cut off")
    assert _eta_recap(tmp_path, reached).startswith("the ETA at 9.0s of training put the target at 34s; it came")
