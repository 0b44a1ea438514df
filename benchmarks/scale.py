"""Predicted time to target at scale: sync, groups (best g), softsync, hpsgd and gossip on 4 to
128 workers, over 10 and 100 Gbit/s links.

    python -m benchmarks.scale [--quick]

Hardware efficiency is simulated (omnitune/efficiency/simulator.py), one worker per node, for a stated
GPU-class worker and model (nothing of this size runs here): a 25.6M-parameter model (ResNet-50's
size, fp32: 102 MB a message) whose step takes 0.10 s at 32 samples per worker (about 320
samples/s, a V100-class GPU), with a log-spread of 0.05 between steps; the parameter server is a
node of its own on the same network, applying an update in 10 ms.

Statistical efficiency comes from probes (omnitune/probing/probe.py): WORKLOAD trained by each
protocol's own update rule on N virtual workers of 32 samples each, the server protocols
replaying the staleness histogram the simulator gives at that size (10 Gbit/s), iterations to
TARGET (at most MAX_SAMPLES samples a probe), each cell at one learning rate, scaled with the
samples of a step by the square-root rule, and Omnivore's momentum rule where a server makes
the staleness (0.9 otherwise). No rate is tuned per
cell: a tuned grid would change the levels, and this one probe per cell is what fits the
machine's time (six sizes, seven variants).
The two halves are multiplied: time to target = seconds per iteration x iterations. It is a
projection: the probes' model is not the 25.6M-parameter one, only its communication is.

Writes benchmarks/results/scale.json and scale.png.
"""

from __future__ import annotations

import argparse
import json
import time

from benchmarks.common import RESULTS, print_rows, write_results
from omnitune import planning
from omnitune.core.protocols import HPSGD, Gossip, Groups, SoftSync, Sync, Variant
from omnitune.efficiency.simulator import Link, Network, Scenario, SimDevice, simulate
from omnitune.efficiency.statmodel import ProbeConfig
from omnitune.probing.probe import make_prober
from omnitune.runtime import workload

PARAMS = 25.6e6
MODEL_BYTES = 4 * PARAMS
STEP_S, SPREAD, BATCH = 0.10, 0.05, 32
SERVER_UPDATE_S = 0.010
LINKS = {"10 Gbit/s": Link(20e-6, 10e9 / 8), "100 Gbit/s": Link(5e-6, 100e9 / 8)}
SIZES, QUICK_SIZES = (4, 8, 16, 32, 64, 128), (4, 16, 64)
WORKLOAD, TARGET = "teacher-mlp", 0.90
# One learning rate per cell, by the square-root scaling rule (Krizhevsky 2014) from teacher-mlp's
# tuned 0.1 at 256 samples: lr = 0.1 sqrt(b / 256) for a step on b samples, at most 0.4.
BASE_LR, BASE_BATCH, MAX_LR = 0.1, 256, 0.4
# A probe trains at most this many samples (so iterations, not the machine's load, end it) and
# for at most MAX_PROBE_S, a guard.
MAX_SAMPLES, MAX_PROBE_S = 1_500_000, 600.0
SIM_ITERS = 300


def variants(n: int) -> dict[str, list[Variant]]:
    """The protocols at n workers: groups at g = 2, 4, 8 where that leaves several workers a
    group (its best is kept), softsync with four updates per round of the learners (n = 4), hpsgd, gossip
    every step."""
    gs = [g for g in (2, 4, 8) if g < n and n % g == 0]
    return {"sync": [Sync()], "groups": [Groups(g=g) for g in gs], "softsync": [SoftSync(learners=n, n=min(4, n))],
            "hpsgd": [HPSGD()], "gossip": [Gossip(every=1)]}


def scenario(v: Variant, n: int, link: Link) -> Scenario:
    workers = [SimDevice(f"w{i}", i, STEP_S, SPREAD) for i in range(n)]
    return Scenario(v, v.group(tuple(workers)), Network(link, link), MODEL_BYTES, SERVER_UPDATE_S, server_node=n)


