"""What the runtime's asynchrony does to momentum, measured on real runs.

    python -m benchmarks.momentum [--quick]

Omnivore's compute groups on this machine (g = 1, 2, 4 one-thread groups at one parameter
server; g = 1 is a group alone at the server), on logistic regression on digits (convex) and
on lenet-digits:
1. Implicit momentum, fitted to the server's real sequence of models. R replicate runs start
   from one set of weights with explicit momentum 0 and differ in their minibatch order; each
   records the server's weights after every update (`trajectory.pt`). Their mean path w_t (the
   expectation the theory speaks of) and full-batch gradients at it are fitted to the heavy-ball
   form  w_{t+1} - w_t = mu (w_t - w_{t-1}) - kappa (1 - mu) grad f(w_t),  kappa = lr
   (statmodel.fit_momentum). Nothing in the runtime draws staleness from a law: the fit can
   disagree with 1 - 1/g, and with the staleness the runs measured.
2. The best explicit momentum on a grid that includes 0 and a negative value: training loss after
   a fixed number of real updates, mean over seeds, against the rule 0.9 - (1 - 1/g).
3. The same for AdamW's beta1 (lenet-digits with an AdamW recipe: its own weights decay, beta2
   0.99): does the best beta1 fall with g as the best momentum does? Adam divides each step by
   the gradients' running scale, so the heavy-ball algebra behind 1 - 1/g does not carry over
   exactly; this measures it.
Writes benchmarks/results/momentum.json and momentum.png (momentum-quick.* with --quick).
"""

from __future__ import annotations

import argparse
import io
import math
import tempfile
from pathlib import Path

import numpy as np
import torch

from benchmarks.common import RESULTS, print_rows, write_results
from omnitune.core.cluster import load_cluster
from omnitune.core.protocols import Groups
from omnitune.core.runspec import RunSpec
from omnitune.efficiency import statmodel
from omnitune.runtime import workload
from omnitune.runtime import checkpoint, job
from omnitune.runtime.flat import get_grads, set_params
from omnitune.runtime.optim import HeavyBall

GROUPS = (1, 2, 4)
GRID = (-0.3, 0.0, 0.3, 0.6, 0.9)
# workload: (lr, batch per group, updates fitted, replicates, replicates with --quick, grid updates)
SETTINGS = {"logreg-digits": (0.5, 64, 60, 16, 8, 150), "lenet-digits": (0.1, 32, 40, 8, 4, 100)}
BETA1_GRID = (-0.3, 0.0, 0.3, 0.6, 0.8, 0.9)
# AdamW on lenet-digits: (lr, batch per group, updates, seeds, seeds with --quick)
ADAMW = (2e-3, 32, 100, 3, 1)
ADAMW_RECIPE = '{"optimizer": "adamw", "weight_decay": 0.01, "beta2": 0.99}'


def start_checkpoint(wl, path: Path) -> None:
    """Every replicate starts from these weights (seed 0) with no momentum yet."""
    torch.manual_seed(0)
    model = wl.build_model()
    opt = HeavyBall(model.parameters(), lr=0.1, momentum=0.0)
    data = io.BytesIO()
    torch.save({"model": model.state_dict(), "optimizer": opt.state_dict(), "iteration": 0, "train_s": 0.0}, data)
    path.mkdir(parents=True, exist_ok=True)
    (path / checkpoint.FILE).write_bytes(data.getvalue())


def real_run(name: str, devices, g: int, lr: float, mu: float, batch: int, updates: int, seed: int, out: Path):
    """`name`: a workload's name or file."""
    wl = workload.load(name)
    start_checkpoint(wl, out)
    spec = RunSpec(workload=name, data_dir=None, variant=Groups(g=g), devices=devices,
                   groups=tuple((d.id,) for d in devices), batch_size={d.id: batch for d in devices}, lr=lr,
                   momentum=mu, seed=seed)
    summary = job.run_spec(spec, str(out), max_time_s=120, eval_every_iters=updates, resume=True,
                           max_iters=updates, trajectory=updates)
    return summary, torch.load(out / "trajectory.pt", weights_only=True)


