"""A small CNN with BatchNorm on scikit-learn's digits, its inputs shifted and scaled.

The same images and split as lenet-digits (1,437 train / 360 test), but each pixel is
3·(value / 16) + 2: far from BatchNorm's initial running statistics (mean 0, variance 1), so a
model evaluated with statistics that never moved scores near chance. It checks that every
protocol carries BatchNorm's buffers to the model it evaluates and checkpoints.
"""

from pathlib import Path

from torch import nn
from torch.utils.data import TensorDataset

from omnitune.runtime import workload

_digits = workload.load(str(Path(__file__).with_name("lenet_digits.py")))


def build_model() -> nn.Module:
    return nn.Sequential(
        nn.Conv2d(1, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(),
        nn.Conv2d(8, 16, 3, padding=1), nn.BatchNorm2d(16), nn.ReLU(), nn.MaxPool2d(2),
        nn.Flatten(), nn.Linear(16 * 4 * 4, 10),
    )


def build_datasets(data_dir, seed):
    train, test = _digits.build_datasets(data_dir, seed)
    shifted = lambda d: TensorDataset(3.0 * d.tensors[0] + 2.0, d.tensors[1])
    return shifted(train), shifted(test)
