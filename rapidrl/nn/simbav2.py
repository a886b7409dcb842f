"""SimbaV2 networks (Lee et al., "Hyperspherical Normalization for Scalable Deep Reinforcement Learning", ICML 2025):
the actor and the critic ensemble of SAC's ``network="simbav2"`` (docs/simba.md).

Every hidden representation lives on the unit hypersphere, and so does every weight vector of a linear layer (one
per output unit: the projection ``project_weights`` after each optimizer step). A network of width w and k blocks
is, on an input x [B, D] (``l2n``: division by the L2 norm over the features, floored at 1e-8):

    x = l2n([x, c_shift])                                    (the shift keeps the input's norm: c_shift = 3)
    h = l2n(s_in * (x W_in))                                 (the embedder; no biases anywhere before the heads)
    u = l2n(relu(s_up * (h W_up)) + 1e-8) W_down)            (k times: an MLP of inner width 4w ...)
    h = l2n(h + a * (u - h))                                 (... and a learned interpolation towards it, per feature)

then per head a linear layer of width w, a scaler and a linear layer with a bias: the actor's two heads give the
means and the unsquashed log stds of SAC's squashed Gaussian, the critic's one head the logits of a categorical
value distribution. s_* and a are learned per-feature scalers: a parameter that starts at ``scale`` and is multiplied
by the constant ``init / scale``, so the value starts at ``init`` while Adam moves it at the step size of ``scale``
(the authors' ``Scaler``). Their settings: scalers init = scale = sqrt(2 / w) (the inner ones divided by 2), the
interpolation a init 1 / (k + 1) at scale 1 / sqrt(w), head scalers 1, orthogonal weights then projected, the
authors' code (dojeon-ai/SimbaV2, ``scale_rl/agents/simbaV2``) as the reference.

``SimbaV2Network`` holds n members with their weights stacked ([n, in, out], as ``rapidrl.nn.qnets.CriticEnsemble``)
and evaluates them with batched matrix products. ``SimbaV2CriticEnsemble`` is its (s, a) interface for the critics
(``forward(obs, actions, members, detach_params)``); ``SimbaV2Actor`` the actor's network (one member, two heads).
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from rapidrl.nn.dtypes import full_precision

__all__ = ["C_SHIFT", "NORM_EPS", "SimbaV2Actor", "SimbaV2CriticEnsemble", "SimbaV2Network", "l2n"]

NORM_EPS = 1e-8
"""The floor of every L2 norm and the offset after the MLP's ReLU (the authors' ``EPS``: no zero vector)."""
C_SHIFT = 3.0
"""The constant feature appended to the input before its projection onto the sphere."""


def l2n(x: torch.Tensor, dim: int = -1) -> torch.Tensor:
    """x divided by its L2 norm over ``dim`` (floored at ``NORM_EPS``)."""
    return x / torch.linalg.vector_norm(x, dim=dim, keepdim=True).clamp_min(NORM_EPS)


class SimbaV2Network(nn.Module):
    """n SimbaV2 networks of the same shape, evaluated together: x [B, in_dim] -> [k, B, heads * out_dim].

    Parameters (members first): ``w_in`` [n, in_dim + 1, w] and its scaler ``s_in`` [n, 1, w]; per block j ``w_up[j]``
    [n, w, 4w], ``s_up[j]`` [n, 1, 4w], ``w_down[j]`` [n, 4w, w], ``alpha[j]`` [n, 1, w]; per head t ``w_h1[t]``
    [n, w, w], ``s_h[t]`` [n, 1, w], ``w_h2[t]`` [n, w, out_dim], ``b_h[t]`` [n, 1, out_dim]. The weights (``w_*``)
    are the ones projected onto the sphere, each output unit's vector over the inputs (dim 1).
    """

    def __init__(self, n: int, in_dim: int, width: int, blocks: int, out_dim: int, heads: int = 1):
        super().__init__()
        if min(n, in_dim, width, blocks, out_dim, heads) < 1:
            raise ValueError(f"SimbaV2Network needs n, in_dim, width, blocks, out_dim and heads >= 1, got {n}, "
                             f"{in_dim}, {width}, {blocks}, {out_dim}, {heads}")
        self.n, self.width, self.blocks, self.out_dim, self.heads = n, width, blocks, out_dim, heads
        inner = 4 * width
        scaler = math.sqrt(2.0 / width)

        def weight(d_in: int, d_out: int) -> nn.Parameter:
            members = []
            for _ in range(n):
                w = torch.empty(d_out, d_in)
                nn.init.orthogonal_(w)
                members.append(w.T)
            return nn.Parameter(l2n(torch.stack(members), dim=1).contiguous())  # [n, in, out], unit columns

        def const(value: float, d: int) -> nn.Parameter:
            return nn.Parameter(torch.full((n, 1, d), float(value)))

        self.w_in, self.s_in = weight(in_dim + 1, width), const(scaler, width)
        self.w_up = nn.ParameterList(weight(width, inner) for _ in range(blocks))
        self.s_up = nn.ParameterList(const(scaler / 2, inner) for _ in range(blocks))  # init and scale / sqrt(4)
        self.w_down = nn.ParameterList(weight(inner, width) for _ in range(blocks))
        self.alpha = nn.ParameterList(const(1.0 / math.sqrt(width), width) for _ in range(blocks))
        self.alpha_factor = (1.0 / (blocks + 1)) / (1.0 / math.sqrt(width))  # init / scale of the interpolation
        self.w_h1 = nn.ParameterList(weight(width, width) for _ in range(heads))
        self.s_h = nn.ParameterList(const(1.0, width) for _ in range(heads))
        self.w_h2 = nn.ParameterList(weight(width, out_dim) for _ in range(heads))
        self.b_h = nn.ParameterList(const(0.0, out_dim) for _ in range(heads))

    def spherical_weights(self) -> list[nn.Parameter]:
        """The weights kept on the sphere (``project_weights``)."""
        return [self.w_in, *self.w_up, *self.w_down, *self.w_h1, *self.w_h2]

    @torch.no_grad()
    def project_weights(self) -> None:
        """Each weight's vector of every output unit back onto the unit sphere (after an optimizer step)."""
        for w in self.spherical_weights():
            w.copy_(l2n(w, dim=1))

    def forward(self, x: torch.Tensor, members: int | None = None, detach_params: bool = False) -> torch.Tensor:
        """[k, B, heads * out_dim] of the first ``members`` networks (default all n) on x [B, in_dim], float32.
        detach_params: the parameters as constants (gradients reach the input only)."""
        k = self.n if members is None else members

        def p(t: torch.Tensor) -> torch.Tensor:
            t = t.detach() if detach_params else t
            return t if k == self.n else t[:k]

        x = l2n(torch.cat([x, torch.full_like(x[:, :1], C_SHIFT)], -1))
        h = l2n(torch.matmul(x, p(self.w_in)) * p(self.s_in))  # [k, B, w]
        for j in range(self.blocks):
            u = F.relu(torch.bmm(h, p(self.w_up[j])) * p(self.s_up[j])) + NORM_EPS
            u = l2n(torch.bmm(u, p(self.w_down[j])))
            h = l2n(h + (p(self.alpha[j]) * self.alpha_factor) * (u - h))
        outs = [torch.baddbmm(p(self.b_h[t]), torch.bmm(h, p(self.w_h1[t])) * p(self.s_h[t]), p(self.w_h2[t]))
                for t in range(self.heads)]
        return full_precision(outs[0] if self.heads == 1 else torch.cat(outs, -1))


