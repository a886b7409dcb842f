"""TQC (Kuznetsov et al. 2020): SAC with distributional critics whose pooled top quantiles are dropped from the target.

Read top to bottom: the config, the losses (pure functions), the update (``TQC._update_step``), written out. One
update reads three files: this one; ``rapidrl.algos.soft_actor_critic`` (``soft_passes``, ``joint_step``,
``soft_stats``, and the networks' and temperature's construction); ``rapidrl.algos.offpolicy_losses``
(``quantile_huber_loss``, ``temperature_loss``, ``polyak_update``). Collection, replay and the update driver come
from the shared off-policy core (``rapidrl.algos.offpolicy``).

Each of ``n_critics`` critics predicts ``n_quantiles`` quantiles Z_i(s, a) at fractions tau_j = (j + 0.5) / Q (one
``CriticEnsemble`` with Q outputs per member). The target pools the n * Q target quantiles of (s', a'), a' ~ pi(s'),
sorts them and keeps the smallest n * (Q - ``top_quantiles_to_drop_per_net``): that truncation is what controls
overestimation, instead of SAC's minimum over critics. Every current quantile regresses on every kept target with
the quantile Huber loss (kappa = 1). The actor maximises the mean of all quantiles minus alpha log pi.

One update is one backward pass and one Adam step for actor, critics and temperature (the losses touch disjoint
parameters; the actor's loss goes through the critics of before this step, with their weights held constant), then
a Polyak target update, as ``rapidrl.algos.sac``. sb3-contrib's TQC takes three optimizer steps in turn, its actor
seeing the critics after theirs; the settings and the losses are sb3-contrib's.

Gradient backends: "handwritten" (the CPU default) computes the quantile Huber loss and its gradient in one Numba pass
(``rapidrl.kernels.quantile``, ``CompiledQuantileHuberLoss``) instead of ~15 PyTorch operators on the pairwise
[n, B, Q, M] tensor, the networks through autograd (under bf16 autocast too: the loss takes their float32
outputs); "torch" is autograd throughout (``quantile_huber_loss``, shared with QR-DQN and IQN in
``rapidrl.algos.offpolicy_losses``: the reference, any device).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from rapidrl.algos.offpolicy import OffPolicyAlgorithm, OffPolicyConfig
from rapidrl.algos.offpolicy_losses import quantile_huber_loss, temperature_loss
from rapidrl.algos.offpolicy_networks import NetworkConfig
from rapidrl.algos.registry import register
from rapidrl.algos.soft_actor_critic import (
    EntropyConfig,
    SquashedGaussianActorCritic,
    joint_step,
    soft_passes,
    soft_stats,
)
from rapidrl.kernels.quantile import quantile_huber
from rapidrl.train.config import check_positive, require
from rapidrl.train.path_settings import HandwrittenBackend


@dataclass
class TQCConfig(OffPolicyConfig, EntropyConfig, NetworkConfig):
    """sb3-contrib's TQC defaults (sb3_contrib/tqc/tqc.py, policies.py)."""

    n_critics: int = 5
    """Distributional critics."""
    n_quantiles: int = 25
    """Quantiles each critic predicts."""
    top_quantiles_to_drop_per_net: int = 2
    """Target quantiles dropped per critic: the largest n_critics * this of the pooled n_critics * n_quantiles."""

    def validate(self) -> None:
        super().validate()
        self.validate_entropy()
        self.validate_network()
        check_positive(self, "n_critics", "n_quantiles")
        check_positive(self, "top_quantiles_to_drop_per_net", allow_zero=True)
        require(self.top_quantiles_to_drop_per_net < self.n_quantiles,
                f"top_quantiles_to_drop_per_net={self.top_quantiles_to_drop_per_net} must be below "
                f"n_quantiles={self.n_quantiles} (some target quantiles must remain)")


