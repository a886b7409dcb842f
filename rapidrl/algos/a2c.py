"""A2C (Mnih et al. 2016, synchronous): one gradient step per short rollout, RMSprop by default."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from rapidrl.algos.actor_critic import ActorCriticOptimizerConfig, actor_critic_loss
from rapidrl.algos.onpolicy import OnPolicyAlgorithm, OnPolicyConfig
from rapidrl.algos.registry import register
from rapidrl.nn.optim import optimizer_step


@dataclass
class A2CConfig(OnPolicyConfig, ActorCriticOptimizerConfig):
    num_steps: int = 5
    """Steps per env in each rollout."""
    learning_rate: float = 7e-4
    """Optimizer learning rate."""
    gae_lambda: float = 1.0
    """GAE lambda (1.0: n-step returns, the original A2C)."""
    normalize_advantage: str = "none"
    """Advantage normalisation (``OnPolicyConfig``): "none" here, as the original A2C and SB3's."""

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
        """One gradient step on the whole rollout: its samples as one batch, or for a recurrent policy its N env
        columns replayed through the recurrent layers (``rapidrl.train.recurrent``)."""
        c = self.config
        if self.policy.recurrent:
            mb = self._sequences.whole(c.normalize_advantage)
        else:
            (mb,) = list(self.buffer.minibatches(c.num_steps * c.num_envs, generator=self.torch_generator,
                                                 normalize_advantage=c.normalize_advantage))
        with self._autocast():  # bf16 autocast under precision="bf16" (the heads return float32)
            log_probs, entropy, values = mb.evaluate(self.policy)
        # L = -E[A log pi] + vf_coef * E[(R - V)^2] - ent_coef * E[H] (SB3's A2C; value_scale 1)
        loss, stats = actor_critic_loss(log_probs, entropy, values, mb.advantages, mb.returns, ent_coef=c.ent_coef,
                                        vf_coef=c.vf_coef)
        self.optimizer.zero_grad(set_to_none=False)  # every on-policy update keeps its .grad tensors (ppo.py)
        loss.backward()
        self._sync_grads(list(self.policy.parameters()))
        optimizer_step(self.optimizer, c.max_grad_norm)
        if not self.reporting:
            return  # scalars are read back at reports only (log_every_steps)
        record = {f"losses/{k}": float(v) for k, v in stats.items()}
        record["losses/explained_variance"] = self._explained_variance()
        self.record(record)
