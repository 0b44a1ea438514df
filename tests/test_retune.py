"""Re-tuning during a run (runtime/job.py, planning/retune.py): when the run pauses, what it compares, and when it
switches."""

import json
import math

import pytest

from omnitune.planning import retune
from omnitune.planning.retune import Reading, candidates, decide
from omnitune.runtime.job import FIRST_COST_S, RETUNE_SHARE as SHARE, next_stop


@pytest.fixture(autouse=True)
def read_here(monkeypatch):
    """The pauses here read in this process, where the tests' fakes of pause.pause_reading are
    (tests/test_pause.py runs the reader processes for real)."""
    from omnitune.probing import pause

    monkeypatch.setattr(pause, "reader_processes", lambda *a: 1)


def test_pauses_double_and_all_retuning_fits_in_its_share():
    """A fake clock of measured costs, one small, one large: every pause comes at least twice as
    late as the last, and the re-tuning spent by then, the pause's own included, is at most SHARE
    of the training time. Fails if next_stop ignores what was spent, the pause's own cost, or
    the doubling."""
    stop, spent, stops = 0.0, 0.0, []
    for cost in (3.0, 3.0, 40.0, 1.0, 1.0):
        new = next_stop(stop, spent, cost)
        assert new >= 2 * stop
        spent += cost
        assert spent <= SHARE * new + 1e-9
        stop = new
        stops.append(stop)
    assert stops[:2] == [30.0, 60.0]                 # 3 s of re-tuning waits for 30 s of training
    assert stops[2] == pytest.approx((6.0 + 40.0) / SHARE)    # a costly one waits longer
    assert stops[3] == 2 * stops[2]


def test_a_short_run_is_never_paused():
    """Before any re-tuning was measured, the first pause waits for FIRST_COST_S / SHARE of training."""
    first = next_stop(0.0, 0.0, FIRST_COST_S)
    assert first == pytest.approx(FIRST_COST_S / SHARE) and first >= 20


def test_the_candidates_are_the_rate_up_and_down_and_with_asynchrony_the_momenta():
    assert candidates(0.1, 0.9, False) == [retune.Setting(lr, 0.9) for lr in (0.1, 0.3, 0.0333, 1.0, 0.01)]
    more = candidates(0.1, 0.6, True)
    assert more[0] == retune.Setting(0.1, 0.6) and {s.momentum for s in more if s.lr == 0.1} == {0.0, 0.3, 0.6, 0.9}


def test_a_pause_reads_only_what_it_may_switch_to():
    """spec_candidates: a run that is not stalled reads none of a lower rate per sample of batch
    (challenger passes over those), twice and half the batch at the scaled rate still; a stalled
    run's pause reads every candidate (tests/test_runtime.py: a stall at a rate too low to move)."""
    from tests.conftest import make_spec

    spec = make_spec("sync", [["cpu0"]], batch=16, lr=0.1, momentum=0.9)
    assert retune.spec_candidates(spec, None, stalled=False) == [retune.Setting(lr, 0.9) for lr in (0.1, 0.3, 1.0)]
    assert retune.spec_candidates(spec, None, stalled=True) == retune.spec_candidates(spec, None)
    assert len(retune.spec_candidates(spec, None)) == 5
    two = make_spec("sync", [["cpu0", "cpu1"]], batch=16, lr=0.1, momentum=0.9)
    going = retune.spec_candidates(two, calibrated_step_s(), stalled=False)
    assert {s.batch for s in going} == {0.5, 1.0, 2.0} and len(going) == 5


def test_a_pause_whose_current_setting_diverges_reads_the_lower_rates(tmp_path, monkeypatch):
    """pause.retune reads the current setting first; where it diverges from the checkpoint, the
    pause reads the lower rates too, though the run was not stalled (a tenth of the rate because
    a third reads finite, which is better), and goes on with one; no larger rate is read
    (Omnivore's rule after a divergence: retune.below)."""
    from omnitune.probing import pause
    from tests.conftest import make_spec

    spec = make_spec("sync", [["cpu0"]], batch=16, lr=0.1, momentum=0.9)
    read = []

    def fake(wl, train, held, spec, state, setting, batches, iters, cool=True):
        read.append(setting.lr)
        return Reading(math.inf, math.inf, -math.inf) if setting.lr >= 0.1 else Reading(1.0, 1.0, 0.0)
    ckpt = faked_pause(tmp_path, monkeypatch, fake)
    new, record = pause.retune(spec, ckpt, "schedule", iters=10)
    assert read[0] == 0.1 and set(read) == {0.1, 0.0333, 0.01} and new.lr < 0.1 and record["switched"]


def test_a_pause_reads_a_rate_a_cool_down_left_at_three_digits_as_its_candidates(tmp_path, monkeypatch):
    """A run's changes in place left lr 0.01665 (a cool-down's step) in force, and its pause reads
    around it: the current rate is read as 0.0167, the key its candidates use (retune.rate), and
    the pause decides. Fails if the current setting is missing from the readings (a KeyError
    ended a held-out run's benchmark, 2026-12-06)."""
    from omnitune.probing import pause
    from tests.conftest import make_spec

    spec = make_spec("sync", [["cpu0"]], batch=16, lr=0.01665, momentum=0.9)
    read = []

    def fake(wl, train, held, spec, state, setting, batches, iters, cool=True):
        read.append(setting.lr)
        return Reading(1.0, 1.0, 0.0)
    ckpt = faked_pause(tmp_path, monkeypatch, fake)
    new, record = pause.retune(spec, ckpt, "stall", iters=10)
    assert read[0] == 0.0167 and new.lr == 0.0167 and not record["switched"]


def test_a_plateau_lowers_the_rate_a_step_only_for_a_large_gain():
    """retune.plateau on teacher-mlp's long readings (2026-11-29, 300 updates, raw validation loss
    on two batch orders): at batch 64, lr 0.1, levelled off at 0.90, a third of the rate read
    19.7% lower and is taken; on a run still climbing (batch 256, lr 0.04 at 43 s) it read 7.1%
    lower, and the rate stays. A gain within the third's spread over its repeats, or a reading
    that is not finite, changes nothing; the current rate's own spread is no shield. Fails if the
    rule lowers the rate on any lower reading, or by more than a step, or keeps a swinging rate."""
    def pair(lr, now, third):
        return {retune.Setting(lr, 0.9): readings(*((x, x) for x in now)),
                retune.Setting(retune.rate(lr, 1 / 3), 0.9): readings(*((x, x) for x in third))}
    flat = retune.plateau(retune.Setting(0.1, 0.9), pair(0.1, (0.3577, 0.3520), (0.2980, 0.2721)))
    assert flat.switched and flat.setting == retune.Setting(0.0333, 0.9) and "plateau" in flat.reason
    climbing = retune.plateau(retune.Setting(0.04, 0.9), pair(0.04, (0.1741, 0.1644), (0.1612, 0.1532)))
    assert not climbing.switched and climbing.setting == retune.Setting(0.04, 0.9)
    unsure = retune.plateau(retune.Setting(0.1, 0.9), pair(0.1, (0.35, 0.35), (0.20, 0.40)))
    assert not unsure.switched          # 0.05 lower, 14% of 0.35, but the third's repeats spread 0.20
    swinging = retune.plateau(retune.Setting(0.1, 0.9), pair(0.1, (0.304, 0.416), (0.250, 0.274)))
    assert swinging.switched            # 0.098 lower; the current rate's spread 0.112 is its own swinging
    broken = pair(0.1, (0.35,), (math.inf,))
    assert not retune.plateau(retune.Setting(0.1, 0.9), broken).switched


def faked_pause(tmp_path, monkeypatch, reading):
    """pause.pause_reading faked by `reading`, the validation set as given, and an empty
    checkpoint for the pause to load: returns its path."""
    import torch

    from omnitune.probing import pause

    monkeypatch.setattr(pause, "pause_reading", reading)
    monkeypatch.setattr(pause, "first", lambda test, n: test)
    ckpt = tmp_path / "c.pt"
    torch.save({"model": {}, "optimizer": {}}, ckpt)
    return ckpt


def faked_plateau(tmp_path, monkeypatch):
    """A run at lr 0.1 (batch 16) paused on a plateau, with pause.pause_reading faked: a lower
    rate read longer than 10 updates reads loss 0.30, everything else 0.40. Returns the spec,
    its checkpoint and the list of readings taken, as (lr, updates, cooled)."""
    from omnitune.probing import pause
    from tests.conftest import make_spec

    read = []

    def fake(wl, train, held, spec, state, setting, batches, iters, cool=True):
        read.append((setting.lr, iters, cool))
        loss = 0.30 if setting.lr < 0.1 and iters > 10 else 0.40
        return Reading(loss, loss, 0.0)
    ckpt = faked_pause(tmp_path, monkeypatch, fake)
    return make_spec("sync", [["cpu0"]], batch=16, lr=0.1, momentum=0.9), ckpt, read


