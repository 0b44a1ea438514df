"""CUDA code paths: checked without a GPU where they are pure, and for real where one exists."""

from dataclasses import replace

import pytest
import torch

from omnitune.core import plan as plan_mod
from omnitune.core.cluster import Device, local_cluster
from omnitune.runtime.context import backend, buffer_device
from omnitune.runtime.topology import roles
from tests.conftest import DATA, make_spec

GPUS_AND_CPU = (Device("cuda0", "cuda", cuda_index=0), Device("cuda1", "cuda", cuda_index=1), Device("cpu0", "cpu"))


def mixed_plan(protocol="groups", groups=(("cuda0", "cuda1"), ("cpu0",))):
    return make_spec(protocol, groups, batch=16, devices=GPUS_AND_CPU)


def test_gpus_get_layouts_of_their_own_and_beside_cpu_workers_on_the_cores_they_leave():
    c = local_cluster(cpu_count=4, cuda_count=2)
    assert [d.id for d in c.layout("one-per-core")] == ["cpu0", "cpu1", "cpu2", "cpu3"]
    assert [d.id for d in c.layout("one-worker")] == ["cpu-all"]
    assert [d.id for d in c.layout("gpus")] == ["cuda0", "cuda1"]
    # Each GPU's process takes a core: CPU workers beside two GPUs get the other two.
    assert [d.id for d in c.layout("gpus+per-core")] == ["cuda0", "cuda1", "cpu0", "cpu1"]
    assert [(d.id, d.threads) for d in c.layout("gpus+one-worker")] == [("cuda0", 1), ("cuda1", 1), ("cpu-rest", 2)]
    for ids in c.layouts.values():
        assert sum(c.device(d).threads for d in ids) <= 4


def test_with_one_core_free_beside_the_gpu_there_is_no_second_mixed_layout():
    c = local_cluster(cpu_count=2, cuda_count=1)
    assert [d.id for d in c.layout("gpus+per-core")] == ["cuda0", "cpu0"]
    assert "gpus+one-worker" not in c.layouts
    assert "gpus" in local_cluster(cpu_count=1, cuda_count=1).layouts
    assert "gpus+per-core" not in local_cluster(cpu_count=1, cuda_count=1).layouts


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
    assert backend(plan_mod.load(DATA / "plan-v1.json").spec) == "gloo"


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_a_real_run_on_a_gpu(tmp_path):
    from omnitune.runtime import job
    base = plan_mod.load(DATA / "plan-v1.json")
    gpu = Device("cuda0", "cuda", cuda_index=0)
    plan = replace(base, spec=make_spec("sync", [["cuda0"]], devices=(gpu,), target=0.9))
    plan_mod.save(plan, tmp_path / "plan.json")
    s = job.run(str(tmp_path / "plan.json"), str(tmp_path / "run"), job.RunOptions(max_time_s=60))
    assert s.reached_target


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
@pytest.mark.parametrize("protocol, groups", [
    ("sync", [["cuda0", "cpu0"]]), ("groups", [["cuda0"], ["cpu0"]]), ("softsync", [["cuda0"], ["cpu0"]]),
    ("hpsgd", [["cuda0", "cpu0"]]), ("gossip", [["cuda0", "cpu0"]]),
])
def test_every_protocol_runs_with_a_gpu_beside_a_cpu(tmp_path, protocol, groups):
    """Weights, gradients and BatchNorm statistics cross between a GPU and a CPU process (gloo
    for mixed groups), and the run reaches its target with statistics that moved."""
    from omnitune.runtime import job
    devices = (Device("cuda0", "cuda", cuda_index=0), Device("cpu0", "cpu"))
    spec = make_spec(protocol, groups, devices=devices, workload="bncnn-digits", momentum=0.5, target=0.9)
    s = job.run_spec(spec, str(tmp_path / "run"), max_time_s=60)
    assert s.reached_target and s.final_accuracy >= 0.85, s


