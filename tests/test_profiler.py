from dataclasses import replace

from omnitune.core.cluster import local_cluster
from omnitune.core.profile import StepTiming
from omnitune.profiling import profiler
from omnitune.runtime import host
from omnitune.runtime.measure import Settings
from omnitune.runtime.profile_worker import ProfileJob, alone_sized, message_sizes, p2p_partner, sized_specs
from omnitune.runtime.topology import Node


def test_message_sizes_span_latency_and_bandwidth():
    sizes = message_sizes(153128)
    assert sizes[0] == 4096 and 153128 in sizes and max(sizes) == 4 * 153128
    assert all(s % 4 == 0 for s in sizes)


def test_host_facts_are_this_hosts():
    """Each fact from its source: the hostname, core count, Python and torch versions, and one
    CUDA device name per visible device (none without CUDA). Fails if host_facts reports
    os.cpu_count() // 2 (physical cores), a fixed hostname such as "localhost", sys.version
    whole, or torch.version.cuda for torch."""
    import os
    import platform
    import socket

    import torch

    facts = host.host_facts()
    assert facts.hostname == socket.gethostname()
    assert facts.cpu_count == os.cpu_count()
    assert facts.platform == platform.platform()
    assert facts.python == platform.python_version()
    assert facts.torch == torch.__version__
    if torch.cuda.is_available():
        assert facts.cuda_devices == tuple(torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count()))
    else:
        assert facts.cuda_devices == ()


def test_host_facts_name_each_visible_cuda_device(monkeypatch):
    """With CUDA reported (stubbed), one name per device index, in index order; with CUDA not
    available, none even where a device count is reported. Fails if host_facts drops the
    is_available() guard or names device 0 for every index."""
    import torch

    names = {0: "GPU zero", 1: "GPU one"}
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda i=0: names[i])
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    assert host.host_facts().cuda_devices == ("GPU zero", "GPU one")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert host.host_facts().cuda_devices == ()


def test_calibration_runs_every_variant_the_planner_may_choose():
    cluster = local_cluster(cpu_count=4, cuda_count=0)
    specs = profiler.calibration_specs(cluster, "one-per-core", "lenet-digits", None, (8, 32))
    keys = {(s.variant.key, len(s.groups)) for s in specs}
    assert keys == {("sync", 1), ("groups", 2), ("groups", 4), ("softsync/n=1", 4), ("softsync/n=2", 4),
                    ("softsync/n=4", 4), ("hpsgd", 1), ("gossip/every=1", 1), ("gossip/every=4", 1)}
    assert all(s.target_accuracy is None for s in specs)         # they train for their time
    server_only = profiler.calibration_specs(cluster, "one-per-core", "lenet-digits", None, (8,), server_only=True)
    assert server_only and all(s.variant.has_server for s in server_only)


def test_the_larger_calibration_batch_is_cut_to_what_a_job_can_time_several_updates_of():
    cluster = local_cluster(cpu_count=2, cuda_count=0)
    specs = profiler.calibration_specs(cluster, "one-per-core", "lenet-digits", None, (16, 64, 256))
    job = ProfileJob("lenet-digits", None, cluster.layout("one-per-core"),
                     Settings(calibrate_s=0.4, calibrate_batches=(16, 64, 256)), calibration_specs=specs)

    def steps(per_sample_s: float) -> list[StepTiming]:
        return [StepTiming(b, b * per_sample_s, 1 / per_sample_s) for b in (1, 2, 4, 8, 16, 32, 64, 128, 256)]

    def batches(*devices) -> set[int]:
        return {b for s in sized_specs(job, list(devices)) for b in s.batch_size.values()}

    assert batches(steps(1e-5), steps(2e-5)) == {16, 64, 256}       # fast steps: batch 256 fits 8 updates
    assert batches(steps(3e-4), steps(3e-4)) == {16, 64, 128}       # 8 updates of 0.077 s fit 0.4 s, not of 0.15
    # The slower device decides: 8 updates of 0.03 s fit 0.4 s at batch 32, not at 64.
    assert batches(steps(1e-5), steps(1e-3)) == {16, 32}
    assert batches(steps(1e-2), steps(1e-2)) == {16, 32}            # nothing fits: twice the smaller batch
    # Allowed to halve to 8: a job at batch 16 would run past 0.4 s for its 4 updates and warm-up
    # (0.16 s each), so 16 halves to 8, and the larger batch is twice that; at 0.064 s a step it would not.
    job = replace(job, settings=replace(job.settings, calibrate_least_batch=8))
    assert batches(steps(1e-2), steps(1e-2)) == {8, 16}
    assert batches(steps(4e-3), steps(4e-3)) == {16, 32}
    assert sized_specs(job, [steps(1e-5), None]) == specs           # a device without timings: as planned


