"""The update every process of a run applies, and every probe emulates: the workload's recipe
(core/recipe.py) around one of two rules.

    HeavyBall   torch's SGD arithmetic (torch.optim.sgd.sgd), for any momentum the planner emits:
                    g <- g + wd * w;   v <- mu * v + g;   w <- w - lr * v
                (v starts at the first gradient, as torch's SGD). torch.optim.SGD refuses a
                negative momentum, yet asynchrony can call for one: with g groups the implicit
                momentum is about 1 - 1/g, so keeping the total at 0.9 asks for 0.9 - (1 - 1/g)
                < 0 at g >= 11 (Mitliagkas et al. 2016).
    AdamW       torch's own AdamW arithmetic (torch.optim.adamw.adamw), with the run's momentum
                as beta1.

Each step clips the gradient to the recipe's norm, sets the learning rate its schedule gives for
the iteration, and applies the rule. The state is torch's (SGD's "momentum_buffer"; AdamW's
"step", "exp_avg", "exp_avg_sq" per parameter, by index), so checkpoints of either load into the
other. `step_on` applies the rule to tensors that are not the model's parameters: the probes'
emulator keeps each replica's parameters as one flat vector.

Neither is a torch.optim.Optimizer: constructing one imports torch._dynamo, which adds about two
seconds to every process's start-up, for nothing this loop uses.
"""

from __future__ import annotations

import torch
from torch.optim.adamw import adamw
from torch.optim.sgd import sgd

from omnitune.core.recipe import Recipe

MOMENTUM_RANGE = (-1.0, 1.0)       # open interval: |mu| < 1 keeps the recursion stable
CLIP_EPS = 1e-6                    # as torch.nn.utils.clip_grad_norm_


class Update:
    """The recipe's step for one model (or one flat vector): clip, schedule, rule."""

    def __init__(self, params, lr: float, momentum: float, recipe: Recipe = Recipe(), horizon: int = 0,
                 iteration: int = 0):
        if not lr > 0:
            raise ValueError(f"lr must be positive, got {lr}")
        if not MOMENTUM_RANGE[0] < momentum < MOMENTUM_RANGE[1]:
            raise ValueError(f"momentum must be in (-1, 1), got {momentum}")
        self.params = list(params)
        self.recipe, self.horizon, self.iteration = recipe, horizon, iteration
        self.param_groups = [{"lr": lr, "momentum": momentum}]      # the base rate, before the schedule
        self.state: dict[int, dict[str, torch.Tensor]] = {}         # by parameter index, as torch's state_dict

    def set_hyper(self, lr: float, momentum: float) -> None:
        self.param_groups[0].update(lr=lr, momentum=momentum)

    def switch(self, lr: float, momentum: float) -> None:
        """Go on from a loaded state at another rate and momentum (a pause's switch, or a
        candidate read from its checkpoint). The rule's own correction first (HeavyBall's)."""
        self.set_hyper(lr, momentum)

    @property
    def lr(self) -> float:
        """The scheduled rate of the next step."""
        return self.param_groups[0]["lr"] * self.recipe.lr_factor(self.iteration, self.horizon)

    @torch.no_grad()
    def step(self) -> None:
        pairs = [(i, p, p.grad) for i, p in enumerate(self.params) if p.grad is not None]
        self.step_on([i for i, _, _ in pairs], [p for _, p, _ in pairs], [g for _, _, g in pairs])

    @torch.no_grad()
    def step_on(self, keys: list[int], tensors: list[torch.Tensor], grads: list[torch.Tensor]) -> None:
        """One step of `tensors` (updated in place) on `grads`, with the state kept under `keys`."""
        clip = self.recipe.clip_grad_norm
        if clip > 0 and grads:
            norm = torch.linalg.vector_norm(torch.stack([torch.linalg.vector_norm(g) for g in grads]))
            scale = torch.clamp(clip / (norm + CLIP_EPS), max=1.0)
            grads = [g * scale for g in grads]
        if tensors:
            self.apply(tensors, grads, [self.state.setdefault(k, {}) for k in keys], self.lr)
        self.iteration += 1

    def apply(self, params: list[torch.Tensor], grads: list[torch.Tensor], states: list[dict], lr: float) -> None:
        """The rule on every tensor at once (torch's multi-tensor kernels: on a GPU a small model's
        step is mostly kernel launches, and a loop over the parameters launches several each)."""
        raise NotImplementedError

    def zero_grad(self) -> None:
        for p in self.params:
            p.grad = None

    def state_dict(self) -> dict:
        """torch's layout: parameters by index."""
        return {"state": {i: dict(s) for i, s in self.state.items() if s},
                "param_groups": [{**self.param_groups[0], "params": list(range(len(self.params)))}]}

    def load_state_dict(self, state: dict) -> None:
        saved = state["param_groups"]
        if len(saved) != 1 or len(saved[0]["params"]) != len(self.params):
            raise ValueError("the optimizer state is of another model: "
                             f"{[len(g['params']) for g in saved]} parameters against {len(self.params)}")
        group = self.param_groups[0]
        self.set_hyper(saved[0].get("lr", group["lr"]), saved[0].get("momentum", group["momentum"]))
        self.state = {}
        for i, p in enumerate(self.params):
            kept = {k: v for k, v in state["state"].get(i, {}).items() if k in self.SLOTS}
            if kept:
                self.state[i] = {k: v.clone() if k == "step" else v.to(p.device, p.dtype).clone()
                                 for k, v in kept.items()}      # AdamW's step stays on the host, as torch's

    SLOTS: tuple[str, ...] = ()


