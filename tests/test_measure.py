import pytest

from omnitune.runtime.measure import Settings, StepTimer, barriers, batch_sizes, measure_steps


def test_batch_sizes():
    assert batch_sizes(1) == [1]
    assert batch_sizes(16) == [1, 2, 4, 8, 16]
    assert batch_sizes(48) == [1, 2, 4, 8, 16, 32, 48]


def test_measure_steps_stops_at_the_time_cap(digits):
    import torch
    wl, train, _ = digits
    timer = StepTimer(wl, train, torch.device("cpu"))
    steps = measure_steps(timer, Settings(max_batch=32, max_step_s=1e-9, repeats=1, warmup=0))
    assert [s.batch_size for s in steps] == [1]          # the first step already exceeded the cap
    steps = measure_steps(timer, Settings.make(quick=True, max_batch=16))
    assert [s.batch_size for s in steps] == [1, 2, 4, 8, 16]
    assert all(s.sec_per_step > 0 and s.samples_per_s == s.batch_size / s.sec_per_step for s in steps)
    assert all(s.spread >= 0 for s in steps) and any(s.spread > 0 for s in steps)   # repeats never agree to the ns


def test_quick_settings_are_lighter():
    assert Settings.make(True).repeats < Settings.make(False).repeats
    assert Settings.make(False, max_batch=128).max_batch == 128


@pytest.mark.parametrize("spell", [0, 1, 2])
def test_a_slow_spell_in_one_pass_leaves_the_steps_as_they_were(spell):
    """Steps of 1 ms a sample, ten times slower through one of three passes over the sizes (a slow
    spell of the host): every size's step is still about 1 ms a sample."""
    s = Settings(max_batch=8, max_step_s=1.0, passes=3)
    met = []                                                     # the barrier: once per size and pass

    class Spell:
        def time(self, batch, settings, first=True):
            slow = 10 if (len(met) - 1) // len(batch_sizes(s.max_batch)) == spell else 1
            return [batch * 1e-3 * slow * (1 + 0.01 * i) for i in range(3 if first else 1)]
    steps = measure_steps(Spell(), s, barrier=lambda: met.append(1))
    assert len(met) == barriers(s)
    assert [x.batch_size for x in steps] == [1, 2, 4, 8]
    assert [x.sec_per_step for x in steps] == pytest.approx([b * 1e-3 for b in (1, 2, 4, 8)], rel=0.02)
    assert all(x.spread == pytest.approx(0.01, rel=0.1) for x in steps)      # within a pass, not between
