"""The digits (as lenet-digits splits them) with a small MLP, trained by a recipe other than
plain SGD: AdamW with weight decay, a warm-up then cosine schedule, and gradient clipping."""

import numpy as np
import torch
from sklearn.datasets import load_digits
from torch import nn
from torch.utils.data import TensorDataset

RECIPE = {"optimizer": "adamw", "weight_decay": 0.01, "beta2": 0.99, "schedule": "cosine", "warmup": 0.1,
          "floor": 0.1, "clip_grad_norm": 1.0}


def build_model() -> nn.Module:
    return nn.Sequential(nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 10))


def build_datasets(data_dir, seed):
    digits = load_digits()
    x = torch.tensor(digits.data / 16.0, dtype=torch.float32)
    y = torch.tensor(digits.target, dtype=torch.long)
    perm = torch.as_tensor(np.random.default_rng(0).permutation(len(y)))
    n_train = int(0.8 * len(y))
    return TensorDataset(x[perm[:n_train]], y[perm[:n_train]]), TensorDataset(x[perm[n_train:]], y[perm[n_train:]])
