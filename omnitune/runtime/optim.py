"""The update every process of a run applies: SGD with heavy-ball momentum, for any momentum the
planner emits.

    v <- mu * v + g;   w <- w - lr * v          (v starts at the first gradient, as torch's SGD)

torch.optim.SGD refuses a negative momentum, yet asynchrony can call for one: with g groups the
implicit momentum is about 1 - 1/g, so keeping the total at 0.9 asks for 0.9 - (1 - 1/g) < 0 at
g >= 11 (Mitliagkas et al. 2016). The state is torch's SGD's ("momentum_buffer" per parameter),
so checkpoints of either load into the other.
"""

from __future__ import annotations

import torch

MOMENTUM_RANGE = (-1.0, 1.0)       # open interval: |mu| < 1 keeps the recursion stable


class HeavyBall(torch.optim.Optimizer):
    def __init__(self, params, lr: float, momentum: float):
        if not lr > 0:
            raise ValueError(f"lr must be positive, got {lr}")
        if not MOMENTUM_RANGE[0] < momentum < MOMENTUM_RANGE[1]:
            raise ValueError(f"momentum must be in (-1, 1), got {momentum}")
        super().__init__(params, {"lr": lr, "momentum": momentum})

    @torch.no_grad()
    def step(self, closure=None):
        for group in self.param_groups:
            lr, mu = group["lr"], group["momentum"]
            for p in group["params"]:
                if p.grad is None:
                    continue
                state = self.state[p]
                if "momentum_buffer" not in state:
                    state["momentum_buffer"] = p.grad.detach().clone()
                else:
                    state["momentum_buffer"].mul_(mu).add_(p.grad)
                p.add_(state["momentum_buffer"], alpha=-lr)
