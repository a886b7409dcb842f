"""The action distributions' formulas in PyTorch, one definition each: diagonal Gaussian log-density and entropy,
the tanh squash's log-Jacobian, the squashed Gaussian built from them, categorical log-probabilities and entropy, and
action masks on them.

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

MASKED_LOGIT = -1e9
"""The logit given to an invalid action. Its probability exp(MASKED_LOGIT - logsumexp) is exactly 0 in float32 and
bfloat16 (and float64) for any valid logits above -1e9 + 100, so log-probabilities, entropy and sampling cover the
valid actions only, and being finite it keeps entropy's 0 * log 0 terms 0 (never NaN) and gradients 0. The masked
distribution is computed from logits, never from renormalised probabilities (sb3-contrib issue 322: float32
probabilities that drifted off the simplex at 992 actions)."""

__all__ = ["LOG_2", "LOG_2PI", "MASKED_LOGIT", "apply_action_mask", "categorical_entropy", "categorical_log_probs",
           "gaussian_entropy", "gaussian_log_density", "gaussian_log_prob", "masked_max", "split_action_mask",
           "squashed_gaussian_log_prob", "tanh_log_jacobian"]


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
    """log softmax over the last dimension: logits [..., K] -> log-probabilities [..., K] (masked logits from
    ``apply_action_mask``: the masked distribution's, ``MASKED_LOGIT - logsumexp`` at invalid actions)."""
    return torch.log_softmax(logits, -1)


def apply_action_mask(logits: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
    """logits (or Q values) [..., K] with ``MASKED_LOGIT`` where ``mask`` [..., K] (bool) is False; ``logits`` itself
    when mask is None. The categorical functions of this module then describe the distribution over the valid
    actions only, and max/argmax pick a valid action (twin: ``rapidrl.kernels.distributions.apply_action_mask``)."""
    return logits if mask is None else logits.masked_fill(~mask, MASKED_LOGIT)


def masked_max(values: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
    """max over the valid entries of values [..., K] -> [...]; 0 where no entry is valid (the value of a state where
    nothing can be done: a finished game's final state), ``values.max(-1)`` when mask is None (twin:
    ``rapidrl.kernels.distributions.masked_max``)."""
    if mask is None:
        return values.max(-1).values
    best = apply_action_mask(values, mask).max(-1).values
    return torch.where(mask.any(-1), best, torch.zeros_like(best))


def split_action_mask(mask: torch.Tensor | None, sizes: list[int]) -> list[torch.Tensor | None]:
    """A MultiDiscrete space's mask [..., sum(sizes)] (the components' masks side by side, sb3-contrib's layout) as
    one mask per component; ``[None] * len(sizes)`` for None."""
    if mask is None:
        return [None] * len(sizes)
    return list(torch.split(mask, sizes, dim=-1))


def categorical_entropy(log_probs: torch.Tensor) -> torch.Tensor:
    """-sum_k p_k log p_k from log-probabilities [..., K] -> [...]."""
    return -(log_probs.exp() * log_probs).sum(-1)
