"""Asynchrony begets momentum, reproduced (Mitliagkas, Zhang, Hadjis, Ré 2016).

    python -m benchmarks.momentum [--quick]

For g = 1, 2, 4, 8, 16 emulated asynchronous groups (gradients computed on weights tau updates
old, tau from the queueing model's geometric distribution), on a convex problem (logistic
regression on digits) and on the CNN (lenet-digits):
- the implicit momentum measured from the trajectory (probe.sense_momentum: replicas from one
  start, full-batch gradients, heavy-ball fit) against the theory's 1 - 1/g;
- the best explicit momentum from a grid that includes 0 and negative values: lowest training
  loss after a fixed number of minibatch updates at a fixed learning rate, mean over seeds.
Writes benchmarks/results/momentum.json and momentum.png.
"""

from __future__ import annotations

import argparse
import math

import numpy as np
import torch

from benchmarks.common import RESULTS, print_rows, write_results
from omnitune import statmodel, workload
from omnitune.probe import Emulator, sense_momentum
from omnitune.statmodel import ProbeConfig

GROUPS = (1, 2, 4, 8, 16)
GRID = (-0.3, -0.15, 0.0, 0.15, 0.3, 0.45, 0.6, 0.75, 0.9)
# workload: (sensing lr, sensing steps, grid lr, grid batch, grid iterations)
SETTINGS = {"logreg-digits": (0.5, 60, 0.5, 32, 200), "lenet-digits": (0.1, 40, 0.1, 32, 150)}


def loss_after(wl, train, cfg: ProbeConfig, iters: int, seed: int) -> float:
    emu = Emulator(wl, train, cfg, init_seed=0, noise_seed=seed, max_iters=iters)
    for _ in range(iters):
        if not math.isfinite(emu.step()):
            return math.inf
    loss, _ = workload.evaluate(wl, emu.current_model(), train, torch.device("cpu"))
    return loss if math.isfinite(loss) else math.inf


def bench(name: str, quick: bool) -> list[dict]:
    wl = workload.load(name)
    train, _ = wl.build_datasets(None, 0)
    sense_lr, sense_steps, lr, batch, iters = SETTINGS[name]
    replicas = (16 if quick else 48) if name == "logreg-digits" else (6 if quick else 16)
    seeds = 2 if quick else 3
    grid = GRID[::2] if quick else GRID
    full = min(len(train), 2048)
    rows = []
    for g in GROUPS:
        reading = sense_momentum(wl, train, ProbeConfig(full, sense_lr, 0.0, g), sense_steps, replicas, seed=0)
        losses = {mu: float(np.mean([loss_after(wl, train, ProbeConfig(batch, lr, mu, g), iters, s)
                                     for s in range(seeds)])) for mu in grid}
        best = min(losses, key=losses.get)
        rows.append({"workload": name, "groups": g, "implicit_momentum_measured": reading.implicit,
                     "implicit_momentum_theory": statmodel.implicit_momentum(g), "fit_r2": reading.r2,
                     "best_explicit_momentum": best, "rule_explicit_momentum": 0.9 - statmodel.implicit_momentum(g),
                     "loss_by_momentum": {str(k): v for k, v in losses.items()}})
        print_rows(name, rows[-1:], ["groups", "implicit_momentum_measured", "implicit_momentum_theory",
                                     "fit_r2", "best_explicit_momentum"])
    return rows


def plot(rows: list[dict], path) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(10, 4.2))
    gs = np.array(GROUPS)
    axes[0].plot(gs, 1 - 1 / gs, "k--", label="theory 1 − 1/g")
    axes[1].plot(gs, 0.9 - (1 - 1 / gs), "k--", label="rule 0.9 − (1 − 1/g)")
    for i, name in enumerate(dict.fromkeys(r["workload"] for r in rows)):
        mine = [r for r in rows if r["workload"] == name]
        axes[0].plot([r["groups"] for r in mine], [r["implicit_momentum_measured"] for r in mine], "o-",
                     color=f"C{i}", label=f"measured, {name}")
        axes[1].plot([r["groups"] for r in mine], [r["best_explicit_momentum"] for r in mine], "s-",
                     color=f"C{i}", label=f"best on grid, {name}")
    axes[0].set(xscale="log", xlabel="asynchronous groups g", ylabel="implicit momentum",
                title="asynchrony begets momentum")
    axes[1].set(xscale="log", xlabel="asynchronous groups g", ylabel="explicit momentum",
                title="best explicit momentum falls as g grows")
    for ax in axes:
        ax.set_xticks(GROUPS, [str(g) for g in GROUPS])
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer replicas, seeds and grid points")
    args = parser.parse_args()
    torch.set_num_threads(1)
    rows = [r for name in SETTINGS for r in bench(name, args.quick)]
    path = write_results("momentum", {"quick": args.quick, "grid": list(GRID[::2] if args.quick else GRID),
                                      "settings": SETTINGS, "rows": rows})
    plot(rows, RESULTS / "momentum.png")
    print(f"wrote {path} and {RESULTS / 'momentum.png'}")


if __name__ == "__main__":
    main()
