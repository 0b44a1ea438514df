from omnitune.runtime.measure import Settings, StepTimer, batch_sizes, measure_steps


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
