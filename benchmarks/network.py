"""Two hosts with addresses of their own (network namespaces on a bridge), their link unshaped,
at 1 Gbit/s and at 20 Mbit/s (tbf): what `profile` measures of the link, what `plan` chooses,
and the plan's measured time to target beside the default's.

    sudo python -m benchmarks.network [--quick]      → benchmarks/results/network.json

Each host runs one CPU worker; the server, when the plan has one, runs on host 0. The workload
is `mlp-digits` (a 1.33 MB model that trains in seconds), so communication decides its plans on
a slow link. The default is what a user would start with: sync on every device, lr 0.01,
momentum 0.9, batch 32 per device. Each configuration runs 3 times (seeds 1–3; once with
--quick); a run that misses the target counts as its cap.

Goals (`goals_met`): on the slow link the plan moves fewer bytes across the link per training
sample than on the 1 Gbit/s link (the direction the hardware model predicts: larger batches,
groups or fewer exchanges), and its median time to target beats the default's.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path

from benchmarks.common import print_rows, write_results
from omnitune.core import plan as plan_mod, profile as profile_mod
from omnitune.core.protocols import Gossip, Sync
from tests.netns import Hosts, unavailable

WORKLOAD, TARGET = "mlp-digits", 0.95
RATES = (None, 1000.0, 20.0)          # Mbit/s; None: unshaped
CAP_S = 150.0
PORT = 29400
ROOT = Path(__file__).resolve().parent.parent


def omnitune(args: list[str]) -> list[str]:
    return [sys.executable, "-m", "omnitune.cli", *args]


def on_both(hosts: Hosts, args, timeout: float) -> list[str]:
    """`omnitune ARGS(n) --node-rank n` in each host's namespace at once; their outputs."""
    procs = [h.popen(omnitune([*args(n), "--node-rank", str(n)]), cwd=ROOT, stdout=subprocess.PIPE,
                     stderr=subprocess.STDOUT, text=True) for n, h in enumerate(hosts.hosts)]
    outs = [p.communicate(timeout=timeout)[0] for p in procs]
    for p, text in zip(procs, outs):
        if p.returncode != 0:
            raise RuntimeError(f"{' '.join(p.args[-6:])} failed:\n{text[-2000:]}")
    return outs


def measured_link(prof) -> dict:
    """The rate the profile's model-size messages imply: an all-reduce between the two hosts sends
    the message each way at once; a round trip sends it there, then back."""
    size = prof.model_bytes // 4 * 4
    ar = next(a for a in prof.network.allreduce if a.bytes == size and a.group_size == 2)
    rt = next(p for p in prof.network.p2p if p.bytes == size)
    return {"message_bytes": size, "allreduce_s": ar.seconds, "round_trip_s": rt.round_trip_s,
            "allreduce_mbit": 8 * size / ar.seconds / 1e6, "round_trip_mbit": 16 * size / rt.round_trip_s / 1e6}


def link_bytes_per_sample(spec, model_bytes: int) -> float:
    """Bytes that cross the link between the two hosts per training sample, by the protocol.
    sync and hpsgd all-reduce every step (each host sends the model once); a group or learner on
    host 1 pushes a gradient and pulls the weights (2 models) per update, host 0's nothing;
    gossip swaps the pair's states (2 models) every `every` steps."""
    batch = [spec.batch_size[d.id] for d in spec.devices]
    remote = [spec.batch_size[d.id] for d in spec.devices if d.node != spec.server_node]
    v = spec.variant
    if isinstance(v, Gossip):
        return 2 * model_bytes / (sum(batch) * v.every)
    if not v.has_server:                                   # sync, hpsgd
        return 2 * model_bytes / sum(batch)
    # One update per group; groups of equal speed take turns, so host 1's share of the samples
    # is its share of the batch.
    return 2 * model_bytes * len(remote) / len(batch) / (sum(batch) / len(batch)) if remote else 0.0


def describe(spec) -> dict:
    return {"protocol": spec.variant.label, "groups": len(spec.groups), "batch": spec.batch_size,
            "lr": spec.lr, "momentum": spec.momentum}


def run_plan(hosts: Hosts, plan_path: Path, work: Path, seeds, tag: str) -> dict:
    runs = []
    for seed in seeds:
        seeded = work / f"{tag}-s{seed}.json"
        plan = plan_mod.load(plan_path)
        plan_mod.save(replace(plan, spec=replace(plan.spec, seed=seed)), seeded)
        out = work / f"{tag}-s{seed}"
        on_both(hosts, lambda n: ["run", str(seeded), "--out-dir", str(out / f"node{n}"), "--max-time-s", str(CAP_S),
                                  "--timeout-s", "60"], timeout=CAP_S + 120)
        s = json.loads((out / "node0" / "summary.json").read_text())
        runs.append({"time_s": s["time_to_target_s"] if s["reached_target"] else CAP_S, "reached": s["reached_target"],
                     "iterations": s["iterations"], "sec_per_iter": s["measured_sec_per_iter"]})
    times = [r["time_s"] for r in runs]
    return {"median_s": statistics.median(times), "spread_s": [min(times), max(times)], "runs": runs}


