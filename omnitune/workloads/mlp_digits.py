"""A wide MLP on scikit-learn's bundled digits: a model of 1.3 MB that trains in seconds, so that
communication, not compute, decides its plans on a slow link (the network benchmark).

The digits, split as `lenet-digits` splits them (fixed seed), flattened to 64 inputs. The
network is 64 → 1024 → 256 → 10 (331,530 parameters, 1.33 MB of float32): a step on a batch of
32 costs about a millisecond here, an all-reduce of its gradient over 20 Mbit/s about half a
second. Target 0.95: a few hundred iterations of plain SGD reach it; accuracy levels off near
0.97-0.98.
"""

from importlib.metadata import version

import numpy as np
import torch
from torch import nn
from torch.utils.data import TensorDataset

# The same split for every seed: kept in omnitune's cache, keyed by scikit-learn's version too, so
# that a process which loads this workload imports scikit-learn (1.4 s here) only to build it once.
CACHE_DATASETS = f"scikit-learn {version('scikit-learn')}"


def build_model() -> nn.Module:
    return nn.Sequential(nn.Linear(64, 1024), nn.ReLU(), nn.Linear(1024, 256), nn.ReLU(), nn.Linear(256, 10))


def build_datasets(data_dir, seed):
    from sklearn.datasets import load_digits

    digits = load_digits()
    x = torch.tensor(digits.data / 16.0, dtype=torch.float32)
    y = torch.tensor(digits.target, dtype=torch.long)
    perm = torch.as_tensor(np.random.default_rng(0).permutation(len(y)))
    n_train = int(0.8 * len(y))
    train, test = perm[:n_train], perm[n_train:]
    return TensorDataset(x[train], y[train]), TensorDataset(x[test], y[test])
