"""The action distributions' formulas in PyTorch, one definition each: diagonal Gaussian log-density and entropy,
the tanh squash's log-Jacobian, the squashed Gaussian built from them, categorical log-probabilities and entropy.

Every PyTorch caller (``rapidrl.nn.policies``, ``rapidrl.nn.qnets``, ...) uses these. Compiled code uses their
Numba twins, ``rapidrl.kernels.distributions``; ``tests/test_distributions.py`` compares the two over ordinary
and extreme inputs. Shapes: ``[..., A]`` in (A = action dimensions or categories), ``[...]`` out (summed over A).
"""

from __future__ import annotations

import math

import torch
from torch.nn import functional

LOG_2PI = math.log(2.0 * math.pi)
LOG_2 = math.log(2.0)

__all__ = ["LOG_2", "LOG_2PI", "categorical_entropy", "categorical_log_probs", "gaussian_entropy",
           "gaussian_log_density", "gaussian_log_prob", "squashed_gaussian_log_prob", "tanh_log_jacobian"]


def gaussian_log_density(z: torch.Tensor, log_std: torch.Tensor) -> torch.Tensor:
    """sum_j log N(x_j; mean_j, std_j^2) from the standardised z = (x - mean) / std [..., A] and log std
    (broadcast to z) -> [...]."""
    return (-0.5 * z.square() - log_std - 0.5 * LOG_2PI).sum(-1)


def gaussian_log_prob(x: torch.Tensor, mean: torch.Tensor, log_std: torch.Tensor) -> torch.Tensor:
    """Diagonal Gaussian log-density of x [..., A] given mean [..., A] and log std (broadcast) -> [...]."""
    return gaussian_log_density((x - mean) * torch.exp(-log_std), log_std)


def gaussian_entropy(log_std: torch.Tensor) -> torch.Tensor:
    """Entropy of a diagonal Gaussian, sum_j (log std_j + (1 + log 2 pi) / 2): log std [..., A] -> [...]."""
    return (log_std + 0.5 + 0.5 * LOG_2PI).sum(-1)


def tanh_log_jacobian(u: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    """log |d a / d u| of a = center + scale * tanh(u), summed over dimensions: u [..., A], scale (broadcast) ->
    [...]. Written stably as log(1 - tanh(u)^2) = 2 (log 2 - u - softplus(-2u)): finite for every u."""
    return (torch.log(scale) + 2.0 * (LOG_2 - u - functional.softplus(-2.0 * u))).sum(-1)


def squashed_gaussian_log_prob(z: torch.Tensor, log_std: torch.Tensor, u: torch.Tensor, scale: torch.Tensor
                               ) -> torch.Tensor:
    """log-density of a = center + scale * tanh(u), u = mean + std * z ~ N(mean, std^2): the Gaussian's minus the
    squash's log-Jacobian. z, u [..., A]; log_std, scale broadcast -> [...]."""
    return gaussian_log_density(z, log_std) - tanh_log_jacobian(u, scale)


def categorical_log_probs(logits: torch.Tensor) -> torch.Tensor:
    """log softmax over the last dimension: logits [..., K] -> log-probabilities [..., K]."""
    return torch.log_softmax(logits, -1)


def categorical_entropy(log_probs: torch.Tensor) -> torch.Tensor:
    """-sum_k p_k log p_k from log-probabilities [..., K] -> [...]."""
    return -(log_probs.exp() * log_probs).sum(-1)
