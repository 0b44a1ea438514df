"""A small ResNet with BatchNorm on procedurally generated shapes (made from a seed; nothing is
downloaded).

Ten classes of shape (disk, ring, square, frame, diamond, cross, triangle, ellipse, two dots,
bar), each drawn at a random position, size, small rotation and brightness onto a 32×32 image
whose background is a random low-frequency texture, plus pixel noise. 24,000 training and 1,000
test images, generated in about a second. The texture and noise make the small shapes hard to
tell apart: a model must learn the outline, not the brightness. The network (77,754 parameters)
has three residual stages with BatchNorm, whose statistics every protocol must carry.

Target 0.9: a well-tuned run (sync on both cores, batch 32, lr 0.1, momentum 0.9) reaches it in
about 80 s of training here; the default (lr 0.01) is still near 0.84 after 300 s. Accuracy
keeps rising past 0.9 (to about 0.93 by 150 s), so the target is not a plateau's edge, though
test accuracy swings by a few points between evaluations while BatchNorm's statistics settle.
"""

import math

import numpy as np
import torch
from torch import nn
from torch.utils.data import TensorDataset

SIZE = 32
TRAIN, TEST = 24_000, 1_000
CACHE_DATASETS = True   # the same images for every seed, 1.8 s to draw: kept in omnitune's cache
NOISE = 0.35             # pixel noise (standard deviation; shapes are 0.5–1 brighter than the texture)
TEXTURE = 0.6            # amplitude of the background's low-frequency texture


def _mask(label: int, u: np.ndarray, v: np.ndarray) -> np.ndarray:
    """Shape `label` in the shape's own coordinates (u, v in units of its size)."""
    rho, box = np.hypot(u, v), np.maximum(abs(u), abs(v))
    return [
        lambda: rho < 0.9,                                                          # disk
        lambda: (rho < 1.0) & (rho > 0.6),                                          # ring
        lambda: box < 0.75,                                                         # square
        lambda: (box < 0.9) & (box > 0.55),                                         # frame
        lambda: abs(u) + abs(v) < 1.0,                                              # diamond
        lambda: ((abs(u) < 0.25) & (abs(v) < 1.0)) | ((abs(v) < 0.25) & (abs(u) < 1.0)),   # cross
        lambda: (v < 0.6) & (v > -0.9 + 1.8 * abs(u)),                              # triangle
        lambda: u ** 2 + (v / 0.45) ** 2 < 1.0,                                     # ellipse
        lambda: (np.hypot(u - 0.55, v) < 0.35) | (np.hypot(u + 0.55, v) < 0.35),    # two dots
        lambda: (abs(u) < 1.0) & (abs(v) < 0.2),                                    # bar
    ][label]()


def _shapes(n: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    labels = rng.integers(0, 10, n)
    r = rng.uniform(5.0, 9.0, n).astype(np.float32)[:, None, None]
    cx, cy = rng.uniform(10.0, SIZE - 10.0, (2, n)).astype(np.float32)[:, :, None, None]
    theta = rng.uniform(-math.pi / 9, math.pi / 9, n).astype(np.float32)[:, None, None]
    y, x = np.mgrid[0:SIZE, 0:SIZE].astype(np.float32)
    shape = np.zeros((n, SIZE, SIZE), np.float32)
    for label in range(10):          # each class's pixels alone: 3× faster than all, then indexing
        mine = labels == label
        cos, sin, size = np.cos(theta[mine]), np.sin(theta[mine]), r[mine]
        dx, dy = x[None] - cx[mine], y[None] - cy[mine]
        shape[mine] = _mask(label, (cos * dx + sin * dy) / size, (-sin * dx + cos * dy) / size)
    return shape * rng.uniform(0.5, 1.0, n).astype(np.float32)[:, None, None], labels


def _texture(n: int, rng: np.random.Generator) -> np.ndarray:
    """Low-frequency noise: a 4×4 random grid, upsampled smoothly to 32×32."""
    coarse = torch.tensor(rng.normal(0.0, 1.0, (n, 1, 4, 4)), dtype=torch.float32)
    return nn.functional.interpolate(coarse, size=(SIZE, SIZE), mode="bicubic", align_corners=True)[:, 0].numpy()


def generate(n: int, seed: int) -> TensorDataset:
    rng = np.random.default_rng(seed)
    shape, labels = _shapes(n, rng)
    image = shape + TEXTURE * _texture(n, rng) + rng.normal(0.0, NOISE, shape.shape).astype(np.float32)
    return TensorDataset(torch.from_numpy(image[:, None]), torch.from_numpy(labels))


def build_datasets(data_dir, seed):
    """The same images for every seed (the seed orders training, not the data)."""
    return generate(TRAIN, 1), generate(TEST, 2)


class Block(nn.Module):
    def __init__(self, cin: int, cout: int, stride: int):
        super().__init__()
        self.body = nn.Sequential(
            nn.Conv2d(cin, cout, 3, stride, 1, bias=False), nn.BatchNorm2d(cout), nn.ReLU(),
            nn.Conv2d(cout, cout, 3, 1, 1, bias=False), nn.BatchNorm2d(cout))
        self.skip = nn.Sequential() if stride == 1 and cin == cout else nn.Sequential(
            nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))

    def forward(self, x):
        return torch.relu(self.body(x) + self.skip(x))


def build_model() -> nn.Module:
    return nn.Sequential(
        nn.Conv2d(1, 16, 3, 1, 1, bias=False), nn.BatchNorm2d(16), nn.ReLU(),
        Block(16, 16, 1), Block(16, 32, 2), Block(32, 64, 2),
        nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(64, 10))