def test_a_plateau_pause_reads_the_rate_and_a_third_long_and_records_them(tmp_path, monkeypatch):
    """pause.retune told "plateau" (a stall on its way) reads as on schedule, no lower rate among
    its short readings; where nothing wins there, it reads the current rate and a third of it for
    RULES.plateau_updates times its updates with no cool-down, on a second batch order only where the
    first passes the gain, and goes on at the third where it gains (recorded under "plateau").
    Fails if the plateau check is skipped, or read short."""
    from omnitune.probing import pause

    spec, ckpt, read = faked_plateau(tmp_path, monkeypatch)
    new, record = pause.retune(spec, ckpt, "plateau", iters=10)
    short = [lr for lr, iters, _ in read if iters == 10]
    assert min(short) >= 0.1                  # on schedule: no lower rate among the short readings
    long = [(lr, cool) for lr, iters, cool in read if iters == 10 * retune.RULES.plateau_updates]
    assert sorted(long) == [(0.0333, False)] * 2 + [(0.1, False)] * 2
    assert new.lr == 0.0333 and record["switched"] and "plateau" in record["reason"]
    assert record["plateau"]["updates"] == 100 and len(record["plateau"]["readings"]) == 2
    read.clear()
    monkeypatch.setattr(pause, "pause_reading", lambda *a, **k: read.append(a[6:]) or Reading(0.4, 0.4, 0.0))
    new, record = pause.retune(spec, ckpt, "plateau", iters=10)
    assert not record["switched"] and new.lr == 0.1 and len(record["plateau"]["readings"]) == 2
    assert sum(1 for r in read if r[1] == 100) == 2       # no gain on the first order: no second


@pytest.mark.parametrize("why, checked", [("plateau", True), ("off pace", True), ("schedule", False),
                                          ("stall", False)])
def test_a_plateau_is_checked_on_a_plateau_or_off_pace_pause_only(tmp_path, monkeypatch, why, checked):
    """Where no short reading wins, pause.retune reads the long pair on a "plateau" pause and on
    one "off pace" (past half the run's way: job.py), and goes on at the third where it gains;
    on schedule, or stalled with no pace at all, it reads no long pair. Fails if an off-pace run
    skips the check (one run grew its batch at AdaScale's rate instead, and missed its target),
    or if any other pause reads it."""
    from omnitune.probing import pause

    spec, ckpt, read = faked_plateau(tmp_path, monkeypatch)
    new, record = pause.retune(spec, ckpt, why, iters=10)
    long = [lr for lr, iters, _ in read if iters > 10]
    assert bool(long) == checked and ("plateau" in record) == checked
    assert new.lr == (0.0333 if checked else 0.1)


@pytest.mark.parametrize("why", ["divergence", "plateau", "stall"])
def test_a_pause_of_a_run_tuned_in_place_reads_only_what_its_tuner_cannot(tmp_path, monkeypatch, why):
    """pause.retune with `lean` (the run is tuned in place): a divergence reads nothing and keeps
    the setting (runtime/job.py then holds it below the rate that diverged); a plateau reads the
    long pair only, no short candidate, and takes the third where it gains; a stall reads the
    short candidates as any pause does. Fails if a lean divergence reads, or a lean plateau
    reads a candidate the tuner would never take."""
    from omnitune.probing import pause

    spec, ckpt, read = faked_plateau(tmp_path, monkeypatch)
    new, record = pause.retune(spec, ckpt, why, iters=10, lean=True)
    short = [lr for lr, iters, _ in read if iters == 10]
    long = sorted(lr for lr, iters, _ in read if iters > 10)
    if why == "divergence":
        assert read == [] and new == spec and not record["switched"] and "no readings" in record["reason"]
    elif why == "plateau":
        assert short == [] and long == [0.0333, 0.0333, 0.1, 0.1] and new.lr == 0.0333 and record["switched"]
    else:
        assert short and min(short) < 0.1 and long == []


def test_a_plateau_check_overrides_the_goodputs_batch(tmp_path, monkeypatch):
    """At a "plateau" pause whose short readings take the goodput's larger batch (at AdaScale's
    rate, which keeps the noise the run levelled off at), the plateau check still runs, and where
    a third of the rate gains it wins: the run goes on at the third, at its own batch. Where the
    check finds no plateau, the goodput's batch stands. Fails if the growth skips the check."""
    import torch

    from omnitune.probing import pause
    from tests.conftest import make_spec

    spec = make_spec("sync", [["cpu0", "cpu1"]], batch=16, lr=0.1, momentum=0.9)
    bigger = retune.Setting(0.2, 0.9, 4.0)
    monkeypatch.setattr(pause, "first", lambda test, n: test)
    monkeypatch.setattr(pause, "noise_and_growth", lambda *a: (500.0, (bigger, 1.5)))
    monkeypatch.setattr(pause, "timed_scales", lambda *a: None)
    ckpt = tmp_path / "c.pt"
    torch.save({"model": {}, "optimizer": {}}, ckpt)

    def reading(third_long: float):
        def fake(wl, train, held, spec, state, setting, batches, iters, cool=True):
            long = iters == 10 * retune.RULES.plateau_updates
            loss = third_long if long and setting.lr < 0.1 else 0.40
            return Reading(loss, loss, 0.0)
        return fake
    monkeypatch.setattr(pause, "pause_reading", reading(0.30))
    new, record = pause.retune(spec, ckpt, "plateau", iters=10, step_s=calibrated_step_s())
    assert new.lr == 0.0333 and dict(new.batch_size) == dict(spec.batch_size) and "plateau" in record
    monkeypatch.setattr(pause, "pause_reading", reading(0.40))
    new, record = pause.retune(spec, ckpt, "plateau", iters=10, step_s=calibrated_step_s())
    assert new.lr == 0.2 and new.batch_size["cpu0"] == 64 and "no plateau" in record["plateau"]["reason"]


def test_a_diverged_runs_pause_reads_no_larger_rate_and_weighs_no_growth(tmp_path, monkeypatch):
    """A run whose loss diverged at lr 0.1 pauses (why "divergence"): its pause reads the current
    rate again from the checkpoint and the lower ones, and neither three times the rate, nor twice
    the batch at twice the rate, nor the goodput's batch (so no noise scale nor timing either)."""
    import torch

    from omnitune.probing import pause
    from tests.conftest import make_spec

    spec = make_spec("sync", [["cpu0", "cpu1"]], batch=16, lr=0.1, momentum=0.9)
    read, weighed = [], []

    def fake(wl, train, held, spec, state, setting, batches, iters, cool=True):
        read.append((setting.lr, setting.batch))
        return Reading(1.0 + abs(math.log10(setting.lr / 0.03)), 1.0 + abs(math.log10(setting.lr / 0.03)), 0.0)
    monkeypatch.setattr(pause, "pause_reading", fake)
    monkeypatch.setattr(pause, "first", lambda test, n: test)
    monkeypatch.setattr(pause, "noise_and_growth", lambda *a: weighed.append(a) or (50.0, None))
    monkeypatch.setattr(pause, "timed_scales", lambda *a: weighed.append(a) or None)
    ckpt = tmp_path / "c.pt"
    torch.save({"model": {}, "optimizer": {}}, ckpt)
    step_s = calibrated_step_s()
    assert {s.batch for s in retune.spec_candidates(spec, step_s)} == {0.5, 1.0, 2.0}     # twice the batch: a candidate
    new, record = pause.retune(spec, ckpt, "divergence", iters=10, step_s=step_s)
    assert read[0] == (0.1, 1.0) and max(lr for lr, _ in read) == 0.1 and (0.0333, 1.0) in read    # 0.1: again, the noise
    assert (0.05, 0.5) in read and not weighed
    assert new.lr == 0.0333 and record["switched"]
    pause.retune(spec, ckpt, "schedule", iters=10, step_s=step_s)
    assert weighed        # the fakes stand where a pause calls them


def readings(*pairs, score: float = 0.0) -> list[Reading]:
    """Readings of one setting from (raw, cooled) pairs, one per set of batches."""
    return [Reading(raw, cooled, score) for raw, cooled in pairs]


@pytest.mark.parametrize("challenger, switches", [(0.995, False), (0.97, True)])
def test_no_switch_within_the_noise_of_repeats(challenger, switches):
    """The current setting scored 1.00 and 1.02 on two sets of batches (raw and cooled alike):
    noise 0.02. A challenger at 0.995 is within it (and would win on the first repeat alone); one
    at 0.97 is not. Fails if decide switches to any lower mean, or ignores the repeats' spread."""
    d = decide((0.1, 0.9), {(0.1, 0.9): readings((1.00, 1.00), (1.02, 1.02)),
                            (0.3, 0.9): readings((challenger, challenger)), (0.01, 0.9): readings((1.5, 1.5))})
    assert d.switched is switches and d.setting == ((0.3, 0.9) if switches else (0.1, 0.9))
    assert d.margin == pytest.approx(0.02)


def test_the_challengers_spread_is_noise_too():
    """The current setting's two readings agree; the challenger's spread by 0.1: a 0.05 lead is noise."""
    d = decide((0.1, 0.9), {(0.1, 0.9): readings((1.0, 1.0), (1.0, 1.0)),
                            (0.3, 0.9): readings((0.9, 0.9), (1.0, 1.0))})
    assert not d.switched and d.margin == pytest.approx(0.1)


def test_with_one_repeat_the_floor_is_the_noise():
    d = decide((0.1, 0.9), {(0.1, 0.9): readings((1.0, 1.0)), (0.3, 0.9): readings((0.995, 0.995))})
    assert not d.switched and d.margin == pytest.approx(retune.RULES.noise_floor)
    assert decide((0.1, 0.9), {(0.1, 0.9): readings((1.0, 1.0)), (0.3, 0.9): readings((0.98, 0.98))}).switched


