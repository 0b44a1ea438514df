"""benchmarks.gpu without a GPU: its choice of alternatives on a fake profile with a CUDA device,
and its refusal to run where there is none."""

import dataclasses
import json
import subprocess
import sys

import pytest
import torch

from benchmarks import gpu
from benchmarks.common import RESULTS
from benchmarks.harness import fixed_spec
from omnitune.core.files import atomic_write_json
from tests.conftest import DATA, ROOT


def with_gpus(sample, indices=(0,), one_worker: bool = True):
    """The sample profile (cpu0, cpu1, cpu-all) plus a CUDA device per index, laid out as
    local_cluster lays them out: the GPUs alone, and beside one CPU worker per core they leave
    free; each GPU measured as cpu0; without the one-worker layout if asked."""
    gpus = tuple(dataclasses.replace(sample.cluster.device("cpu0"), id=f"cuda{i}", kind="cuda", cuda_index=i,
                                     threads=1) for i in indices)
    ids = tuple(d.id for d in gpus)
    layouts = {name: members for name, members in sample.cluster.layouts.items()
               if one_worker or name != "one-worker"}
    layouts["gpus"] = ids
    free = sample.cluster.layouts["one-per-core"][:2 - len(ids)]
    if free:
        layouts["gpus+per-core"] = ids + free
    cluster = dataclasses.replace(sample.cluster, devices=sample.cluster.devices + gpus, layouts=layouts)
    devices = sample.devices + tuple(dataclasses.replace(sample.device("cpu0"), device_id=i) for i in ids)
    calibration = tuple(c for c in sample.calibration if c.layout in layouts)
    return dataclasses.replace(sample, cluster=cluster, devices=devices, calibration=calibration)


def test_the_alternatives_are_the_gpu_the_cpus_and_everything(sample_profile):
    prof = with_gpus(sample_profile)
    assert gpu.alternatives(prof) == {"gpu-alone": ("gpus", ("cuda0",)),
                                      "cpus-alone": ("one-worker", ("cpu-all",)),
                                      "all-devices": ("gpus+per-core", ("cuda0", "cpu0"))}


def test_without_one_worker_the_cpus_are_those_of_one_per_core(sample_profile):
    prof = with_gpus(sample_profile, one_worker=False)
    assert gpu.alternatives(prof)["cpus-alone"] == ("one-per-core", ("cpu0", "cpu1"))


def test_the_gpu_alone_is_the_first_by_index(sample_profile):
    prof = with_gpus(sample_profile, indices=(1, 0))
    found = gpu.alternatives(prof)
    assert found["gpu-alone"] == ("gpus", ("cuda0",))
    assert found["cpus-alone"] == ("one-worker", ("cpu-all",))
    assert set(found["all-devices"][1]) == {"cuda0", "cuda1"}      # two GPUs leave no core of two free


def test_no_gpu_in_the_profile_is_an_error(sample_profile):
    with pytest.raises(ValueError, match="no CUDA device"):
        gpu.alternatives(sample_profile)


def test_the_alternatives_differ_only_in_devices(sample_profile):
    prof = with_gpus(sample_profile)
    configs = gpu.alternative_configs(prof, 32, 0.05)
    assert {(c.batch, c.lr, c.momentum, c.g) for c in configs.values()} == {(32, 0.05, 0.9, 1)}
    assert [c.variant.balanced for c in configs.values()] == [False, False, True]
    specs = {name: fixed_spec(prof, "lenet-digits", 0.9, c) for name, c in configs.items()}
    assert specs["gpu-alone"].batch_size == {"cuda0": 32}
    assert specs["cpus-alone"].batch_size == {"cpu-all": 32}
    assert specs["all-devices"].device_ids == ("cuda0", "cpu0")
    assert sum(specs["all-devices"].batch_size.values()) == 2 * 32


@pytest.mark.skipif(torch.cuda.is_available(), reason="with a GPU it would run the whole benchmark")
def test_without_a_gpu_it_says_so_and_exits_2():
    results = [RESULTS / name for name in ("gpu.json", "gpu-quick.json")]
    before = [p.stat().st_mtime_ns if p.exists() else None for p in results]
    for args in ([], ["--quick"]):
        done = subprocess.run([sys.executable, "-m", "benchmarks.gpu", *args], cwd=ROOT, capture_output=True,
                              text=True, timeout=120)
        assert done.returncode == 2
        assert done.stdout == ""
        assert done.stderr.strip().splitlines()[-1] == gpu.NO_GPU
    assert [p.stat().st_mtime_ns if p.exists() else None for p in results] == before


