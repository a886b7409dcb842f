"""PPO (Schulman et al. 2017): clipped surrogate objective on GAE advantages.

Read top to bottom: the config, the loss (a pure function), the update loop. Rollout collection and
advantages come from the shared on-policy core (``rapidrl.algos.onpolicy``).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from rapidrl.algos.onpolicy import OnPolicyAlgorithm, OnPolicyConfig
from rapidrl.train.config import check_positive, require


@dataclass
class PPOConfig(OnPolicyConfig):
    update_epochs: int = 4
    """Passes over the rollout per update."""
    minibatch_size: int = 256
    """Transitions per gradient step; must not exceed num_steps * num_envs."""
    clip_coef: float = 0.2
    """Clip range of the probability ratio."""
    anneal_clip: bool = False
    """Decay clip_coef linearly to 0 with the learning rate."""
    clip_vloss: bool = True
    """Clip the value update around the old values with the same range."""
    norm_adv: str = "minibatch"
    """Advantage normalization: "minibatch", "batch" or "none"."""
    target_kl: float | None = None
    """Stop the epochs of an update early when the approximate KL exceeds this (None: never)."""

    def validate(self) -> None:
        super().validate()
        check_positive(self, "update_epochs", "minibatch_size", "clip_coef")
        batch = self.num_steps * self.num_envs
        require(self.minibatch_size <= batch,
                f"minibatch_size={self.minibatch_size} is larger than the rollout "
                f"(num_steps * num_envs = {batch})")
        require(self.norm_adv in ("minibatch", "batch", "none"),
                f"norm_adv must be 'minibatch', 'batch' or 'none', got {self.norm_adv!r}")
        require(self.target_kl is None or self.target_kl > 0, f"target_kl must be > 0 or None, got {self.target_kl}")


def ppo_loss(new_log_probs: torch.Tensor, entropy: torch.Tensor, new_values: torch.Tensor,
             old_log_probs: torch.Tensor, old_values: torch.Tensor, advantages: torch.Tensor,
             returns: torch.Tensor, *, clip_coef: float, clip_vloss: bool, ent_coef: float, vf_coef: float
             ) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """PPO loss on a minibatch; every tensor is [B].

    L = E[max(-A r, -A clip(r, 1-eps, 1+eps))] + vf_coef * L_V - ent_coef * E[H], r = exp(logp - logp_old),
    L_V = 0.5 E[max((V - R)^2, (V_old + clip(V - V_old, -eps, eps) - R)^2)] when clipped, else 0.5 E[(V - R)^2].
    Stats (detached): policy/value loss, entropy, approx_kl = E[(r - 1) - log r], clip fraction.
    """
    log_ratio = new_log_probs - old_log_probs
    ratio = log_ratio.exp()
    pg_loss = torch.max(-advantages * ratio, -advantages * ratio.clamp(1.0 - clip_coef, 1.0 + clip_coef)).mean()
    if clip_vloss:
        clipped = old_values + (new_values - old_values).clamp(-clip_coef, clip_coef)
        v_loss = 0.5 * torch.max((new_values - returns).square(), (clipped - returns).square()).mean()
    else:
        v_loss = 0.5 * (new_values - returns).square().mean()
    ent = entropy.mean()
    loss = pg_loss + vf_coef * v_loss - ent_coef * ent
    with torch.no_grad():
        stats = {"policy_loss": pg_loss.detach(), "value_loss": v_loss.detach(), "entropy": ent.detach(),
                 "approx_kl": ((ratio - 1.0) - log_ratio).mean(),
                 "clipfrac": ((ratio - 1.0).abs() > clip_coef).float().mean()}
    return loss, stats


class PPO(OnPolicyAlgorithm):
    """Proximal Policy Optimization. ``PPO(env, **hyperparameters)``; see PPOConfig for the fields."""

    name = "ppo"
    config_class = PPOConfig

    def _make_optimizer(self) -> torch.optim.Optimizer:
        return torch.optim.Adam(self.policy.parameters(), lr=self.config.learning_rate, eps=1e-5, foreach=True)

    def _update(self) -> None:
        c = self.config
        clip = c.clip_coef * (self.progress_remaining() if c.anneal_clip else 1.0)
        norm = None if c.norm_adv == "none" else c.norm_adv
        params = list(self.policy.parameters())
        totals: dict[str, torch.Tensor] = {}
        count = 0
        for _epoch in range(c.update_epochs):
            for mb in self.buffer.minibatches(c.minibatch_size, generator=self.torch_generator,
                                              normalize_advantages=norm):
                new_logp, entropy, new_values = self.policy.evaluate(mb.obs, mb.actions)
                loss, stats = ppo_loss(new_logp, entropy, new_values, mb.log_probs, mb.values, mb.advantages,
                                       mb.returns, clip_coef=clip, clip_vloss=c.clip_vloss, ent_coef=c.ent_coef,
                                       vf_coef=c.vf_coef)
                self.optimizer.zero_grad(set_to_none=True)
                loss.backward()
                if c.max_grad_norm > 0:
                    nn.utils.clip_grad_norm_(params, c.max_grad_norm, foreach=True)
                self.optimizer.step()
                for k, v in stats.items():
                    totals[k] = totals[k] + v if k in totals else v
                count += 1
                last_kl = stats["approx_kl"]
            if c.target_kl is not None and float(last_kl) > c.target_kl:
                break
        record = {f"losses/{k}": float(v) / count for k, v in totals.items()}
        record["losses/explained_variance"] = self._explained_variance()
        record["charts/learning_rate"] = self.optimizer.param_groups[0]["lr"]
        self.record(record)
