"""Forward and backward of an ``nn.Sequential`` MLP by hand: a few large PyTorch calls, no autograd graph.

For the small MLPs of on-policy RL an autograd update costs ~2 ms on this CPU, nearly all of it per-op
overhead (~150 graph nodes). Writing the backward of ``Linear -> tanh/relu`` stacks explicitly takes
about a quarter of the calls and writes gradients straight into each parameter's ``.grad`` (``out=``),
so the optimizer and gradient clipping are PyTorch's own. Tests compare every gradient with autograd.
"""

from __future__ import annotations

import torch
from torch import nn


def linear_layers(seq: nn.Sequential) -> list[nn.Linear]:
    """The Linear layers of an MLP built by ``rapidrl.nn.mlp`` (activations in between)."""
    return [m for m in seq if isinstance(m, nn.Linear)]


@torch.no_grad()
def mlp_forward(x: torch.Tensor, layers: list[nn.Linear], activation: str) -> tuple[torch.Tensor, list[torch.Tensor]]:
    """x [B, I] -> (out [B, O], inputs of every layer [x, h1, ..., h_{L-1}]) for ``mlp_backward``."""
    inputs = [x]
    h = x
    last = len(layers) - 1
    for i, layer in enumerate(layers):
        h = torch.addmm(layer.bias, h, layer.weight.t())
        if i < last:
            h = h.tanh_() if activation == "tanh" else h.relu_()
            inputs.append(h)
    return h, inputs


@torch.no_grad()
def mlp_backward(d_out: torch.Tensor, inputs: list[torch.Tensor], layers: list[nn.Linear], activation: str) -> None:
    """Write d loss / d (weight, bias) of every layer into ``.grad`` given d loss / d out [B, O]."""
    d = d_out
    for i in range(len(layers) - 1, -1, -1):
        layer, x = layers[i], inputs[i]
        if layer.weight.grad is None:
            layer.weight.grad = torch.empty_like(layer.weight)
            layer.bias.grad = torch.empty_like(layer.bias)
        torch.mm(d.t(), x, out=layer.weight.grad)
        torch.sum(d, 0, out=layer.bias.grad)
        if i > 0:
            d = torch.mm(d, layer.weight)  # d loss / d x_i, x_i = act(z_{i-1})
            if activation == "tanh":
                d = d.mul_(1.0 - x * x)
            else:
                d = d.mul_(x > 0)
