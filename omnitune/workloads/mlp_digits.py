"""A wide MLP on scikit-learn's bundled digits: a model of 1.3 MB that trains in seconds, so that
communication, not compute, decides its plans on a slow link (the network benchmark).

The digits, split as `lenet-digits` splits them (fixed seed), flattened to 64 inputs. The
network is 64 → 1024 → 256 → 10 (331,530 parameters, 1.33 MB of float32): a step on a batch of
32 costs about a millisecond here, an all-reduce of its gradient over 20 Mbit/s about half a
second. Target 0.95: a few hundred iterations of plain SGD reach it; accuracy levels off near
0.97-0.98.
"""

from pathlib import Path

from torch import nn
from torch.utils.data import TensorDataset

from omnitune.runtime import workload

_digits = workload.load(str(Path(__file__).with_name("lenet_digits.py")))


def build_model() -> nn.Module:
    return nn.Sequential(nn.Linear(64, 1024), nn.ReLU(), nn.Linear(1024, 256), nn.ReLU(), nn.Linear(256, 10))


def build_datasets(data_dir, seed):
    flat = lambda d: TensorDataset(d.tensors[0].flatten(1), d.tensors[1])      # noqa: E731
    train, test = _digits.build_datasets(data_dir, seed)
    return flat(train), flat(test)