def test_a_switch_needs_both_the_raw_and_the_cooled_loss():
    """Short-horizon bias: a lower rate that wins only on the raw loss (teacher-mlp's down-switch)
    is not taken; nor a higher one that wins only cooled (lenet-digits at 3x: never reaches the
    target at a constant rate); one that wins both is. Fails if either reading alone decides."""
    current = readings((0.17, 0.15))
    assert not decide((0.04, 0.9), {(0.04, 0.9): current, (0.0133, 0.9): readings((0.15, 0.16))}).switched
    assert not decide((0.04, 0.9), {(0.04, 0.9): current, (0.12, 0.9): readings((0.30, 0.12))}).switched
    both = decide((0.04, 0.9), {(0.04, 0.9): current, (0.12, 0.9): readings((0.16, 0.13)),
                                (0.0133, 0.9): readings((0.15, 0.12))})
    assert both.switched and both.setting == (0.12, 0.9)


def test_a_lower_rate_only_for_a_stalled_run():
    """Short-horizon bias runs towards lower rates: a lower rate that wins both readings is taken
    only when the run's own readings are stalled. Fails if decide lowers a healthy run's rate."""
    scores = {(0.04, 0.9): readings((0.17, 0.15)), (0.0133, 0.9): readings((0.15, 0.13))}
    assert not decide((0.04, 0.9), scores).switched
    d = decide((0.04, 0.9), scores, stalled=True)
    assert d.switched and d.setting == (0.0133, 0.9)


def test_a_run_off_pace_switches_without_the_noise_margin():
    """gru-count's second pause (lr 0.1, batch 8, off pace at 105 s): the current rate's repeats
    spread 0.085 cooled and 0.75 raw; a third of the rate reads lower on both, by 0.11 cooled.
    A stalled run keeps its rate (the raw gap is within the current rate's spread); a run off pace
    switches. Where the rival reads higher on either loss, an off-pace run stays too. Fails if
    off pace still asks for the margin, or switches to a rival that reads worse."""
    now, third = retune.Setting(0.1, 0.9), retune.Setting(0.0333, 0.9)
    scores = {now: readings((2.10, 2.07), (2.85, 2.16)), third: readings((2.02, 2.04), (2.02, 1.97))}
    assert not decide(now, scores, stalled=True).switched
    d = decide(now, scores, stalled=True, off_pace=True)
    assert d.switched and d.setting == third and "off pace" in d.reason
    worse_raw = {now: scores[now], third: readings((2.6, 2.04), (2.6, 1.97))}
    assert not decide(now, worse_raw, stalled=True, off_pace=True).switched


def test_a_run_off_pace_does_not_switch_on_a_tie():
    """teacher-mlp's off-pace pauses (lr 0.01, batch 64, loss 0.254): rivals read lower by 0.0020,
    0.0005 and 0.0002 on both losses, within RULES.noise_floor (1%, 0.0025) of the current loss: the
    run stays. A rival lower by 2% on both switches. Fails if off pace switches on any gap."""
    now = retune.Setting(0.01, 0.9)
    for gap in (0.0020, 0.0005, 0.0002):
        rival = retune.Setting(0.03, 0.9)
        scores = {now: readings((0.2537, 0.2538), (0.2535, 0.2532)),
                  rival: readings((0.2537 - gap, 0.2538 - gap), (0.2535 - gap, 0.2532 - gap))}
        assert not decide(now, scores, stalled=True, off_pace=True).switched
    clear = {now: scores[now], rival: readings((0.248, 0.248), (0.248, 0.248))}
    d = decide(now, clear, stalled=True, off_pace=True)
    assert d.switched and d.setting == rival and "1%" in d.reason


def test_where_cooling_reaches_the_target_the_run_goes_on_cooled():
    """The kept setting's cool-down reaches the target score (0.95) on both repeats: the run goes
    on at a tenth of its rate. One repeat short of it: the rate is kept."""
    d = decide((0.1, 0.9), {(0.1, 0.9): readings((0.3, 0.2), (0.3, 0.2), score=0.96)}, target=0.95)
    assert d.switched and d.setting == retune.Setting(0.01, 0.9) and "reaches the target" in d.reason
    mixed = [Reading(0.3, 0.2, 0.96), Reading(0.3, 0.2, 0.94)]
    assert not decide((0.1, 0.9), {(0.1, 0.9): mixed}, target=0.95).switched


def test_a_run_that_diverged_goes_on_with_the_best_reading_whatever_the_noise():
    """decide(diverged=True): the current setting diverged in the run, so it is no incumbent; a
    held-out run kept lr 0.1 (cooled 0.87, repeats 0.5 apart) over lr 0.033 (0.54) for want of a
    margin, and missed its target."""
    rs = {(0.1, 0.9): readings((1.2, 0.6), (2.3, 1.14)), (0.0333, 0.9): readings((0.57, 0.54), (0.58, 0.55)),
          (0.01, 0.9): readings((0.56, 0.56))}
    assert not decide((0.1, 0.9), rs, stalled=True).switched
    d = decide((0.1, 0.9), rs, stalled=True, diverged=True)
    assert d.switched and d.setting == (0.0333, 0.9) and "diverged in the run" in d.reason


def test_a_diverging_current_setting_gives_way_and_a_diverging_candidate_never_wins():
    d = decide((1.0, 0.9), {(1.0, 0.9): readings((math.nan, math.nan)), (0.3, 0.9): readings((0.8, 0.8)),
                            (0.1, 0.9): readings((0.9, 0.9))})
    assert d.switched and d.setting == (0.3, 0.9)
    assert not decide((0.1, 0.9), {(0.1, 0.9): readings((1.0, 1.0)),
                                   (1.0, 0.9): readings((-math.inf, -math.inf))}).switched

@pytest.mark.parametrize("first_pause_s", [None, 9.5])
def test_a_run_paused_on_a_fake_clock_keeps_its_retuning_within_its_share(tmp_path, monkeypatch, first_pause_s):
    """run_with_replans with the launcher and the probes faked on one clock: every launch costs
    RESTART_S and every pause's probes 2.4 s (together more than the first estimate, FIRST_COST_S),
    and the run trains 200 s. The first pause waits for its estimated cost (the re-tuner's, where
    it gives one: 9.5 s of probes) plus a restart to be SHARE of the training. Once a pause's
    probes have been measured, every later pause comes only where all re-tuning by then, the
    restart it owes included, fits in SHARE of the training. Fails if the schedule leaves out the
    restart a pause still owes (once: 11.4 s of 80 s, 14%), or the re-tuner's estimate, or if a
    restart's measure takes in the last segment's evaluations (it did, 1-2 s a pause)."""
    import json
    from dataclasses import replace

    from omnitune.core import plan as plan_mod
    from omnitune.runtime import job
    from omnitune.runtime.summary import RunSummary
    from tests.conftest import make_plan

    clock = {"t": 0.0, "train": 0.0}
    monkeypatch.setattr(job.time, "perf_counter", lambda: clock["t"])
    pauses = []

    waits = []

    def run_job(args):
        waits.append(args.pace_wait_s)
        clock["t"] += job.RESTART_S                            # every launch, the restart after a pause too
        began_at = clock["train"]                              # a segment resumes from the pause's checkpoint
        end = min(args.stop_at_s, 200.0)
        evals = 0.1 * (end - clock["train"])                   # a segment's clock goes on from its training time
        clock["t"] += end - clock["train"] + evals
        clock["train"] = end
        return RunSummary(1, end >= 200.0, 200.0 if end >= 200.0 else None, None, int(end), 0.5, 0.99, None, 0.0,
                          0.01, end + evals, evals, "", "sync", 1, (int(end),), 0.0, 1, started_at_s=began_at)

    def replan(spec, checkpoint, why):
        clock["t"] += 2.4
        pauses.append(clock["train"])
        return spec, {"before": {}, "after": {}, "switched": False}

    monkeypatch.setattr(job, "run_job", run_job)
    limits = []          # what each pause's re-fit of the schedule is told of the time limit
    monkeypatch.setattr(job, "refit_horizon", lambda spec, run_dir, at, before, left: limits.append((at, left)) or spec)
    plan = plan_mod.load(make_plan(tmp_path / "plan.json", "sync", [["cpu0"]]))
    args = job.prepare(plan.spec, str(tmp_path / "run"), job.RunOptions(max_time_s=1000))
    s = job.run_with_replans(plan, replace(args, max_time_s=1000), None, replan, first_pause_s)
    first = FIRST_COST_S if first_pause_s is None else first_pause_s + job.RESTART_S
    assert waits[0] == pytest.approx(first)              # off pace, it waits as long as a pause costs
    assert s.replans == len(pauses) >= (2 if first_pause_s is None else 1) and pauses[0] == pytest.approx(first / SHARE)
    for k, at in enumerate(pauses[1:], start=2):
        assert k * (2.4 + job.RESTART_S) <= SHARE * at + 1e-9, (k, at, pauses)
    records = [json.loads(line) for line in (tmp_path / "run" / "replans.jsonl").read_text().splitlines()]
    assert [r["restart_s"] for r in records[1:]] == pytest.approx([job.RESTART_S] * (len(records) - 1))  # not evals
    assert s.started_at_s == 0.0            # where the run started, not where its last segment resumed
    assert s.first_pause_at_s == pytest.approx(first / SHARE)         # what the summary says of the schedule
    # Each re-fit is told the iterations left before the 1000-s limit: the fake trains 1 iteration
    # a second, and its summary's clock adds a tenth of the last segment for evaluations.
    assert [at for at, _ in limits] == [int(p) for p in pauses]
    began = [0.0] + pauses[:-1]
    assert [left for _, left in limits] == pytest.approx(
        [(1000 - p) * int(p) / (p + 0.1 * (p - b)) for p, b in zip(pauses, began)])