def test_one_device_layouts_get_a_sync_job_at_two_batches_cut_like_the_measured_layouts():
    cluster = local_cluster(cpu_count=4, cuda_count=0)      # one-per-core (measured), 2-workers, one-worker
    settings = Settings(calibrate_s=0.4, calibrate_batches=(16, 64, 256))
    alone = profiler.alone_specs(cluster, "one-per-core", "lenet-digits", None, settings)
    assert [(name, s.variant.key, s.batch_size) for name, s in alone] == [
        ("one-worker", "sync", {"cpu-all": 16}), ("one-worker", "sync", {"cpu-all": 256})]
    job = ProfileJob("lenet-digits", None, cluster.layout("one-per-core"), settings, "one-per-core",
                     alone_specs=alone)
    slow = [StepTiming(b, b * 3e-4, 1 / 3e-4) for b in (1, 2, 4, 8, 16, 32, 64, 128, 256)]
    # 8 updates of batch 256 at 0.077 s do not fit the job's 0.4 s, of batch 128 they do.
    assert [(name, s.batch_size["cpu-all"]) for name, s in alone_sized(job, [slow] * 4)] == [
        ("one-worker", 16), ("one-worker", 128)]
    # On one core there is no other layout.
    assert profiler.alone_specs(local_cluster(cpu_count=1, cuda_count=0), "one-per-core", "lenet-digits", None,
                                settings) == ()


def test_a_gpu_alone_is_calibrated_at_batches_its_own_steps_allow():
    """A one-device layout's jobs are cut by that device's steps, not the measured CPU layout's:
    a fast GPU beside slow cores still gets its job at the largest calibration batch."""
    cluster = local_cluster(cpu_count=4, cuda_count=1)
    settings = Settings(calibrate_s=0.4, calibrate_batches=(16, 64, 256))
    alone = profiler.alone_specs(cluster, "one-per-core", "lenet-digits", None, settings)
    slow = [StepTiming(b, b * 3e-3, 1 / 3e-3) for b in (1, 2, 4, 8, 16, 32, 64, 128, 256)]
    fast = [StepTiming(b, 1e-3 + b * 1e-6, b / (1e-3 + b * 1e-6)) for b in (1, 2, 4, 8, 16, 32, 64, 128, 256)]
    job = ProfileJob("lenet-digits", None, cluster.layout("one-per-core"), settings, "one-per-core",
                     alone_specs=alone, alone_steps={"cuda0": fast})
    batches = {(name, s.batch_size[s.devices[0].id]) for name, s in alone_sized(job, [slow] * 4)}
    assert ("gpus", 256) in batches and ("gpus", 16) in batches
    assert ("one-worker", 32) in batches        # no steps of its own here: cut by the measured layout's


def test_round_trips_cross_the_link_between_nodes_when_there_is_one():
    one = (Node(0, "127.0.0.1", (0, 1, 2)),)
    assert p2p_partner(one) == 1
    two = (Node(0, "10.0.0.1", (0, 1)), Node(1, "10.0.0.2", (2, 3)))
    assert p2p_partner(two) == 2
    server_second = (Node(0, "10.0.0.1", (1,)), Node(1, "10.0.0.2", (0, 2)))
    assert p2p_partner(server_second) == 1


def test_gpus_are_timed_alone_and_cpu_workers_side_by_side():
    cluster = local_cluster(cpu_count=16, cuda_count=1)
    assert profiler.concurrent_layout(cluster) == "one-per-core"
    assert "cuda0" not in cluster.layouts["one-per-core"]


