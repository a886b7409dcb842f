"""Forward and backward of the critic ensemble by hand: a few large PyTorch calls, no autograd graph.

For the small networks of off-policy RL an autograd update costs ~2 ms on this CPU, nearly all of it per-op
overhead. Writing the backward of the stacked weights ``[n, in, out]`` of ``rapidrl.nn.qnets.CriticEnsemble``
explicitly (one batched matmul per layer for all members, ReLU between layers) takes about a quarter of the calls
and writes gradients straight into each parameter's ``.grad`` (``out=``), so the optimizer and gradient clipping
are PyTorch's own (SAC's handwritten backend). Tests compare every gradient with autograd. (A plain MLP's forward and
backward in compiled code: ``rapidrl.kernels.mlp``.)
"""

from __future__ import annotations

import torch

from rapidrl._unsafe.torch_private import relu_backward

__all__ = ["ensemble_backward", "ensemble_forward"]


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
    critics); all rows get their input gradient. 0: no parameter gradient is written (``.grad`` untouched).
    """
    rows = slice(None) if param_rows is None else slice(0, param_rows)
    d = d_out
    for i in range(len(weights) - 1, -1, -1):
        w, b, x = weights[i], biases[i], inputs[i]
        if param_rows != 0:
            if w.grad is None:
                w.grad = torch.empty_like(w)
                b.grad = torch.empty_like(b)
            torch.bmm(x[:, rows].transpose(1, 2), d[:, rows], out=w.grad)
            torch.sum(d[:, rows], 1, keepdim=True, out=b.grad)
        d = torch.bmm(d, w.transpose(1, 2))  # d loss / d x_i
        if i > 0:
            d = relu_backward(d, x)
    return d