def clocked_run(tmp_path, monkeypatch, limit_s: float, first_end: float | None = None, chosen=None,
                on_launch=None, **kwargs):
    """run_with_replans on one fake clock: every launch costs RESTART_S and trains to its stop or
    the limit (the first to `first_end` where given, as a segment that ends by itself); every
    pause's probes take 9.5 s and go on with `chosen(spec)` (the same spec by default);
    `on_launch(args)` sees each launch first. Returns the summary, the launches' stops, the
    training times the pauses came at, and the launched jobs."""
    from dataclasses import replace

    from omnitune.core import plan as plan_mod
    from omnitune.runtime import job
    from omnitune.runtime.summary import RunSummary
    from tests.conftest import make_plan

    clock = {"t": 0.0, "train": 0.0}
    monkeypatch.setattr(job.time, "perf_counter", lambda: clock["t"])
    launched, pauses = [], []

    def run_job(args):
        launched.append(args)
        if on_launch is not None:
            on_launch(args)
        clock["t"] += job.RESTART_S
        end = first_end if first_end is not None and len(launched) == 1 else min(args.stop_at_s, limit_s)
        clock["t"] += end - clock["train"]
        clock["train"] = end
        return RunSummary(1, False, None, None, int(end), 0.5, 0.5, None, 0.0, 0.01, end, 0.0, "", "sync", 1,
                          (int(end),), 0.0, 1)

    def replan(spec, checkpoint, why):
        clock["t"] += 9.5
        pauses.append(clock["train"])
        new = spec if chosen is None else chosen(spec)
        return new, {"before": {}, "after": {}, "switched": new != spec}

    monkeypatch.setattr(job, "run_job", run_job)
    monkeypatch.setattr(job, "refit_horizon", lambda spec, run_dir, at, before, left: spec)
    plan = plan_mod.load(make_plan(tmp_path / "plan.json", "sync", [["cpu0"]]))
    args = job.prepare(plan.spec, str(tmp_path / "run"), job.RunOptions(max_time_s=limit_s))
    s = job.run_with_replans(plan, replace(args, max_time_s=limit_s), None, replan, 9.5, **kwargs)
    return s, [a.stop_at_s for a in launched], pauses, launched


@pytest.mark.parametrize("limit_s, paused_at", [(170.0, 140.0), (160.0, None)])
def test_no_pause_is_scheduled_where_it_would_leave_less_of_the_limit_than_it_costs(tmp_path, monkeypatch,
                                                                                    limit_s, paused_at):
    """A fake launcher on one clock, the re-tuner's estimate 9.5 s of probes: with the restart,
    a pause costs 14 s, so the first is due at 140 s of training. Under a 170-s limit it leaves
    30 s after its 14, and is taken; under 160 s it would leave 6, and the run goes on to its
    limit unpaused (the summary still says when the schedule had it due, and what a pause costs,
    and `run` says why a stall there went unanswered). Fails if the schedule ignores the limit, or
    skips a pause that pays."""
    from dataclasses import replace

    s, stops, pauses, _ = clocked_run(tmp_path, monkeypatch, limit_s)
    assert s.first_pause_at_s == pytest.approx(140.0)
    assert pauses == ([] if paused_at is None else [pytest.approx(paused_at)])
    assert stops[0] == (math.inf if paused_at is None else pytest.approx(paused_at))
    # The summary keeps what a pause costs; `run` says why a stalled run that missed its target
    # was never paused, and nothing where it was, or did not stall.
    from omnitune.cli.commands import _unanswered_stall
    assert s.pause_cost_s == pytest.approx(14.0)
    line = _unanswered_stall(replace(s, stalled_at_s=30.0))
    assert (line is None) == (paused_at is not None)
    assert line is None or ("estimated at 14s" in line and "from 140s" in line)
    assert _unanswered_stall(s) is None


def test_a_run_tuned_in_place_pauses_only_as_insurance(tmp_path, monkeypatch):
    """run_with_replans not `scheduled` (the run is tuned in place), a fake launcher on one clock
    under a 170-s limit: where the schedule would pause at 140 s (as above), no segment has a
    stop; the first ends at 50 s by itself (as a stall or a divergence ends one), and only then
    does the run pause, once, and go on to its limit. Fails if a scheduled pause comes, or if
    the insurance pause does not."""
    s, stops, pauses, _ = clocked_run(tmp_path, monkeypatch, 170.0, first_end=50.0, scheduled=False)
    assert stops == [math.inf, math.inf] and pauses == [50.0]
    assert s.replans == 1 and s.first_pause_at_s is None


def test_a_pause_that_chooses_a_rate_past_the_runs_edge_goes_on_below_it(tmp_path, monkeypatch):
    """run_with_replans with a fake launcher: the first segment's tuner cut its rate for
    instability (a change "unstable" to 0.04 in metrics.jsonl: the edge is 0.08 at the plan's
    batch) and the segment ended by itself; the pause chooses lr 1.0. The next segment runs at
    half the edge, 0.04, and replans.jsonl says what was held. Fails if the pause's choice
    reaches the next segment, or the record hides the hold."""
    from dataclasses import replace
    from pathlib import Path

    def unstable(args):                  # the first segment's tuner cut its rate to 0.04
        if not (Path(args.run_dir) / "metrics.jsonl").exists():
            row = {"event": "change", "iteration": 40, "train_s": 40.0, "why": "unstable", "lr": 0.04,
                   "batch_size": dict(args.spec.batch_size)}
            (Path(args.run_dir) / "metrics.jsonl").write_text(json.dumps(row) + "\n")
    _, _, _, launched = clocked_run(tmp_path, monkeypatch, 170.0, first_end=50.0, scheduled=False,
                                    chosen=lambda spec: replace(spec, lr=1.0), on_launch=unstable)
    assert launched[1].spec.lr == pytest.approx(0.04)
    record = json.loads((tmp_path / "run" / "replans.jsonl").read_text().splitlines()[0])
    assert record["held_from_lr"] == 1.0 and record["switched"]
    assert record["edge_per_sample"] == pytest.approx(0.08 / sum(launched[0].spec.batch_size.values()))


@pytest.mark.parametrize("predicted", [None, 1000, 5000])
def test_a_schedule_is_refitted_at_the_runs_own_pace(tmp_path, monkeypatch, predicted):
    """run_with_replans on a fake clock, its pace check at 12 s of a 240-s limit and the first pause
    past the limit: the fake trains 10 iterations a second, where the plan's 0.2 s an iteration
    spanned its schedule over 1,200. At the check the horizon becomes the iterations the limit
    leaves at the run's pace (its evaluations in it): where the plan predicted none, it ends there;
    a predicted horizon stays (1,000) or is cut there (5,000). The next segment resumes from the
    check's checkpoint with that spec (plan-paced.json), the summary says what changed, no pause is
    counted, and the resume's cost is the run's tuning. Fails if the check re-tunes, keeps the
    plan's horizon, or ignores the limit."""
    from dataclasses import replace

    from omnitune.core import plan as plan_mod
    from omnitune.runtime import job
    from omnitune.runtime.summary import RunSummary
    from tests.conftest import make_plan

    clock = {"t": 0.0, "train": 0.0}
    monkeypatch.setattr(job.time, "perf_counter", lambda: clock["t"])
    launched = []

    def run_job(args):
        launched.append(args)
        clock["t"] += job.RESTART_S
        end = min(args.stop_at_s, 240.0)
        evals = 0.1 * (end - clock["train"])
        clock["t"] += end - clock["train"] + evals
        clock["train"] = end
        return RunSummary(1, False, None, None, int(10 * end), 0.5, 0.99, None, 0.2, 0.1, end + evals, evals, "",
                          "sync", 1, (int(10 * end),), 0.0, 1)

    def replan(spec, checkpoint, why):
        raise AssertionError("the pace check is no pause")

    monkeypatch.setattr(job, "run_job", run_job)
    monkeypatch.setattr(job, "pace_check_at", lambda spec, limit, start: start + job.PACE_CHECK_SHARE * limit)
    horizon = 1200 if predicted is None else predicted
    plan = plan_mod.load(make_plan(tmp_path / "plan.json", "sync", [["cpu0"]], horizon=horizon))
    args = job.prepare(plan.spec, str(tmp_path / "run"), job.RunOptions(max_time_s=240))
    s = job.run_with_replans(plan, replace(args, max_time_s=240, predicted_sec_per_iter=0.2), None, replan,
                             first_pause_s=100.0, from_limit=predicted is None)
    assert [a.stop_at_s for a in launched][0] == pytest.approx(12.0)
    limit = 120 + round((240 - 12.0) * 120 / 13.2)           # 2,193: at 120 / 13.2 s, from 12 s of training
    assert launched[1].spec.horizon == {None: limit, 1000: 1000, 5000: limit}[predicted]
    assert plan_mod.load(launched[1].plan_path).spec == launched[1].spec
    assert launched[1].resume_from == str(tmp_path / "run" / "checkpoint.pt")
    assert s.repaced["before"] == horizon and s.repaced["after"] == launched[1].spec.horizon
    assert s.repaced["sec_per_iter"] == 0.1 and s.repaced["predicted_sec_per_iter"] == 0.2
    assert s.replans == 0 and not (tmp_path / "run" / "replans.jsonl").exists()
    assert s.replan_s == pytest.approx(job.RESTART_S)        # the resume after the check is the run's to pay


