"""What A2C and IMPALA share: the actor-critic loss (a pure function), their optimizer choice (config fields and
the optimizer they build), and explained variance.

The two losses differ only in where the advantages and value targets come from (A2C: GAE's advantages and
returns on its own rollout; IMPALA: V-trace's policy-gradient advantages and targets ``vs`` on a stale one) and
in the scale of the value loss each source writes (A2C's (R - V)^2 as SB3's A2C, IMPALA's paper's
0.5 (vs - V)^2).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from rapidrl.nn.optim import adam
from rapidrl.train.config import check_positive, require

__all__ = ["ActorCriticOptimizerConfig", "actor_critic_loss", "explained_variance"]


def actor_critic_loss(log_probs: torch.Tensor, entropy: torch.Tensor, values: torch.Tensor, advantages: torch.Tensor,
                      value_targets: torch.Tensor, *, ent_coef: float, vf_coef: float, value_scale: float = 1.0
                      ) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """L = -E[A log pi(a|s)] + vf_coef * value_scale * E[(target - V(s))^2] - ent_coef * E[H]; every tensor [B].

    Returns (loss, detached statistics: policy_loss, value_loss (with ``value_scale``), entropy)."""
    pg_loss = -(advantages * log_probs).mean()
    v_loss = value_scale * (value_targets - values).square().mean()
    ent = entropy.mean()
    loss = pg_loss + vf_coef * v_loss - ent_coef * ent
    return loss, {"policy_loss": pg_loss.detach(), "value_loss": v_loss.detach(), "entropy": ent.detach()}


@dataclass
class ActorCriticOptimizerConfig:
    """The optimizer fields of A2C and IMPALA (a dataclass mixin of their configs)."""

    optimizer: str = "rmsprop"
    """"rmsprop" (as in the A2C and IMPALA papers) or "adam"."""
    rms_alpha: float = 0.99
    """RMSprop smoothing constant."""
    rms_eps: float = 1e-5
    """Epsilon of the optimizer, RMSprop's or Adam's (added to the root of the second-moment estimate)."""

    def validate_optimizer(self) -> None:
        check_positive(self, "rms_eps")
        require(0.0 < self.rms_alpha < 1.0, f"rms_alpha must lie in (0, 1), got {self.rms_alpha}")
        require(self.optimizer in ("rmsprop", "adam"), f"optimizer must be 'rmsprop' or 'adam', got {self.optimizer!r}")

    def make_optimizer(self, params, lr: float) -> torch.optim.Optimizer:
        """``optimizer`` over ``params`` with learning rate ``lr`` and epsilon ``rms_eps``: RMSprop (foreach) or Adam
        (``rapidrl.nn.optim.adam``)."""
        if self.optimizer == "adam":
            return adam(params, lr, eps=self.rms_eps)
        return torch.optim.RMSprop(params, lr=lr, alpha=self.rms_alpha, eps=self.rms_eps, foreach=True)


def explained_variance(targets, predictions) -> float:
    """1 - Var[targets - predictions] / Var[targets] (population variances) of two same-shape arrays or tensors;
    0 when Var[targets] = 0 (NaN-free)."""
    targets, predictions = targets.reshape(-1), predictions.reshape(-1)

    def var(x) -> float:
        return float(np.var(x)) if isinstance(x, np.ndarray) else float(torch.var(x, unbiased=False))

    var_t = var(targets)
    return 0.0 if var_t == 0.0 else 1.0 - var(targets - predictions) / var_t
