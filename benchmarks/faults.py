"""Faults on purpose: how long a run takes to recover, and how much work it loses.

Each scenario kills one process of a real run (the OMNITUNE_FAULT_KILL hook) and lets
torchelastic restart the job from its last checkpoint. From the run dir:
- recovery: the killed rank's log stamps the kill; restarts.jsonl stamps the coordinator's
  restart; the gap is detection, stopping the survivors, re-rendezvous, process start-up
  (importing torch) and loading the checkpoint.
- work lost: the iteration killed at less the iteration the restart went on from, and that in
  training seconds (the first attempt's clock at the kill, from its last evaluations' pace, less
  the checkpoint's), against the checkpoint interval.

A stuck peer (OMNITUNE_FAULT_HANG: alive, silent) is not restarted: the others give up after
--timeout-s and the job stops; "stops after" is from the hang to the command's error.

    python -m benchmarks.faults [--quick]      # about 2 minutes on 2 cores
"""

from __future__ import annotations

import json
import re
import tempfile
import time
from pathlib import Path

from benchmarks.common import print_rows, write_results
from omnitune.runtime import job
from omnitune.runtime.context import FAULT_MARK
from tests.conftest import make_plan
from tests.test_multinode import run_nodes, two_free_ports

SCENARIOS = [
    # name, protocol, groups, lr, kill "rank:iteration", checkpoint interval (s), target, two nodes
    ("worker killed (sync, 2 workers)", "sync", [["cpu0", "cpu1"]], 0.02, "1:120", 0.1, 0.95, False),
    ("worker killed, 1 s checkpoints", "sync", [["cpu0", "cpu1"]], 0.005, "1:500", 1.0, 0.97, False),
    ("server killed (groups, g=2)", "groups", [["cpu0"], ["cpu1"]], 0.02, "0:150", 0.1, 0.95, False),
    ("worker on node 1 killed (2 nodes)", "sync", [["cpu0", "cpu1"]], 0.02, "1:120", 0.1, 0.95, True),
]


STUCK = [
    # name, protocol, groups, hang "rank:iteration", --timeout-s
    ("worker stuck (sync)", "sync", [["cpu0", "cpu1"]], "1:100", 5.0),
    ("worker stuck (groups, g=2)", "groups", [["cpu0"], ["cpu1"]], "2:100", 5.0),
    ("server stuck (groups, g=2)", "groups", [["cpu0"], ["cpu1"]], "0:100", 5.0),
]


def train_s_at(run_dir: Path, iteration: int) -> float:
    """The first attempt's training clock at `iteration`, from its last two evaluations' pace."""
    lines = [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines()]
    first = [(m["iteration"], m["train_s"]) for m in lines if m["attempt"] == 0]
    (i1, t1), (i2, t2) = ([(0, 0.0)] + first)[-2:]
    return t2 + (iteration - i2) * (t2 - t1) / (i2 - i1)


def kill_time(run_dirs: list[Path]) -> float:
    for d in run_dirs:
        for log in d.glob("logs/**/stderr.log"):
            found = re.search(rf"{FAULT_MARK} .* time ([0-9.]+)", log.read_text())
            if found:
                return float(found.group(1))
    raise RuntimeError(f"no fault mark in the logs of {run_dirs}")


def scenario(tmp: Path, name, protocol, groups, lr, kill, every_s, target, two_nodes, environ) -> dict:
    extra = {"nodes": {"cpu1": 1}, "rendezvous": f"127.0.0.1:{two_free_ports()}"} if two_nodes else {}
    plan = make_plan(tmp / "plan.json", protocol, groups, lr=lr, momentum=0.4 if protocol == "groups" else 0.9,
                     target=target, **extra)
    started = time.perf_counter()
    if two_nodes:
        results = run_nodes(tmp, plan, ["--checkpoint-every-s", str(every_s), "--max-restarts", "1"],
                            env={"OMNITUNE_FAULT_KILL": kill})
        if any(r.returncode for r in results):
            raise RuntimeError(results[0].stdout[-2000:] + results[1].stdout[-2000:])
        run_dirs = [tmp / "node0", tmp / "node1"]
    else:
        environ["OMNITUNE_FAULT_KILL"] = kill
        try:
            job.run(str(plan), str(tmp / "run"), max_time_s=60, checkpoint_every_s=every_s, max_restarts=1)
        finally:
            del environ["OMNITUNE_FAULT_KILL"]
        run_dirs = [tmp / "run"]
    wall = time.perf_counter() - started
    summary = json.loads((run_dirs[0] / "summary.json").read_text())
    restart = json.loads((run_dirs[0] / "restarts.jsonl").read_text().splitlines()[0])
    killed_at = int(kill.split(":")[1])
    lost = killed_at - restart["iteration"]
    return {"scenario": name, "checkpoint_every_s": every_s, "killed_at_iteration": killed_at,
            "resumed_from_iteration": restart["iteration"], "iterations_lost": lost,
            "train_s_lost": train_s_at(run_dirs[0], killed_at) - restart["train_s"],
            "recovery_s": restart["time"] - kill_time(run_dirs), "restarts": summary["restarts"],
            "reached_target": summary["reached_target"], "time_to_target_s": summary["time_to_target_s"],
            "command_wall_s": wall}


def stuck(tmp: Path, name, protocol, groups, hang, timeout_s, environ) -> dict:
    from omnitune.core.errors import UserError

    plan = make_plan(tmp / "plan.json", protocol, groups, lr=0.02, momentum=0.4, target=0.999)
    environ["OMNITUNE_FAULT_HANG"] = hang
    try:
        job.run(str(plan), str(tmp / "run"), max_time_s=60, timeout_s=timeout_s)
        message = "(the run ended without an error)"
    except UserError as e:
        message = str(e)
    finally:
        del environ["OMNITUNE_FAULT_HANG"]
    return {"scenario": name, "timeout_s": timeout_s, "stops_after_s": time.time() - kill_time([tmp / "run"]),
            "message": message[:90]}


def main() -> None:
    import argparse
    import os

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="one kill and one stuck peer")
    quick = parser.parse_args().quick
    rows = []
    for spec in SCENARIOS[:1] if quick else SCENARIOS:
        with tempfile.TemporaryDirectory(prefix="omnitune-faults-") as tmp:
            rows.append(scenario(Path(tmp), *spec, os.environ))
        print(rows[-1])
    columns = ["scenario", "checkpoint_every_s", "killed_at_iteration", "resumed_from_iteration", "iterations_lost",
               "train_s_lost", "recovery_s", "restarts", "reached_target", "time_to_target_s", "command_wall_s"]
    print_rows("faults: recovery and work lost", rows, columns)
    stuck_rows = []
    for spec in STUCK[:1] if quick else STUCK:
        with tempfile.TemporaryDirectory(prefix="omnitune-faults-") as tmp:
            stuck_rows.append(stuck(Path(tmp), *spec, os.environ))
    print_rows("stuck peers: the job stops", stuck_rows, ["scenario", "timeout_s", "stops_after_s", "message"])
    path = write_results("faults", {"quick": quick, "rows": rows, "stuck": stuck_rows})
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
