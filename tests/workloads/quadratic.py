"""A quadratic for the emulators' tests: loss(w; batch) = mean_i 1/2 (w - x_i)^T A (w - x_i).

Each sample x_i is a centre, so a minibatch's gradient is A (w - mean of its centres), known in
closed form; workers reading different shards get different gradients.
"""

import torch
from torch import nn
from torch.utils.data import TensorDataset

A = torch.tensor([[2.0, 0.3, 0.0], [0.3, 1.0, 0.1], [0.0, 0.1, 0.5]])


class Quadratic(nn.Module):
    def __init__(self):
        super().__init__()
        self.w = nn.Parameter(torch.randn(3))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        d = self.w - x
        return 0.5 * ((d @ A) * d).sum(1)          # each sample's loss


def build_model() -> nn.Module:
    return Quadratic()


def build_datasets(data_dir, seed):
    g = torch.Generator().manual_seed(0)
    x = torch.randn(240, 3, generator=g) + torch.tensor([1.0, -2.0, 0.5])
    return TensorDataset(x, torch.zeros(240)), TensorDataset(x[:8], torch.zeros(8))


def loss_fn(outputs: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    return outputs.mean()


def metric(outputs: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    return torch.zeros(())