class HeavyBall(Update):
    """torch's SGD arithmetic (torch.optim.sgd.sgd), which takes any momentum: only the
    optimizer's constructor refuses a negative one. At momentum 0 it keeps no buffer, as torch."""
    SLOTS = ("momentum_buffer",)

    def switch(self, lr: float, momentum: float) -> None:
        """Momentum correction (Goyal et al. 2017, section 2.1): the buffer scaled by the old rate
        over the new, so that the step lr * v goes on at the speed it had and the new rate comes
        in with the new gradients. Uncorrected, the first updates after the switch move the old
        velocity, with its old batch's noise, times the new rate over the old, and a larger batch
        at its larger rate then reads worse than the batch it would replace, past the pause's 1%
        floor, where corrected it does not (docs/model.md; docs/decisions.md,
        optim.HeavyBall.switch)."""
        old = self.param_groups[0]["lr"]
        if old != lr:
            for state in self.state.values():
                if "momentum_buffer" in state:
                    state["momentum_buffer"].mul_(old / lr)
        self.set_hyper(lr, momentum)

    def apply(self, params: list[torch.Tensor], grads: list[torch.Tensor], states: list[dict], lr: float) -> None:
        momentum = self.param_groups[0]["momentum"]
        buffers = [s.get("momentum_buffer") for s in states]
        sgd(params, grads, buffers, foreach=True, weight_decay=self.recipe.weight_decay,
            momentum=momentum, lr=lr, dampening=0.0, nesterov=False, maximize=False)
        for state, buffer in zip(states, buffers):
            if momentum == 0:                   # torch neither reads nor updates it: a later momentum
                state.pop("momentum_buffer", None)      # starts afresh, not from an old velocity
            elif buffer is not None:
                state["momentum_buffer"] = buffer


class AdamW(Update):
    SLOTS = ("step", "exp_avg", "exp_avg_sq")

    def apply(self, params: list[torch.Tensor], grads: list[torch.Tensor], states: list[dict], lr: float) -> None:
        for state, p in zip(states, params):
            if "step" not in state:
                state.update(step=torch.tensor(0.0), exp_avg=torch.zeros_like(p), exp_avg_sq=torch.zeros_like(p))
        r = self.recipe
        adamw(params, grads, [s["exp_avg"] for s in states], [s["exp_avg_sq"] for s in states], [],
              [s["step"] for s in states], foreach=True, amsgrad=False, beta1=self.param_groups[0]["momentum"],
              beta2=r.beta2, lr=lr, weight_decay=r.weight_decay, eps=r.eps, maximize=False)


RULES: dict[str, type[Update]] = {"sgd": HeavyBall, "adamw": AdamW}


def optimizer(params, lr: float, momentum: float, recipe: Recipe = Recipe(), horizon: int = 0,
              iteration: int = 0) -> Update:
    """The recipe's update over `params`, starting at `iteration` of its schedule."""
    return RULES[recipe.optimizer](params, lr, momentum, recipe, horizon, iteration)