def batches(v: Variant, n: int) -> tuple[tuple[int, ...], ...]:
    return tuple((BATCH,) * len(g) for g in v.group(tuple(range(n))))


def scaled_lr(v: Variant, n: int) -> float:
    """The effective step for one update of this variant at n workers: each replica's own batch
    for hpsgd and gossip, the update's samples otherwise."""
    b = v.samples_per_update(batches(v, n))
    per_step = BATCH if isinstance(v, (HPSGD, Gossip)) else b
    return float(f"{min(MAX_LR, BASE_LR * (per_step / BASE_BATCH) ** 0.5):.3g}")


def momentum(v: Variant) -> float:
    """Omnivore's rule for the server protocols, whose staleness is real; mu* for the others
    (hpsgd's one-step-late merge costs about nothing at 0.9, while the rule's 0.4 costs 3x the
    iterations: benchmarks.emulation and the README's protocols notes)."""
    return v.rule_momentum(planning.MU_STAR) if v.has_server else planning.MU_STAR


def probe(prober, v: Variant, n: int, staleness: tuple[int, ...]) -> tuple[float | None, dict]:
    """Iterations to target at the scaled learning rate (times the variant's lr_gain), with the
    rule's momentum; and the probe's record (keys as when cells tried several rates)."""
    cfg = ProbeConfig(v, batches(v, n), scaled_lr(v, n) * v.lr_gain, momentum(v), staleness if v.has_server else ())
    start = time.perf_counter()
    r = prober(cfg, int(MAX_SAMPLES / cfg.samples_per_update), MAX_PROBE_S, lambda it, acc: False, 32)
    tried = {"lr": cfg.lr, "iters": r.iters_to_target, "reached": r.reached, "note": r.note,
             "probe_s": time.perf_counter() - start}
    return r.iters_to_target, {"lrs": [tried], "best_lr": cfg.lr if r.iters_to_target is not None else None}


def cell(prober, name: str, n: int) -> list[dict]:
    """One protocol at n workers: every link's simulated hardware, one set of probes."""
    rows = []
    for v in variants(n)[name]:
        sims = {label: simulate(scenario(v, n, link), SIM_ITERS) for label, link in LINKS.items()}
        iters, probes = probe(prober, v, n, sims["10 Gbit/s"].staleness)
        for label, out in sims.items():
            rows.append({"protocol": name, "variant": v.label, "groups": v.groups, "workers": n, "link": label,
                         "sec_per_iter": out.sec_per_iter, "mean_staleness": out.mean_staleness,
                         "samples_per_s": v.samples_per_update(batches(v, n)) / out.sec_per_iter,
                         "iters_to_target": iters,
                         "time_to_target_s": None if iters is None else iters * out.sec_per_iter, **probes})
    return rows


def best_rows(rows: list[dict]) -> list[dict]:
    """Per protocol, size and link, the best variant (groups: the best g)."""
    out = {}
    for r in rows:
        key = (r["protocol"], r["workers"], r["link"])
        t = r["time_to_target_s"]
        if key not in out or (t is not None and (out[key]["time_to_target_s"] is None or t < out[key]["time_to_target_s"])):
            out[key] = r
    return list(out.values())


ASYNCHRONOUS = ("groups", "softsync", "gossip")    # Jin et al.'s side: no global barrier per step