def test_the_profile_and_plan_are_recorded_as_json(sample_profile):
    from omnitune.core import plan as plan_mod

    facts = gpu.profile_facts(with_gpus(sample_profile), 12.5)
    assert facts["devices"]["cuda0"]["kind"] == "cuda" and facts["devices"]["cpu-all"]["threads"] == 2
    assert facts["devices"]["cuda0"]["best_samples_per_s"] == sample_profile.device("cpu0").best.samples_per_s
    assert facts["wall_s"] == 12.5 and facts["network"]["allreduce"]
    chosen = gpu.plan_facts(plan_mod.load(DATA / "plan-v1.json"), 3.0)
    assert chosen["nominal_batch"] >= 1 and chosen["effective_lr"] > 0 and chosen["idle"] == {}
    json.dumps({"profile": facts, "plan": chosen}, allow_nan=False)


# Stubbed runs by device set, for seeds 0, 1, 2: (time to target s, reached it, seconds per iteration).
RUNS = {
    ("cpu0", "cpu1"): [(10.0, True, 0.020), (9.0, True, 0.032), (15.0, True, 0.025)],      # the plan: median 10
    ("cuda0",): [(8.0, False, 0.004), (9.0, False, 0.005), (7.0, True, 0.006)],            # fastest, but misses twice
    ("cpu-all",): [(25.0, True, 0.050), (24.0, True, 0.060), (26.0, True, 0.055)],
    ("cuda0", "cpu0"): [(16.0, True, 0.010), (14.0, True, 0.012), (21.0, True, 0.011)],   # the best alternative
}


def stub_bench(monkeypatch, tmp_path, sample_profile, run_spec, **plan_fields):
    """gpu.bench's profile and plan stubbed (the plan sync on both cores, with `plan_fields`), its
    runs by `run_spec`; returns the folder its results go to, and the plan."""
    from omnitune.core import plan as plan_mod
    from tests.conftest import make_spec

    prof = with_gpus(sample_profile)
    plan = dataclasses.replace(plan_mod.load(DATA / "plan-v1.json"), spec=make_spec("sync", [["cpu0", "cpu1"]]),
                               layout="one-per-core", **plan_fields)
    monkeypatch.setattr(gpu, "local_cluster", lambda: prof.cluster)
    monkeypatch.setattr(gpu.profiler, "profile", lambda *a, **k: prof)
    monkeypatch.setattr(gpu.planning, "search", lambda *a, **k: None)
    monkeypatch.setattr(gpu.planning, "build_plan", lambda *a, **k: plan)
    monkeypatch.setattr(gpu, "make_prober", lambda *a, **k: None)
    monkeypatch.setattr(gpu, "hand_on", lambda plan, prober, path: plan)
    monkeypatch.setattr("benchmarks.harness.job.run_spec", run_spec)
    results = tmp_path / "results"
    results.mkdir()
    monkeypatch.setattr(gpu, "RESULTS", results)
    monkeypatch.setattr(gpu, "write_results", lambda name, data: atomic_write_json(results / f"{name}.json", data))
    return results, plan