def test_the_pace_check_is_for_a_schedule_with_a_time_limit():
    from dataclasses import replace

    from omnitune.runtime.job import PACE_CHECK_SHARE, pace_check_at
    from tests.conftest import make_spec

    lm = make_spec("sync", [["cpu0"]], workload="charlm-stdlib", horizon=2000)     # warm-up, then cosine
    assert pace_check_at(lm, 240.0, 3.0) == pytest.approx(3.0 + PACE_CHECK_SHARE * 240.0)
    assert pace_check_at(lm, math.inf, 0.0) is None
    assert pace_check_at(replace(lm, horizon=0), 240.0, 0.0) is None
    assert pace_check_at(replace(lm, target_accuracy=None), 240.0, 0.0) is None
    assert pace_check_at(replace(lm, workload="lenet-digits"), 240.0, 0.0) is None     # a constant rate


def test_a_pause_reads_as_stalled_after_a_stall_in_the_latest_half_of_its_segment():
    """A run that swings reads stalled at one evaluation and not at the next: the pause counts the
    latest half of the segment, not its latest evaluation; a stall in the segment's first half
    that the run climbed out of is over."""
    from omnitune.runtime.job import pause_why
    assert pause_why([]) == "schedule"
    assert pause_why([{"train_s": 1.0}, {"train_s": 2.0}]) == "schedule"
    assert pause_why([{"train_s": 1.0, "stalled": True}, {"train_s": 2.0}]) == "stall"
    assert pause_why([{"train_s": 1.0, "stalled": True, "off_pace": True}, {"train_s": 2.0}]) == "off pace"
    assert pause_why([{"train_s": 1.0, "stalled": True}, {"train_s": 2.0, "diverged": True}]) == "divergence"
    # teacher-mlp: stalled at 3-5 s, climbing from there to a pause at 33 s
    climbed = [{"train_s": 3.0, "stalled": True}, {"train_s": 5.0, "stalled": True, "off_pace": True},
               *({"train_s": float(t)} for t in range(6, 34))]
    assert pause_why(climbed, since_s=0.0) == "schedule"
    # the same stalls in a segment that began at 2 s: past its half (17.5 s) nothing stalled either
    assert pause_why(climbed, since_s=2.0) == "schedule"
    # a later segment (from 20 s): the half is at 26.5 s; a stall at 27 s counts, one at 25 s not
    later = [{"train_s": float(t)} for t in range(21, 34)]
    assert pause_why([{**r, "stalled": r["train_s"] == 27.0} for r in later], since_s=20.0) == "stall"
    assert pause_why([{**r, "stalled": r["train_s"] == 25.0} for r in later], since_s=20.0) == "schedule"


def test_a_pause_tries_twice_and_half_the_batch_at_its_scaled_rate():
    """Where the hardware model prices them, the batches follow the rate (linear scaling), so each
    keeps the current rate per sample."""
    tried = candidates(0.1, 0.9, False, (2.0, 0.5))
    assert tried[:5] == candidates(0.1, 0.9, False)
    assert tried[5:] == [retune.Setting(0.2, 0.9, 2.0), retune.Setting(0.05, 0.9, 0.5)]
    assert [s.noise for s in tried[5:]] == [pytest.approx(0.1)] * 2


def test_a_bigger_batch_at_the_same_rate_is_a_lower_rate_per_sample():
    """Short-horizon bias runs towards less gradient noise: twice the batch at the same rate (half
    the rate per sample) reads better early, and is a rival only in a stalled run; twice the batch
    at twice the rate is a rival at once. Fails if the bias rule looks at the rate alone."""
    now, same_rate, scaled = retune.Setting(0.1, 0.9), retune.Setting(0.1, 0.9, 2.0), retune.Setting(0.2, 0.9, 2.0)
    quieter = {now: readings((1.0, 1.0), (1.0, 1.0)), same_rate: readings((0.8, 0.8), (0.8, 0.8))}
    assert not decide(now, quieter).switched
    assert decide(now, quieter, stalled=True).setting == same_rate
    faster = {now: readings((1.0, 1.0), (1.0, 1.0)), scaled: readings((0.8, 0.8), (0.8, 0.8))}
    assert decide(now, faster).setting == scaled


def test_the_winners_batches_and_its_cooled_rate_go_into_the_spec():
    from tests.conftest import make_spec

    spec = make_spec("groups", [["cpu0"], ["cpu1"]], batch=1, lr=0.1, momentum=0.4)
    spec = retune.retuned(spec, retune.Setting(0.2, 0.4, 2.0))
    assert (spec.lr, spec.batch_size) == (0.2, {"cpu0": 2, "cpu1": 2})
    assert retune.retuned(spec, retune.Setting(0.1, 0.4, 0.25)).batch_size == {"cpu0": 1, "cpu1": 1}   # at least 1
    d = decide(retune.Setting(0.1, 0.4), {retune.Setting(0.1, 0.4): readings((1.0, 1.0), (1.0, 1.0)),
                                          retune.Setting(0.2, 0.4, 2.0): readings((0.5, 0.5), (0.5, 0.5), score=1.0)},
               target=0.9)
    assert d.setting == retune.Setting(0.02, 0.4, 2.0)                     # cooled, at its own batch


def calibrated_step_s():
    """The hardware model of a profile whose calibration jobs timed sync and groups (g=2) on its
    two one-core workers (layout one-per-core)."""
    from omnitune import planning
    from omnitune.core import profile
    from tests.conftest import DATA

    return planning.spec_step_s(profile.load(DATA / "profile-v1-calibrated.json"), "one-per-core")


def test_a_batch_is_read_after_the_updates_that_fit_in_the_current_ones_time():
    """retune.pace from the profile's hardware model (planning.spec_step_s): twice the batch steps
    slower, so fewer of its updates fit; half of 1 is not a batch, and past the largest batch the
    profile measured (64) the model would extrapolate, so neither is tried."""
    from dataclasses import replace

    from tests.conftest import make_spec

    step_s = calibrated_step_s()
    spec = make_spec("sync", [["cpu0", "cpu1"]], batch=16)
    assert retune.batch_scales(spec, step_s) == (2.0, 0.5)
    bigger, smaller = (retune.pace(spec, retune.Setting(0.1, 0.9, f), step_s) for f in (2.0, 0.5))
    assert bigger < 1.0 < smaller and retune.pace(spec, retune.Setting(0.3, 0.9), step_s) == 1.0
    assert bigger == pytest.approx(step_s(spec) / step_s(retune.scaled(spec, 2.0)))
    assert retune.batch_scales(replace(spec, batch_size={"cpu0": 64, "cpu1": 64}), step_s) == (0.5,)
    assert retune.batch_scales(replace(spec, batch_size={"cpu0": 1, "cpu1": 1}), step_s) == (2.0,)
    assert retune.batch_scales(spec, None) == ()


def test_no_pause_prices_a_shape_that_no_real_job_timed(sample_profile):
    """The uncalibrated profile timed each worker alone, not the two side by side: the model has
    no step time for sync on both, so a pause there tries no other batch or protocol. Fails if
    spec_step_s answers from the simulator (issue 36: a 3x optimistic step won a search)."""
    from omnitune import planning
    from tests.conftest import make_spec

    step_s = planning.spec_step_s(sample_profile, "one-per-core")
    spec = make_spec("sync", [["cpu0", "cpu1"]], batch=16)
    assert step_s(spec) is None and retune.batch_scales(spec, step_s) == () == retune.faster_protocols(spec, step_s)
    assert planning.spec_step_s(sample_profile, "one-worker")(make_spec("sync", [["cpu-all"]])) > 0


def test_another_protocol_is_a_candidate_only_where_the_model_predicts_it_faster():
    """On the calibrated profile, sync on both workers trains 38% more samples a second than
    groups of one worker each. From groups, sync is a candidate, at the same rate and the momentum
    that keeps the total (0.4 + 0.5), read after the updates that fit in the time of the current
    ones; from sync, groups are not (slower). Softsync and hpsgd, which no job timed here, never
    are. Fails if the gain is not required, if momentum or pace ignore the protocol, or if the
    winner's spec keeps the old groups."""
    from omnitune.core.protocols import Sync
    from tests.conftest import make_spec

    step_s = calibrated_step_s()
    sync = make_spec("sync", [["cpu0", "cpu1"]], batch=16, lr=0.1, momentum=0.9)
    groups = make_spec("groups", [["cpu0"], ["cpu1"]], batch=16, lr=0.1, momentum=0.4)
    assert retune.throughput(sync, step_s) > 1.3 * retune.throughput(groups, step_s)
    assert retune.faster_protocols(sync, step_s) == ()
    found = retune.faster_protocols(groups, step_s)
    assert found == ((Sync(), 0.1, 0.9),)
    setting = retune.Setting(0.1, 0.9, 1.0, Sync())
    assert setting in candidates(0.1, 0.4, True, (), found)
    assert retune.pace(groups, setting, step_s) == pytest.approx(step_s(groups) / step_s(sync))
    moved = retune.retuned(groups, setting)
    assert (moved.variant, moved.groups, moved.momentum) == (Sync(), (("cpu0", "cpu1"),), 0.9)


