"""The targets and losses of the off-policy algorithms, one definition each (pure functions of tensors).

Shared by DQN and discrete CQL (``dqn_loss``); DDPG, TD3 and TD3+BC (``td3_target``, ``smoothed_target_actions``);
SAC, CrossQ and CQL (``soft_target``, ``soft_actor_loss``); and every critic ensemble (``critic_loss``) and target
network (``polyak_update``). An algorithm's own loss (TQC's quantile loss, CQL's penalty, IQL's expectile) stays in
its module.
"""

from __future__ import annotations

import torch

from rapidrl._unsafe.torch_private import polyak

__all__ = ["critic_loss", "dqn_loss", "polyak_update", "smoothed_target_actions", "soft_actor_loss", "soft_target",
           "td3_target", "temperature_loss"]


def polyak_update(target: list[torch.Tensor], online: list[torch.Tensor], tau: float) -> None:
    """target <- target + tau (online - target), all tensors in one foreach call (tau = 1 copies)."""
    polyak(target, online, tau)


def critic_loss(q: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """Sum over critics of 0.5 * mean squared error: q [n, B], target [B] (the critic ensembles' loss)."""
    return 0.5 * (q - target).square().mean(1).sum()


def dqn_loss(q: torch.Tensor, next_q_target: torch.Tensor, rewards: torch.Tensor, discounts: torch.Tensor,
             weights: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """Huber TD loss (DQN's, and discrete CQL's TD term); every tensor is [B].

    target = r + discount * Q_target(s', a'), discount = gamma^n for a bootstrapped n-step return and 0
    after termination; loss = mean_i w_i huber(q_i - target_i) (w = 1 without prioritized replay).
    Returns (loss, TD errors q - target, detached).
    """
    target = rewards + discounts * next_q_target
    td = q - target
    per_sample = torch.nn.functional.smooth_l1_loss(q, target, reduction="none")
    loss = (per_sample * weights).mean() if weights is not None else per_sample.mean()
    return loss, td.detach()


def td3_target(rewards: torch.Tensor, discounts: torch.Tensor, next_q: torch.Tensor) -> torch.Tensor:
    """r + discount * min_i Q'_i(s', a'): next_q [n, B], the rest [B] (TD3's and TD3+BC's critic target; DDPG's with
    its one critic, n = 1)."""
    return rewards + discounts * next_q.min(0).values


def smoothed_target_actions(target_actions: torch.Tensor, noise: torch.Tensor, scale: torch.Tensor,
                            center: torch.Tensor, sigma: float, clip: float) -> torch.Tensor:
    """clip(mu'(s') + clip(sigma * scale * noise, -clip * scale, clip * scale)) into the action bounds."""
    eps = torch.clamp(noise * (sigma * scale), -clip * scale, clip * scale)
    return torch.clamp(target_actions + eps, center - scale, center + scale)


def soft_target(rewards: torch.Tensor, discounts: torch.Tensor, next_q: torch.Tensor, next_log_prob: torch.Tensor,
                alpha: torch.Tensor) -> torch.Tensor:
    """r + discount * (min_i Q_i(s', a') - alpha log pi(a'|s')), a' ~ pi(s'): next_q [n, B], the rest [B] (SAC's
    target critics; CrossQ's online critics; CQL's with ``backup_entropy``)."""
    return rewards + discounts * (next_q.min(0).values - alpha * next_log_prob)


def soft_actor_loss(q_pi: torch.Tensor, log_prob: torch.Tensor, alpha: torch.Tensor) -> torch.Tensor:
    """E[alpha log pi(a|s) - min_i Q_i(s, a)], a ~ pi(s): q_pi [n, B], log_prob [B] -> [] (SAC, CrossQ, CQL)."""
    return (alpha * log_prob - q_pi.min(0).values).mean()


def temperature_loss(log_alpha: torch.Tensor, log_prob: torch.Tensor, target_entropy: float) -> torch.Tensor:
    """-log alpha * E[log pi + target entropy]: raises alpha while the entropy is below target."""
    return -(log_alpha * (log_prob.detach() + target_entropy)).mean()
