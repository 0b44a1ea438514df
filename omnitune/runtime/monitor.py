"""The coordinator's view of a run: when to evaluate, what to log, when to stop."""

from __future__ import annotations

import math
import statistics
import time
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path

import torch

from omnitune.core.target import Target, of
from omnitune.core.files import append_jsonl
from omnitune.efficiency.statmodel import EVIDENCE
from omnitune.runtime.flat import get_params, num_params
from omnitune.runtime.workload import Workload, evaluate


# A run is stalled while its median score over the latest STALL_SHARE of its training time is no
# higher than over the STALL_SHARE before it, once it has been evaluated STALL_EVALS times: waiting
# on would most likely not cross a target it is short of, and a lower rate (re-tuning) or a stop
# (--stop-on-stall) is the answer. Medians of windows, not the age of the best reading: a curve that
# climbs slowly through noise goes seconds without a new best, and would read stalled while it
# climbs (docs/decisions.md, monitor.STALL_SHARE and monitor.STALL_EVALS).
STALL_SHARE = 0.2
STALL_EVALS = 5
# A re-tuned run is off pace where, at the pace its median score rose from the first half of its
# training to the latest half, it would reach its target only past its time limit, or never (no
# rise). Linear, so optimistic for a curve that levels off. It pauses the run although the pause
# does not fit its budget, once that latest half lasted as long as the pause costs
# (job.run_with_replans). It holds through most of a run that creeps far short of its target,
# and rarely or never in runs that reach theirs (docs/decisions.md, monitor.off_pace). Each half's median
# needs PACE_READINGS readings, so that no single one moves it: a segment after a pause begins
# with its first half all but empty, and one reading there could pause the run again and lower a
# rate that is climbing (docs/decisions.md, monitor.PACE_READINGS).
PACE_READINGS = 3
# A run has diverged when its training loss is not finite, or when its moving average (each
# minibatch weighing DIVERGE_EMA) is above DIVERGE_FACTOR times the lowest that average has been
# since its first DIVERGE_WARMUP minibatches: a rate too high for where the run now is. The
# average, not the mean between two evaluations: with evaluations every few minibatches, that
# mean's lowest is a lucky draw, and twice it is noise, so noise reads as divergence again and
# again (docs/decisions.md, monitor.DIVERGE_FACTOR, monitor.DIVERGE_EMA and monitor.DIVERGE_WARMUP).
# Re-tuning steps in at once, from the best score's checkpoint, kept at most every BEST_EVERY_S of
# wall time (and 20 times what the last one took to write).
DIVERGE_FACTOR = 2.0
DIVERGE_EMA = 0.02
DIVERGE_WARMUP = 100
BEST_EVERY_S = 2.0
# A job with `min_iters` (the profile's calibration jobs) runs past its time limit until it has
# timed that many iterations after its first check, up to STRETCH times the limit.
STRETCH = 4.0
# Training losses recorded as tensors are read back this many at a time, and before each
# evaluation: a read waits for the device's queue, and reading each step's slows a small model's
# step on a GPU (docs/decisions.md, monitor.UNREAD_LOSSES).
UNREAD_LOSSES = 64