def test_the_benchmark_glue_with_profile_plan_and_runs_stubbed(sample_profile, monkeypatch, tmp_path):
    """bench() end to end without a GPU, --quick with three seeds: the profile and plan stubbed
    (the plan on both cores), each device set's runs given their own times. Checks what bench
    computes: a miss counts as the time limit (the GPU alone, fastest when it reaches the target,
    has median 30 s, not 8), the best alternative is the smallest median (all-devices, 16 s), so
    plan_over_best_alternative is 10 / 16; the runs go seed by seed across the configurations;
    predicted_over_measured_sec_per_iter divides by the plan row's median measured figure.

    Fails if harness.measure counts a miss as its own time, if bench takes the largest median
    or the first alternative as the best, if interleaved runs configuration by configuration, if
    the ratio uses another row's (or the mean) seconds per iteration, if a configuration's time is
    the mean of its runs rather than the median, or if bench ignores `seeds`."""
    from types import SimpleNamespace

    ran = []

    def run_spec(spec, out_dir, max_time_s, start_from=None):
        ran.append((spec.device_ids, spec.seed, max_time_s))
        time_s, reached, sec_per_iter = RUNS[spec.device_ids][spec.seed]
        return SimpleNamespace(time_to_target_s=time_s, reached_target=reached, final_accuracy=0.9, final_loss=0.3,
                               mean_staleness=0.0, measured_sec_per_iter=sec_per_iter, iterations=100,
                               protocol_stats={}, started_at_s=0.0)
    results, plan = stub_bench(monkeypatch, tmp_path, sample_profile, run_spec)
    out = gpu.bench(True, tmp_path, seeds=(0, 1, 2))
    partial = json.loads((results / "gpu-partial.json").read_text())
    assert [(r["config"], r["seed"]) for r in partial["runs"]][:5] == [
        ("plan", 0), ("gpu-alone", 0), ("cpus-alone", 0), ("all-devices", 0), ("plan", 1)]
    assert len(partial["runs"]) == 12 and (results / "gpu-profile.json").exists()

    order = [("cpu0", "cpu1"), ("cuda0",), ("cpu-all",), ("cuda0", "cpu0")]
    assert out["workload"] == "cnn1d-mnist1d" and out["time_limit_s"] == 30.0 and out["seeds"] == [0, 1, 2]
    assert [r["config"] for r in out["rows"]] == ["plan", "gpu-alone", "cpus-alone", "all-devices"]
    assert [r["devices"] for r in out["rows"]] == [list(d) for d in order]
    assert [(devices, seed) for devices, seed, _ in ran] == [(d, seed) for seed in (0, 1, 2) for d in order]
    assert {limit for _, _, limit in ran} == {30.0}
    rows = {r["config"]: r for r in out["rows"]}
    assert rows["gpu-alone"]["time_to_target_s"] == 30.0 and rows["gpu-alone"]["spread_s"] == [7.0, 30.0]
    assert rows["gpu-alone"]["reached_target"] == [False, False, True]
    assert [r["time_to_target_s"] for r in out["rows"]] == [10.0, 30.0, 25.0, 16.0]
    assert [r["measured_sec_per_iter"] for r in out["rows"]] == [0.025, 0.005, 0.055, 0.011]
    summary = out["summary"]
    assert summary["plan_s"] == 10.0 and summary["gpu-alone_s"] == 30.0 and summary["all-devices_s"] == 16.0
    assert summary["best_alternative"] == "all-devices"
    assert summary["plan_over_best_alternative"] == pytest.approx(10.0 / 16.0)
    assert summary["predicted_over_measured_sec_per_iter"] == pytest.approx(plan.prediction.sec_per_iter / 0.025)
    assert summary["predicted_over_measured"] == pytest.approx(plan.prediction.time_to_target_s / 10.0)
    assert out["profile"]["devices"]["cuda0"]["kind"] == "cuda"
    json.dumps(out, allow_nan=False)
    from benchmarks import docs
    page = docs.gpu_section({**out, "cuda_device": "a stub", "measured_at": "today"})
    assert sum(line.startswith("| plan |") or line.startswith("| gpu-alone |") for line in page) == 2
    assert any("0.62× the best alternative (all-devices)" in line for line in page)


def test_a_plan_that_starts_from_its_probe_runs_beside_its_own_setup_from_scratch(sample_profile, monkeypatch,
                                                                                    tmp_path):
    """Where the plan hands its probe's checkpoint on, a plan-from-scratch row runs the same setup
    without it, seed by seed beside the plan: handed_on_over_from_scratch is the plan's median over
    that row's, and the row is not an alternative (the best alternative stays all-devices). Fails if
    the row starts from the checkpoint too, is counted as an alternative, or is missing."""
    from types import SimpleNamespace

    ran = []

    def run_spec(spec, out_dir, max_time_s, start_from=None):
        ran.append((spec.device_ids, spec.seed, start_from is not None))
        time_s, reached, sec_per_iter = RUNS[spec.device_ids][spec.seed]
        scratch = spec.device_ids == ("cpu0", "cpu1") and start_from is None
        if scratch:
            time_s = 2 * time_s          # from scratch, the plan's setup takes twice as long, in 4x the iterations
        return SimpleNamespace(time_to_target_s=time_s, reached_target=reached, final_accuracy=0.9, final_loss=0.3,
                               mean_staleness=0.0, measured_sec_per_iter=sec_per_iter, iterations=400 if scratch else 100,
                               protocol_stats={}, started_at_s=0.0)
    stub_bench(monkeypatch, tmp_path, sample_profile, run_spec, start="p.start.pt")
    out = gpu.bench(True, tmp_path, seeds=(0, 1, 2))
    assert [r["config"] for r in out["rows"]] == ["plan", "plan-from-scratch", "gpu-alone", "cpus-alone",
                                                  "all-devices"]
    assert ran[:2] == [(("cpu0", "cpu1"), 0, True), (("cpu0", "cpu1"), 0, False)]
    summary = out["summary"]
    assert summary["plan_from_scratch_s"] == 20.0 and summary["handed_on_over_from_scratch"] == pytest.approx(0.5)
    assert summary["handed_on_over_from_scratch_iterations"] == pytest.approx(0.25)
    assert summary["best_alternative"] == "all-devices" and "plan-from-scratch_s" not in summary
    from benchmarks import docs
    page = docs.gpu_section({**out, "cuda_device": "a stub", "measured_at": "today"})
    assert any("0.50× the time of its own setup from scratch" in line for line in page)