def crossovers(best: list[dict], sizes) -> dict[str, dict]:
    """Per link and size: the fastest protocol, and the best asynchronous one (groups, softsync,
    gossip) against sync; then where sync pulls ahead for good (hpsgd, a synchronous all-reduce
    one step late, is reported but counts on neither side)."""
    out = {}
    for link in LINKS:
        fastest, versus = {}, {}
        for n in sizes:
            mine = {r["protocol"]: r["time_to_target_s"] for r in best
                    if r["workers"] == n and r["link"] == link and r["time_to_target_s"] is not None}
            if not mine:
                continue
            fastest[n] = min(mine, key=mine.get)
            asyn = min((p for p in mine if p in ASYNCHRONOUS), key=mine.get, default=None)
            if asyn and "sync" in mine:
                versus[n] = {"asynchronous": asyn, "asynchronous_s": mine[asyn], "sync_s": mine["sync"],
                             "sync_over_async": mine["sync"] / mine[asyn]}
        ahead = [n for n, v in versus.items() if v["sync_over_async"] > 1]
        sync_from = min((n for n in versus if all(versus[m]["sync_over_async"] < 1 for m in versus if m >= n)),
                        default=None)
        out[link] = {"fastest": fastest, "sync_vs_async": versus,
                     "async_ahead_at": ahead, "sync_ahead_from": sync_from}
    return out


def plot(best: list[dict], path) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(LINKS), figsize=(11, 4.2), sharey=True)
    for ax, link in zip(axes, LINKS):
        for name in ("sync", "groups", "softsync", "hpsgd", "gossip"):
            pts = sorted((r["workers"], r["time_to_target_s"]) for r in best
                         if r["protocol"] == name and r["link"] == link and r["time_to_target_s"] is not None)
            if pts:
                ax.plot(*zip(*pts), marker="o", label=name)
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_title(f"{link} links")
        ax.set_xlabel("workers (one per node)")
        ax.grid(True, which="both", alpha=0.3)
    axes[0].set_ylabel(f"predicted time to {TARGET} (s)")
    axes[0].legend(loc="lower left", fontsize=8)
    fig.suptitle("25.6M parameters, 0.10 s per step of 32 (GPU-class); statistical efficiency from probes")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="4, 16 and 64 workers")
    parser.add_argument("--replot", action="store_true", help="no probes: the summary and the figure again, "
                        "from the rows of the last run's JSON")
    args = parser.parse_args()
    sizes = QUICK_SIZES if args.quick else SIZES
    name = "scale" + ("-quick" if args.quick else "")
    if args.replot:
        rows = json.loads((RESULTS / f"{name}.json").read_text())["rows"]
    else:
        prober = make_prober(workload.load(WORKLOAD), None, TARGET, seed=0)
        rows = []
        for n in sizes:
            for protocol in variants(n):
                rows += cell(prober, protocol, n)
                print_rows(f"{protocol} on {n} workers", rows[-len(LINKS):],
                           ["variant", "link", "sec_per_iter", "mean_staleness", "iters_to_target", "time_to_target_s"])
    best = best_rows(rows)
    summary = crossovers(best, sizes)
    plot(best, RESULTS / f"{name}.png")
    for link, v in summary.items():
        print_rows(f"{link}: the best asynchronous protocol against sync (predicted seconds to {TARGET})",
                   [{"workers": n, **x} for n, x in v["sync_vs_async"].items()],
                   ["workers", "asynchronous", "asynchronous_s", "sync_s", "sync_over_async"])
        print(f"{link}: fastest per size {v['fastest']}; asynchronous ahead of sync at {v['async_ahead_at']}, "
              f"sync ahead from {v['sync_ahead_from']} workers on")
    path = write_results(name, {
        "quick": args.quick, "workload": WORKLOAD, "target": TARGET, "params": PARAMS, "step_s": STEP_S,
        "batch_per_worker": BATCH, "server_update_s": SERVER_UPDATE_S,
        "links": {k: {"latency_s": v.latency_s, "bytes_per_s": v.bytes_per_s} for k, v in LINKS.items()},
        "rows": rows, "best": best, "crossover": summary,
        "jin_et_al": "asynchronous methods ahead up to about 32 nodes, synchronous all-reduce at about 100"})
    print(f"wrote {path} and {RESULTS / (name + '.png')}")


if __name__ == "__main__":
    main()