@dataclass
class Monitor:
    """Evaluates the test set at intervals and decides when the run ends.

    Evaluation pauses training on the coordinator, so the interval grows to at least ten
    times the last evaluation's duration: evaluation stays under ~10% of the wall time. With
    `eval_every_iters` it evaluates every that many iterations instead, to read iterations to
    target as finely as a probe does (benchmarks).
    Time to target is training time: wall time less the time spent evaluating before the
    evaluation that found the target (the prediction does not include evaluation either).
    """

    workload: Workload
    test: torch.utils.data.Dataset
    target: Target                            # its score is compared with each reading's (core/target.py)
    max_time_s: float
    eval_every_s: float
    metrics_path: Path
    start: float = field(default_factory=time.perf_counter)
    next_eval: float = 0.0
    time_to_target_s: float | None = None
    wall_to_target_s: float | None = None
    final_accuracy: float = 0.0
    final_loss: float | None = None
    evaluations: int = 0
    evaluated_at: int = -1                    # the iteration of the last evaluation
    eval_s: float = 0.0              # wall time spent evaluating
    losses: list = field(default_factory=list)
    unread: list = field(default_factory=list)   # recorded, not yet read (record_loss)
    checkpoint_every_s: float = float("inf")
    saver: object = None                      # saver(iteration, train_s) writes a checkpoint
    next_checkpoint: float = 0.0
    checkpoints: int = 0
    attempt: int = 0                          # which start of the job (0, then 1 after a restart)
    eval_every_iters: int = 0                 # > 0: evaluate every this many iterations, not by time
    max_iters: int = 0                        # > 0: stop at this many iterations
    min_iters: int = 0                        # > 0: the time limit waits for this many timed iterations (STRETCH)
    record: int = 0                           # keep the model's weights after each of the first this many checks
    trajectory: list = field(default_factory=list)
    warm: tuple[int, float] | None = None     # (iteration, training seconds) at the first check
    stop: tuple[int, float] | None = None     # and at the check that ended the run
    scores: deque = field(default_factory=deque)   # (training time, score) of the evaluations `rising` reads
    best_score: float = float("-inf")
    best_at_s: float = 0.0                    # training time of the best score so far
    stalled: bool = False                     # stalled now (STALL_SHARE)
    stalled_at_s: float | None = None         # training time of the first stall
    stall_stop_from_s: float = float("inf")   # a stall at or after this training time ends the run
    pace_wait_s: float = float("inf")         # being off pace ends it once the latest half lasted this long
    limit_s: float = float("inf")             # the whole run's time limit, which its pace is judged by
    off_pace: bool = False                    # off pace now (`off_pace`; only where pace_wait_s is finite)
    loss_average: float = float("nan")        # the training loss's moving average (DIVERGE_EMA)
    lowest_average: float = float("inf")      # its lowest, past DIVERGE_WARMUP minibatches
    minibatches: int = 0
    diverged: bool = False                    # diverged now (DIVERGE_FACTOR)
    diverged_at_s: float | None = None        # training time of the first divergence
    diverge_stop: bool = False                # a divergence ends the run (re-tuning steps in)
    best_saver: object = None                 # best_saver(iteration, train_s) keeps the best score's checkpoint
    next_best_save: float = 0.0

    def __post_init__(self):
        self.target = of(self.target)            # a plain number: an accuracy

    def elapsed(self) -> float:
        return time.perf_counter() - self.start

    def record_loss(self, loss: float | torch.Tensor) -> None:
        """A minibatch's training loss; a tensor (a GPU's) is read later, with others, so that the
        step need not wait for the device (`read_losses`)."""
        self.unread.append(loss)
        if len(self.unread) >= UNREAD_LOSSES:
            self.read_losses()

    def read_losses(self) -> None:
        """Read the recorded losses back at once, and fold them into the moving average."""
        if not self.unread:
            return
        tensors = [x for x in self.unread if isinstance(x, torch.Tensor)]
        read = iter(torch.stack(tensors).tolist() if tensors else ())
        values = [next(read) if isinstance(x, torch.Tensor) else float(x) for x in self.unread]
        self.unread.clear()
        for loss in values:
            self.losses.append(loss)
            first = self.minibatches == 0 or not math.isfinite(self.loss_average)
            self.loss_average = loss if first else (1 - DIVERGE_EMA) * self.loss_average + DIVERGE_EMA * loss
            self.minibatches += 1
            if self.minibatches >= DIVERGE_WARMUP and math.isfinite(self.loss_average):
                self.lowest_average = min(self.lowest_average, self.loss_average)

    def due(self, iteration: int) -> bool:
        """Whether `check` at this iteration evaluates or checkpoints the model."""
        return self.eval_due(iteration) or (self.saver is not None and self.elapsed() >= self.next_checkpoint)

    def eval_due(self, iteration: int) -> bool:
        if self.eval_every_iters:
            return iteration % self.eval_every_iters == 0
        return self.elapsed() >= self.next_eval

    def check(self, model: torch.nn.Module, iteration: int, extra: dict | None = None) -> bool:
        """Evaluate if due; return True when the run should stop (target reached, out of time or
        of iterations)."""
        if self.warm is None:
            settle(model)
            self.warm = (iteration, self.elapsed() - self.eval_s)
        if len(self.trajectory) < self.record:
            self.trajectory.append(get_params(model, torch.empty(num_params(model))).cpu())
        now = self.elapsed()
        if self.saver is not None and now >= self.next_checkpoint:
            if self.next_checkpoint > 0:
                self.saver(iteration, now - self.eval_s)
                self.checkpoints += 1
            self.next_checkpoint = now + self.checkpoint_every_s
        if self.eval_due(iteration):
            self.evaluate(model, iteration, extra)
            self.next_eval = self.elapsed() + max(self.eval_every_s, 10 * (self.elapsed() - now))
        done = (self.time_to_target_s is not None or self.out_of_time(iteration)
                or 0 < self.max_iters <= iteration
                or self.progress_ends(self.elapsed() - self.eval_s)
                or self.diverged and self.diverge_stop)
        if done and self.stop is None:
            settle(model)
            self.stop = (iteration, self.elapsed() - self.eval_s)
        return done

    def progress_ends(self, train_s: float) -> bool:
        """Whether the run's progress ends it at `train_s`: a stall past `stall_stop_from_s`, or
        being off pace once the latest half of the training lasted `pace_wait_s`. Where that wait
        is a pause's cost (a re-tuned run's), neither ends it once a pause would leave less of the
        time limit after it than it costs (`pause_pays`)."""
        return ((self.stalled and train_s >= self.stall_stop_from_s
                 or self.off_pace and train_s / 2 >= self.pace_wait_s)
                and pause_pays(train_s, self.pace_wait_s, self.limit_s))

    def out_of_time(self, iteration: int) -> bool:
        """Past the time limit, and, with `min_iters`, past that many iterations since the first
        check or past STRETCH times the limit."""
        now = self.elapsed()
        if now < self.max_time_s:
            return False
        return iteration - self.warm[0] >= self.min_iters or now >= STRETCH * self.max_time_s

    def note_score(self, score: float, train_s: float) -> bool:
        """Track the best score, whether the run has stalled (STALL_SHARE) and whether it has
        diverged (DIVERGE_FACTOR); return whether `score` is a new best."""
        better = score > self.best_score
        if better:
            self.best_score, self.best_at_s = score, train_s
        self.scores.append((train_s, score))
        keep = 0.0 if math.isfinite(self.pace_wait_s) else (1 - 2 * STALL_SHARE) * train_s   # older: in no window
        while len(self.scores) > 1 and self.scores[0][0] <= keep:
            self.scores.popleft()
        self.stalled = self.evaluations >= STALL_EVALS and not rising(self.scores, train_s)
        if self.stalled and self.stalled_at_s is None:
            self.stalled_at_s = train_s
        self.off_pace = (math.isfinite(self.pace_wait_s) and self.evaluations >= STALL_EVALS
                         and off_pace(self.scores, train_s, self.target.score, self.limit_s))
        if self.minibatches:
            self.diverged = (not math.isfinite(self.loss_average)
                             or self.loss_average > DIVERGE_FACTOR * self.lowest_average)
            if self.diverged and self.diverged_at_s is None:
                self.diverged_at_s = train_s
        return better

    def keep_best(self, iteration: int, train_s: float) -> None:
        """Write the best score's checkpoint, unless one was written less than BEST_EVERY_S ago."""
        began = self.elapsed()
        if self.best_saver is None or began < self.next_best_save:
            return
        self.best_saver(iteration, train_s)
        self.next_best_save = self.elapsed() + max(BEST_EVERY_S, 20 * (self.elapsed() - began))

    def evaluate(self, model: torch.nn.Module, iteration: int, extra: dict | None = None) -> None:
        settle(model)
        wall = self.elapsed()
        device = next(model.parameters()).device
        self.read_losses()
        test_loss, accuracy = evaluate(self.workload, model, self.test, device)
        train_loss = sum(self.losses) / len(self.losses) if self.losses else None
        self.losses.clear()
        self.final_accuracy, self.final_loss = accuracy, finite(test_loss)
        score = self.target.score_of(test_loss, accuracy)
        self.evaluations += 1
        self.evaluated_at = iteration
        if score >= self.target.score and self.time_to_target_s is None:
            self.time_to_target_s, self.wall_to_target_s = wall - self.eval_s, wall
        if self.note_score(score, wall - self.eval_s) and not self.diverged:
            self.keep_best(iteration, wall - self.eval_s)
        line = {"wall_s": round(wall, 4), "train_s": round(wall - self.eval_s, 4), "attempt": self.attempt,
                "time": round(time.time(), 3), "iteration": iteration, "train_loss": finite(train_loss),
                "test_loss": finite(test_loss), "test_accuracy": accuracy,
                **({"stalled": True} if self.stalled else {}), **({"off_pace": True} if self.off_pace else {}),
                **({"diverged": True} if self.diverged else {}), **(extra or {})}
        append_jsonl(self.metrics_path, line)
        self.eval_s += self.elapsed() - wall


