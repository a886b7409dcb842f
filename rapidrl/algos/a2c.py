"""A2C (Mnih et al. 2016, synchronous): one gradient step per short rollout, RMSprop by default."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from rapidrl.algos.onpolicy import OnPolicyAlgorithm, OnPolicyConfig
from rapidrl.algos.registry import register
from rapidrl.buffers import normalize_advantages
from rapidrl.nn.optim import optimizer_step
from rapidrl.train.actor_critic import ActorCriticOptimizerConfig, actor_critic_loss


@dataclass
class A2CConfig(OnPolicyConfig, ActorCriticOptimizerConfig):
    num_steps: int = 5
    """Steps per env in each rollout."""
    learning_rate: float = 7e-4
    """Optimizer learning rate."""
    gae_lambda: float = 1.0
    """GAE lambda (1.0: n-step returns, the original A2C)."""
    normalize_advantage: bool = False
    """Normalize advantages over the rollout."""

    def validate(self) -> None:
        super().validate()
        self.validate_optimizer()


@register
class A2C(OnPolicyAlgorithm):
    """Advantage Actor-Critic. ``A2C(env, **hyperparameters)``; see A2CConfig for the fields."""

    name = "a2c"
    config_class = A2CConfig
    supports_recurrent = True

    def _make_optimizer(self) -> torch.optim.Optimizer:
        return self.config.make_optimizer(self.policy.parameters(), self.config.learning_rate)

    def _update(self) -> None:
        c = self.config
        batch = c.num_steps * c.num_envs
        norm = "batch" if c.normalize_advantage else None
        if self.policy.recurrent:  # the whole rollout as N sequences through the recurrent layer
            idx = None  # all columns
            log_probs, entropy, values = (x.reshape(-1) for x in self._score_columns(idx))
            advantages, returns = self._columns("advantages", idx), self._columns("returns", idx)
            if norm:
                advantages = normalize_advantages(advantages)
        else:
            (mb,) = list(self.buffer.minibatches(batch, generator=self.torch_generator, normalize_advantages=norm))
            with self._autocast():  # bf16 autocast under precision="bf16" (the heads return float32)
                log_probs, entropy, values = self.policy.evaluate(mb.obs, mb.actions)
            advantages, returns = mb.advantages, mb.returns
        # L = -E[A log pi] + vf_coef * E[(R - V)^2] - ent_coef * E[H] (SB3's A2C; value_scale 1)
        loss, stats = actor_critic_loss(log_probs, entropy, values, advantages, returns, ent_coef=c.ent_coef,
                                        vf_coef=c.vf_coef)
        self.optimizer.zero_grad(set_to_none=True)
        loss.backward()
        self._sync_grads(list(self.policy.parameters()))
        optimizer_step(self.optimizer, c.max_grad_norm)
        if self.num_updates % c.log_every:
            return  # scalars are read back only every log_every updates
        record = {f"losses/{k}": float(v) for k, v in stats.items()}
        record["losses/explained_variance"] = self._explained_variance()
        self.record(record)