def full_batch_grads(wl, train, path: torch.Tensor) -> torch.Tensor:
    x, y = workload.collate(train, range(min(len(train), 2048)))
    model, out = wl.build_model(), torch.empty(path.shape)
    for t, w in enumerate(path):
        set_params(model, w)
        model.zero_grad(set_to_none=False)
        wl.loss_fn(model(x), y).backward()
        get_grads(model, out[t])
    return out


def final_loss(wl, train, out: Path) -> float:
    model = wl.build_model()
    model.load_state_dict(torch.load(out / checkpoint.FILE, weights_only=True)["model"])
    loss, _ = workload.evaluate(wl, model, train, torch.device("cpu"))
    return loss if math.isfinite(loss) else math.inf


def bench(name: str, quick: bool, work: Path) -> list[dict]:
    wl = workload.load(name)
    train, _ = wl.build_datasets(None, 0)
    lr, batch, updates, replicates, quick_replicates, grid_updates = SETTINGS[name]
    rows = []
    for g in GROUPS:
        spec = work / f"g{g}.yaml"
        spec.write_text(f"nodes:\n  - host: 127.0.0.1\n    cpu_workers: {[1] * g}\n")
        devices = load_cluster(spec).devices
        paths, staleness = [], np.zeros(8)
        for r in range(quick_replicates if quick else replicates):
            s, path = real_run(name, devices, g, lr, 0.0, batch, updates, 100 + r, work / f"{name}-g{g}-r{r}")
            paths.append(path[:updates])
            staleness[:min(8, len(s.staleness))] += s.staleness[:8]
        n = min(len(p) for p in paths)
        mean_path = torch.stack([p[:n] for p in paths]).mean(0).double()
        grads = full_batch_grads(wl, train, mean_path.float()).double()
        reading = statmodel.fit_momentum((mean_path[1:] - mean_path[:-1]).numpy(), grads[:-1].numpy(), lr, 0.0)
        losses = {}
        for mu in GRID[1::2] if quick else GRID:
            runs = []
            for s in range(1 if quick else 2):
                out = work / f"{name}-g{g}-mu{mu}-s{s}"
                real_run(name, devices, g, lr, mu, batch, grid_updates, s, out)
                runs.append(final_loss(wl, train, out))
            losses[mu] = float(np.mean(runs))
        best = min(losses, key=losses.get)
        rows.append({"workload": name, "groups": g, "replicates": len(paths), "updates_fitted": n,
                     "implicit_momentum_measured": reading.implicit, "implicit_momentum_theory": 1 - 1 / g,
                     "fit_r2": reading.r2, "measured_staleness": staleness.tolist(),
                     "mean_staleness": float((staleness * np.arange(8)).sum() / max(staleness.sum(), 1)),
                     "best_explicit_momentum": best, "rule_explicit_momentum": round(0.9 - (1 - 1 / g), 4),
                     "loss_by_momentum": {str(k): v for k, v in losses.items()}})
        print_rows(name, rows[-1:], ["groups", "mean_staleness", "implicit_momentum_measured",
                                     "implicit_momentum_theory", "fit_r2", "best_explicit_momentum"])
    return rows


def adamw_file(work: Path) -> str:
    """lenet-digits with an AdamW recipe, as a workload file of its own."""
    path = work / "lenet_digits_adamw.py"
    path.write_text(workload.resolve("lenet-digits").read_text() + f"\nRECIPE = {ADAMW_RECIPE}\n")
    return str(path)


