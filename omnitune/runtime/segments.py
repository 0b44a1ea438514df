"""A re-tuned run's processes, kept from one segment to the next.

Ending the job's processes at a pause and launching new ones after the re-tuning probes would be
most of a pause's cost, paid even when the pause changes nothing (docs/decisions.md, job.RESUME_S
and segments.Segments). So the processes wait at the end of a segment instead (in
`process.main`): the coordinator writes the segment's checkpoint and summary, marks the run dir
(`PAUSED`), and every process waits on the job's store for the next segment. The re-tuner
answers with that segment, which the same processes run, or with an empty answer that ends them.
A re-tuned spec that needs other processes (another node layout or backend: a protocol with a
parameter server, say) ends them and launches anew.

torchelastic's agent stays in the main thread, where it handles signals and stops the workers
on an interrupt, as in every other launch; the re-tuning loop runs in a thread of its own and asks
the main thread for each launch (`resident`). So the pauses' probes train in a second thread,
and the main thread's OpenMP helpers are let go first (`release_openmp_threads`).
"""

from __future__ import annotations

import ctypes
import dataclasses
import functools
import json
import os
import queue
import threading
import time
from pathlib import Path
from typing import Callable

from omnitune.core import plan as plan_mod
from omnitune.core.errors import UserError
from omnitune.core.files import atomic_write_bytes
from omnitune.runtime.context import JobArgs, backend
from omnitune.runtime.launch import Interrupted, coordinator, job_store
from omnitune.runtime.summary import RunSummary, load as load_summary
from omnitune.runtime.topology import nodes

PAUSED = "paused-{}"       # the coordinator's mark in the run dir: segment k of this launch is done
POLL_S = 0.02              # how often the re-tuner looks for that mark
OWNER_CHECK_S = 1.0        # how often a waiting process checks that the command that launched it lives
# What the next segment takes from the re-tuner: its spec comes from the plan at `plan_path`.
CHANGES = ("plan_path", "resume_from", "stop_at_s", "stall_stop_from_s", "pace_wait_s", "diverge_stop")


class Segments:
    """The re-tuner's side: `run(job)` runs one segment and returns its summary, on the processes
    of the last segment where they can run it, else on new ones. `close` ends the processes."""

    def __init__(self, launches: queue.Queue):
        self.launches = launches        # to the main thread: a job to launch (None: no more)
        self.ended: queue.Queue = queue.Queue()   # from it: each launch's end (None, or its error)
        self.live: JobArgs | None = None          # the live processes' latest job (None: none live)
        self.done = 0                   # segments the live processes have finished
        self.store = None               # a client of the live processes' store, once needed

    def run(self, job: JobArgs) -> RunSummary:
        self._check_ended()
        if self.live is not None and self.keeps(job):
            self._answer({name: getattr(job, name) for name in CHANGES})
            self.live = dataclasses.replace(job, owner_pid=self.live.owner_pid)
        else:
            self.close()
            for stale in Path(job.run_dir).glob(PAUSED.format("*")):
                stale.unlink()
            job = dataclasses.replace(job, owner_pid=os.getpid() if waits(job) else 0)
            self.live, self.done, self.store = job if waits(job) else None, 0, None
            self.launches.put(job)
        return self._finished(job)

    def keeps(self, job: JobArgs) -> bool:
        """Whether the live processes can run `job`: the same processes on the same nodes and
        backend, nothing changed but CHANGES and the spec, which is in its plan file (they read
        it from there)."""
        live = self.live
        rest = dataclasses.replace(job, spec=live.spec, owner_pid=live.owner_pid,
                                   **{name: getattr(live, name) for name in CHANGES})
        return (rest == live and nodes(job.spec) == nodes(live.spec) and backend(job.spec) == backend(live.spec)
                and bool(job.plan_path) and plan_mod.load(job.plan_path).spec == job.spec)

    def close(self) -> None:
        """End the live processes, if any, and wait for their launch to end."""
        self._check_ended()
        if self.live is None:
            return
        self._answer(None)
        self.live = None
        error = self.ended.get()
        if error is not None:
            raise error

    def _finished(self, job: JobArgs) -> RunSummary:
        """Wait for the segment's mark, or for the launch's end (processes that do not wait, or
        a launcher that does not keep them: the next segment launches anew)."""
        mark = Path(job.run_dir) / PAUSED.format(self.done)
        while not mark.is_file():
            try:
                error = self.ended.get(timeout=POLL_S)
            except queue.Empty:
                continue
            self.live = None
            if error is not None:
                raise error
            break
        else:
            mark.unlink()
            self.done += 1
        return load_summary(Path(job.run_dir) / "summary.json")

    def _check_ended(self) -> None:
        """A launch that ended while its processes waited (a crash, or a kill) cannot go on."""
        try:
            error = self.ended.get_nowait()
        except queue.Empty:
            return
        self.live = None
        if error is not None:
            raise error

    def _answer(self, changes: dict | None) -> None:
        """Hand the live processes their next segment (None: none, they end)."""
        if self.store is None:
            host = coordinator(nodes(self.live.spec)).host
            self.store = job_store(host, self.live.store_port, False, self.live.timeout_s)
        self.store.set(next_key(self.done - 1), json.dumps(changes).encode())


