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
    """A parameter that had no part in the loss (no gradient) counts zeros."""
    torch.cat([p.grad.reshape(-1).to(out.device) if p.grad is not None else torch.zeros(p.numel(), device=out.device)
               for p in _params(model)], out=out)
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


def flatten_state(optimizer_state: dict, model: torch.nn.Module) -> dict:
    """A saved optimizer's state (its state_dict, per parameter) as the state of one parameter,
    the model's parameters in one vector: each buffer concatenated in parameter order (zeros
    where a parameter has none yet), AdamW's step count kept as it is."""
    params = _params(model)
    per_param = optimizer_state.get("state", {})
    slots = {k for s in per_param.values() for k, v in s.items() if k != "step"}
    flat: dict[str, torch.Tensor] = {k: torch.zeros(num_params(model)) for k in slots}
    offset = 0
    for i, p in enumerate(params):
        for k, v in per_param.get(i, {}).items():
            if k == "step":
                flat.setdefault("step", v.clone())
            else:
                flat[k][offset:offset + p.numel()] = v.reshape(-1).to(torch.float32)
        offset += p.numel()
    return {"state": {0: flat} if flat else {},
            "param_groups": [{**g, "params": [0]} for g in optimizer_state.get("param_groups", [{}])]}


def unflatten_state(flat_state: dict, model: torch.nn.Module) -> dict:
    """flatten_state's inverse: the state of one flat vector as the model's optimizer state_dict,
    which a checkpoint holds."""
    params, state, offset = _params(model), {}, 0
    flat = flat_state.get("state", {}).get(0, {})
    for i, p in enumerate(params):
        if flat:
            state[i] = {k: v.clone() if k == "step" else v[offset:offset + p.numel()].view_as(p).clone()
                        for k, v in flat.items()}
        offset += p.numel()
    return {"state": state,
            "param_groups": [{**g, "params": list(range(len(params)))} for g in flat_state["param_groups"]]}