class SimbaV2CriticEnsemble(SimbaV2Network):
    """n SimbaV2 critics over (s, a): (obs [B, O], actions [B, A]) -> [k, B] (out_dim 1) or [k, B, out_dim] (the
    logits of a categorical value distribution); the interface of ``rapidrl.nn.qnets.CriticEnsemble``."""

    def __init__(self, n: int, obs_dim: int, act_dim: int, width: int, blocks: int, out_dim: int = 1):
        super().__init__(n, obs_dim + act_dim, width, blocks, out_dim)

    def forward(self, obs: torch.Tensor, actions: torch.Tensor, members: int | None = None,
                detach_params: bool = False) -> torch.Tensor:
        out = super().forward(torch.cat([obs, actions], -1), members, detach_params)
        return out.squeeze(-1) if self.out_dim == 1 else out


class SimbaV2Actor(SimbaV2Network):
    """An actor's network: obs [B, O] -> [B, heads * A]. SAC's two heads give the means then the unsquashed log stds
    (the trunk of a ``SquashedGaussianActor`` whose head is the identity); TD3's and DDPG's one the actions before
    their tanh (a ``DeterministicActor``'s whole network)."""

    def __init__(self, obs_dim: int, act_dim: int, width: int, blocks: int, heads: int = 2):
        super().__init__(1, obs_dim, width, blocks, act_dim, heads=heads)

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        return super().forward(obs)[0]
