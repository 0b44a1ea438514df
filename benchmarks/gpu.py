"""omnitune on a machine with a CUDA GPU and many cores: its profile, plan and real runs.

    python -m benchmarks.gpu [--quick]

NEEDS A CUDA DEVICE. Without one it prints one line saying so and exits with status 2, writing
nothing.

On this machine's default local cluster (`omnitune.core.cluster.local_cluster`: CPU layouts, the GPUs
alone, and the GPUs beside CPU workers on the cores they leave free) it records:
1. what `omnitune profile` measures: per device id its kind, threads, best samples/s and the batch
   of it; the network figures the profile holds; the profile's wall time;
2. what `omnitune plan` chooses (layout, protocol, devices, per-device batches, lr, momentum,
   predicted seconds per iteration and time to target, where the seconds per iteration came
   from, planning's time against its budget), run for real, against three alternatives a user
   would try, each at the plan's nominal per-device batch, its effective learning rate and
   momentum 0.9, so that they differ only in their devices: gpu-alone (sync on the first CUDA
   device), cpus-alone (sync on the `one-worker` layout's CPU worker, or with no such layout the
   CPU devices of `one-per-core`) and all-devices (sync with throughput-balanced batches on the
   largest layout with a GPU). Every configuration runs with seeds 0, 1, 2 (one with --quick),
   seed by seed across the configurations; the alternatives from scratch, the plan, as after
   `omnitune plan`, from its chosen probe's checkpoint, whose training its clock counts (planning's
   own cost is its wall time less that training). Where the plan starts from such a checkpoint, a
   row plan-from-scratch runs its setup from scratch too, beside it: what the handed-on start
   costs or gains (`handed_on_over_from_scratch`; not an alternative). Rows give the median time
   to target and min-max, a run that misses its target counting as the time limit;
3. whether `pytest -m gpu` passes (`python -m pytest -q -m gpu tests` from the repository root).
After every run the figures so far go to benchmarks/results/gpu-partial.json, and the profile and
the plan to gpu-profile.json and gpu-plan.json, so a session cut short still leaves them.

Workload: shapes-resnet to 0.9 accuracy, each run limited to 45 s (benchmarks/gpu_session.sh
passes 30), and the plan's own probing budget; with 30 s, all of it ended in 7 minutes on an H200
with 16 cores. With --quick: cnn1d-mnist1d to 0.85, each run limited to 30 s, a quick profile and
one seed. Writes
benchmarks/results/gpu.json (gpu-quick.json with --quick).
"""

from __future__ import annotations

import argparse
from dataclasses import replace
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path

from benchmarks.common import RESULTS, print_rows, write_results
from benchmarks.harness import fixed_spec, interleaved
from omnitune import planning
from omnitune.core import plan as plan_mod, profile as profile_mod
from omnitune.core.cluster import local_cluster
from omnitune.core.files import to_dict
from omnitune.core.plan import start_path
from omnitune.core.protocols import Sync
from omnitune.planning import Config
from omnitune.probing import timing
from omnitune.probing.probe import hand_on, make_prober
from omnitune.profiling import profiler
from omnitune.runtime import host, workload

ROOT = Path(__file__).resolve().parent.parent
NO_GPU = "benchmarks.gpu: no CUDA device here; run it on a machine with one"
FULL = ("shapes-resnet", 0.9, 45.0)        # workload, target accuracy, time limit per run (s)
QUICK = ("cnn1d-mnist1d", 0.85, 30.0)
MOMENTUM = 0.9
# The alternatives' protocols: sync, and on every device sync with balanced batches.
VARIANTS = {"gpu-alone": Sync(), "cpus-alone": Sync(balanced=False), "all-devices": Sync(balanced=True)}
FROM_SCRATCH = "plan-from-scratch"     # the plan's setup, not from its probe's checkpoint: not an alternative
PYTEST_TIMEOUT_S = 1800
COLUMNS = ["config", "layout", "protocol", "devices", "batches", "lr", "momentum", "time_to_target_s", "spread_s",
           "reached_target", "measured_sec_per_iter", "iterations", "final_accuracy"]


