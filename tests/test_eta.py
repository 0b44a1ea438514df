"""The live ETA (efficiency/eta.py) and how `omnitune run` shows and keeps it (cli/commands.py)."""

import json
import math

import pytest

from omnitune.cli import commands as cli_app
from omnitune.efficiency.eta import BAND, MIN_READINGS, estimate, horizon


def readings(n: int, attempt: int = 0, start: int = 50) -> list[dict]:
    """A curve that climbs as 0.99 - 0.9 (it / 10)^-0.5, 10 ms an iteration: 0.95 at 5,063."""
    return [{"attempt": attempt, "iteration": it, "train_s": it * 0.01, "time": 1e9 + it,
             "test_accuracy": 0.99 - 0.9 * (it / 10) ** -0.5} for it in range(start, start + 50 * n, 50)]


def paced(n: int, sec_per_iter: float = 0.01) -> list[dict]:
    """A curve whose error falls by the same factor every iteration, 0.5 exp(-it / 1000): 0.95 at
    2,303 iterations."""
    return [{"attempt": 0, "iteration": it, "train_s": it * sec_per_iter, "time": 1e9 + it,
             "test_accuracy": 1.0 - 0.5 * math.exp(-it / 1000)} for it in range(50, 50 + 50 * n, 50)]


def test_the_eta_waits_for_readings_counts_down_to_the_target_and_is_zero_there():
    """Fails if the ETA is given from too few readings, ignores the seconds per iteration, or
    mixes the readings of an earlier attempt (a restart) into the current one's curve."""
    assert estimate(readings(MIN_READINGS - 1), 0.95) is None
    e = estimate(paced(30), 0.95)                      # 1,500 iterations in: 803 to go at 10 ms
    assert e.iteration == 1500 and e.eta_s == pytest.approx(8.03, rel=0.01)
    assert e.iters_to_target == pytest.approx(2303, rel=0.01)
    assert estimate(paced(30, sec_per_iter=0.02), 0.95).eta_s == pytest.approx(16.06, rel=0.01)
    assert estimate(readings(40), 0.5).eta_s == 0.0       # past the target: reached
    restarted = readings(40) + readings(3, attempt=1, start=2100)
    assert estimate(restarted, 0.95) is None              # the new attempt has too few readings of its own


def test_readings_too_early_in_the_run_say_so_not_that_it_stalls():
    """Of four readings, the first at iteration 0, three lie past the first quarter of the
    iterations: too few to fit a pace, or the curves and their backtest, which the note says
    (shapes-resnet's runs at a quarter of their way read "no progress" while they climbed)."""
    climbing = [{"attempt": 0, "iteration": it, "train_s": it * 0.01, "time": 1e9 + it,
                 "test_accuracy": 1.0 - 0.5 * math.exp(-it / 1000)} for it in range(0, 4500, 500)]
    e = estimate(climbing[:4], 0.95, model="pace")
    assert e.eta_s is None and e.note.startswith(f"fewer than {MIN_READINGS} readings")
    assert estimate(climbing[:5], 0.95, model="pace").eta_s is not None       # a fourth one past it
    e = estimate(climbing[:8], 0.999, model="curves")
    assert e.eta_s is None and e.note.startswith("fewer than 8 readings")
    assert estimate(climbing, 0.999, model="curves").eta_s is not None


def test_the_eta_band_is_the_calibrated_share_of_the_training_left():
    """The band runs from BAND[0] to BAND[1] times the training left, whatever the curve; a run
    whose recent readings do not climb has no estimate. Fails if the band is read off the fit's
    own spread, or a flat curve gets an ETA."""
    e = estimate(readings(40), 0.95)
    assert e.band_s == pytest.approx((BAND[0] * e.eta_s, BAND[1] * e.eta_s))
    flat = [dict(x, test_accuracy=0.6) for x in readings(20)]
    assert estimate(flat, 0.95).eta_s is None
    assert estimate([dict(x, test_accuracy=0.6 + 1e-6 * x["iteration"]) for x in readings(20)], 0.95).eta_s is None


def test_a_schedules_horizon_errs_long_where_the_eta_keeps_the_recent_pace():
    """eta.horizon (what a pause re-fits a schedule to) is the plateau-and-pace extrapolation,
    which on a power law lies past the pace's crossing: a schedule decayed at the pace's would
    leave the run short of the target. Fails if the two are the same estimate."""
    lines = readings(40)
    assert horizon(lines, 0.95) > estimate(lines, 0.95).iters_to_target
    assert horizon(readings(MIN_READINGS - 1), 0.95) is None


