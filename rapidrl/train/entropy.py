"""The entropy temperature of the maximum-entropy actor-critics (SAC, TQC, CrossQ): its settings, its loss, its state.

alpha weighs the policy's entropy in the targets and the actor loss. Fixed (``ent_coef`` a number), or tuned by
gradient descent on log alpha towards a target entropy (``ent_coef="auto"``, Haarnoja et al. 2018b):
loss = -log alpha * E[log pi(a|s) + target entropy], target entropy -(action dimensions) by default.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from rapidrl.train.config import check_positive, require

__all__ = ["EntropyConfig", "initial_log_alpha", "temperature_loss"]


@dataclass
class EntropyConfig:
    """The temperature's fields, shared by the configs of SAC-style algorithms (a dataclass mixin)."""

    ent_coef: float | str = "auto"
    """Entropy temperature alpha: a fixed number, or "auto" to tune it towards ``target_entropy``."""
    ent_coef_init: float = 1.0
    """Initial alpha when tuned."""
    target_entropy: float | str = "auto"
    """Entropy target of the tuning; "auto" is -(action dimensions)."""

    def validate_entropy(self) -> None:
        check_positive(self, "ent_coef_init")
        require(self.ent_coef == "auto" or (isinstance(self.ent_coef, (int, float)) and self.ent_coef >= 0),
                f"ent_coef must be 'auto' or a number >= 0, got {self.ent_coef!r}")
        require(self.target_entropy == "auto" or isinstance(self.target_entropy, (int, float)),
                f"target_entropy must be 'auto' or a number, got {self.target_entropy!r}")


def initial_log_alpha(config: EntropyConfig, act_dim: int, device: torch.device
                      ) -> tuple[torch.Tensor, bool, float]:
    """(log alpha [1] (a leaf that requires grad when tuned), tuned?, target entropy) of a fresh model. A fixed
    alpha = 0 is log alpha = -inf (its exp is exactly 0)."""
    tune = config.ent_coef == "auto"
    init = config.ent_coef_init if tune else float(config.ent_coef)
    log_alpha = torch.log(torch.tensor([init], device=device)).requires_grad_(tune)
    target = float(-act_dim if config.target_entropy == "auto" else config.target_entropy)
    return log_alpha, tune, target


def temperature_loss(log_alpha: torch.Tensor, log_prob: torch.Tensor, target_entropy: float) -> torch.Tensor:
    """-log alpha * E[log pi + target entropy]: raises alpha while the entropy is below target."""
    return -(log_alpha * (log_prob.detach() + target_entropy)).mean()
