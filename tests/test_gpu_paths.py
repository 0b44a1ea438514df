"""CUDA code paths: checked without a GPU where they are pure, and for real where one exists."""

from dataclasses import replace

import pytest
import torch

from omnitune import plan as plan_mod
from omnitune.cluster import Device, local_cluster
from omnitune.runtime.context import backend, buffer_device
from omnitune.runtime.topology import roles
from tests.conftest import DATA


def mixed_plan(protocol="groups", groups=(("cuda0", "cuda1"), ("cpu0",))):
    base = plan_mod.load(DATA / "plan-v1.json")
    devices = (Device("cuda0", "cuda", cuda_index=0), Device("cuda1", "cuda", cuda_index=1), Device("cpu0", "cpu"))
    return replace(base, protocol=protocol, devices=devices, groups=groups,
                   batch_size={d.id: 16 for d in devices})


def test_cuda_devices_join_profiles_and_layouts():
    c = local_cluster(cpu_count=2, cuda_count=2)
    assert [d.id for d in c.layout("one-per-core")] == ["cpu0", "cpu1", "cuda0", "cuda1"]
    assert [d.id for d in c.layout("one-worker")] == ["cpu-all", "cuda0", "cuda1"]


def test_nccl_inside_gpu_groups_and_gloo_elsewhere():
    plan = mixed_plan()
    assert backend(plan) == "cpu:gloo,cuda:nccl"          # NCCL for CUDA tensors, gloo for the rest
    rs = roles(plan)
    gpu_worker, cpu_worker = rs[1], rs[3]
    # An all-GPU group all-reduces on the GPU (NCCL); a group with a CPU member on the CPU (gloo).
    assert buffer_device(plan, gpu_worker, torch.device("cuda", 0)).type == "cuda"
    assert buffer_device(plan, cpu_worker, torch.device("cpu")).type == "cpu"
    mixed = mixed_plan("sync", (("cuda0", "cuda1", "cpu0"),))
    assert buffer_device(mixed, roles(mixed)[0], torch.device("cuda", 0)).type == "cpu"
    assert backend(plan_mod.load(DATA / "plan-v1.json")) == "gloo"


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_a_real_run_on_a_gpu(tmp_path):
    from omnitune.runtime import job
    base = plan_mod.load(DATA / "plan-v1.json")
    gpu = Device("cuda0", "cuda", cuda_index=0)
    plan = replace(base, protocol="sync", devices=(gpu,), groups=(("cuda0",),), batch_size={"cuda0": 32},
                   target_accuracy=0.9)
    plan_mod.save(plan, tmp_path / "plan.json")
    s = job.run(str(tmp_path / "plan.json"), str(tmp_path / "run"), max_time_s=60)
    assert s.reached_target


def test_a_mixed_two_node_cluster_launches_each_node_its_devices(tmp_path, monkeypatch):
    """A CPU node with the server and a node of two GPUs: node 1 starts its two GPU processes,
    which form a group all-reducing with NCCL; the launcher is faked at its seam."""
    from omnitune.cluster import load_cluster
    from omnitune.runtime import job
    from omnitune.runtime.topology import nodes

    spec = tmp_path / "cluster.yaml"
    spec.write_text("nodes:\n  - host: 127.0.0.1\n    cpu_workers: [2]\n  - host: 127.0.0.1\n"
                    "    cpu_workers: []\n    gpus: [0, 1]\nrendezvous: 127.0.0.1:29500\n")
    cluster = load_cluster(spec)
    base = plan_mod.load(DATA / "plan-v1.json")
    plan = replace(base, protocol="groups", devices=cluster.devices, groups=(("n1-cuda0", "n1-cuda1"), ("n0-cpu0",)),
                   batch_size={d.id: 16 for d in cluster.devices}, rendezvous=cluster.rendezvous)
    plan_mod.save(plan, tmp_path / "plan.json")
    node0, node1 = nodes(plan)
    rs = roles(plan)
    assert [rs[r].kind for r in node0.ranks] == ["server", "worker"] and rs[node0.ranks[1]].device.id == "n0-cpu0"
    assert [rs[r].device.cuda_index for r in node1.ranks] == [0, 1]
    assert buffer_device(plan, rs[node1.ranks[0]], torch.device("cuda", 0)).type == "cuda"
    calls = []
    monkeypatch.setattr("omnitune.runtime.launch.launch", lambda entry, args, nprocs, log_dir, **kw:
                        calls.append((nprocs, kw["nodes"], kw["is_host"])))
    assert job.run(str(tmp_path / "plan.json"), str(tmp_path / "run"), node_rank=1) is None
    assert calls == [(2, 2, False)]