def test_a_pause_that_doubles_the_batch_halves_the_schedules_iterations_left(tmp_path):
    """refit_horizon after a switch to twice the batch: the iterations still to go, which the
    readings counted at the old batch, halve."""
    import json

    from omnitune.runtime.job import refit_horizon
    from tests.conftest import make_spec
    from tests.test_eta import readings as curve

    (tmp_path / "metrics.jsonl").write_text("".join(json.dumps(x) + "\n" for x in curve(40)))
    spec = make_spec("sync", [["cpu0"]], target=0.95, horizon=1000)
    same = refit_horizon(spec, tmp_path, 2000).horizon
    doubled = refit_horizon(retune.scaled(spec, 2.0), tmp_path, 2000, before=spec).horizon
    assert doubled == pytest.approx(2000 + (same - 2000) / 2, abs=1)


def test_a_pauses_first_cost_counts_its_readings_at_the_runs_step():
    """pause.pause_cost_s: every candidate's updates, cool-down and evaluations, and two repeats,
    at the run's step for each device: twice the step, twice the cost; more candidates (the
    batches the hardware model prices), more cost. The candidates are a stalled run's, all of
    them (3 rates: ten times and a tenth are read only where the near steps win, which the
    estimate counts as not; and 2 batches where priced), not a schedule pause's 2 (and 2): a stall
    pauses shapes-resnet, whose pause read 9 settings at 16 ms a step in 8.6-12.7 s. Where priced,
    the goodput's batch is read twice more, after the noise scale's draws. Fails if the estimate
    counts the schedule pause's candidates (4 / 6 where priced), or leaves out the goodput's."""
    from omnitune.probing.pause import NOISE_DRAWS, pause_cost_s
    from tests.conftest import make_spec

    spec = make_spec("sync", [["cpu0"]], batch=16, lr=0.1, momentum=0.9)
    alone = pause_cost_s(spec, 30, None, 0.016)
    assert pause_cost_s(spec, 30, None, 0.032) == pytest.approx(2 * alone)
    two = make_spec("sync", [["cpu0", "cpu1"]], batch=16, lr=0.1, momentum=0.9)
    priced = pause_cost_s(two, 30, calibrated_step_s(), 0.016)
    # 5 candidates where priced, 2 repeats, and the goodput's batch twice; its noise scale's draws
    noise = NOISE_DRAWS * 0.016 * 2
    assert priced == pytest.approx(pause_cost_s(two, 30, None, 0.016) * 9 / 5 + noise)
    assert 8.0 < alone * 9 / 5 < 12.0


def test_a_pause_on_one_cpu_counts_the_timing_of_its_batches():
    """pause.pause_cost_s on one CPU device, priced: its readings and the timing of the run's
    batch and of two and four times it (pause.timed_scales: rounds of a warm-up step and the timed
    ones, each at its multiple of the run's step); a slowed device is not timed."""
    from omnitune import planning
    from omnitune.core import profile
    from omnitune.probing.pause import NOISE_DRAWS, TIMED_ROUNDS, TIMED_STEPS, pause_cost_s
    from tests.conftest import DATA, make_spec

    step_s = planning.spec_step_s(profile.load(DATA / "profile-v1.json"), "one-worker")
    one = make_spec("sync", [["cpu-all"]], batch=16, lr=0.1, momentum=0.9)
    slowed = make_spec("sync", [["cpu-all"]], batch=16, lr=0.1, momentum=0.9, slowdown={"cpu-all": 2.0})
    timing = TIMED_ROUNDS * (1 + TIMED_STEPS) * (1 + 2 + 4) * 0.016
    assert pause_cost_s(one, 30, step_s, 0.016) == pytest.approx(pause_cost_s(slowed, 30, step_s, 0.016) + timing)
    assert pause_cost_s(slowed, 30, step_s, 0.016) == pytest.approx(pause_cost_s(one, 30, None, 0.016) * 9 / 5
                                                                     + NOISE_DRAWS * 0.016)


def test_a_stalled_pause_lowers_the_rate_one_step_at_most():
    """teacher-mlp's stalled pause at 10.5 s (batch 64, lr 0.033) read a tenth of the rate lower on
    both losses beyond the noise and took it; the run then missed its target. A stalled pause now
    takes a third where it reads lower on both, never a tenth; off pace, a tenth may win. Fails
    if a stall lowers the rate more than one step, or if off pace is held to one."""
    now, third, tenth = retune.Setting(0.033, 0.9), retune.Setting(0.011, 0.9), retune.Setting(0.0033, 0.9)
    scores = {now: readings((0.30, 0.25), (0.30, 0.25)), third: readings((0.28, 0.24), (0.28, 0.24)),
              tenth: readings((0.26, 0.22), (0.26, 0.22))}
    assert retune.challenger(now, scores, stalled=True) == third
    assert decide(now, scores, stalled=True).setting == third
    only_tenth = {now: scores[now], tenth: scores[tenth]}
    assert not decide(now, only_tenth, stalled=True).switched
    assert decide(now, only_tenth, stalled=True, off_pace=True).setting == tenth
    assert retune.lowest(False) == 1.0 and retune.lowest(True) == retune.RULES.stall_step and retune.lowest(True, True) == 0


@pytest.mark.parametrize("last, flag, told", [(2200, "stalled", "plateau"), (2600, "stalled", "plateau"),
                                              (None, "stalled", "stall"), (2200, "off_pace", "plateau"),
                                              (2600, "off_pace", "off pace")])
def test_a_stall_on_its_way_and_off_pace_before_half_way_pause_for_a_plateau_check(tmp_path, monkeypatch,
                                                                                 last, flag, told):
    """run_with_replans on a fake clock: the segment ends stalled (or off pace); its readings'
    error halves every 1,000 iterations from 0.5, so the recent pace crosses 0.985 at 5,059. A
    stall whose pace gets there is told "plateau" (read as on schedule, then the plateau check),
    kept in replans.jsonl as `early`, at 2,200 and at 2,600 alike; with readings flat at 0.9 the
    pace never gets there, and a stall is a stall. Off pace, the run is told "plateau" short of
    half way (2,200) and "off pace" past it (2,600). Fails if a stall on its way, or an early off-pace run, may lower
    the rate."""
    import json
    from dataclasses import replace

    from omnitune.core import plan as plan_mod
    from omnitune.runtime import job
    from omnitune.runtime.summary import RunSummary
    from tests.conftest import make_plan

    clock = {"t": 0.0, "train": 0.0}
    monkeypatch.setattr(job.time, "perf_counter", lambda: clock["t"])
    run_dir, launched, told_why = tmp_path / "run", [], []
    halving = [(i, 1 - 0.5 * 2 ** (-i / 1000)) for i in range(0, (last or 0) + 1, 200)]
    curve = halving if last else [(i, 0.9) for i in range(0, 2601, 200)]

    def run_job(args):
        launched.append(args)
        end = 20.0 if len(launched) == 1 else 100.0
        if len(launched) == 1:
            with open(run_dir / "metrics.jsonl", "a") as f:
                for k, (it, acc) in enumerate(curve):
                    f.write(json.dumps({"train_s": 20.0 * (k + 1) / len(curve), "iteration": it,
                                        "test_accuracy": acc, flag: True}) + "\n")
        clock["t"] += end - clock["train"] + job.RESUME_S
        clock["train"] = end
        return RunSummary(1, end >= 100.0, 100.0 if end >= 100.0 else None, None, 100 * int(end), 0.5, 0.99, None,
                          0.1, 0.1, end, 0.0, "", "sync", 1, (100 * int(end),), 0.0, 1)

    def replan(spec, checkpoint, why):
        told_why.append(why)
        return spec, {"before": {}, "after": {}, "switched": False}

    monkeypatch.setattr(job, "run_job", run_job)
    plan = plan_mod.load(make_plan(tmp_path / "plan.json", "sync", [["cpu0"]], lr=0.1, target=0.985))
    args = job.prepare(plan.spec, str(run_dir), job.RunOptions(max_time_s=100))
    job.run_with_replans(plan, replace(args, max_time_s=100), None, replan, first_pause_s=0.1, restart_s=job.RESUME_S)
    assert told_why == [told]
    record = json.loads((run_dir / "replans.jsonl").read_text().splitlines()[0])
    assert record.get("early") == ({"stalled": "stall", "off_pace": "off pace"}[flag] if told == "plateau" else None)
    assert (record["way"] is None) == (last is None)