def bench_rate(mbit: float | None, quick: bool, work: Path) -> dict:
    seeds = (1,) if quick else (1, 2, 3)
    with Hosts(2) as hosts:
        hosts.shape(mbit)
        spec = work / "cluster.yaml"
        spec.write_text(f"nodes:\n  - host: {hosts[0].address}\n  - host: {hosts[1].address}\n"
                        f"rendezvous: {hosts[0].address}:{PORT}\n")
        prof_path = work / "profile.json"
        start = time.perf_counter()
        on_both(hosts, lambda n: ["profile", "--workload", WORKLOAD, "--cluster", str(spec), "--out",
                                  str(work / f"profile{n}.json"), *(["--quick"] if quick else [])], timeout=600)
        profile_s = time.perf_counter() - start
        (work / "profile0.json").rename(prof_path)
        prof = profile_mod.load(prof_path)
        plan_path = work / "plan.json"
        start = time.perf_counter()
        done = subprocess.run(omnitune(["plan", "--profile", str(prof_path), "--workload", WORKLOAD,
                                        "--target-accuracy", str(TARGET), "--out", str(plan_path)]),
                              cwd=ROOT, capture_output=True, text=True)
        if done.returncode != 0:
            raise RuntimeError(f"plan failed:\n{done.stdout}{done.stderr}")
        planning_s = time.perf_counter() - start
        plan = plan_mod.load(plan_path)
        default_path = work / "default.json"
        ids = tuple(d.id for d in plan.spec.devices)
        plan_mod.save(replace(plan, spec=replace(plan.spec, variant=Sync(), groups=(ids,),
                                                 batch_size={i: 32 for i in ids}, lr=0.01, momentum=0.9)),
                      default_path)
        default = plan_mod.load(default_path)
        return {
            "rate_mbit": mbit, "link": measured_link(prof), "profile_s": profile_s, "planning_s": planning_s,
            "plan": describe(plan.spec), "plan_link_bytes_per_sample": link_bytes_per_sample(plan.spec, prof.model_bytes),
            "default_link_bytes_per_sample": link_bytes_per_sample(default.spec, prof.model_bytes),
            "predicted_time_to_target_s": plan.prediction.time_to_target_s,
            "predicted_sec_per_iter": plan.prediction.sec_per_iter,
            "plan_runs": run_plan(hosts, plan_path, work, seeds, "plan"),
            "default_runs": run_plan(hosts, default_path, work, seeds, "default"),
        }


def summarize(rows: list[dict]) -> dict:
    by_rate = {r["rate_mbit"]: r for r in rows}
    fast, slow = by_rate.get(1000.0), by_rate.get(20.0)
    fewer = slow["plan_link_bytes_per_sample"] < fast["plan_link_bytes_per_sample"] if fast and slow else None
    beats = slow["plan_runs"]["median_s"] < slow["default_runs"]["median_s"] if slow else None
    return {"plan_changes_toward_less_traffic": fewer, "plan_beats_default_on_slow_link": beats,
            "default_over_plan_slow": slow["default_runs"]["median_s"] / slow["plan_runs"]["median_s"] if slow else None}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="quick profiles, one run per configuration")
    args = parser.parse_args()
    why = unavailable()
    if why:
        sys.exit(f"benchmarks.network: {why}")
    rows = []
    with tempfile.TemporaryDirectory(prefix="omnitune-network-") as tmp:
        for mbit in RATES:
            work = Path(tmp) / f"rate-{mbit or 'unshaped'}"
            work.mkdir()
            row = bench_rate(mbit, args.quick, work)
            rows.append(row)
            print(f"{mbit or 'unshaped'} Mbit/s: link {row['link']['allreduce_mbit']:.0f} Mbit/s (all-reduce), "
                  f"plan {row['plan']}, {row['plan_runs']['median_s']:.2f} s against default "
                  f"{row['default_runs']['median_s']:.2f} s", flush=True)
    summary = summarize(rows)
    goals_met = bool(summary["plan_changes_toward_less_traffic"] and summary["plan_beats_default_on_slow_link"])
    table = [{"rate": r["rate_mbit"] or "unshaped", "allreduce_mbit": r["link"]["allreduce_mbit"],
              "round_trip_mbit": r["link"]["round_trip_mbit"], "plan": f"{r['plan']['protocol']} b{r['plan']['batch']}",
              "plan_bytes_per_sample": r["plan_link_bytes_per_sample"],
              "predicted_s": r["predicted_time_to_target_s"], "plan_s": r["plan_runs"]["median_s"],
              "default_s": r["default_runs"]["median_s"]} for r in rows]
    print_rows("two namespaced hosts: the plan against the default, by link rate", table, list(table[0]))
    write_results("network", {"version": 1, "quick": args.quick, "workload": WORKLOAD, "target": TARGET,
                              "cap_s": CAP_S, "rows": rows, "summary": summary, "goals_met": goals_met})
    print(f"goals met: {goals_met} ({summary}); wrote benchmarks/results/network.json")


if __name__ == "__main__":
    main()