def test_the_run_shows_its_eta_and_keeps_it_in_eta_jsonl(tmp_path, monkeypatch):
    """One look at a run dir: a reading written before the run began is not the run's; the ETA
    goes to the status line and to eta.jsonl, and the same reading is neither shown twice nor
    fitted again (a fit takes up to a second of a core the training needs)."""
    from omnitune.efficiency import eta

    lines = readings(30)
    (tmp_path / "metrics.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines) + '{"half a li')
    shown = []
    last = cli_app._eta_step(tmp_path, 0.95, lines[0]["time"], shown.append, None)
    assert last == lines[-1]["iteration"] and len(shown) == 1 and "ETA" in shown[0] and "0.95" in shown[0]
    kept = [json.loads(x) for x in (tmp_path / "eta.jsonl").read_text().splitlines()]
    assert kept[0]["iteration"] == last and kept[0]["eta_s"] == pytest.approx(float(shown[0].split("ETA ")[1]
                                                                                     .split("s")[0]), abs=0.5)
    fits = []
    monkeypatch.setattr(eta, "estimate", lambda *a: fits.append(a))
    assert cli_app._eta_step(tmp_path, 0.95, lines[0]["time"], shown.append, last) == last and len(shown) == 1
    assert not fits
    assert cli_app._eta_step(tmp_path, 0.95, lines[-1]["time"] + 1, shown.append, None) is None   # none since


def test_a_pause_refits_the_schedules_horizon_from_the_runs_readings(tmp_path):
    """job.refit_horizon: the horizon becomes the iterations to target the readings predict (the
    curve crosses 0.95 at 5,063), never before the current iteration; a run without a horizon,
    or without enough readings, keeps its own. The same holds for a loss target, read as 1 - loss."""
    from dataclasses import replace

    from omnitune.runtime.job import refit_horizon
    from tests.conftest import make_spec

    spec = make_spec("sync", [["cpu0"]], target=0.95, horizon=1000)
    (tmp_path / "metrics.jsonl").write_text("".join(json.dumps(x) + "\n" for x in readings(40)))
    refit = refit_horizon(spec, tmp_path, 2000).horizon
    assert 3000 < refit < 10_000 and refit != 1000
    assert refit_horizon(replace(spec, horizon=0), tmp_path, 2000).horizon == 0
    (tmp_path / "metrics.jsonl").write_text("".join(json.dumps(x) + "\n" for x in readings(2)))
    assert refit_horizon(spec, tmp_path, 2000).horizon == 1000
    as_loss = [{**x, "test_loss": 1 - x["test_accuracy"]} for x in readings(40)]
    (tmp_path / "metrics.jsonl").write_text("".join(json.dumps(x) + "\n" for x in as_loss))
    on_loss = replace(spec, target_accuracy=None, target_loss=0.05)
    assert refit_horizon(on_loss, tmp_path, 2000).horizon == refit


def test_a_refitted_horizon_ends_by_the_runs_time_limit(tmp_path):
    """A pause's re-fitted horizon stops where the run's time limit comes (job.iterations_left: at
    the pace the run kept, its evaluations in it, from its training time), with no estimate
    too; after a switch to twice the batch, at half as many iterations left. A run off pace must
    be cooled by its limit, not left at a high rate past it. Fails if the cap is left out, if it
    pulls a horizon before the current iteration, or if it ignores a change of batch."""
    from dataclasses import replace

    from omnitune.planning import retune
    from omnitune.runtime.job import iterations_left, refit_horizon
    from omnitune.runtime.summary import RunSummary
    from tests.conftest import make_spec

    spec = make_spec("sync", [["cpu0"]], target=0.95, horizon=1000)
    (tmp_path / "metrics.jsonl").write_text("".join(json.dumps(x) + "\n" for x in readings(40)))
    free = refit_horizon(spec, tmp_path, 2000).horizon
    assert free > 3000
    assert refit_horizon(spec, tmp_path, 2000, limit_iters=500).horizon == 2500
    assert refit_horizon(spec, tmp_path, 2000, limit_iters=10 ** 6).horizon == free
    assert refit_horizon(spec, tmp_path, 2000, limit_iters=0).horizon == 2001     # never before where it is
    doubled = refit_horizon(retune.scaled(spec, 2.0), tmp_path, 2000, before=spec, limit_iters=500).horizon
    assert doubled == 2250
    (tmp_path / "metrics.jsonl").write_text("".join(json.dumps(x) + "\n" for x in readings(2)))   # no estimate
    assert refit_horizon(replace(spec, horizon=9000), tmp_path, 2000, limit_iters=500).horizon == 2500
    assert refit_horizon(spec, tmp_path, 2000, limit_iters=500).horizon == 1000    # within the limit: its own

    at = lambda iterations, wall_s, eval_s: RunSummary(1, False, None, None, iterations, 0.5, 0.95, None, 0.0, 0.01,
                                                       wall_s, eval_s, "", "sync", 1, (iterations,), 0.0, 1)
    assert iterations_left(at(1200, 120.0, 0.0), 240.0) == pytest.approx(1200)    # 10 a second, 120 s left
    assert iterations_left(at(1200, 120.0, 12.0), 240.0) == pytest.approx(1320)   # the clock goes on at 108 s
    assert iterations_left(at(1200, 120.0, 0.0), float("inf")) is None
    assert iterations_left(at(1200, 250.0, 0.0), 240.0) == 0


def test_a_plan_without_a_prediction_schedules_over_the_runs_time_limit():
    from dataclasses import replace

    from omnitune.runtime.job import scheduled
    from tests.conftest import make_spec

    spec = make_spec("sync", [["cpu0"]])
    assert scheduled(spec, 300.0, 0.1).horizon == 3000
    assert scheduled(replace(spec, horizon=500), 300.0, 0.1).horizon == 500      # the plan's prediction stands
    assert scheduled(spec, 300.0, 0.0).horizon == 0


def test_the_power_law_model_forecasts_a_curve_that_slows_where_the_pace_is_early():
    """A curve whose error falls as a power of the iterations, 2 / sqrt(it), read to 400
    iterations: it reaches 0.95 at 1,600. The power model says so within 2%; the pace (an error
    falling by the same factor every iteration) puts it well before, and "between" lies between
    the two. A curve that falls by the same factor each iteration (`paced`) is the pace's: there
    the power law errs late. Fails if a model reads the wrong space (log-log against log-linear)
    or "between" leaves the interval its two ends make."""
    lines = [{"attempt": 0, "iteration": it, "train_s": it * 0.01, "time": 1e9 + it,
              "test_accuracy": 1.0 - 2.0 / math.sqrt(it)} for it in range(40, 401, 20)]
    power, pace, between = (estimate(lines, 0.95, model=m).iters_to_target for m in ("power", "pace", "between"))
    assert power == pytest.approx(1600, rel=0.02)
    assert pace < 0.8 * power and pace < between < power
    assert estimate(paced(30), 0.95, model="power").iters_to_target > 1.2 * 2303


def test_the_backtested_model_takes_whichever_forecast_the_curves_last_third():
    """"backtested" fits the pace and the power law to the curve before its last third and takes
    the one that forecast that third better: the power law's finish on a power law (2 / sqrt(it),
    0.95 at 1,600 iterations), the pace's on a curve the pace fits exactly (`paced`). Fails if the
    backtest reads the wrong space or picks the worse of the two."""
    lines = [{"attempt": 0, "iteration": it, "train_s": it * 0.01, "time": 1e9 + it,
              "test_accuracy": 1.0 - 2.0 / math.sqrt(it)} for it in range(40, 401, 20)]
    assert estimate(lines, 0.95, model="backtested").iters_to_target == estimate(lines, 0.95, model="power").iters_to_target
    assert estimate(paced(30), 0.95, model="backtested").iters_to_target == estimate(paced(30), 0.95).iters_to_target


def test_the_pace_corrected_by_its_drift_moves_toward_a_slowing_curves_finish_and_keeps_a_steady_one():
    """On the power law above (0.95 at 1,600 iterations, 16 s), the pace's finish moves later with
    every reading; corrected by that drift, "pace-drift" says later than the pace and no later
    than the truth. On a curve the pace fits exactly (`paced`: 23.0 s), every earlier estimate
    said the same finish, and the correction changes nothing. Fails if the drift is read with
    the wrong sign, or moves an estimate that never drifted."""
    lines = [{"attempt": 0, "iteration": it, "train_s": it * 0.01, "time": 1e9 + it,
              "test_accuracy": 1.0 - 2.0 / math.sqrt(it)} for it in range(40, 401, 20)]
    pace, drift = (estimate(lines, 0.95, model=m) for m in ("pace", "pace-drift"))
    assert pace.train_s + pace.eta_s < 0.5 * 16.0
    assert pace.train_s + pace.eta_s + 2.0 < drift.train_s + drift.eta_s <= 16.0
    steady, corrected = (estimate(paced(30), 0.95, model=m) for m in ("pace", "pace-drift"))
    assert corrected.eta_s == pytest.approx(steady.eta_s, rel=1e-6)