def test_the_goodput_grows_the_batch_as_the_noise_scale_grows():
    """retune.grown on the calibrated profile's hardware model (sync on two cores, batch 8 each;
    64 the largest it measured): at a noise scale far below the batch nothing grows; at 100
    samples four times the batch at AdaScale's rate, under four times the rate; and nothing past
    the largest batch the profile timed. Fails if the rate scales linearly whatever phi, or if the
    batch grows on the hardware alone."""
    from dataclasses import replace

    from tests.conftest import make_spec

    step_s = calibrated_step_s()
    spec = make_spec("sync", [["cpu0", "cpu1"]], batch=8, lr=0.1, momentum=0.9)
    assert retune.grown(spec, step_s, 1.0) is None
    setting, ratio = retune.grown(spec, step_s, 100.0)
    assert setting.batch == 4.0 and setting.momentum == 0.9 and ratio > 1 + retune.RULES.goodput_gain
    assert setting.lr == pytest.approx(0.1 * 4 * (100 + 16) / (100 + 64), rel=0.01) and setting.lr < 0.4
    assert retune.grown(spec, step_s, math.inf)[0].lr == pytest.approx(0.4)
    assert retune.grown(replace(spec, batch_size={"cpu0": 64, "cpu1": 64}), step_s, 1e6) is None
    assert retune.grown(spec, None, 100.0) is None


@pytest.mark.parametrize("grown_raw, grown_cooled, switches", [(1.01, 1.01, True), (0.9, 0.9, True),
                                                                (1.2, 1.0, False), (1.0, 1.2, False)])
def test_the_goodputs_batch_is_taken_unless_its_readings_are_worse_beyond_the_noise(grown_raw, grown_cooled,
                                                                                   switches):
    """The current setting read 1.00 and 1.02 (noise 0.02). The goodput's larger batch is taken at a
    reading within that noise (short reads favour the smaller batch, so a tie is no reason to stay)
    or better, and refused where either loss is worse beyond it, the reason saying so."""
    now, bigger = retune.Setting(0.1, 0.9), retune.Setting(0.3, 0.9, 4.0)
    d = decide(now, {now: readings((1.0, 1.0), (1.02, 1.02)),
                     bigger: readings((grown_raw, grown_cooled), (grown_raw, grown_cooled))}, growth=bigger)
    assert d.switched is switches and d.setting == (bigger if switches else now)
    assert ("goodput grows" in d.reason) is switches and ("beyond the noise" in d.reason) is not switches
    assert not decide(now, {now: readings((1.0, 1.0)), bigger: [Reading(math.inf, math.inf, 0.0)]},
                      growth=bigger).switched


def test_a_larger_batch_whose_repeats_swing_is_vetoed_by_the_current_settings_noise():
    """gru-count's pause (2026-11-28): four times the batch read 0.87 and 2.10 cooled against the
    current 0.94 and 0.88. Its own spread (1.24) is no margin for it: worse by 0.575 on the mean
    against the current setting's spread of 0.06, it is refused. The same mean gap within the
    current setting's own spread is taken."""
    now, bigger = retune.Setting(0.03, 0.9), retune.Setting(0.066, 0.9, 4.0)
    d = decide(now, {now: readings((1.42, 0.94), (1.41, 0.88)), bigger: readings((1.40, 0.87), (1.44, 2.10))},
               growth=bigger)
    assert not d.switched and "cooled validation loss 0.5750 higher, beyond the noise 0.0600" in d.reason
    steady = decide(now, {now: readings((1.0, 0.5), (1.0, 1.5)), bigger: readings((1.0, 1.2), (1.0, 1.2))},
                    growth=bigger)
    assert steady.switched and steady.setting == bigger


def test_a_rate_that_wins_beyond_the_noise_goes_before_the_goodputs_batch():
    now, bigger, higher = retune.Setting(0.1, 0.9), retune.Setting(0.3, 0.9, 4.0), retune.Setting(0.3, 0.9)
    d = decide(now, {now: readings((1.0, 1.0), (1.0, 1.0)), higher: readings((0.8, 0.8), (0.8, 0.8)),
                     bigger: readings((0.9, 0.9), (0.9, 0.9))}, growth=bigger)
    assert d.setting == higher


def test_a_pause_measures_the_noise_scale_and_takes_the_goodputs_batch(tmp_path, monkeypatch):
    """pause.retune with the hardware model: the noise scale measured at the checkpoint (faked at
    1,000 samples) makes four times the batch a candidate at AdaScale's rate; it reads like the
    current setting, and the run goes on with it; replans' record says why, with phi and the
    goodput's gain. Without the hardware model nothing is measured."""
    import torch

    from omnitune.probing import pause
    from tests.conftest import make_spec

    spec = make_spec("sync", [["cpu0", "cpu1"]], batch=8, lr=0.1, momentum=0.9)
    read = []

    def fake(wl, train, held, spec, state, setting, batches, iters, cool=True):
        read.append((setting, iters))
        return Reading(1.0, 1.0, 0.0)
    monkeypatch.setattr(pause, "pause_reading", fake)
    monkeypatch.setattr(pause, "first", lambda test, n: test)
    monkeypatch.setattr(pause, "gradient_noise", lambda *a, **k: (1000.0, 1.0))
    ckpt = tmp_path / "c.pt"
    torch.save({"model": {}, "optimizer": {}}, ckpt)
    new, record = pause.retune(spec, ckpt, "schedule", iters=30, step_s=calibrated_step_s())
    bigger = retune.grown(spec, calibrated_step_s(), 1000.0)[0]
    assert [s for s, _ in read].count(bigger) == 2 and dict(read)[bigger] < 30
    assert new.batch_size == {"cpu0": 32, "cpu1": 32} and new.lr == bigger.lr and record["switched"]
    assert record["noise_scale"] == 1000.0 and record["goodput_gain"] > 1 + retune.RULES.goodput_gain
    assert "goodput grows" in record["reason"]
    _, plain = pause.retune(spec, ckpt, "schedule", iters=30)
    assert plain["noise_scale"] is None and not plain["switched"]
    monkeypatch.setattr(pause, "gradient_noise", lambda *a, **k: (math.inf, -1.0))     # all noise: linear scaling
    new, record = pause.retune(spec, ckpt, "schedule", iters=30, step_s=calibrated_step_s())
    assert record["noise_scale"] == "inf" and json.loads(json.dumps(record))["noise_scale"] == "inf"
    assert new.lr == pytest.approx(0.4) and new.batch_size == {"cpu0": 32, "cpu1": 32}


def test_a_far_rate_is_read_only_where_the_near_one_read_better_on_both_losses():
    """Ten times the rate follows three times, a tenth a third, only where that near step read
    lower than the current setting raw and cooled; other settings are always read. Fails if the
    far rates are read whatever the near ones did, or never."""
    now = retune.Setting(0.04, 0.9)
    x3, x10, third, tenth = (retune.Setting(retune.rate(0.04, f), 0.9) for f in (3.0, 10.0, 1 / 3, 0.1))
    worse = {now: readings((1.0, 1.0)), x3: readings((1.2, 0.9)), third: readings((0.9, 1.1))}
    assert not retune.further(x10, now, worse) and not retune.further(tenth, now, worse)
    better = {now: readings((1.0, 1.0)), x3: readings((0.9, 0.95)), third: readings((0.8, 0.9))}
    assert retune.further(x10, now, better) and retune.further(tenth, now, better)
    assert not retune.further(x10, now, {now: readings((1.0, 1.0))})          # the near one not read
    for other in (now, x3, third, retune.Setting(0.08, 0.9, 2.0), retune.Setting(0.04, 0.5)):
        assert retune.further(other, now, {})


@pytest.mark.parametrize("x3_reads, far_read", [((1.1, 1.1), False), ((0.9, 0.9), True)])
def test_a_pause_reads_ten_times_the_rate_only_after_three_times_read_better(tmp_path, monkeypatch, x3_reads,
                                                                             far_read):
    """pause.retune on a stalled run: 3x the rate reads worse than the current one, and 10x is not
    read (the record lists it as not read; a tenth likewise where a third read worse); where 3x
    reads better on both losses, 10x is read."""
    from omnitune.probing import pause
    from tests.conftest import make_spec

    spec = make_spec("sync", [["cpu0", "cpu1"]], batch=8, lr=0.1, momentum=0.9)
    read = []

    def fake(wl, train, held, spec, state, setting, batches, iters, cool=True):
        read.append(setting)
        ratio = round(setting.lr / 0.1, 2)
        return Reading(*x3_reads, 0.0) if ratio == 3.0 else Reading(1.2, 1.2, 0.0) if ratio == 0.33 \
            else Reading(1.0, 1.0, 0.0)
    ckpt = faked_pause(tmp_path, monkeypatch, fake)
    _, record = pause.retune(spec, ckpt, "stall", iters=30)
    lrs = {s.lr for s in read}
    assert (1.0 in lrs) is far_read and 0.01 not in lrs and 0.3 in lrs and 0.0333 in lrs
    assert {r["lr"] for r in record["not_read"]} == ({0.01} if far_read else {1.0, 0.01})