def sec_per_iter(monitor: Monitor, iterations: int, wall: float, since: tuple[int, float]) -> float:
    """Training seconds per iteration past the monitor's first check, which ends the warm-up step
    (a process's first step builds its kernels and takes longer than the next, and a short
    calibration job times only a few steps), from `since` (iteration, training seconds: where
    this start of the job began) if nothing followed it; up to `wall`, or up to the stopping
    check when the run's model is the one it judged (gossip's workers go on for three rounds
    past it, so that all agree on a last one; counted, those rounds would weigh on the judged
    iterations, most of all in a short calibration job)."""
    first = monitor.warm if monitor.warm and iterations > monitor.warm[0] else since
    end = monitor.stop[1] if monitor.stop and monitor.stop[0] == iterations else wall - monitor.eval_s
    return (end - first[1]) / max(iterations - first[0], 1)


def pause_pays(train_s: float, cost_s: float, limit_s: float) -> bool:
    """Whether a pause of `cost_s` at `train_s` leaves at least as much of the time limit after
    it as it costs (an infinite cost: no pause is weighed, as for --stop-on-stall): a slow
    model's pause can cost a large part of the limit, and one taken too late ends the run inside
    it, with nothing trained on what it chose (docs/decisions.md, monitor.pause_pays)."""
    return not math.isfinite(cost_s) or train_s + 2 * cost_s <= limit_s


