"""Noisy linear layers with factorised Gaussian noise (Fortunato et al. 2018, "Noisy Networks for Exploration"):
Rainbow's exploration, in place of epsilon-greedy.

``NoisyLinear(p, q)`` computes ``y = (mu_W + sigma_W * eps_W) x + mu_b + sigma_b * eps_b`` with learned ``mu`` and
``sigma`` and the noise ``eps_W = f(eps_out) f(eps_in)^T``, ``eps_b = f(eps_out)``, ``f(x) = sgn(x) sqrt(|x|)``
for standard normal ``eps_in`` [p] and ``eps_out`` [q] (p + q draws, not p * q). The noise is a buffer: it stays
fixed until ``sample_noise`` draws it again (an algorithm does so before each update and each exploring action) and
is zero after ``remove_noise`` (the mean network: deterministic evaluation and export).

Initialisation as the paper's factorised case: ``mu ~ U(-1/sqrt(p), 1/sqrt(p))``, ``sigma = sigma_0 / sqrt(p)``,
``sigma_0 = 0.5``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch
from torch import nn
from torch.nn import functional as F

__all__ = ["NoisyLinear", "noisy_mlp", "remove_noise", "sample_noise", "scaled_noise"]


def scaled_noise(x: torch.Tensor) -> torch.Tensor:
    """f(x) = sgn(x) sqrt(|x|), the factorised noise's scaling (elementwise)."""
    return x.sign() * x.abs().sqrt()


class NoisyLinear(nn.Module):
    """A linear layer [.., p] -> [.., q] whose weights carry learned Gaussian noise (module doc)."""

    def __init__(self, in_features: int, out_features: int, sigma_0: float = 0.5):
        super().__init__()
        self.in_features, self.out_features = int(in_features), int(out_features)
        bound = 1.0 / math.sqrt(in_features)
        self.weight_mu = nn.Parameter(torch.empty(out_features, in_features).uniform_(-bound, bound))
        self.weight_sigma = nn.Parameter(torch.full((out_features, in_features), sigma_0 * bound))
        self.bias_mu = nn.Parameter(torch.empty(out_features).uniform_(-bound, bound))
        self.bias_sigma = nn.Parameter(torch.full((out_features,), sigma_0 * bound))
        self.register_buffer("weight_epsilon", torch.zeros(out_features, in_features))
        self.register_buffer("bias_epsilon", torch.zeros(out_features))

    @torch.no_grad()
    def sample_noise(self, generator: torch.Generator | None = None) -> None:
        """Draw new factorised noise (p + q standard normals from ``generator``, on the layer's device)."""
        device = self.weight_mu.device
        eps_in = scaled_noise(torch.randn(self.in_features, generator=generator, device=device))
        eps_out = scaled_noise(torch.randn(self.out_features, generator=generator, device=device))
        self.weight_epsilon.copy_(torch.outer(eps_out, eps_in))
        self.bias_epsilon.copy_(eps_out)

    @torch.no_grad()
    def remove_noise(self) -> None:
        """Zero noise: the layer computes its mean ``mu_W x + mu_b``."""
        self.weight_epsilon.zero_()
        self.bias_epsilon.zero_()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        weight = self.weight_mu + self.weight_sigma * self.weight_epsilon
        bias = self.bias_mu + self.bias_sigma * self.bias_epsilon
        return F.linear(x, weight, bias)

    def extra_repr(self) -> str:
        return f"in_features={self.in_features}, out_features={self.out_features}"


def noisy_mlp(in_dim: int, hidden: Sequence[int], out_dim: int | None, *, layer_norm: bool = False
              ) -> nn.Sequential:
    """``rapidrl.nn.policies.mlp`` with ``NoisyLinear`` layers and ReLU: ``NoisyLinear -> (LayerNorm) -> ReLU`` per
    hidden size, then an optional output ``NoisyLinear``."""
    layers: list[nn.Module] = []
    d = in_dim
    for h in hidden:
        layers.append(NoisyLinear(d, h))
        if layer_norm:
            layers.append(nn.LayerNorm(h))
        layers.append(nn.ReLU())
        d = h
    if out_dim is not None:
        layers.append(NoisyLinear(d, out_dim))
    return nn.Sequential(*layers)


def sample_noise(module: nn.Module, generator: torch.Generator | None = None) -> None:
    """Draw new noise in every ``NoisyLinear`` of ``module`` (in module order, from ``generator``)."""
    for m in module.modules():
        if isinstance(m, NoisyLinear):
            m.sample_noise(generator)


def remove_noise(module: nn.Module) -> None:
    """Zero the noise of every ``NoisyLinear`` of ``module`` (its mean network)."""
    for m in module.modules():
        if isinstance(m, NoisyLinear):
            m.remove_noise()
