"""SimBa networks (Lee et al., "SimBa: Simplicity Bias for Scaling Up Parameters in Deep Reinforcement Learning",
ICLR 2025): the actor's trunk and the critic ensemble of ``network="simba"`` (docs/simba.md).

A SimBa network of width w and k blocks is, on an input x [B, D]:

    h = x W_in + b_in                                      (orthogonal init, gain 1)
    h = h + relu(LN(h) W_up + b_up) W_down + b_down        (k times: pre-LayerNorm residual blocks, inner width 4w)
    z = LN(h)                                              (post-LayerNorm)

then a linear head on z. The weights of the blocks start as He-normal (flax's ``he_normal``: a normal of std
sqrt(2 / fan_in) truncated at two standard deviations, rescaled to keep that std), the biases at 0, the LayerNorms
at scale 1 and shift 0 with eps 1e-6, all as in the authors' code (SonyResearch/simba, ``scale_rl/networks``). The
third part of SimBa, running-statistics normalisation of the observations, is the algorithm's (``normalize_obs``,
``rapidrl.algos.offpolicy``), not the network's: the replay keeps raw observations, and every network input is
normalised with the statistics of the moment.

``SimbaEncoder`` is one network (the actor's trunk). ``SimbaCriticEnsemble`` is n of them over (s, a) with a linear
head each, evaluated together with batched matrix products as ``rapidrl.nn.qnets.CriticEnsemble`` (the same
``forward`` and the same [n, in, out] weight layout, so member i equals a ``SimbaEncoder`` plus a head holding its
slices: ``member``).
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from rapidrl.nn.dtypes import full_precision

__all__ = ["LAYER_NORM_EPS", "ResidualBlock", "SimbaCriticEnsemble", "SimbaEncoder", "he_normal_"]

LAYER_NORM_EPS = 1e-6
"""flax's LayerNorm epsilon, which SimBa's code uses (PyTorch's default is 1e-5)."""
_TRUNCATED_STD = 0.87962566103423978
"""The std of a standard normal truncated to [-2, 2] (flax's variance scaling divides by it)."""


def he_normal_(weight: torch.Tensor, fan_in: int) -> torch.Tensor:
    """Fill ``weight`` in place with flax's ``he_normal``: N(0, 2 / fan_in) truncated at two standard deviations, scaled
    so the std stays sqrt(2 / fan_in). Returns ``weight``."""
    std = math.sqrt(2.0 / fan_in) / _TRUNCATED_STD
    with torch.no_grad():
        return nn.init.trunc_normal_(weight, 0.0, std, -2.0 * std, 2.0 * std)


def _linear(d_in: int, d_out: int, init: str, gain: float = 1.0) -> nn.Linear:
    """nn.Linear with zero bias and ``init`` "orthogonal" (``gain``) or "he" (``he_normal_``) weights."""
    layer = nn.Linear(d_in, d_out)
    if init == "orthogonal":
        nn.init.orthogonal_(layer.weight, gain)
    else:
        he_normal_(layer.weight, d_in)
    nn.init.zeros_(layer.bias)
    return layer


class ResidualBlock(nn.Module):
    """x [..., w] -> x + relu(LN(x) W_up + b_up) W_down + b_down, inner width 4w."""

    def __init__(self, width: int):
        super().__init__()
        self.norm = nn.LayerNorm(width, eps=LAYER_NORM_EPS)
        self.up = _linear(width, 4 * width, "he")
        self.down = _linear(4 * width, width, "he")

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.down(torch.relu(self.up(self.norm(x))))


class SimbaEncoder(nn.Sequential):
    """x [B, in_dim] -> z [B, width]: the input layer, ``blocks`` residual blocks, the output LayerNorm."""

    def __init__(self, in_dim: int, width: int, blocks: int):
        if in_dim < 1 or width < 1 or blocks < 1:
            raise ValueError(f"SimbaEncoder needs in_dim, width and blocks >= 1, got {in_dim}, {width}, {blocks}")
        super().__init__(_linear(in_dim, width, "orthogonal", 1.0), *(ResidualBlock(width) for _ in range(blocks)),
                         nn.LayerNorm(width, eps=LAYER_NORM_EPS))
        self.out_dim = width


class SimbaCriticEnsemble(nn.Module):
    """n SimBa critics Q_i(s, a) evaluated together: (obs [B, O], actions [B, A]) -> [n, B] (``out_dim`` > 1:
    [n, B, out_dim], TQC's quantiles). The interface of ``rapidrl.nn.qnets.CriticEnsemble``.

    Parameters, each with the members first: ``w_in`` [n, O + A, w], ``b_in`` [n, 1, w]; per block j
    ``norm_scale[j]``, ``norm_shift[j]`` [n, 1, w], ``w_up[j]`` [n, w, 4w], ``b_up[j]`` [n, 1, 4w], ``w_down[j]``
    [n, 4w, w], ``b_down[j]`` [n, 1, w]; the output LayerNorm's ``out_scale``, ``out_shift`` [n, 1, w]; the head's
    ``w_head`` [n, w, out_dim] (orthogonal, gain 1) and ``b_head`` [n, 1, out_dim]. Each member is initialised as a
    ``SimbaEncoder`` of its own.
    """

    def __init__(self, n: int, obs_dim: int, act_dim: int, width: int, blocks: int, out_dim: int = 1):
        super().__init__()
        if n < 1:
            raise ValueError(f"n must be >= 1, got {n}")
        self.n, self.width, self.blocks, self.out_dim = int(n), int(width), int(blocks), int(out_dim)
        members = [(SimbaEncoder(obs_dim + act_dim, width, blocks), _linear(width, out_dim, "orthogonal", 1.0))
                   for _ in range(n)]

        def stack(get, bias: bool = False) -> nn.Parameter:
            """The members' tensors ``get(encoder, head)`` as one parameter: weights [n, in, out], biases and
            LayerNorm affines [n, 1, out]."""
            parts = [get(enc, head).detach() for enc, head in members]
            return nn.Parameter(torch.stack([p.reshape(1, -1) if bias else p.T for p in parts]).contiguous())

        self.w_in, self.b_in = stack(lambda e, h: e[0].weight), stack(lambda e, h: e[0].bias, True)
        self.norm_scale = nn.ParameterList(stack(lambda e, h, j=j: e[1 + j].norm.weight, True) for j in range(blocks))
        self.norm_shift = nn.ParameterList(stack(lambda e, h, j=j: e[1 + j].norm.bias, True) for j in range(blocks))
        self.w_up = nn.ParameterList(stack(lambda e, h, j=j: e[1 + j].up.weight) for j in range(blocks))
        self.b_up = nn.ParameterList(stack(lambda e, h, j=j: e[1 + j].up.bias, True) for j in range(blocks))
        self.w_down = nn.ParameterList(stack(lambda e, h, j=j: e[1 + j].down.weight) for j in range(blocks))
        self.b_down = nn.ParameterList(stack(lambda e, h, j=j: e[1 + j].down.bias, True) for j in range(blocks))
        self.out_scale, self.out_shift = stack(lambda e, h: e[-1].weight, True), stack(lambda e, h: e[-1].bias, True)
        self.w_head, self.b_head = stack(lambda e, h: h.weight), stack(lambda e, h: h.bias, True)

    def _norm(self, h: torch.Tensor, scale: torch.Tensor, shift: torch.Tensor) -> torch.Tensor:
        """Each member's LayerNorm over the last axis of h [k, B, w] with its own scale and shift [k, 1, w]."""
        return torch.addcmul(shift, F.layer_norm(h, (self.width,), eps=LAYER_NORM_EPS), scale)

    def forward(self, obs: torch.Tensor, actions: torch.Tensor, members: int | None = None,
                detach_params: bool = False) -> torch.Tensor:
        """Q values [k, B] (``out_dim`` > 1: [k, B, out_dim]) of the first ``members`` critics (default all n), float32.

        detach_params: treat the parameters as constants, so a backward pass computes gradients for the inputs (an
        actor loss) without accumulating the parameters' gradients."""
        k = self.n if members is None else members

        def p(t: torch.Tensor) -> torch.Tensor:
            t = t.detach() if detach_params else t
            return t if k == self.n else t[:k]

        x = torch.cat([obs, actions], -1)  # [B, O + A]
        h = torch.baddbmm(p(self.b_in), x.unsqueeze(0).expand(k, *x.shape), p(self.w_in))  # [k, B, w]
        for j in range(self.blocks):
            inner = torch.relu(torch.baddbmm(p(self.b_up[j]), self._norm(h, p(self.norm_scale[j]),
                                                                         p(self.norm_shift[j])), p(self.w_up[j])))
            h = h + torch.baddbmm(p(self.b_down[j]), inner, p(self.w_down[j]))  # [k, B, w]
        q = torch.baddbmm(p(self.b_head), self._norm(h, p(self.out_scale), p(self.out_shift)), p(self.w_head))
        return full_precision(q.squeeze(-1) if self.out_dim == 1 else q)  # [k, B] or [k, B, out_dim]

    def member(self, i: int) -> nn.Module:
        """Critic i as a plain network: x = [obs, action] [B, O + A] -> [B, out_dim] (a ``SimbaEncoder`` and a linear
        head holding copies of its slices; the reference ``forward`` is tested against)."""
        enc = SimbaEncoder(self.w_in.shape[1], self.width, self.blocks)
        head = nn.Linear(self.width, self.out_dim)
        with torch.no_grad():
            enc[0].weight.copy_(self.w_in[i].T)
            enc[0].bias.copy_(self.b_in[i, 0])
            for j in range(self.blocks):
                block = enc[1 + j]
                block.norm.weight.copy_(self.norm_scale[j][i, 0])
                block.norm.bias.copy_(self.norm_shift[j][i, 0])
                block.up.weight.copy_(self.w_up[j][i].T)
                block.up.bias.copy_(self.b_up[j][i, 0])
                block.down.weight.copy_(self.w_down[j][i].T)
                block.down.bias.copy_(self.b_down[j][i, 0])
            enc[-1].weight.copy_(self.out_scale[i, 0])
            enc[-1].bias.copy_(self.out_shift[i, 0])
            head.weight.copy_(self.w_head[i].T)
            head.bias.copy_(self.b_head[i, 0])
        return nn.Sequential(enc, head).to(self.w_in.device)