def test_layouts_of_gpus_beside_cpu_workers_get_balanced_sync_jobs_from_the_measured_steps():
    """The mixed layouts' jobs: sync with balanced batches, the GPU (timed alone before the launch)
    given the larger share, cut like the measured layout's jobs."""
    from omnitune.runtime.profile_worker import mixed_sized
    cluster = local_cluster(cpu_count=4, cuda_count=1)
    settings = Settings(calibrate_s=0.4, calibrate_batches=(16, 64, 256))
    mixed = profiler.mixed_specs(cluster, "lenet-digits", None, settings)
    assert {name for name, _ in mixed} == {"gpus+per-core", "gpus+one-worker"}
    assert all(s.variant.key == "sync" and s.variant.balanced for _, s in mixed)

    def steps(per_sample_s: float) -> list[StepTiming]:
        return [StepTiming(b, 1e-4 + b * per_sample_s, 1 / per_sample_s) for b in (1, 2, 4, 8, 16, 32, 64, 128, 256)]
    per_core = cluster.layout("one-per-core")
    job = ProfileJob("lenet-digits", None, per_core, settings, "one-per-core", mixed_specs=mixed,
                     alone_steps={"cuda0": steps(1e-6), "cpu-rest": steps(3e-5)})
    jobs = mixed_sized(job, [steps(1e-4)] * len(per_core))
    assert {(layout, nominal) for layout, _, nominal in jobs} == {(name, b) for name in ("gpus+per-core", "gpus+one-worker")
                                                                 for b in (16, 256)}
    for layout, spec, nominal in jobs:
        assert sum(spec.batch_size.values()) == nominal * len(spec.devices)
        assert spec.batch_size["cuda0"] == max(spec.batch_size.values())


def test_cpu_workers_between_one_thread_and_the_widest_are_modelled_not_timed(monkeypatch):
    """profiler.in_between: the few-worker layouts' devices and the GPU layouts' cpu-rest lie
    between the one-per-core workers and cpu-all, and are not timed; the widest worker and a GPU
    are, and alike devices once."""
    seen = []

    def fake(wl, train, device, settings, progress):
        seen.append(device.id)
        return [StepTiming(1, 0.01, 100.0)]
    monkeypatch.setattr(profiler, "measure_alone", fake)
    cluster = local_cluster(cpu_count=8, cuda_count=1)
    biggest = profiler.concurrent_layout(cluster)
    modelled = profiler.in_between(cluster, biggest)
    assert set(modelled) == {d.id for d in cluster.devices if d.kind == "cpu" and 1 < d.threads < 8}
    assert "cpu-rest" in modelled and "cpu2x0" in modelled and "cpu4x1" in modelled
    assert set(modelled.values()) == {("cpu0", "cpu-all")}
    devices = profiler.outside(cluster, biggest, None, None, Settings(), lambda m: None, skip=set(modelled))
    assert sorted(seen) == ["cpu-all", "cuda0"] and set(devices) == {"cpu-all", "cuda0"}
    assert profiler.in_between(local_cluster(cpu_count=2, cuda_count=0), "one-per-core") == {}


def test_a_modelled_worker_interpolates_throughput_per_thread_in_log_threads():
    """profiler.interpolated, against the arithmetic by hand: the narrow workers' median at the
    batches all of them timed (one of three reads 3x slower and reached batch 16 only), the
    widest's, a third of the way in log threads for 2 of 1..8; past batch 16 the widest's steps
    at the model's ratio there, up to the widest's 256. The result is marked modelled. With no
    batch in common, the widest's steps scaled by threads. Fails if the model is cut to the
    narrow workers' batches or takes a batch some of them never reached."""
    import math

    from omnitune.core.profile import DeviceProfile
    cluster = local_cluster(cpu_count=8, cuda_count=0)

    def dp(device_id, per_sample_s, batches, concurrent):
        return DeviceProfile.measured(device_id, [StepTiming(b, b * per_sample_s, 1 / per_sample_s, 0.02)
                                                  for b in batches], concurrent)
    devices = {"cpu0": dp("cpu0", 1e-3, (1, 4, 16, 64), True), "cpu1": dp("cpu1", 1e-3, (1, 4, 16, 64), True),
               "cpu2": dp("cpu2", 3e-3, (1, 4, 16), True), "cpu-all": dp("cpu-all", 4e-4, (4, 16, 64, 256), False)}
    out = profiler.interpolated(cluster, "cpu4x0", "cpu0", "cpu-all", devices)
    assert out.modelled and not out.concurrent and out.max_batch == 256
    assert [s.batch_size for s in out.steps] == [4, 16, 64, 256]
    share = math.log(2) / math.log(8)
    per_sample_thread = math.exp((1 - share) * math.log(1e-3) + share * math.log(8 * 4e-4))
    for s in out.steps:
        assert math.isclose(s.sec_per_step, s.batch_size * per_sample_thread / 2, rel_tol=1e-9)
        assert math.isclose(s.samples_per_s, s.batch_size / s.sec_per_step) and s.spread == 0.02
    assert devices["cpu-all"].best.samples_per_s < out.best.samples_per_s * 4 < devices["cpu0"].best.samples_per_s * 8
    apart = {**devices, "cpu-all": dp("cpu-all", 4e-4, (128, 256), False)}
    alone = profiler.interpolated(cluster, "cpu4x0", "cpu0", "cpu-all", apart)
    assert [(s.batch_size, s.sec_per_step) for s in alone.steps] == [(128, 128 * 4e-4 * 4), (256, 256 * 4e-4 * 4)]


