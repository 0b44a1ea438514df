"""A model's parameters and gradients as one flat float32 vector (what crosses the wire)."""

from __future__ import annotations

import torch


def num_params(model: torch.nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())


def get_params(model: torch.nn.Module, out: torch.Tensor) -> torch.Tensor:
    torch.cat([p.detach().reshape(-1).to(out.device) for p in model.parameters()], out=out)
    return out


def set_params(model: torch.nn.Module, flat: torch.Tensor) -> None:
    offset = 0
    with torch.no_grad():
        for p in model.parameters():
            n = p.numel()
            p.copy_(flat[offset:offset + n].view_as(p))
            offset += n


def get_grads(model: torch.nn.Module, out: torch.Tensor) -> torch.Tensor:
    torch.cat([p.grad.reshape(-1).to(out.device) for p in model.parameters()], out=out)
    return out


def set_grads(model: torch.nn.Module, flat: torch.Tensor) -> None:
    offset = 0
    for p in model.parameters():
        n = p.numel()
        g = flat[offset:offset + n].view_as(p).to(p.device)
        if p.grad is None:
            p.grad = g.clone()
        else:
            p.grad.copy_(g)
        offset += n
