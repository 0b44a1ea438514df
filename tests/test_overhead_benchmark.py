"""benchmarks.overhead without long runs: its pairing and summary, its glue with both sides
stubbed, the plain loop's CPU variants for a few steps, and its refusal of --device cuda where
there is no GPU."""

import argparse
import json
import os
import subprocess
import sys

import pytest
import torch

from benchmarks import overhead, plain_steps
from benchmarks.common import RESULTS
from omnitune.core.cluster import Device
from tests.conftest import ROOT


def test_pairs_alternate_which_side_goes_first():
    assert overhead.order(4) == [("runtime", "plain"), ("plain", "runtime"), ("runtime", "plain"),
                                 ("plain", "runtime")]
    assert overhead.order(1) == [("runtime", "plain")]


def test_the_summary_is_the_median_and_the_extremes():
    assert overhead.spread([1.3, 0.9, 1.0]) == {"median": 1.0, "min": 0.9, "max": 1.3}
    assert overhead.spread([1.0, 1.2, 0.8, 1.1])["median"] == pytest.approx(1.05)


def test_a_row_holds_each_sides_median_and_the_ratios():
    pairs = [{"runtime": 0.004, "plain": 0.004, "ratio": 1.0}, {"runtime": 0.006, "plain": 0.004, "ratio": 1.5},
             {"runtime": 0.004, "plain": 0.005, "ratio": 0.8}]
    row = overhead.pair_row("teacher-mlp", "cpu", 256, pairs)
    assert row["runtime_ms"] == pytest.approx(4.0) and row["plain_ms"] == pytest.approx(4.0)
    assert (row["ratio"], row["ratio_min"], row["ratio_max"]) == (1.0, 0.8, 1.5)
    assert row["goal_met"] is True
    assert overhead.pair_row("w", "cpu", 256, pairs[1:])["goal_met"] is False


def test_settings_refuse_nothing_to_measure():
    with pytest.raises(ValueError, match="pairs"):
        overhead.Settings(("teacher-mlp",), pairs=0, seconds=1.0, rounds=1, window_s=1.0)
    with pytest.raises(ValueError, match="positive"):
        overhead.Settings(("teacher-mlp",), pairs=1, seconds=0.0, rounds=1, window_s=1.0)
    with pytest.raises(ValueError, match="workload"):
        overhead.Settings((), pairs=1, seconds=1.0, rounds=1, window_s=1.0)


def test_the_command_line_overrides_the_settings_it_names():
    parser_args = dict(quick=True, pairs=None, seconds=None, rounds=None, window_s=None, only=None)
    assert overhead.settings_from(argparse.Namespace(**parser_args)) == overhead.QUICK
    s = overhead.settings_from(argparse.Namespace(**{**parser_args, "quick": False, "pairs": 2, "only": ["lenet-digits"]}))
    assert (s.pairs, s.seconds, s.workloads) == (2, overhead.FULL.seconds, ("lenet-digits",))
    with pytest.raises(ValueError, match="pairs"):
        overhead.settings_from(argparse.Namespace(**{**parser_args, "pairs": 0}))


def test_the_cpu_device_is_one_worker_on_every_core():
    device = overhead.runtime_device("cpu")
    assert device.kind == "cpu" and device.threads == len(os.sched_getaffinity(0))
    assert overhead.runtime_device("cuda") == Device("cuda0", "cuda", cuda_index=0)


def test_each_pair_runs_both_sides_with_its_seed_and_the_first_side_alternating(monkeypatch, tmp_path):
    calls = []

    def side(name, sec):
        def run(loop, seconds, work):
            calls.append((name, loop.seed, seconds))
            return sec
        return run
    monkeypatch.setattr(overhead, "runtime_side", side("runtime", 0.006))
    monkeypatch.setattr(overhead, "plain_side", side("plain", 0.004))
    s = overhead.Settings(("teacher-mlp",), pairs=3, seconds=0.5, rounds=1, window_s=0.1)
    out = overhead.bench("cpu", s, 64, False, tmp_path)
    assert calls == [("runtime", 0, 0.5), ("plain", 0, 0.5), ("plain", 1, 0.5), ("runtime", 1, 0.5),
                     ("runtime", 2, 0.5), ("plain", 2, 0.5)]
    assert [p["first"] for p in out["raw"]["teacher-mlp"]["pairs"]] == ["runtime", "plain", "runtime"]
    row, = out["rows"]
    assert row["ratio"] == pytest.approx(1.5) and row["batch"] == 64 and row["goal_met"] is False
    json.dumps(out, allow_nan=False)


def test_the_variants_on_the_cpu_time_each_step_against_the_plain_loop():
    loop = plain_steps.Loop("lenet-digits", Device("cpu0", "cpu"), batch=16)
    groups = plain_steps.variant_groups("cpu")
    names = tuple(n for g in groups for n in g)
    assert groups and "runtime-like" in names and not set(names) & set(plain_steps.CUDA_ONLY)
    timed = plain_steps.time_variants(loop, ("plain", *names, "cuda-graph"), window_s=0.02, rounds=2)
    assert set(timed["sec_per_iter"]) == {"plain", *names}
    assert all(len(s) == 2 and min(s) > 0 for s in timed["sec_per_iter"].values())
    assert set(timed["errors"]) == {"cuda-graph"}
    rows = overhead.variant_rows("lenet-digits", "cpu", [timed])
    assert [r["variant"] for r in rows] == [*names, "cuda-graph"]
    assert all(r["over_plain_min"] <= r["over_plain"] <= r["over_plain_max"] for r in rows[:-1])
    assert rows[-1]["error"].startswith("ValueError")


def test_every_variant_is_in_one_group_and_plain_in_none():
    grouped = [n for g in plain_steps.GROUPS for n in g]
    assert sorted(grouped) == sorted(set(plain_steps.VARIANTS) - {"plain"})
    assert [n for g in plain_steps.variant_groups("cuda") for n in g] == grouped


def test_a_variant_process_that_dies_reports_its_group(monkeypatch):
    def die(*args):
        raise overhead.BrokenProcessPool("gone")
    monkeypatch.setattr(overhead, "in_fresh_process", die)
    loop = plain_steps.Loop("teacher-mlp", overhead.runtime_device("cuda"))
    rows = overhead.variant_rows("teacher-mlp", "cuda", overhead.measure_variants(loop, overhead.QUICK))
    assert {r["variant"] for r in rows} == set(plain_steps.VARIANTS) - {"plain"}
    assert all(r["error"].startswith("the process died") for r in rows)


@pytest.mark.skipif(torch.cuda.is_available(), reason="with a GPU it would run the whole benchmark")
def test_cuda_without_a_gpu_says_so_and_exits_2():
    results = [RESULTS / name for name in ("overhead-cuda.json", "overhead-cuda-quick.json")]
    before = [p.stat().st_mtime_ns if p.exists() else None for p in results]
    done = subprocess.run([sys.executable, "-m", "benchmarks.overhead", "--device", "cuda", "--quick"], cwd=ROOT,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 2
    assert done.stdout == ""
    assert done.stderr.strip().splitlines()[-1] == overhead.NO_GPU
    assert [p.stat().st_mtime_ns if p.exists() else None for p in results] == before
