"""A LeNet-style CNN on scikit-learn's bundled digits (8×8 grey images, 10 classes).

1,797 images ship with scikit-learn; 80% train / 20% test, split with a fixed seed.
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
    return nn.Sequential(
        nn.Conv2d(1, 16, 3, padding=1), nn.ReLU(),
        nn.Conv2d(16, 32, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
        nn.Flatten(), nn.Linear(32 * 4 * 4, 64), nn.ReLU(), nn.Linear(64, 10),
    )


def build_datasets(data_dir, seed):
    from sklearn.datasets import load_digits

    digits = load_digits()
    x = torch.tensor(digits.images / 16.0, dtype=torch.float32).unsqueeze(1)
    y = torch.tensor(digits.target, dtype=torch.long)
    # The split is fixed (seed 0) so that every run and probe tests on the same images.
    perm = torch.as_tensor(np.random.default_rng(0).permutation(len(y)))
    n_train = int(0.8 * len(y))
    train, test = perm[:n_train], perm[n_train:]
    return TensorDataset(x[train], y[train]), TensorDataset(x[test], y[test])