def alternatives(prof) -> dict[str, tuple[str, tuple[str, ...]]]:
    """The three alternatives' layout and device ids on a profile's cluster: the first CUDA
    device (lowest index) alone, in the smallest layout that holds it; the CPU workers of
    `one-worker` (or, with no such layout, the CPU devices of `one-per-core`); every device of
    the largest layout with that GPU. ValueError with no CUDA device."""
    cluster = prof.cluster
    gpus = sorted((d for d in cluster.devices if d.kind == "cuda"), key=lambda d: d.cuda_index)
    if not gpus:
        raise ValueError("the profile's cluster has no CUDA device")
    first = gpus[0].id
    with_gpu = [name for name, ids in cluster.layouts.items() if first in ids]
    alone = min(with_gpu, key=lambda name: len(cluster.layouts[name]))
    everything = max(with_gpu, key=lambda name: len(cluster.layouts[name]))
    cpu_layout = "one-worker" if "one-worker" in cluster.layouts else "one-per-core"
    cpus = tuple(d for d in cluster.layouts[cpu_layout] if cluster.device(d).kind == "cpu")
    if not cpus:
        raise ValueError(f"the profile's {cpu_layout} layout has no CPU device")
    return {"gpu-alone": (alone, (first,)), "cpus-alone": (cpu_layout, cpus),
            "all-devices": (everything, cluster.layouts[everything])}


def alternative_configs(prof, batch: int, lr: float) -> dict[str, Config]:
    """Each alternative as a single sync group at the same nominal batch, lr and momentum."""
    return {name: Config(layout, VARIANTS[name], (ids,), batch, lr, MOMENTUM)
            for name, (layout, ids) in alternatives(prof).items()}


def profile_facts(prof, wall_s: float) -> dict:
    cluster = prof.cluster
    devices = {}
    for dp in prof.devices:
        dev, best = cluster.device(dp.device_id), dp.best
        devices[dp.device_id] = {"kind": dev.kind, "threads": dev.threads, "cuda_index": dev.cuda_index,
                                 "best_samples_per_s": best.samples_per_s, "best_batch": best.batch_size,
                                 "max_batch": dp.max_batch}
    return {"wall_s": wall_s, "workload": prof.workload, "quick": prof.quick, "host": to_dict(prof.host),
            "layouts": to_dict(cluster.layouts), "devices": devices,
            "network": to_dict(prof.network) if prof.network else None,
            "calibration_jobs": len(prof.calibration)}


def plan_facts(plan, planning_s: float) -> dict:
    s = plan.spec
    return {"layout": plan.layout, "protocol": s.variant.label, "devices": list(s.device_ids),
            "groups": [list(g) for g in s.groups], "idle": dict(plan.idle), "batches": dict(s.batch_size),
            "nominal_batch": plan.candidates[0].batch_size, "lr": s.lr,
            "effective_lr": s.lr / s.variant.lr_gain, "momentum": s.momentum,
            "predicted_time_to_target_s": plan.prediction.time_to_target_s,
            "predicted_sec_per_iter": plan.prediction.sec_per_iter,
            "predicted_iters_to_target": plan.prediction.iters_to_target,
            "hardware_model": plan.hardware_model, "model_sec_per_iter": plan.prediction.model_sec_per_iter,
            "planning_s": planning_s,
            "planning_own_s": planning_s - (plan.planning.handed_on_s if plan.planning else 0.0),
            "planning": to_dict(plan.planning) if plan.planning else None, "note": plan.candidates[0].note}


def described(spec, **kw) -> dict:
    return {**kw, "protocol": spec.variant.label, "devices": list(spec.device_ids), "batches": spec.batch_size,
            "lr": spec.lr, "momentum": spec.momentum}


