import math

import pytest

from omnitune.core.protocols import Gossip, Groups, SoftSync, Sync
from omnitune.efficiency.statmodel import ProbeStatus
from omnitune.probing.probe import ProbeConfig, eval_schedule, make_prober, run_probe


def test_probe_reaches_a_modest_target(digits):
    wl, train, test = digits
    r, _ = run_probe(wl, train, test, ProbeConfig(Sync(), ((32,),), 0.05, 0.9), 0.9, 1000, 30, seed=0)
    assert r.reached and r.note == "reached" and 0 < r.iters_to_target <= r.curve[-1][0]
    assert r.mean_staleness == 0


def test_probe_staleness_follows_the_protocol(digits):
    """Equal groups take turns at the server: g - 1 updates late, after the first round."""
    wl, train, test = digits
    stale = [run_probe(wl, train, test, ProbeConfig(Groups(g=g), ((32,),) * g, 0.02, 0.0), 0.99, 60, 30,
                       seed=0)[0].mean_staleness for g in (2, 4)]
    assert 0.9 < stale[0] <= 1 and 2.5 < stale[1] <= 3
    waits, _ = run_probe(wl, train, test, ProbeConfig(SoftSync(learners=4, n=1), ((16,),) * 4, 0.02, 0.0), 0.99,
                         30, 30, seed=0)
    assert waits.mean_staleness == 0                  # n = 1: an update waits for every learner


def test_probe_reports_divergence(digits):
    wl, train, test = digits
    r, _ = run_probe(wl, train, test, ProbeConfig(Sync(), ((32,),), 1e4, 0.9), 0.9, 200, 30, seed=0)
    assert r.status == ProbeStatus.DIVERGED and r.note == "diverged" and r.iters_to_target is None


def test_same_seed_same_curve(digits):
    wl, _, _ = digits
    prober = make_prober(wl, None, 0.95, seed=3)
    cfg = ProbeConfig(Groups(g=2), ((16,), (16,)), 0.05, 0.4)
    assert prober(cfg, 100, 30).curve == prober(cfg, 100, 30).curve


def test_gossip_is_evaluated_right_after_its_averaging_rounds(digits):
    """Between rounds a replica drifts alone; the runtime evaluates only right after a round, so
    the probe must too, or its curve mixes both phases."""
    wl, train, test = digits
    r, _ = run_probe(wl, train, test, ProbeConfig(Gossip(every=4), ((16, 16),), 0.05, 0.9), 1.1, 60, 30, seed=0,
                     eval_every=10)
    assert [it for it, _ in r.curve] == [20, 40, 60]


def test_eval_schedule_is_close_early_and_within_its_count():
    close = eval_schedule(1500, 64)
    assert close[:3] == [10, 20, 30] and close[-1] == 1500 and len(close) <= 64    # a short job's crossing
    few = eval_schedule(5000, 4)
    assert len(few) <= 4 and few[-1] == 5000 and few == sorted(set(few))           # dear evaluations: spread out
    assert eval_schedule(24, 2)[-1] == 24


def test_a_probe_goes_on_from_where_it_stopped(digits):
    """A longer probe of the same configuration starts from the first one's hand-off: its
    iterations, curve and training time go on, and the hand-off is a checkpoint of the model."""
    from omnitune.runtime.flat import flatten_state

    wl, train, test = digits
    cfg = ProbeConfig(Sync(), ((32,),), 0.05, 0.9)
    first, stop = run_probe(wl, train, test, cfg, 1.1, 40, 30, seed=0, eval_every=20)
    assert (stop.iterations, stop.curve) == (40, first.curve) and 0 < stop.train_s <= first.seconds
    model = wl.build_model()
    model.load_state_dict(stop.state["model"])
    assert flatten_state(stop.state["optimizer"], model)["state"][0]["momentum_buffer"].abs().sum() > 0
    more, went_on = run_probe(wl, train, test, cfg, 1.1, 80, 30, seed=0, eval_every=20, start=stop)
    assert more.iters == went_on.iterations == 80
    assert [it for it, _ in more.curve] == [20, 40, 60, 80] and more.curve[:2] == first.curve
    assert went_on.train_s > stop.train_s
    assert more.curve[2][1] > first.curve[0][1]          # it learned on from there, not from scratch


def test_a_probe_that_goes_on_reads_as_one_probe_of_all_its_iterations(digits):
    """A probe of 40 iterations from where one of 20 stopped: its first loss is the first
    probe's (a fresh probe's: the same first batch), its training loss the last quarter of all
    40, its seconds both legs'. Fails if the first loss or the losses are the second leg's alone
    (a scout that goes on would then always read as having learned nothing, or its loss be
    averaged over another window than the probes it is ranked against). The second leg's batches
    are a resumed run's (seed + iteration), not a fresh probe's, so its losses are not equal to
    one."""
    wl, train, test = digits
    cfg = ProbeConfig(Sync(), ((32,),), 0.05, 0.9)
    fresh, _ = run_probe(wl, train, test, cfg, 1.1, 40, 30, seed=0)
    short, handoff = run_probe(wl, train, test, cfg, 1.1, 20, 30, seed=0)
    went_on, end = run_probe(wl, train, test, cfg, 1.1, 40, 30, seed=0, start=handoff)
    assert went_on.iters == end.iterations == 40 and len(end.losses) == 40
    assert went_on.start_loss == short.start_loss == fresh.start_loss
    assert went_on.train_loss == pytest.approx(sum(end.losses[30:]) / 10)
    assert went_on.seconds > short.seconds and end.seconds == went_on.seconds


def test_the_noise_scale_grows_as_a_model_learns_and_is_measured_without_an_update(digits):
    """gradient_noise on lenet-digits at batch 32, lr 0.05: after 150 updates phi is about 100
    samples; after 450, with the loss far lower, several times that (about 800), as McCandlish et
    al. found over training. The weights are left as they were."""
    import torch

    from omnitune.probing.emulator import emulator
    from omnitune.probing.pause import gradient_noise

    wl, train, _ = digits
    emu = emulator(wl, train, ProbeConfig(Sync(), ((32,),), 0.05, 0.9), 0)
    for _ in range(150):
        emu.step()
    early = gradient_noise(wl, train, emu.checkpoint_state()["model"], 32, seed=1)[0]
    for _ in range(300):
        emu.step()
    state = {k: v.clone() for k, v in emu.checkpoint_state()["model"].items()}
    later = gradient_noise(wl, train, state, 32, seed=1)[0]
    assert 0 < early < 300 and later > 3 * early
    assert all(torch.equal(state[k], v) for k, v in emu.checkpoint_state()["model"].items())


def test_the_prober_knows_the_loss_of_predicting_the_labels_frequencies(digits):
    """The digits' ten classes are about balanced: log(10)."""
    wl, _, _ = digits
    assert make_prober(wl, None, 0.95, seed=0).label_loss == pytest.approx(math.log(10), abs=0.01)
