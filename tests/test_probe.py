import pytest

from omnitune.probe import ProbeConfig, make_prober, run_probe


def test_probe_reaches_a_modest_target(digits):
    wl, train, test = digits
    r = run_probe(wl, train, test, ProbeConfig(32, 0.05, 0.9, 1), 0.9, 1000, 30, seed=0)
    assert r.reached and r.note == "reached" and 0 < r.iters_to_target <= r.curve[-1][0]
    assert r.mean_staleness == 0


def test_probe_staleness_grows_with_groups(digits):
    wl, train, test = digits
    stale = [run_probe(wl, train, test, ProbeConfig(32, 0.02, 0.0, g), 0.99, 60, 30, seed=0).mean_staleness
             for g in (1, 2, 4)]
    assert stale[0] == 0 < stale[1] < stale[2]


def test_probe_reports_divergence(digits):
    wl, train, test = digits
    r = run_probe(wl, train, test, ProbeConfig(32, 1e4, 0.9, 1), 0.9, 200, 30, seed=0)
    assert r.note == "diverged" and r.iters_to_target is None


def test_same_seed_same_curve(digits):
    wl, _, _ = digits
    prober = make_prober(wl, None, 0.95, seed=3)
    a, b = prober(ProbeConfig(16, 0.05, 0.4, 2), 100), prober(ProbeConfig(16, 0.05, 0.4, 2), 100)
    assert a.curve == b.curve


def test_sensing_finds_explicit_momentum_when_synchronous_and_more_with_groups():
    from omnitune import workload
    from omnitune.probe import sense_momentum

    wl = workload.load("logreg-digits")
    train, _ = wl.build_datasets(None, 0)
    full = len(train)
    sync = sense_momentum(wl, train, ProbeConfig(full, 0.5, 0.5, 1), steps=30, replicas=2, seed=0)
    assert sync.total == pytest.approx(0.5, abs=0.02) and abs(sync.implicit) < 0.02
    four = sense_momentum(wl, train, ProbeConfig(full, 0.5, 0.0, 4), steps=40, replicas=12, seed=0)
    assert 0.5 < four.implicit < 0.9                       # theory: 1 - 1/4 = 0.75