def waits(job: JobArgs) -> bool:
    """Whether the job's processes wait through its pauses: not where torchelastic may restart
    them (a restarted one would run the launch's first segment again, with a store of its own)."""
    return job.max_restarts == 0


def resident(body: Callable[[Callable[[JobArgs], RunSummary]], RunSummary],
             launch: Callable[[JobArgs], object]) -> RunSummary:
    """Run `body(run_segment)` in a thread while this (the main) thread launches the jobs it asks
    for with `launch` (job.run_job), one at a time. An interrupt stops the run at once."""
    launches: queue.Queue = queue.Queue()
    segments = Segments(launches)
    release_openmp_threads()            # this thread only waits on the agent from here on
    outcome: dict = {}

    def control() -> None:
        try:
            outcome["summary"] = body(segments.run)
        except BaseException as e:        # re-raised in the main thread
            outcome["error"] = e
        finally:
            try:
                segments.close()
            except BaseException as e:
                outcome.setdefault("error", e)
            launches.put(None)

    controller = threading.Thread(target=control, name="omnitune-retune", daemon=True)
    controller.start()
    while (job := launches.get()) is not None:
        try:
            launch(job)
            segments.ended.put(None)
        except Interrupted:
            raise
        except UserError as e:
            segments.ended.put(e)
    controller.join()
    if "error" in outcome:
        raise outcome["error"]
    return outcome["summary"]


# GNU OpenMP gives every thread that runs a parallel region a pool of helper threads of its own,
# and where its pools hold more threads than the machine has cores, an idle helper spins about a
# hundred times instead of 300,000 before it sleeps (GOMP_SPINCOUNT's throttled count), so each
# of the next thread's small kernels waits for its helpers to wake. A process that has trained in
# its main thread (a profile and a plan in one Python process) runs the pauses' probes in the
# re-tuning thread 1.6-3.4x slower on 2 cores (docs/decisions.md, segments.release_openmp_threads).
# OMP_PAUSE_HARD frees the calling thread's pool; its next parallel region builds a new one.
OMP_PAUSE_HARD = 2


def release_openmp_threads() -> None:
    """Free the calling thread's OpenMP helper threads, where torch runs on GNU OpenMP."""
    gomp = _libgomp()
    if gomp is not None:
        gomp.omp_pause_resource_all(OMP_PAUSE_HARD)


@functools.cache
def _libgomp():
    """The libgomp this process has loaded (torch's wheels bring their own), or None."""
    try:
        with open(f"/proc/{os.getpid()}/maps") as maps:
            path = next((line.split()[-1] for line in maps if "/libgomp" in line), None)
        lib = ctypes.CDLL(path) if path else None
    except OSError:
        return None
    return lib if lib is not None and hasattr(lib, "omp_pause_resource_all") else None


# In each process:

def next_key(segment: int) -> str:
    return f"omnitune/next/{segment}"


def mark_paused(job: JobArgs, segment: int) -> None:
    """The coordinator's mark that this segment's checkpoint and summary are written."""
    atomic_write_bytes(Path(job.run_dir) / PAUSED.format(segment), b"")


def next_segment(store, job: JobArgs, segment: int) -> JobArgs | None:
    """Wait for the re-tuner's answer after `segment`: the next segment's job, or None (end).
    A process whose launching command has gone exits at once (torchelastic's processes otherwise
    wait for their agent to collect their result). It asks every POLL_S: a store's wait that
    times out logs a warning each time."""
    key, checked = next_key(segment), time.monotonic()
    while not store.check([key]):
        time.sleep(POLL_S)
        if time.monotonic() - checked > OWNER_CHECK_S:
            if not alive(job.owner_pid):      # orphaned: no one will read a result, or reap it
                os._exit(1)
            checked = time.monotonic()
    changes = json.loads(store.get(key))
    if changes is None:
        return None
    spec = plan_mod.load(changes["plan_path"]).spec
    return dataclasses.replace(job, spec=spec, **changes)


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:          # alive, another user's
        pass
    return True

