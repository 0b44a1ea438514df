"""Choose the configuration with the least predicted time to target: Omnivore's optimizer.

time_to_target = sec_per_iter (hardware efficiency, perfmodel) × iters_to_target (statistical
efficiency, probes). The parts, in the order a search uses them:

- space.py: what is searched (Space, Setup, Config, Scored);
- setups.py, hardware.py: every setup the profile offers, scored for hardware efficiency;
- timed.py: real jobs time the setups no calibration job measured, where they could lead;
- budget.py, phases.py: how much planning the job deserves, and the phases a search goes
  through (scouting, then ranking by time or by loss);
- probes.py, study.py: the prober's contract, and probes run as optuna trials with pruning;
- trials.py, ranking.py: what was considered or skipped, and how probes compare;
- order.py: Omnivore's cold start and ladders;
- final.py: the leaders train on when probes rank by loss (short-horizon bias);
- omnivore.py: all of it, for one profile (`search`); build.py: the plan file.

Probing is injected (`Prober`), so this package starts no process and imports no torch; so is
timing (`Timer`).
"""

from omnitune.planning.build import build_plan, candidate_rows, predict
from omnitune.planning.hardware import Hardware, StepTime, measured_shape, profiled, spec_batches, spec_of, spec_step_s
from omnitune.planning.omnivore import Search, search
from omnitune.planning.probes import HandsOn, Prober
from omnitune.planning.setups import enumerate_setups
from omnitune.planning.space import DEFAULT_BATCHES, MU_STAR, Config, Scored, Setup, Space
from omnitune.planning.timed import Timer

__all__ = ["Config", "DEFAULT_BATCHES", "HandsOn", "Hardware", "MU_STAR", "Prober", "Scored", "Search", "Setup",
           "Space", "Timer", "build_plan", "candidate_rows", "enumerate_setups", "measured_shape", "predict",
           "profiled", "search", "spec_batches", "spec_of", "spec_step_s", "StepTime"]