def truncated_target(rewards: torch.Tensor, discounts: torch.Tensor, next_quantiles: torch.Tensor,
                     next_log_prob: torch.Tensor, alpha: torch.Tensor, drop_per_net: int) -> torch.Tensor:
    """r + discount * (z - alpha log pi(a'|s')) for the kept target quantiles z: the n * Q quantiles of
    ``next_quantiles`` [n, B, Q] pooled per row and sorted, the largest n * ``drop_per_net`` dropped.
    rewards, discounts, next_log_prob [B]; returns [B, n * (Q - drop_per_net)], ascending."""
    n, b, q = next_quantiles.shape
    pooled = next_quantiles.permute(1, 0, 2).reshape(b, n * q).sort(dim=1).values  # [B, nQ]
    kept = pooled[:, : n * (q - drop_per_net)]  # [B, M]
    return rewards[:, None] + discounts[:, None] * (kept - alpha * next_log_prob[:, None])


class CompiledQuantileHuberLoss(torch.autograd.Function):
    """``quantile_huber_loss(quantiles, target)`` on the CPU in float32 with its gradient from the same compiled
    pass (``rapidrl.kernels.quantile``); ``CompiledQuantileHuberLoss.apply(quantiles, target)``."""

    @staticmethod
    def forward(ctx, quantiles: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        z = quantiles.detach().contiguous()  # [n, B, Q]
        grad = torch.empty_like(z)
        loss = quantile_huber(z.numpy(), target.detach().contiguous().numpy(), grad.numpy())
        ctx.save_for_backward(grad)
        return torch.tensor(loss, dtype=quantiles.dtype)

    @staticmethod
    def backward(ctx, grad_output: torch.Tensor):
        (grad,) = ctx.saved_tensors
        return grad * grad_output, None


def actor_loss(quantiles_pi: torch.Tensor, log_prob: torch.Tensor, alpha: torch.Tensor) -> torch.Tensor:
    """E[alpha log pi(a|s) - mean_{i,j} Z_ij(s, a)], a ~ pi(s): quantiles_pi [n, B, Q], log_prob [B]."""
    return (alpha * log_prob - quantiles_pi.mean(dim=(0, 2))).mean()


@register
class TQC(SquashedGaussianActorCritic, OffPolicyAlgorithm):
    """Truncated Quantile Critics for Box action spaces. ``TQC(env, **hyperparameters)``; see TQCConfig."""

    name = "tqc"
    config_class = TQCConfig
    stat_names = ("critic_loss", "actor_loss", "ent_coef_loss", "ent_coef", "q_values", "entropy")
    saved_state = ("actor", "critic", "critic_target", "log_alpha", "optimizer")
    bf16_learning_tested = True  # tests/test_learning_bf16.py: Pendulum at the float32 test's settings and threshold
    handwritten = HandwrittenBackend(
        by_hand="the quantile Huber loss and its gradient in one Numba pass (`rapidrl.kernels.quantile`)",
        autograd="the networks, the other losses", autocasts=True)

    def _build_networks(self) -> None:
        self._build_actor_and_critics(out_dim=self.config.n_quantiles)
        self._build_joint_optimizer()

    # -- update ----------------------------------------------------------------------------------------------------
    def _update_step(self, batch) -> torch.Tensor:
        """One update: autograd on the losses above (on the "handwritten" backend the quantile loss and its gradient in
        one compiled pass); returns ``stat_names``' statistics."""
        alpha = self.log_alpha.detach().exp()  # [1]
        with self._autocast():  # bf16 autocast under precision="bf16" (the networks return float32)
            quantiles, quantiles_pi, next_quantiles, log_prob, next_log_prob = soft_passes(
                self.actor, self.critic, self.critic_target, batch, self.torch_rng)  # [n, B, Q] each, [B], [B]
        with torch.no_grad():
            target = truncated_target(batch.rewards, batch.discounts, next_quantiles, next_log_prob, alpha,
                                      self.config.top_quantiles_to_drop_per_net)  # [B, M]
        if self.gradient_backend == "handwritten":
            loss_q = CompiledQuantileHuberLoss.apply(quantiles, target)
        else:
            loss_q = quantile_huber_loss(quantiles, target)
        loss_pi = actor_loss(quantiles_pi, log_prob, alpha)
        loss_alpha = temperature_loss(self.log_alpha, log_prob, self.target_entropy) if self.tune_alpha else None
        joint_step(self.optimizer, [loss_q, loss_pi, loss_alpha], self._target_params, self._critic_params,
                   self.config.tau)  # one backward pass, one Adam step, the Polyak update
        return soft_stats(loss_q, loss_pi, loss_alpha, alpha, quantiles, log_prob)
