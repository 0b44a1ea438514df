import os
from pathlib import Path

import pytest

DATA = Path(__file__).parent / "data"
ROOT = Path(__file__).parent.parent

# Keep worker processes from oversubscribing the test machine's cores.
os.environ.setdefault("OMP_NUM_THREADS", "1")


@pytest.fixture(autouse=True, scope="session")
def own_cache(tmp_path_factory):
    """omnitune's cache (generated datasets, kept profiles) in a folder of this session's, unless
    it is off: a profile measured under the tests' load is none for a user's `train` to use again."""
    before = os.environ.get("OMNITUNE_CACHE_DIR")
    if before != "off":
        os.environ["OMNITUNE_CACHE_DIR"] = str(tmp_path_factory.mktemp("cache"))
    yield
    if before is None:
        os.environ.pop("OMNITUNE_CACHE_DIR", None)
    else:
        os.environ["OMNITUNE_CACHE_DIR"] = before


@pytest.fixture(scope="session")
def digits():
    from omnitune.runtime import workload
    wl = workload.load("lenet-digits")
    train, test = wl.build_datasets(None, 0)
    return wl, train, test


@pytest.fixture(scope="session")
def sample_profile():
    from omnitune.core import profile
    return profile.load(DATA / "profile-v1.json")


def write(path: Path, text: str) -> Path:
    path.write_text(text)
    return path


def make_spec(protocol: str, groups, batch: int = 32, lr: float = 0.05, momentum: float = 0.9,
              target: float | None = 0.9, workload: str = "lenet-digits", slowdown: dict | None = None,
              nodes: dict | None = None, softsync_n: int = 1, gossip_every: int = 1, rebalance: bool = False,
              devices=None, **extra):
    """A run spec for CPU workers cpu0, cpu1, … split into `groups` (lists of device ids).

    `slowdown` maps device ids to an emulated slowdown factor, `nodes` to their node of the
    cluster spec (all on this host); `devices` replaces the CPU workers; `extra` sets other fields.
    """
    from omnitune.core import protocols
    from omnitune.core.cluster import Device
    from omnitune.core.runspec import RunSpec

    ids = [d for g in groups for d in g]
    devices = devices or tuple(Device(i, "cpu", emulated_slowdown=(slowdown or {}).get(i, 1.0),
                                      node=(nodes or {}).get(i, 0)) for i in ids)
    variant = protocols.from_fields(protocol, len(groups), softsync_n, gossip_every, rebalance)
    return RunSpec(workload=workload, data_dir=None, variant=variant, devices=tuple(devices),
                   groups=tuple(tuple(g) for g in groups), batch_size={i: batch for i in ids}, lr=lr,
                   momentum=momentum, target_accuracy=target, **extra)


def make_plan(path: Path, protocol: str, groups, **kw) -> Path:
    """The sample plan with the run spec of `make_spec(protocol, groups, **kw)`, saved to `path`."""
    from dataclasses import replace

    from omnitune.core import plan as plan_mod

    spec = make_spec(protocol, groups, **kw)
    p = replace(plan_mod.load(DATA / "plan-v1.json"), spec=spec, layout="one-per-core",
                implicit_momentum=spec.variant.implicit_momentum())
    plan_mod.save(p, path)
    return path


def many_workers_profile(sample, n: int, tmp_path: Path):
    """The sample profile's cpu0 measurements for each of n one-thread workers of a cluster spec
    (layout "cluster")."""
    from dataclasses import replace

    from omnitune.core.cluster import load_cluster

    spec = tmp_path / "cluster.yaml"
    spec.write_text("nodes:\n  - host: 127.0.0.1\n    cpu_workers: [" + ", ".join(["1"] * n) + "]\n")
    cluster = load_cluster(spec)
    cpu0 = sample.device("cpu0")
    devices = tuple(replace(cpu0, device_id=d.id) for d in cluster.devices)
    return replace(sample, cluster=cluster, devices=devices, calibration=())


def tiny_cached_workload(tmp_path: Path, monkeypatch, recipe: str = "") -> Path:
    """A workload file of 8 training and 40 test samples that omnitune's dataset cache (under
    tmp_path) may hold (CACHE_DATASETS), with `recipe` as its RECIPE's source where given."""
    monkeypatch.setenv("OMNITUNE_CACHE_DIR", str(tmp_path / "cache"))
    path = tmp_path / "tiny.py"
    path.write_text("import torch\nfrom torch.utils.data import TensorDataset\nCACHE_DATASETS = True\n"
                    + (f"RECIPE = {recipe}\n" if recipe else "")
                    + "def build_model():\n    return torch.nn.Linear(2, 2)\n"
                    "def build_datasets(data_dir, seed):\n"
                    "    return (TensorDataset(torch.zeros(8, 2), torch.zeros(8, dtype=torch.long)),\n"
                    "            TensorDataset(torch.zeros(40, 2), torch.zeros(40, dtype=torch.long)))\n")
    return path
