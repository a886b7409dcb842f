"""Quantile networks: IQN's implicit quantile network (Dabney et al. 2018b) and the mean-over-quantiles Q values that
QR-DQN and IQN act on (and export).

``ImplicitQuantileNetwork`` maps an observation and fractions tau in (0, 1) to the return quantiles Z_tau(s, a) of
every action::

    psi(s)     = state features [B, F]: a CNN encoder (``rapidrl.nn.encoders``), or the first hidden layers of an MLP
    phi(tau)   = ReLU(sum_{i < 64} cos(pi i tau) w_i + b)           [.., K, F]  (the cosine embedding, i = 0 .. 63)
    Z_tau(s,.) = f(psi(s) * phi(tau))                                [B, A, K]  (elementwise product, then the head f)

f is one hidden ReLU layer and a linear output layer (Dopamine's IQN head: a 512-unit layer, then the actions). With
an MLP (``hidden`` = (h_1, ..., h_L), L >= 2) psi is layers 1 .. L - 1 and f's hidden layer is h_L; with one hidden
layer, psi is that layer and f is the output layer alone. With a CNN encoder psi is the encoder's features
(its last linear layer included: 512 for the Nature CNN, 128 for MinAtar's) and f's hidden layer has F units, so
the product sits one layer later than in Dopamine (which multiplies the flattened convolutions).

The fractions are [B, K] (sampled per sample: training) or [K] (shared by the whole batch: acting at fixed
fractions, where phi is computed once).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch
from torch import nn

from rapidrl.nn.dtypes import full_precision
from rapidrl.nn.policies import mlp, orthogonal_init

__all__ = ["COSINE_EMBEDDING_DIM", "ImplicitQuantileNetwork", "MeanQuantileQ", "cosine_features",
           "midpoint_fractions"]

COSINE_EMBEDDING_DIM = 64
"""The cosines of the fraction embedding (Dabney et al. 2018b: n = 64)."""


def midpoint_fractions(n: int, device: torch.device | str | None = None) -> torch.Tensor:
    """tau_j = (j + 0.5) / n, j = 0 .. n - 1 [n]: QR-DQN's fixed fractions, and IQN's when it acts."""
    return (torch.arange(n, device=device, dtype=torch.float32) + 0.5) / n


def cosine_features(tau: torch.Tensor, dim: int = COSINE_EMBEDDING_DIM) -> torch.Tensor:
    """cos(pi i tau) for i = 0 .. dim - 1: tau [...] -> [..., dim] (the input of IQN's embedding layer)."""
    i = torch.arange(dim, device=tau.device, dtype=tau.dtype)
    return torch.cos(math.pi * i * tau.unsqueeze(-1))


class ImplicitQuantileNetwork(nn.Module):
    """IQN's network (module docstring): ``forward(obs, tau) -> Z [B, A, K]``, float32 (bf16 autocast: the layers in
    bf16), for obs [B, O] (or [B, C, H, W] with a CNN ``encoder``) and tau [B, K] or [K].

    ``features(obs)`` and ``quantiles(features, tau)`` split the forward, so one psi(s') serves two sets of fractions.
    """

    def __init__(self, obs_dim: int, num_actions: int, hidden: Sequence[int], *, encoder: nn.Module | None = None,
                 embedding_dim: int = COSINE_EMBEDDING_DIM):
        super().__init__()
        if encoder is None and len(hidden) < 1:
            raise ValueError("ImplicitQuantileNetwork needs at least one hidden layer (hidden=()) without an encoder")
        self.has_encoder = encoder is not None
        self.num_actions, self.embedding_dim = int(num_actions), int(embedding_dim)
        if encoder is not None:
            self.trunk = encoder
            width = encoder.out_dim
            head_hidden: tuple[int, ...] = (width,)
        else:
            trunk_hidden = tuple(hidden[:-1]) if len(hidden) > 1 else tuple(hidden)
            self.trunk = mlp(obs_dim, trunk_hidden, None, "relu")
            width = trunk_hidden[-1]
            head_hidden = tuple(hidden[-1:]) if len(hidden) > 1 else ()
        self.feature_dim = int(width)
        self.embedding = orthogonal_init(nn.Linear(self.embedding_dim, width), math.sqrt(2.0))
        self.head = mlp(width, head_hidden, self.num_actions, "relu")

    def features(self, obs: torch.Tensor) -> torch.Tensor:
        """psi(s) [B, F]."""
        return self.trunk(obs)

    def quantiles(self, features: torch.Tensor, tau: torch.Tensor) -> torch.Tensor:
        """Z_tau [B, A, K] of features psi [B, F] at fractions tau [B, K] or [K]."""
        # the cosines in float32 whatever the autocast (pi i tau reaches ~200: bf16 would round it by ~1 radian)
        phi = torch.relu(self.embedding(cosine_features(tau.float(), self.embedding_dim)))  # [(B,) K, F]
        h = features.unsqueeze(1) * phi  # [B, K, F] (phi [K, F] broadcasts over the batch)
        return full_precision(self.head(h)).transpose(1, 2)  # [B, A, K]

    def forward(self, obs: torch.Tensor, tau: torch.Tensor) -> torch.Tensor:
        return self.quantiles(self.features(obs), tau)


class MeanQuantileQ(nn.Module):
    """Q values [B, A] as the mean over quantiles of a quantile network: QR-DQN's ``QNetwork`` outputs [B, A, N]
    (``fractions`` None), or an ``ImplicitQuantileNetwork`` at fixed ``fractions`` [K] (IQN's acting). What QR-DQN
    and IQN act on greedily, and export (wrapped by ``rapidrl.nn.deploy.ArgmaxQ``)."""

    def __init__(self, net: nn.Module, fractions: torch.Tensor | None = None):
        super().__init__()
        self.net = net
        self.has_encoder = bool(getattr(net, "has_encoder", False))
        if fractions is not None:
            self.register_buffer("fractions", fractions.detach().clone().float())
        else:
            self.fractions = None

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        z = self.net(obs) if self.fractions is None else self.net(obs, self.fractions)  # [B, A, K]
        return z.mean(-1)
