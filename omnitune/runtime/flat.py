"""A model's parameters, gradients and BatchNorm statistics as flat float32 vectors (what crosses
the wire).

The state that protocols average or send is the parameters followed by the floating-point
buffers (BatchNorm's running mean and variance): buffers are not parameters, so a protocol that
moved parameters alone would leave them at their initial values where it evaluates. Integer
buffers (BatchNorm's batch counter) stay local.
"""

from __future__ import annotations

import torch


def _params(model: torch.nn.Module) -> list[torch.Tensor]:
    return list(model.parameters())


def _buffers(model: torch.nn.Module) -> list[torch.Tensor]:
    return [b for b in model.buffers() if b.is_floating_point()]


def _gather(tensors: list[torch.Tensor], out: torch.Tensor) -> torch.Tensor:
    if tensors:
        torch.cat([t.detach().reshape(-1).to(out.device) for t in tensors], out=out)
    return out


def _scatter(tensors: list[torch.Tensor], flat: torch.Tensor) -> None:
    offset = 0
    with torch.no_grad():
        for t in tensors:
            n = t.numel()
            t.copy_(flat[offset:offset + n].view_as(t))
            offset += n


def num_params(model: torch.nn.Module) -> int:
    return sum(p.numel() for p in _params(model))


def num_buffers(model: torch.nn.Module) -> int:
    return sum(b.numel() for b in _buffers(model))


def get_params(model: torch.nn.Module, out: torch.Tensor) -> torch.Tensor:
    return _gather(_params(model), out)


def set_params(model: torch.nn.Module, flat: torch.Tensor) -> None:
    _scatter(_params(model), flat)


def get_buffers(model: torch.nn.Module, out: torch.Tensor) -> torch.Tensor:
    return _gather(_buffers(model), out)


def set_buffers(model: torch.nn.Module, flat: torch.Tensor) -> None:
    _scatter(_buffers(model), flat)


def num_state(model: torch.nn.Module) -> int:
    """Parameters and floating-point buffers."""
    return num_params(model) + num_buffers(model)


def get_state(model: torch.nn.Module, out: torch.Tensor) -> torch.Tensor:
    return _gather(_params(model) + _buffers(model), out)


def set_state(model: torch.nn.Module, flat: torch.Tensor) -> None:
    _scatter(_params(model) + _buffers(model), flat)


def get_grads(model: torch.nn.Module, out: torch.Tensor) -> torch.Tensor:
    torch.cat([p.grad.reshape(-1).to(out.device) for p in _params(model)], out=out)
    return out


def set_grads(model: torch.nn.Module, flat: torch.Tensor) -> None:
    offset = 0
    for p in _params(model):
        n = p.numel()
        g = flat[offset:offset + n].view_as(p).to(p.device)
        if p.grad is None:
            p.grad = g.clone()
        else:
            p.grad.copy_(g)
        offset += n


def momentum_vector(optimizer_state: dict, model: torch.nn.Module) -> torch.Tensor:
    """The momentum buffers of a saved optimizer (its state_dict) as one vector in parameter
    order; zeros where a parameter has none yet."""
    params = _params(model)
    state = optimizer_state.get("state", {})
    out = torch.zeros(num_params(model))
    offset = 0
    for i, p in enumerate(params):
        buf = state.get(i, {}).get("momentum_buffer")
        if buf is not None:
            out[offset:offset + p.numel()] = buf.reshape(-1).to(out.dtype)
        offset += p.numel()
    return out


def optimizer_state(velocity: torch.Tensor, model: torch.nn.Module, lr: float, momentum: float) -> dict:
    """A momentum vector (parameter order) as HeavyBall's state_dict, which a checkpoint holds:
    momentum_vector's inverse."""
    params, state, offset = _params(model), {}, 0
    for i, p in enumerate(params):
        state[i] = {"momentum_buffer": velocity[offset:offset + p.numel()].view_as(p).clone()}
        offset += p.numel()
    return {"state": state, "param_groups": [{"lr": lr, "momentum": momentum, "params": list(range(len(params)))}]}
