"""Multinomial logistic regression on scikit-learn's digits: a convex workload.

The same data and split as lenet-digits (8×8 images, 1,437 train / 360 test), flattened.
"""

from pathlib import Path

from torch import nn

from omnitune.runtime import workload

_digits = workload.load(str(Path(__file__).with_name("lenet_digits.py")))


def build_model() -> nn.Module:
    return nn.Sequential(nn.Flatten(), nn.Linear(64, 10))


def build_datasets(data_dir, seed):
    return _digits.build_datasets(data_dir, seed)
