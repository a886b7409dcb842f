"""Optimizers as rapidrl builds them: one definition, the fastest kernel PyTorch has for the device."""

from __future__ import annotations

import torch


def adam(params, lr: float, eps: float = 1e-8) -> torch.optim.Adam:
    """Adam with the fused kernel where torch has one for the device (CPU included), else foreach.

    For the small networks of RL the fused step is ~3x faster than foreach on this CPU (measured: 13 tensors
    of two 64x64 MLPs, 0.33 ms vs 1.0 ms per step, one thread).
    """
    params = list(params)
    try:
        return torch.optim.Adam(params, lr=lr, eps=eps, fused=True)
    except RuntimeError:
        return torch.optim.Adam(params, lr=lr, eps=eps, foreach=True)
