"""benchmarks/harness.py: the workloads and the runs the benchmarks share."""

from benchmarks import harness
from tests.conftest import DATA


def test_the_plan_runs_as_omnitune_run_runs_it_and_its_pauses_count(tmp_path, monkeypatch):
    """A plan file in `interleaved` runs through job.run with the re-tuner handed in; its time is
    the training to the target plus the pauses to re-tune, and a miss counts as the cap. Fails if
    the plan's row runs the spec without re-tuning, or leaves the pauses out of the time."""
    from types import SimpleNamespace

    calls = []

    def run(plan_path, out_dir, options, replan=None, first_pause_s=None):
        calls.append((plan_path, options.retune, replan is not None))
        reached = "s1" in out_dir
        return SimpleNamespace(reached_target=reached, time_to_target_s=10.0 if reached else None, replan_s=2.0,
                               replans=1, iterations=100, final_accuracy=0.9, final_loss=0.3, measured_sec_per_iter=0.1,
                               started_at_s=1.0, wall_s=12.5, eval_s=0.5, stalled_at_s=None, first_pause_at_s=5.0, repaced=None)
    monkeypatch.setattr(harness.job, "run", run)
    for k in (1, 2):
        (tmp_path / f"p{k}.json").write_text((DATA / "plan-v1.json").read_text())
    out = harness.interleaved({"w-plan": {1: tmp_path / "p1.json", 2: tmp_path / "p2.json"}}, tmp_path, 30.0,
                              seeds=(1, 2))["w-plan"]
    assert [r["time_s"] for r in out["runs"]] == [12.0, 30.0] and all(r["retune_s"] == 2.0 for r in out["runs"])
    assert calls == [(str(tmp_path / "p1.json"), True, True), (str(tmp_path / "p2.json"), True, True)]


def test_the_held_out_workload_is_a_file_of_the_benchmarks_that_loads_and_trains():
    """benchmarks/workloads/gru_count.py, reported apart: the benchmark passes its file wherever a
    bundled workload's name goes, and the file keeps the workload contract."""
    import torch

    from omnitune.runtime import workload

    b = harness.WORKLOADS["gru-count"]
    assert b.held_out and b.spec("gru-count").endswith("benchmarks/workloads/gru_count.py")
    assert harness.WORKLOADS["teacher-mlp"].spec("teacher-mlp") == "teacher-mlp"
    wl = workload.load(b.spec("gru-count"))
    train, test = wl.build_datasets(None, 0)
    x, y = train[:8]
    assert x.shape == (8, 128) and int(y.max()) < 32 and len(test) == 2000
    assert y.tolist() == (x == 0).sum(dim=1).clamp(max=31).tolist()
    loss = wl.loss_fn(wl.build_model()(x), y)
    assert torch.isfinite(loss)


def test_a_run_cut_off_goes_on_where_it_stopped_from_its_journal(tmp_path, monkeypatch):
    """--work-dir: each finished run goes to the journal as it ends; started again on the same
    folder, the benchmark reads those back and runs only the rest, seed by seed as before. Fails if
    a journaled run is measured again, or a run that was cut off is not."""
    from benchmarks.common import Journal

    measured = []

    def measure(spec, work, tag, limit_s, start=None):
        if len(measured) == 3 and not cut["done"]:
            cut["done"] = True
            (work / tag).mkdir()           # what a run killed half-way leaves
            raise KeyboardInterrupt
        measured.append(tag)
        return {"time_s": float(len(measured)), "reached": True, "iterations": 10 * len(measured)}

    cut = {"done": False}
    monkeypatch.setattr(harness, "measure", measure)
    specs = {"w-a": object(), "w-b": object()}
    monkeypatch.setattr(harness, "replace", lambda spec, seed: spec)
    path = tmp_path / "w.journal.jsonl"
    try:
        harness.interleaved(specs, tmp_path, 30.0, seeds=(1, 2), journal=Journal(path))
    except KeyboardInterrupt:
        pass
    with path.open("a") as f:
        f.write('{"key": "w-b-s2", "comm')          # a line cut off as the process died
    assert measured == ["w-a-s1", "w-b-s1", "w-a-s2"]
    journal = Journal(path)
    out = harness.interleaved(specs, tmp_path, 30.0, seeds=(1, 2), journal=journal)
    assert measured == ["w-a-s1", "w-b-s1", "w-a-s2", "w-b-s2"]
    assert [r["time_s"] for r in out["w-a"]["runs"]] == [1.0, 3.0] and out["w-b"]["median_s"] == 3.0
    assert not (tmp_path / "w-b-s2").exists()          # the cut run's leftovers, removed before it ran again
    assert len(journal.commits) == 1
