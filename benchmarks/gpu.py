"""omnitune on a machine with a CUDA GPU and many cores: its profile, plan and real runs.

    python -m benchmarks.gpu [--quick]

NEEDS A CUDA DEVICE. Without one it prints one line saying so and exits with status 2, writing
nothing. It has NOT YET BEEN RUN ON A GPU by the author of this code: it has never run past that
check, so its first run on a GPU machine is also its test.

On this machine's default local cluster (`omnitune.cluster.local_cluster`: CPU layouts, each plus
every GPU) it records:
1. what `omnitune profile` measures: per device id its kind, threads, best samples/s and the batch
   of it; the network figures the profile holds (all-reduce and round-trip timings, the server's
   update); the profile's wall time;
2. what `omnitune plan` chooses (layout, protocol, devices used, idle devices and why, per-device
   batches, lr, momentum, predicted time to target), run for real, against three alternatives a
   user would try, each at the plan's nominal per-device batch, its effective learning rate and
   momentum 0.9, so that they differ only in their devices (and all-devices' balanced batches):
   gpu-alone (sync on the first CUDA device), cpus-alone (sync on every CPU worker of the
   `one-worker` layout, or with no such layout the CPU devices of `one-per-core`) and all-devices
   (sync with throughput-balanced batches on every device of `one-per-core`). The plan and each
   alternative run with seeds 0, 1, 2 (one seed with --quick); rows give the median time to
   target and min–max, a run that misses its target counting as the time limit;
3. whether `pytest -m gpu` passes (`python -m pytest -q -m gpu tests` from the repository root):
   its return code and the last line of its output.

Workload: shapes-resnet to 0.9 accuracy, each run limited to 300 s, and the plan's own probing
budget. With --quick: cnn1d-mnist1d to 0.85, each run limited to 60 s, a quick profile, a 60 s
planning budget and one seed. Writes benchmarks/results/gpu.json (gpu-quick.json with --quick).
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path

from benchmarks.common import print_rows, write_results
from benchmarks.plan_quality import fixed_spec
from benchmarks.protocols import repeated
from omnitune import optimizer, plan as plan_mod, profile as profile_mod, profiler, workload
from omnitune.cluster import local_cluster
from omnitune.files import to_dict
from omnitune.optimizer import Config
from omnitune.probe import make_prober
from omnitune.protocols import Sync

ROOT = Path(__file__).resolve().parent.parent
NO_GPU = "benchmarks.gpu: no CUDA device here; run it on a machine with one"
FULL = ("shapes-resnet", 0.9, 300.0)       # workload, target accuracy, time limit per run (s)
QUICK = ("cnn1d-mnist1d", 0.85, 60.0)
QUICK_BUDGET_S = 60.0                      # planning budget with --quick; the full run sizes its own
MOMENTUM = 0.9
# The alternatives' protocols: sync, and on every device sync with balanced batches.
VARIANTS = {"gpu-alone": Sync(), "cpus-alone": Sync(balanced=False), "all-devices": Sync(balanced=True)}
PYTEST_TIMEOUT_S = 1800
COLUMNS = ["config", "layout", "protocol", "devices", "batches", "lr", "momentum", "time_to_target_s", "spread_s",
           "reached_target", "measured_sec_per_iter", "iterations", "final_accuracy"]


def alternatives(prof) -> dict[str, tuple[str, tuple[str, ...]]]:
    """The three alternatives' layout and device ids on a profile's cluster: the first CUDA
    device (lowest index) alone; the CPU workers of `one-worker` (or, with no such layout, the
    CPU devices of `one-per-core`); every device of `one-per-core`. ValueError with no CUDA
    device in `one-per-core`."""
    cluster = prof.cluster
    per_core = cluster.layouts["one-per-core"]
    gpus = sorted((cluster.device(d) for d in per_core if cluster.device(d).kind == "cuda"),
                  key=lambda d: d.cuda_index)
    if not gpus:
        raise ValueError("the profile's one-per-core layout has no CUDA device")
    cpu_layout = "one-worker" if "one-worker" in cluster.layouts else "one-per-core"
    cpus = tuple(d for d in cluster.layouts[cpu_layout] if cluster.device(d).kind == "cpu")
    if not cpus:
        raise ValueError(f"the profile's {cpu_layout} layout has no CPU device")
    return {"gpu-alone": ("one-per-core", (gpus[0].id,)), "cpus-alone": (cpu_layout, cpus),
            "all-devices": ("one-per-core", per_core)}


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
            "hardware_model": plan.hardware_model, "planning_s": planning_s,
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


def bench(quick: bool, work: Path) -> dict:
    wl_name, target, limit_s = QUICK if quick else FULL
    seeds = (0,) if quick else (0, 1, 2)

    start = time.perf_counter()
    prof = profiler.profile(local_cluster(), wl_name, None, profiler.Settings.make(quick), work / "logs")
    profile_s = time.perf_counter() - start
    prof_path = work / f"{wl_name}.profile.json"
    profile_mod.save(prof, prof_path)
    facts = profile_facts(prof, profile_s)
    print_rows(f"profile of {wl_name} on this machine ({profile_s:.1f} s)",
               [{"device": d, **v} for d, v in facts["devices"].items()],
               ["device", "kind", "threads", "best_samples_per_s", "best_batch", "max_batch"])

    start = time.perf_counter()
    found = optimizer.search(prof, optimizer.Space(), make_prober(workload.load(wl_name), None, target, 0),
                             budget_s=QUICK_BUDGET_S if quick else None)
    plan = optimizer.build_plan(found, prof, str(prof_path), wl_name, None, target, 0,
                                datetime.now(timezone.utc).isoformat())
    planning_s = time.perf_counter() - start
    plan_mod.save(plan, work / f"{wl_name}-plan.json")
    chosen = plan_facts(plan, planning_s)
    print(f"plan ({planning_s:.1f} s): {chosen['protocol']} on {chosen['layout']}, devices {chosen['devices']}, "
          f"idle {chosen['idle']}, batches {chosen['batches']}, lr {chosen['lr']}, momentum {chosen['momentum']}, "
          f"predicted {chosen['predicted_time_to_target_s']} s", flush=True)

    rows = [repeated(plan.spec, work, "plan", seeds, limit_s,
                     **described(plan.spec, config="plan", layout=plan.layout))]
    print_rows(f"{wl_name} to {target}", rows[-1:], COLUMNS)
    batch, lr = chosen["nominal_batch"], chosen["effective_lr"]
    for name, c in alternative_configs(prof, batch, lr).items():
        spec = fixed_spec(prof, wl_name, target, c)
        rows.append(repeated(spec, work, name, seeds, limit_s, **described(spec, config=name, layout=c.layout)))
        print_rows(f"{wl_name} to {target}", rows[-1:], COLUMNS)

    plan_s = rows[0]["time_to_target_s"]
    alt = {r["config"]: r["time_to_target_s"] for r in rows[1:]}
    best = min(alt, key=alt.get)
    summary = {"plan_s": plan_s, **{f"{name}_s": t for name, t in alt.items()}, "best_alternative": best,
               "plan_over_best_alternative": plan_s / alt[best],
               "predicted_over_measured": (chosen["predicted_time_to_target_s"] / plan_s
                                           if chosen["predicted_time_to_target_s"] is not None else None)}
    return {"workload": wl_name, "target_accuracy": target, "time_limit_s": limit_s, "seeds": list(seeds),
            "profile": facts, "plan": chosen, "rows": rows, "summary": summary}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true",
                        help="cnn1d-mnist1d, a quick profile, a 60 s planning budget, one seed, 60 s per run")
    args = parser.parse_args()
    import torch
    if not torch.cuda.is_available():
        print(NO_GPU, file=sys.stderr)
        sys.exit(2)
    with tempfile.TemporaryDirectory() as tmp:
        out = bench(args.quick, Path(tmp))
    print_rows(f"the plan against the alternatives (median s; a miss counts as {out['time_limit_s']:g} s)",
               out["rows"], COLUMNS)
    print_rows("summary", [out["summary"]], list(out["summary"]))
    out["pytest_gpu"] = tests = gpu_tests()
    print(f"pytest -m gpu: return code {tests['returncode']}: {tests['last_line']}")
    out = {"quick": args.quick, "time_limits_s": {"full": FULL[2], "quick": QUICK[2]},
           "cuda_device": torch.cuda.get_device_name(0), "cuda_device_count": torch.cuda.device_count(), **out}
    path = write_results("gpu" + ("-quick" if args.quick else ""), out)
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