def gpu_tests() -> dict:
    """`pytest -m gpu` from the repository root: its return code and the last line it printed."""
    cmd = [sys.executable, "-m", "pytest", "-q", "-m", "gpu", "tests"]
    start = time.perf_counter()
    try:
        done = subprocess.run(cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                              timeout=PYTEST_TIMEOUT_S)
        rc, output = done.returncode, done.stdout
    except subprocess.TimeoutExpired as e:
        out = e.stdout.decode(errors="replace") if isinstance(e.stdout, bytes) else (e.stdout or "")
        rc, output = None, out + f"\n(timed out after {PYTEST_TIMEOUT_S} s)"
    lines = [line for line in output.splitlines() if line.strip()]
    return {"command": " ".join(["python", *cmd[1:]]), "returncode": rc, "passed": rc == 0,
            "last_line": lines[-1] if lines else "", "wall_s": time.perf_counter() - start}


def bench(quick: bool, work: Path, seeds: tuple[int, ...] | None = None, limit_s: float | None = None) -> dict:
    wl_name, target, default_limit_s = QUICK if quick else FULL
    seeds = seeds or ((0,) if quick else (0, 1, 2))
    limit_s = limit_s or default_limit_s

    start = time.perf_counter()
    stamped = lambda what: lambda m: print(f"  {time.perf_counter() - start:6.1f}s {what}: {m}", flush=True)  # noqa: E731
    prof = profiler.profile(local_cluster(), wl_name, None, profiler.Settings.make(quick), work / "logs",
                            progress=stamped("profile"))
    profile_s = time.perf_counter() - start
    prof_path = work / f"{wl_name}.profile.json"
    profile_mod.save(prof, prof_path)
    profile_mod.save(prof, RESULTS / "gpu-profile.json")     # to plan again elsewhere
    facts = profile_facts(prof, profile_s)
    print_rows(f"profile of {wl_name} on this machine ({profile_s:.1f} s)",
               [{"device": d, **v} for d, v in facts["devices"].items()],
               ["device", "kind", "threads", "best_samples_per_s", "best_batch", "max_batch"])

    # As `omnitune plan` does: the search, with the unmeasured fastest setups timed, and the chosen
    # probe's training handed on to the run, whose clock counts it.
    start = time.perf_counter()
    timer = lambda c: timing.time_spec(planning.spec_of(c, prof, wl_name, None, target, 0))  # noqa: E731
    prober = make_prober(workload.load(wl_name), None, target, 0)
    found = planning.search(prof, planning.Space(), prober, timer=timer, log=stamped("plan"))
    plan_path = work / f"{wl_name}-plan.json"
    plan = planning.build_plan(found, prof, str(prof_path), wl_name, None, target, 0,
                                datetime.now(timezone.utc).isoformat())
    plan = hand_on(plan, prober, plan_path)
    planning_s = time.perf_counter() - start
    plan_mod.save(plan, plan_path)
    plan_mod.save(plan, RESULTS / "gpu-plan.json")
    chosen = plan_facts(plan, planning_s)
    budget_s = plan.planning.budget_s if plan.planning else None
    print(f"plan ({planning_s:.1f} s, {chosen['planning_own_s']:.1f} s of it not handed on; budget {budget_s} s): "
          f"{chosen['protocol']} on {chosen['layout']}, devices {chosen['devices']}, batches {chosen['batches']}, "
          f"lr {chosen['lr']}, momentum {chosen['momentum']}, {1e3 * chosen['predicted_sec_per_iter']:.2f} ms/iter "
          f"({chosen['hardware_model']}), predicted {chosen['predicted_time_to_target_s']} s", flush=True)

    batch, lr = chosen["nominal_batch"], chosen["effective_lr"]
    handed = start_path(plan, plan_path)      # every seed of the plan's run goes on from it
    configs = {"plan": (plan.layout, {seed: (replace(plan.spec, seed=seed), handed) for seed in seeds})}
    if handed is not None:      # what the handed-on start costs or gains: the same setup from scratch
        configs[FROM_SCRATCH] = (plan.layout, plan.spec)
    for name, c in alternative_configs(prof, batch, lr).items():
        configs[name] = (c.layout, fixed_spec(prof, wl_name, target, c))
    partial = {"workload": wl_name, "target_accuracy": target, "time_limit_s": limit_s, "seeds": list(seeds),
               "profile": facts, "plan": chosen, "runs": []}
    write_results("gpu-partial", partial)      # what a run cut short still leaves

    def on_run(tag, seed, run):
        partial["runs"].append({"config": tag, "seed": seed, **run})
        print(f"  {tag} seed {seed}: {run['time_s']:.1f} s, reached {run['reached']}", flush=True)
        write_results("gpu-partial", partial)

    measured = interleaved({name: spec for name, (_, spec) in configs.items()}, work, limit_s, seeds, on_run)
    rows = []
    for name, (layout, spec) in configs.items():
        m = measured[name]
        spec = plan.spec if name == "plan" else spec
        rows.append({**described(spec, config=name, layout=layout), "time_to_target_s": m["median_s"],
                     "spread_s": m["spread_s"], "reached_target": [r["reached"] for r in m["runs"]],
                     "measured_sec_per_iter": statistics.median(r["sec_per_iter"] for r in m["runs"]),
                     "iterations": m["median_iterations"],
                     "final_accuracy": statistics.median(r["final_accuracy"] for r in m["runs"]), "runs": m["runs"]})
        print_rows(f"{wl_name} to {target}", rows[-1:], COLUMNS)

    plan_s = rows[0]["time_to_target_s"]
    alt = {r["config"]: r["time_to_target_s"] for r in rows[1:] if r["config"] != FROM_SCRATCH}
    best = min(alt, key=alt.get)
    scratch = next((r for r in rows if r["config"] == FROM_SCRATCH), None)
    summary = {"plan_s": plan_s, **{f"{name}_s": t for name, t in alt.items()}, "best_alternative": best,
               "plan_over_best_alternative": plan_s / alt[best],
               **({} if scratch is None else {
                   "plan_from_scratch_s": scratch["time_to_target_s"],
                   "handed_on_over_from_scratch": plan_s / scratch["time_to_target_s"],
                   "handed_on_over_from_scratch_iterations": rows[0]["iterations"] / scratch["iterations"]}),
               "predicted_over_measured_sec_per_iter": chosen["predicted_sec_per_iter"] / rows[0]["measured_sec_per_iter"],
               "predicted_over_measured": (chosen["predicted_time_to_target_s"] / plan_s
                                           if chosen["predicted_time_to_target_s"] is not None else None),
               "profile_s": profile_s, "planning_s": planning_s, "planning_own_s": chosen["planning_own_s"],
               "planning_budget_s": budget_s}
    return {"workload": wl_name, "target_accuracy": target, "time_limit_s": limit_s, "seeds": list(seeds),
            "profile": facts, "plan": chosen, "rows": rows, "summary": summary}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true",
                        help="cnn1d-mnist1d, a quick profile, one seed, 30 s per run")
    parser.add_argument("--seeds", type=int, default=None, help="seeds per configuration (default 3; 1 with --quick)")
    parser.add_argument("--limit-s", type=float, default=None, help="time limit of each run (default 45; 30 with --quick)")
    parser.add_argument("--no-pytest", action="store_true", help="skip `pytest -m gpu`")
    args = parser.parse_args()
    import torch
    if not torch.cuda.is_available():
        print(NO_GPU, file=sys.stderr)
        sys.exit(2)
    with tempfile.TemporaryDirectory() as tmp:
        out = bench(args.quick, Path(tmp), tuple(range(args.seeds)) if args.seeds else None, args.limit_s)
    print_rows(f"the plan against the alternatives (median s; a miss counts as {out['time_limit_s']:g} s)",
               out["rows"], COLUMNS)
    print_rows("summary", [out["summary"]], list(out["summary"]))
    out = {"quick": args.quick, "measured_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
           "cuda_device": torch.cuda.get_device_name(0), "cuda_device_count": torch.cuda.device_count(),
           "cpu_count": host.host_facts().cpu_count, "torch": torch.__version__, **out}
    name = "gpu" + ("-quick" if args.quick else "")
    print(f"wrote {write_results(name, out)}", flush=True)
    if not args.no_pytest:
        out["pytest_gpu"] = tests = gpu_tests()
        print(f"pytest -m gpu: return code {tests['returncode']}: {tests['last_line']}")
        write_results(name, out)


if __name__ == "__main__":
    main()