def off_pace(scores, now: float, target: float, limit_s: float) -> bool:
    """Whether the run, at the pace its median score rose from the first half of its training
    (to `now`) to the latest half, reaches `target` only after `limit_s`, or never; False while
    either half holds fewer than PACE_READINGS readings, where the latest half's median is at
    the target, and while `limit_s` lies more than statmodel.EVIDENCE times `now` ahead: so far
    past its evidence, a pace is the early phase's, not the run's, and where pauses are cheap
    their short readings' bias walks the rate down (docs/decisions.md, monitor.off_pace)."""
    if EVIDENCE * now < limit_s:
        return False
    first = [(t, x) for t, x in scores if t <= now / 2]
    latest = [(t, x) for t, x in scores if t > now / 2]
    if len(first) < PACE_READINGS or len(latest) < PACE_READINGS:
        return False
    (t1, m1), (t2, m2) = [(statistics.median(t for t, _ in half), statistics.median(x for _, x in half))
                          for half in (first, latest)]
    if m2 >= target:
        return False
    pace = (m2 - m1) / (t2 - t1) if t2 > t1 else 0.0
    return pace <= 0 or now + (target - m2) / pace > limit_s


def settle(model: torch.nn.Module) -> None:
    """Wait for the steps queued on the model's GPU: a clock read after them counts their time
    (a GPU's loop does not wait for its steps, `Context.compute_grads`)."""
    param = next(model.parameters(), None) if model is not None else None
    if param is not None and param.is_cuda:
        torch.cuda.synchronize(param.device)


def finite(x: float | None) -> float | None:
    """A loss as the JSON files hold it: None where it is not finite (a diverged run's)."""
    return x if x is not None and math.isfinite(x) else None


def rising(scores, now: float) -> bool:
    """Whether the median score over the latest STALL_SHARE of the training (to `now`) is above
    the median over the STALL_SHARE before it (medians: one lucky reading moves neither); True
    while either window holds no reading."""
    recent = [x for t, x in scores if t > (1 - STALL_SHARE) * now]
    before = [x for t, x in scores if (1 - 2 * STALL_SHARE) * now < t <= (1 - STALL_SHARE) * now]
    if not recent or not before:
        return True
    return statistics.median(recent) > statistics.median(before)