def test_a_profile_models_the_workers_between_and_says_so(tmp_path):
    """A real quick profile of a 4-core layout on this machine: cpu2x0 and cpu2x1 (2 threads)
    come out modelled, between the per-core workers and cpu-all, which are timed; the progress
    line names them. Fails if the in-between workers are timed, or the profile drops them."""
    said = []
    prof = profiler.profile(local_cluster(cpu_count=4, cuda_count=0), "lenet-digits", None, Settings.make(True),
                            tmp_path / "logs", progress=said.append)
    modelled = {d.device_id for d in prof.devices if d.modelled}
    assert modelled == {"cpu2x0", "cpu2x1"}
    assert {d.device_id for d in prof.devices} == {d.id for d in prof.cluster.devices}
    assert any("2 workers of 2 threads not timed" in line for line in said)
    assert not any(line.startswith("device cpu2x") for line in said)


def test_a_profile_keeps_which_devices_were_modelled(tmp_path):
    from dataclasses import replace

    from omnitune.core import profile as profile_mod
    prof = profile_mod.load("tests/data/profile-v3.json")
    assert not any(d.modelled for d in prof.devices)            # an older file loads as measured
    marked = replace(prof, schema_version=profile_mod.SCHEMA_VERSION, devices=(replace(prof.devices[0], modelled=True),) + prof.devices[1:])
    profile_mod.save(marked, tmp_path / "p.json")
    again = profile_mod.load(tmp_path / "p.json")
    assert again.devices[0].modelled and again.schema_version == profile_mod.SCHEMA_VERSION


def test_no_calibration_protocol_starts_past_the_deadline(tmp_path):
    """A real profile of this machine's two-worker layout whose calibration deadline passes at
    once: the first protocol's jobs (the one-device layout's, which run first) still run, every
    later one is left out, and the progress line says so; the profile still loads and plans."""
    from dataclasses import replace

    said = []
    settings = replace(Settings.make(True), calibration_deadline_s=0.01)
    prof = profiler.profile(local_cluster(cpu_count=2, cuda_count=0), "lenet-digits", None, settings,
                            tmp_path / "logs", progress=said.append)
    assert {c.layout for c in prof.calibration} == {"one-worker"} and len(prof.calibration) == 2
    assert any("left out past the deadline" in line for line in said)


def test_a_calibration_job_stops_once_it_has_timed_its_updates(tmp_path):
    """A real profile of this machine's two-worker layout whose calibration jobs may each run
    5 s but stop after 5 timed updates (lenet-digits takes milliseconds an update): every job
    still reports its seconds per update, and all of them together take a fraction of one job's
    5 s. Fails if Settings.calibration_updates does not reach the jobs (then they run 5 s each)."""
    import re
    import time
    from dataclasses import replace

    said = []
    settings = replace(Settings.make(True), calibrate_s=5.0, calibration_budget_s=1000.0, calibration_updates=5)
    began = time.perf_counter()
    prof = profiler.profile(local_cluster(cpu_count=2, cuda_count=0), "lenet-digits", None, settings,
                            tmp_path / "logs", progress=said.append)
    took = time.perf_counter() - began
    line = next(x for x in said if "calibration jobs" in x)
    jobs, each, total = re.search(r"(\d+) calibration jobs \(of ([\d.]+)s each\) in ([\d.]+)s", line).groups()
    assert int(jobs) == len(prof.calibration) >= 4 and float(each) == 5.0
    assert all(c.sec_per_iter > 0 for c in prof.calibration)
    assert float(total) < 5.0 and took < 5.0 * int(jobs) / 2
