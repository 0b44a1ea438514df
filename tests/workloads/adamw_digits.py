"""The digits (as mlp-digits splits and flattens them) with a small MLP, trained by a recipe other
than plain SGD: AdamW with weight decay, a warm-up then cosine schedule, and gradient clipping."""

from torch import nn

from omnitune.runtime import workload

RECIPE = {"optimizer": "adamw", "weight_decay": 0.01, "beta2": 0.99, "schedule": "cosine", "warmup": 0.1,
          "floor": 0.1, "clip_grad_norm": 1.0}
build_datasets = workload.load("mlp-digits").build_datasets


def build_model() -> nn.Module:
    return nn.Sequential(nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 10))