def test_a_mixed_two_node_cluster_launches_each_node_its_devices(tmp_path, monkeypatch):
    """A CPU node with the server and a node of two GPUs: node 1 starts its two GPU processes,
    which form a group all-reducing with NCCL; the launcher is faked at its seam."""
    from omnitune.core.cluster import load_cluster
    from omnitune.runtime import job
    from omnitune.runtime.topology import nodes

    spec = tmp_path / "cluster.yaml"
    spec.write_text("nodes:\n  - host: 127.0.0.1\n    cpu_workers: [2]\n  - host: 127.0.0.1\n"
                    "    cpu_workers: []\n    gpus: [0, 1]\nrendezvous: 127.0.0.1:29500\n")
    cluster = load_cluster(spec)
    base = plan_mod.load(DATA / "plan-v1.json")
    spec = make_spec("groups", (("n1-cuda0", "n1-cuda1"), ("n0-cpu0",)), batch=16, devices=cluster.devices,
                     rendezvous=cluster.rendezvous)
    plan_mod.save(replace(base, spec=spec), tmp_path / "plan.json")
    node0, node1 = nodes(spec)
    rs = roles(spec)
    assert [rs[r].kind for r in node0.ranks] == ["server", "worker"] and rs[node0.ranks[1]].device.id == "n0-cpu0"
    assert [rs[r].device.cuda_index for r in node1.ranks] == [0, 1]
    assert buffer_device(spec, rs[node1.ranks[0]], torch.device("cuda", 0)).type == "cuda"
    calls = []
    monkeypatch.setattr("omnitune.runtime.launch.launch", lambda entry, args, nprocs, log_dir, **kw:
                        calls.append((nprocs, kw["nodes"], kw["is_host"])))
    assert job.run(str(tmp_path / "plan.json"), str(tmp_path / "run"), job.RunOptions(node_rank=1)) is None
    assert calls == [(2, 2, False)]


def test_a_cpu_workers_training_set_stays_where_it_is():
    from torch.utils.data import TensorDataset
    from omnitune.runtime import workload
    data = TensorDataset(torch.arange(12.0).view(6, 2), torch.arange(6))
    assert workload.on_device(data, torch.device("cpu")) is data


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_a_gpu_worker_gathers_the_same_batches_on_the_gpu():
    from torch.utils.data import TensorDataset
    from omnitune.runtime import workload
    data = TensorDataset(torch.randn(100, 3), torch.randint(0, 5, (100,)))
    there = workload.on_device(data, torch.device("cuda", 0))
    for (x, y), (gx, gy) in zip(workload.batches(data, 16, seed=3), workload.batches(there, 16, seed=3)):
        assert gx.is_cuda and torch.equal(gx.cpu(), x) and torch.equal(gy.cpu(), y)
        break


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
@pytest.mark.parametrize("protocol, groups", [("sync", [["cuda0", "cpu0"]]), ("groups", [["cuda0"], ["cpu0"]])])
def test_a_bf16_adamw_recipe_runs_on_a_gpu_beside_a_cpu(tmp_path, protocol, groups):
    """bf16 autocast on the GPU, fp32 on the CPU, AdamW's state on either side: the run gets under
    its target loss."""
    from pathlib import Path

    from omnitune.runtime import job
    source = (Path(__file__).parent / "workloads" / "adamw_digits.py").read_text()
    workload = tmp_path / "adamw_bf16.py"
    workload.write_text(source.replace('"clip_grad_norm": 1.0}', '"clip_grad_norm": 1.0, "precision": "bf16"}'))
    devices = (Device("cuda0", "cuda", cuda_index=0), Device("cpu0", "cpu"))
    spec = make_spec(protocol, groups, devices=devices, workload=str(workload), lr=3e-3, momentum=0.5, target=None,
                     target_loss=0.3, horizon=400)
    s = job.run_spec(spec, str(tmp_path / "run"), max_time_s=60)
    assert s.reached_target and s.final_loss <= 0.3, s
