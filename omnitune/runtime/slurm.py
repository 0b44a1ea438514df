"""The commands that start a plan's nodes: one `omnitune run --node-rank I` a node, typed by hand
(`omnitune run --print-commands`) or run by Slurm (`--format slurm`: an sbatch script)."""

from __future__ import annotations

import shlex
from pathlib import Path

from omnitune.core import plan as plan_mod
from omnitune.core.cluster import is_loopback
import omnitune.runtime.checkpoint as checkpoint
from omnitune.runtime.topology import nodes, roles


def node_commands(plan_path: str, options: list[str]) -> list[str]:
    """The `omnitune run` command of each node of the plan, each after a comment saying what runs there."""
    spec = plan_mod.load(plan_path).spec
    everyone = roles(spec)
    lines = []
    for n in nodes(spec):
        kinds = [everyone[r].device.id if everyone[r].device else "parameter server" for r in n.ranks]
        note = " (the coordinator: metrics, checkpoint and summary are written here)" if 0 in n.ranks else ""
        lines.append(f"# node {n.index} on {n.host}: {', '.join(kinds)}{note}")
        lines.append(shlex.join(["omnitune", "run", plan_path, "--node-rank", str(n.index), *options]))
    return lines


def slurm_script(plan_path: str, options: list[str], out_dir: str) -> str:
    """An sbatch script of the plan: one Slurm task per node, each running its node's command with
    `--node-rank` from `$SLURM_NODEID`, and `--resume` once Slurm requeued the job and the
    coordinator's checkpoint is there. The plan fixes the hosts and the rendezvous, so the
    script asks Slurm for the plan's hosts (unless they are loopback) and says so."""

    spec = plan_mod.load(plan_path).spec
    everyone = nodes(spec)
    gpus = max((r.device.cuda_index + 1 for r in roles(spec) if r.device and r.device.kind == "cuda"), default=0)
    hosts = list(dict.fromkeys(n.host for n in everyone))
    lines = ["#!/bin/bash",
             f"#SBATCH --job-name=omnitune-{Path(plan_path).stem}",
             f"#SBATCH --nodes={len(everyone)}",
             "#SBATCH --ntasks-per-node=1",
             "#SBATCH --exclusive",
             "#SBATCH --requeue",
             "#SBATCH --open-mode=append"]
    lines += [f"#SBATCH --gres=gpu:{gpus}"] if gpus else []
    loopback = any(is_loopback(h) for h in hosts)
    lines += [] if loopback else [f"#SBATCH --nodelist={','.join(hosts)}"]
    lines += ["# add your site's options here: #SBATCH --partition=... --account=... --time=...",
              "#",
              f"# `omnitune run {plan_path}` (written by --print-commands --format slurm). The plan fixes each",
              f"# node's host and the rendezvous ({spec.rendezvous}), so Slurm's node I ($SLURM_NODEID)",
              "# must be the plan's node I:"]
    lines += ["#   " + line[2:] for line in node_commands(plan_path, options) if line.startswith("# ")]
    if loopback:
        lines += ["# Loopback hosts: these nodes meet only on one machine, not on separate Slurm nodes.",
                  "# For a cluster, plan from a cluster spec that names the nodes' addresses."]
    else:
        lines += ["# --nodelist takes Slurm's node names: where they differ from these hosts, write them."]
    if "--checkpoint-every-s" not in options:
        lines += ["# A requeued job resumes from the coordinator's checkpoint, but this run writes none",
                  "# (no --checkpoint-every-s): requeued, it starts over."]
    lines += ["# --exclusive: the plan gives its workers each node's threads and GPUs.",
              "# Each node needs omnitune on PATH, the plan, the workload and its data; relative paths",
              "# start from the folder sbatch ran in.",
              ""]
    indices = [n.index for n in everyone]
    rank = '"$SLURM_NODEID"' if indices == list(range(len(everyone))) else \
        '"${ranks[$SLURM_NODEID]}"'
    command = " ".join([shlex.join(["omnitune", "run", plan_path, "--node-rank"]), rank, *map(shlex.quote, options)])
    task = ([f"ranks=({' '.join(map(str, indices))})"] if rank != '"$SLURM_NODEID"' else []) + [
        "resume=",
        'if [ "${SLURM_RESTART_COUNT:-0}" -gt 0 ] && '
        f"[ -f {shlex.quote(str(Path(out_dir) / checkpoint.FILE))} ]; then resume=--resume; fi",
        f"exec {command} $resume"]
    lines.append(f"srun --ntasks={len(everyone)} --ntasks-per-node=1 bash -c " +
                 shlex.quote("".join("\n  " + t for t in task)))
    return "\n".join(lines)
