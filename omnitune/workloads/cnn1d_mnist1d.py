"""A 1-D CNN on MNIST-1D (Greydanus 2020), generated locally by the `mnist1d` package.

The data is procedurally generated from ten 1-D templates (4,000 train / 1,000 test, length 40);
nothing is downloaded.
"""

from importlib.metadata import version

import numpy as np
import torch
from torch import nn
from torch.utils.data import TensorDataset

# The same samples for every seed, 2 s to generate: kept in omnitune's cache, which the package's
# version keys too.
CACHE_DATASETS = f"mnist1d {version('mnist1d')}"


def build_model() -> nn.Module:
    return nn.Sequential(
        nn.Unflatten(1, (1, 40)),
        nn.Conv1d(1, 25, 5, stride=2, padding=1), nn.ReLU(),
        nn.Conv1d(25, 25, 3, stride=2, padding=1), nn.ReLU(),
        nn.Conv1d(25, 25, 3, stride=2, padding=1), nn.ReLU(),
        nn.Flatten(), nn.Linear(25 * 5, 10),
    )


def build_datasets(data_dir, seed):
    from mnist1d.data import get_dataset_args, make_dataset

    args = get_dataset_args()
    # make_dataset seeds numpy's and random's global state; leave the caller's untouched.
    np_state = np.random.get_state()
    try:
        data = make_dataset(args)
    finally:
        np.random.set_state(np_state)
    def as_set(x, y):
        return TensorDataset(torch.tensor(x, dtype=torch.float32), torch.tensor(y, dtype=torch.long))
    return as_set(data["x"], data["y"]), as_set(data["x_test"], data["y_test"])
