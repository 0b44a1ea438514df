"""Short real jobs that time a configuration before it may win (`omnitune plan`'s finalists).

A configuration whose seconds per iteration come only from a model (the simulator, or the
analytic model where no calibration job ran its shape) may be far off: a mixed setup of a GPU
beside CPU workers can run several times slower than modelled. So the planner times
such a finalist for about TIMING_S with the runtime itself and ranks it by what it measured.
"""

from __future__ import annotations

import tempfile
from dataclasses import replace
from typing import Callable

from omnitune.core.cluster import is_loopback
from omnitune.core.errors import UserError
from omnitune.core.profile import HostFacts, Profile
from omnitune.core.runspec import RunSpec
from omnitune.runtime import job
from omnitune.runtime.host import host_facts

TIMING_S = 1.0          # a timing job trains this long, after its processes start
TIMING_TIMEOUT_S = 60.0

# (the finalist's run spec) -> its measured seconds per iteration, or None when the job failed
Timer = Callable[[RunSpec], "float | None"]


def here(profile: Profile) -> str:
    """Why configurations of this profile cannot be timed on this machine ("" when they can): its
    cluster spans other hosts, or the profile was taken on a machine with other cores or GPUs
    (host names say little: machines of one kind share theirs)."""
    if not all(is_loopback(d.host) for d in profile.cluster.devices):
        return "the cluster spans other hosts"
    then, now = profile.host, host_facts()
    if (then.cpu_count, tuple(then.cuda_devices)) != (now.cpu_count, tuple(now.cuda_devices)):
        return f"the profile was taken on {described(then)}, this is {described(now)}"
    return ""


def described(h: HostFacts) -> str:
    gpus = ", ".join(h.cuda_devices) or "no GPU"
    return f"{h.hostname!r} with {h.cpu_count} cores and {gpus}"


def time_spec(spec: RunSpec, seconds: float = TIMING_S) -> float | None:
    """Seconds per iteration of a real job of `spec`, from scratch, for `seconds` of training
    with no evaluation in between; None when the job fails (its logs are then in the message of
    the UserError it raised, which the planner reports)."""
    spec = replace(spec, target_accuracy=None, target_loss=None)
    with tempfile.TemporaryDirectory(prefix="omnitune-timing-") as tmp:
        try:
            summary = job.run_spec(spec, tmp, max_time_s=seconds, eval_every_s=1e9, timeout_s=TIMING_TIMEOUT_S,
                                   eval_every_iters=1 << 30)
        except UserError:
            return None
    return summary.measured_sec_per_iter if summary.iterations > 0 else None
