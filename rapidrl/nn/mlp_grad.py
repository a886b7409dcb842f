"""Forward and backward of MLPs by hand: a few large PyTorch calls, no autograd graph.

For the small MLPs of on-policy RL an autograd update costs ~2 ms on this CPU, nearly all of it per-op
overhead (~150 graph nodes). Writing the backward of ``Linear -> tanh/relu`` stacks explicitly takes
about a quarter of the calls and writes gradients straight into each parameter's ``.grad`` (``out=``),
so the optimizer and gradient clipping are PyTorch's own. Tests compare every gradient with autograd.

Two layouts: ``nn.Sequential`` MLPs (``mlp_forward``/``mlp_backward``) and the stacked weights
``[n, in, out]`` of ``rapidrl.nn.qnets.CriticEnsemble`` (``ensemble_forward``/``ensemble_backward``, one
batched matmul per layer for all members, ReLU between layers).
"""

from __future__ import annotations

from typing import NamedTuple

import torch
from torch import nn

from rapidrl._unsafe.torch_private import relu_backward as _relu_backward


class Layer(NamedTuple):
    """One Linear layer's parameters as the hand-written passes use them, ``weight_t`` being the transposed
    view of ``weight`` made once (a view follows every in-place update of the weight)."""

    weight: nn.Parameter  # [out, in]
    bias: nn.Parameter  # [out]
    weight_t: torch.Tensor  # [in, out], a view of weight


def linear_layers(modules) -> list[Layer]:
    """The Linear layers of an MLP built by ``rapidrl.nn.mlp`` (or any sequence of modules), in order."""
    return [Layer(m.weight, m.bias, m.weight.detach().t()) for m in modules if isinstance(m, nn.Linear)]


@torch.no_grad()
def mlp_forward(x: torch.Tensor, layers: list[Layer], activation: str) -> tuple[torch.Tensor, list[torch.Tensor]]:
    """x [B, I] -> (out [B, O], inputs of every layer [x, h1, ..., h_{L-1}]) for ``mlp_backward``."""
    inputs = [x]
    h = x
    last = len(layers) - 1
    for i, layer in enumerate(layers):
        h = torch.addmm(layer.bias, h, layer.weight_t)
        if i < last:
            h = h.tanh_() if activation == "tanh" else h.relu_()
            inputs.append(h)
    return h, inputs


@torch.no_grad()
def mlp_backward(d_out: torch.Tensor, inputs: list[torch.Tensor], layers: list[Layer], activation: str) -> None:
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
            d = d.mul_(1.0 - x * x) if activation == "tanh" else relu_backward(d, x)


def relu_backward(d: torch.Tensor, out: torch.Tensor) -> torch.Tensor:
    """d loss / d z from d loss / d relu(z) and ``out`` = relu(z): zero where out is 0 (one kernel,
    ``rapidrl._unsafe.torch_private.relu_backward``)."""
    return _relu_backward(d, out)


@torch.no_grad()
def ensemble_forward(x: torch.Tensor, weights: list[torch.Tensor], biases: list[torch.Tensor]
                     ) -> tuple[torch.Tensor, list[torch.Tensor]]:
    """x [B, I] (the same input for every member) -> (out [n, B, O], inputs of every layer [n, B, *]).

    weights[l] [n, in, out], biases[l] [n, 1, out]; ReLU after every layer but the last.
    """
    h = x.unsqueeze(0).expand(weights[0].shape[0], *x.shape)  # [n, B, I], no copy
    inputs = [h]
    last = len(weights) - 1
    for i, (w, b) in enumerate(zip(weights, biases)):
        h = torch.baddbmm(b, h, w)
        if i < last:
            h = h.relu_()
            inputs.append(h)
    return h, inputs


@torch.no_grad()
def ensemble_backward(d_out: torch.Tensor, inputs: list[torch.Tensor], weights: list[torch.Tensor],
                      biases: list[torch.Tensor], param_rows: int | None = None) -> torch.Tensor:
    """Write d loss / d (weight, bias) into ``.grad`` from d loss / d out [n, B, O]; return d loss / d x [n, B, I].

    param_rows: only the first ``param_rows`` rows of the batch contribute to the parameter gradients (the
    rest are inputs whose gradient is wanted with the weights held constant, e.g. an actor loss through the
    critics); all rows get their input gradient.
    """
    rows = slice(None) if param_rows is None else slice(0, param_rows)
    d = d_out
    for i in range(len(weights) - 1, -1, -1):
        w, b, x = weights[i], biases[i], inputs[i]
        if w.grad is None:
            w.grad = torch.empty_like(w)
            b.grad = torch.empty_like(b)
        torch.bmm(x[:, rows].transpose(1, 2), d[:, rows], out=w.grad)
        torch.sum(d[:, rows], 1, keepdim=True, out=b.grad)
        d = torch.bmm(d, w.transpose(1, 2))  # d loss / d x_i
        if i > 0:
            d = relu_backward(d, x)
    return d
