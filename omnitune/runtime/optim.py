"""The update every process of a run applies: SGD with heavy-ball momentum, for any momentum the
planner emits.

    v <- mu * v + g;   w <- w - lr * v          (v starts at the first gradient, as torch's SGD)

torch.optim.SGD refuses a negative momentum, yet asynchrony can call for one: with g groups the
implicit momentum is about 1 - 1/g, so keeping the total at 0.9 asks for 0.9 - (1 - 1/g) < 0 at
g >= 11 (Mitliagkas et al. 2016). The state is torch's SGD's ("momentum_buffer" per parameter,
the same state_dict layout), so checkpoints of either load into the other.

It is not a torch.optim.Optimizer: constructing one imports torch._dynamo, which adds seconds to
every process's start-up, for nothing this loop uses.
"""

from __future__ import annotations

from collections import defaultdict

import torch

MOMENTUM_RANGE = (-1.0, 1.0)       # open interval: |mu| < 1 keeps the recursion stable


class HeavyBall:
    def __init__(self, params, lr: float, momentum: float):
        if not lr > 0:
            raise ValueError(f"lr must be positive, got {lr}")
        if not MOMENTUM_RANGE[0] < momentum < MOMENTUM_RANGE[1]:
            raise ValueError(f"momentum must be in (-1, 1), got {momentum}")
        self.param_groups = [{"params": list(params), "lr": lr, "momentum": momentum}]
        self.state: defaultdict[torch.Tensor, dict[str, torch.Tensor]] = defaultdict(dict)     # as torch's

    @property
    def params(self) -> list[torch.Tensor]:
        return self.param_groups[0]["params"]

    @torch.no_grad()
    def step(self) -> None:
        group = self.param_groups[0]
        lr, mu = group["lr"], group["momentum"]
        for p in self.params:
            if p.grad is None:
                continue
            state = self.state[p]
            if "momentum_buffer" not in state:
                state["momentum_buffer"] = p.grad.detach().clone()
            else:
                state["momentum_buffer"].mul_(mu).add_(p.grad)
            p.add_(state["momentum_buffer"], alpha=-lr)

    def zero_grad(self) -> None:
        for p in self.params:
            p.grad = None

    def state_dict(self) -> dict:
        """torch.optim.SGD's layout: parameters by index."""
        group = {k: v for k, v in self.param_groups[0].items() if k != "params"}
        return {"state": {i: dict(self.state[p]) for i, p in enumerate(self.params) if self.state.get(p)},
                "param_groups": [{**group, "params": list(range(len(self.params)))}]}

    def load_state_dict(self, state: dict) -> None:
        saved = state["param_groups"]
        if len(saved) != 1 or len(saved[0]["params"]) != len(self.params):
            raise ValueError("the optimizer state is of another model: "
                             f"{[len(g['params']) for g in saved]} parameters against {len(self.params)}")
        group = self.param_groups[0]
        group["lr"], group["momentum"] = saved[0].get("lr", group["lr"]), saved[0].get("momentum", group["momentum"])
        self.state = defaultdict(dict)
        for i, p in enumerate(self.params):
            buf = state["state"].get(i, {}).get("momentum_buffer")
            if buf is not None:
                self.state[p] = {"momentum_buffer": buf.to(p.device, p.dtype).clone()}