def bench_beta1(quick: bool, work: Path) -> list[dict]:
    """The best beta1 of AdamW at each g: training loss after a fixed number of real updates,
    mean over seeds, on a grid that includes 0 and a negative value (seeds interleaved)."""
    name = adamw_file(work)
    wl = workload.load(name)
    train, _ = wl.build_datasets(None, 0)
    lr, batch, updates, seeds, quick_seeds = ADAMW
    rows = []
    for g in GROUPS:
        spec = work / f"g{g}.yaml"
        spec.write_text(f"nodes:\n  - host: 127.0.0.1\n    cpu_workers: {[1] * g}\n")
        devices = load_cluster(spec).devices
        runs: dict[float, list[float]] = {b: [] for b in BETA1_GRID}
        for s in range(quick_seeds if quick else seeds):
            for b1 in BETA1_GRID:
                out = work / f"adamw-g{g}-b{b1}-s{s}"
                real_run(name, devices, g, lr, b1, batch, updates, s, out)
                runs[b1].append(final_loss(wl, train, out))
        losses = {b: float(np.mean(v)) for b, v in runs.items()}
        best = min(losses, key=losses.get)
        rows.append({"workload": "lenet-digits (AdamW)", "groups": g, "lr": lr, "updates": updates,
                     "seeds": len(runs[best]), "best_beta1": best, "rule_beta1": round(0.9 - (1 - 1 / g), 4),
                     "loss_by_beta1": {str(k): v for k, v in losses.items()},
                     "losses_by_beta1": {str(k): v for k, v in runs.items()}})
        print_rows("AdamW beta1 under asynchrony", rows[-1:], ["groups", "best_beta1", "rule_beta1"])
    return rows


def plot(rows: list[dict], name: str) -> Path:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (a1, a2) = plt.subplots(1, 2, figsize=(10, 4))
    for i, name in enumerate(SETTINGS):
        mine = [r for r in rows if r["workload"] == name]
        g = [r["groups"] for r in mine]
        a1.plot(g, [r["implicit_momentum_measured"] for r in mine], "o-", color=f"C{i}", label=f"{name} (measured)")
        a2.plot(g, [r["best_explicit_momentum"] for r in mine], "o-", color=f"C{i}", label=name)
    gs = np.array(GROUPS, float)
    a1.plot(gs, 1 - 1 / gs, "k--", label="1 - 1/g")
    a2.plot(gs, 0.9 - (1 - 1 / gs), "k--", label="rule 0.9 - (1 - 1/g)")
    a1.set(xscale="log", xlabel="groups g (real runs)", ylabel="implicit momentum", title="implicit momentum")
    a2.set(xscale="log", xlabel="groups g (real runs)", ylabel="best explicit momentum", title="best explicit momentum")
    a1.legend(fontsize=8)
    a2.legend(fontsize=8)
    fig.tight_layout()
    path = RESULTS / f"{name}.png"
    fig.savefig(path, dpi=110)
    return path


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer replicates, seeds and grid points")
    parser.add_argument("--only", choices=["momentum", "beta1"], help="run one part (default: both)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        rows = [] if args.only == "beta1" else [r for name in SETTINGS for r in bench(name, args.quick, Path(tmp))]
        beta1 = [] if args.only == "momentum" else bench_beta1(args.quick, Path(tmp))
    if beta1:
        print_rows("AdamW's beta1 under asynchrony (real runs)", beta1,
                   ["groups", "seeds", "best_beta1", "rule_beta1"])
        path = write_results("momentum-beta1",
                             {"quick": args.quick, "grid": list(BETA1_GRID), "settings": list(ADAMW),
                              "recipe": ADAMW_RECIPE, "rows": beta1})
        print(f"wrote {path}")
    if not rows:
        return
    print_rows("asynchrony and momentum on the runtime (real runs)", rows,
               ["workload", "groups", "mean_staleness", "implicit_momentum_measured", "implicit_momentum_theory",
                "fit_r2", "best_explicit_momentum", "rule_explicit_momentum"])
    path = write_results("momentum", {"quick": args.quick, "grid": list(GRID),
                                      "settings": {k: list(v) for k, v in SETTINGS.items()}, "rows": rows})
    print(f"wrote {path} and {plot(rows, path.stem)}")


if __name__ == "__main__":
    main()
