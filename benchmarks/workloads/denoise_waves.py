"""A convolutional denoiser of waves: a held-out workload of `benchmarks.plan_quality` and
`benchmarks.retune` (generated from a seed), kept out of all tuning of the planner's and the
tuner's rules and constants.

Another family than the workloads those were tuned on (classifiers: an MLP, convolutional nets, a
transformer; and the held-out GRU): a regression, an encoder-decoder of 1-D convolutions trained
on the mean squared error, whose target is a test loss.

Each sample is a wave of LENGTH points, the sum of WAVES sinusoids of random frequency (1 to 12
cycles), amplitude and phase, plus Gaussian noise of standard deviation NOISE; the label is the
clean wave. 100,000 training and 2,000 test waves. The model: three strided convolutions down,
three transposed convolutions up, and the input added back (about 19,000 parameters).
Chosen once, before any plan or tuned run of it: the target, a test loss of 0.048 (the noise
alone is 0.25), is what one worker at batch 64, lr 0.03 reached in about two minutes while the
file was written (docs/decisions.md, denoise-waves).
"""

import math

import torch
from torch import nn
from torch.utils.data import TensorDataset

LENGTH, WAVES, NOISE = 128, 3, 0.5
TRAIN, TEST = 100_000, 2_000
CACHE_DATASETS = True     # the same waves for every seed
TOLERANCE = 0.05          # a wave counts as "correct" (the metric) when its mean squared error is below this


def _samples(n: int, seed: int) -> TensorDataset:
    g = torch.Generator().manual_seed(seed)
    t = torch.arange(LENGTH) / LENGTH
    freq = torch.randint(1, 13, (n, WAVES, 1), generator=g).float()
    amp = torch.rand(n, WAVES, 1, generator=g) * 0.8 + 0.2
    phase = torch.rand(n, WAVES, 1, generator=g) * 2 * math.pi
    clean = (amp * torch.sin(2 * math.pi * freq * t + phase)).sum(dim=1)
    noisy = clean + NOISE * torch.randn(n, LENGTH, generator=g)
    return TensorDataset(noisy.unsqueeze(1), clean.unsqueeze(1))


def build_datasets(data_dir, seed):
    """The same waves for every seed (the seed orders training, not the data)."""
    return _samples(TRAIN, 1), _samples(TEST, 2)


class Denoiser(nn.Module):
    def __init__(self, width: int = 32):
        super().__init__()
        self.down = nn.Sequential(
            nn.Conv1d(1, width, 5, stride=2, padding=2), nn.ReLU(),
            nn.Conv1d(width, width, 5, stride=2, padding=2), nn.ReLU(),
            nn.Conv1d(width, width, 5, stride=2, padding=2), nn.ReLU())
        self.up = nn.Sequential(
            nn.ConvTranspose1d(width, width, 4, stride=2, padding=1), nn.ReLU(),
            nn.ConvTranspose1d(width, width, 4, stride=2, padding=1), nn.ReLU(),
            nn.ConvTranspose1d(width, 1, 4, stride=2, padding=1))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.up(self.down(x))


def build_model() -> nn.Module:
    return Denoiser()


def loss_fn(outputs: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    return nn.functional.mse_loss(outputs, targets)


def metric(outputs: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """The waves denoised to within TOLERANCE (mean squared error)."""
    return ((outputs - targets) ** 2).mean(dim=(1, 2)).lt(TOLERANCE).sum()