def test_timed_scales_replace_the_models_ratios_and_nothing_else():
    """retune.timed: a scale the pause timed steps at the model's current step times the timed
    ratio; the current batch keeps the model's figure, other shapes and unpriced ones the model's."""
    from dataclasses import replace

    from tests.conftest import make_spec

    step_s = calibrated_step_s()
    spec = make_spec("sync", [["cpu0", "cpu1"]], batch=8, lr=0.1, momentum=0.9)
    base = step_s(spec)
    faster = retune.timed(step_s, spec, {1.0: 0.010, 2.0: 0.012, 4.0: 0.016})
    assert faster(spec) == pytest.approx(base)
    assert faster(retune.scaled(spec, 2.0)) == pytest.approx(base * 1.2)
    assert faster(retune.scaled(spec, 4.0)) == pytest.approx(base * 1.6)
    half = retune.scaled(spec, 0.5)
    assert faster(half) == step_s(half)
    huge = replace(spec, batch_size={"cpu0": 10**6, "cpu1": 10**6})
    assert step_s(huge) is None and faster(huge) is None


@pytest.mark.parametrize("big_s, grows", [(0.011, True), (0.040, False)])
def test_a_pause_on_one_cpu_grows_the_batch_by_the_steps_it_timed(tmp_path, monkeypatch, big_s, grows):
    """On one CPU device the goodput's speeds are the pause's own timings: where four times the
    batch steps nearly as fast as the run's, the batch grows; where it steps four times slower
    (no more samples a second), it does not, whatever the profile's curve says. The timings go
    into replans' record."""
    import torch

    from omnitune import planning
    from omnitune.core import profile
    from omnitune.probing import pause
    from tests.conftest import DATA, make_spec

    spec = make_spec("sync", [["cpu-all"]], batch=16, lr=0.1, momentum=0.9)
    step_s = planning.spec_step_s(profile.load(DATA / "profile-v1.json"), "one-worker")
    assert step_s(spec) and step_s(retune.scaled(spec, 4.0))
    monkeypatch.setattr(pause, "pause_reading", lambda *a: Reading(1.0, 1.0, 0.0))
    monkeypatch.setattr(pause, "first", lambda test, n: test)
    monkeypatch.setattr(pause, "gradient_noise", lambda *a, **k: (1000.0, 1.0))
    seconds = {1.0: 0.010, 2.0: (0.010 + big_s) / 2, 4.0: big_s}
    monkeypatch.setattr(pause, "timed_scales", lambda *a: seconds)
    ckpt = tmp_path / "c.pt"
    torch.save({"model": {}, "optimizer": {}}, ckpt)
    new, record = pause.retune(spec, ckpt, "schedule", iters=30, step_s=step_s)
    assert record["timed_step_s"] == {"1.0": 0.010, "2.0": seconds[2.0], "4.0": big_s}
    assert (new.batch_size["cpu-all"] > 16) == grows == record["switched"]


def test_a_pause_times_its_batches_on_one_cpu_device_only():
    """pause.timed_scales times the run's batch and the larger ones the model prices, on the
    workload's real loop from its own weights; several devices, a slowed one or none priced:
    nothing is timed."""
    import torch

    from omnitune import planning
    from omnitune.core import profile
    from omnitune.probing import pause
    from omnitune.runtime import workload as workload_mod
    from tests.conftest import DATA, make_spec

    spec = make_spec("sync", [["cpu-all"]], batch=16, lr=0.1, momentum=0.9)
    step_s = planning.spec_step_s(profile.load(DATA / "profile-v1.json"), "one-worker")
    wl = workload_mod.load(spec.workload)
    train, _ = wl.build_datasets(None, 0)
    torch.manual_seed(0)
    net = wl.build_model()
    state = {"model": net.state_dict(), "optimizer": None}
    seconds = pause.timed_scales(wl, train, spec, state, step_s)
    assert set(seconds) == {1.0, 2.0, 4.0} and all(t > 0 for t in seconds.values())
    two = make_spec("sync", [["cpu0", "cpu1"]], batch=16)
    assert pause.timed_scales(wl, train, two, state, calibrated_step_s()) is None
    slowed = make_spec("sync", [["cpu-all"]], batch=16, slowdown={"cpu-all": 2.0})
    assert pause.timed_scales(wl, train, slowed, state, step_s) is None
    assert pause.timed_scales(wl, train, spec, state, lambda s: step_s(s) if s == spec else None) is None


def test_a_pauses_first_cost_counts_no_goodput_for_adamw_and_the_test_set_it_has(tmp_path, monkeypatch):
    """pause.pause_cost_s for a run that is not SGD weighs no goodput (no reads of its batch, no
    noise scale, no timing: pause.grows), and its evaluations are of the validation samples there
    are (pause.validation_size: the cached test set, where it holds fewer than RETUNE_VALIDATION)."""
    from types import SimpleNamespace

    from omnitune import planning
    from omnitune.core import profile
    from omnitune.probing.pause import (FORWARD_SHARE, NOISE_DRAWS, RETUNE_VALIDATION, TIMED_ROUNDS, TIMED_STEPS,
                                        pause_cost_s, validation_size)
    from omnitune.runtime import workload
    from tests.conftest import DATA, make_spec, tiny_cached_workload

    step_s = planning.spec_step_s(profile.load(DATA / "profile-v1.json"), "one-worker")
    one = make_spec("sync", [["cpu-all"]], batch=16, lr=0.1, momentum=0.9)
    # its 5 candidates (3 rates, 2 priced batches) and 2 repeats: no goodput's batch, noise or timing
    adamw = pause_cost_s(one, 30, step_s, 0.016, SimpleNamespace(recipe=SimpleNamespace(optimizer="adamw")))
    assert adamw == pytest.approx(pause_cost_s(one, 30, None, 0.016) * 7 / 5)
    assert pause_cost_s(one, 30, step_s, 0.016) == pytest.approx(
        adamw * 9 / 7 + NOISE_DRAWS * 0.016 + TIMED_ROUNDS * (1 + TIMED_STEPS) * (1 + 2 + 4) * 0.016)
    full, small = pause_cost_s(one, 30, None, 0.016), pause_cost_s(one, 30, None, 0.016, validation=128)
    reads = 3 + 2                               # the rates near and the batches left unpriced: as above
    saved = reads * 2 * (RETUNE_VALIDATION - 128) / 16 * FORWARD_SHARE * 0.016
    assert full - small == pytest.approx(saved) and saved > 0
    wl = workload.load(str(tiny_cached_workload(tmp_path, monkeypatch)))
    assert validation_size(wl, None) == RETUNE_VALIDATION          # not built yet: no cost to count them
    wl.build_datasets(None, 0)                                      # now in the cache
    assert validation_size(wl, None) == 40
    assert validation_size(wl, str(tmp_path)) == RETUNE_VALIDATION  # a data dir: never from the cache
    wl.cache_path().write_bytes(b"not a cache file")
    assert validation_size(wl, None) == RETUNE_VALIDATION          # unreadable: the most, no rebuild


def test_a_pause_reads_around_the_values_in_force_and_never_goes_back_over_the_runs_edge(tmp_path):
    """The run's checkpoint says its changes in place left lr 0.05 at batch 32 in force over a
    segment launched at lr 0.1, batch 16: the pause reads around those (`in_force`), not the
    plan's. The tuner cut 0.08 at batch 16 (a change "unstable" to 0.04): the run's edge is 0.005
    a sample. A pause's choice of 0.1 at batch 16 (0.00625 a sample: past it) is held at half the
    edge (0.04), one of 0.06 at batch 32 (under it) stands; a divergence at the values in force
    (0.05 at 32, 0.0016 a sample) lowers the edge to that. Fails if a pause reads the plan's
    values, or takes the run back over an edge it met (gru-count's pause after a divergence chose
    the rate that diverged again, 2026-12-06)."""
    from dataclasses import replace

    from omnitune.core.change import Knobs
    from omnitune.core import plan as plan_mod
    from omnitune.runtime import checkpoint, job
    from tests.conftest import make_plan

    spec = plan_mod.load(make_plan(tmp_path / "plan.json", "sync", [["cpu0"]])).spec
    spec = replace(spec, lr=0.1, batch_size={"cpu0": 16})
    path = tmp_path / "checkpoint.pt"
    assert job.in_force(spec, path) is spec                         # no checkpoint: the spec
    now = Knobs(0.05, spec.momentum, {"cpu0": 32})
    checkpoint.save_state(path, {"model": {}, "optimizer": {}, "knobs": {"base": Knobs.of(spec).to_dict(),
                                                                         "now": now.to_dict()}}, 100, 1.0)
    assert (job.in_force(spec, path).lr, job.in_force(spec, path).batch_size) == (0.05, {"cpu0": 32})
    assert job.in_force(replace(spec, lr=0.2), path).lr == 0.2     # another segment's checkpoint: its own
    lines = [{"iteration": 50, "test_accuracy": 0.5},
             {"event": "change", "iteration": 60, "why": "unstable", "lr": 0.04, "batch_size": {"cpu0": 16}},
             {"event": "change", "iteration": 70, "why": "cool-down", "lr": 0.001, "batch_size": {"cpu0": 16}}]
    over = job.edge(lines, None, 0.5)
    assert over == pytest.approx(0.005)
    assert job.below_edge(spec, over, 0.5).lr == pytest.approx(0.04)
    wider = replace(spec, lr=0.06, batch_size={"cpu0": 32})
    assert job.below_edge(wider, over, 0.5) is wider
    assert job.edge(lines, job.in_force(spec, path), 0.5) == pytest.approx(0.05 / 32)
    assert job.edge(lines[:1], None, 0.5) is None and job.below_edge(spec, None, 0.5) is spec
