"""What several classic-control envs share: Gymnasium's reset-bound check and the uniform draw of their PyTorch
initial states."""

from __future__ import annotations


def reset_bounds_check(low: int):
    """``check_params`` for an env whose reset bounds are ``params[low]``, ``params[low + 1]``: they must be ordered
    (Gymnasium's ``maybe_parse_reset_bounds``)."""

    def check_params(params):
        if params[low] > params[low + 1]:
            raise ValueError(f"Lower bound ({params[low]}) must be lower than higher bound ({params[low + 1]}).")

    return check_params


def torch_uniform(gen, shape, low, high, like):
    """``low + (high - low) * U[0, 1)`` of ``shape`` on ``like``'s device and dtype, from generator ``gen``."""
    import torch

    return low + (high - low) * torch.rand(shape, generator=gen, device=like.device, dtype=like.dtype)
