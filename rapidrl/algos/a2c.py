"""A2C (Mnih et al. 2016, synchronous): one gradient step per short rollout, RMSprop by default."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from rapidrl.algos.onpolicy import OnPolicyAlgorithm, OnPolicyConfig
from rapidrl.algos.registry import register
from rapidrl.buffers import normalize_advantages
from rapidrl.nn.optim import adam, optimizer_step
from rapidrl.train.config import check_positive, require


@dataclass
class A2CConfig(OnPolicyConfig):
    num_steps: int = 5
    """Steps per env in each rollout."""
    learning_rate: float = 7e-4
    """Optimizer learning rate."""
    gae_lambda: float = 1.0
    """GAE lambda (1.0: n-step returns, the original A2C)."""
    optimizer: str = "rmsprop"
    """"rmsprop" (as in the literature) or "adam"."""
    rms_alpha: float = 0.99
    """RMSprop smoothing constant."""
    rms_eps: float = 1e-5
    """RMSprop epsilon."""
    normalize_advantage: bool = False
    """Normalize advantages over the rollout."""

    def validate(self) -> None:
        super().validate()
        check_positive(self, "rms_eps")
        require(0.0 < self.rms_alpha < 1.0, f"rms_alpha must lie in (0, 1), got {self.rms_alpha}")
        require(self.optimizer in ("rmsprop", "adam"), f"optimizer must be 'rmsprop' or 'adam', got {self.optimizer!r}")


def a2c_loss(log_probs: torch.Tensor, entropy: torch.Tensor, values: torch.Tensor, advantages: torch.Tensor,
             returns: torch.Tensor, *, ent_coef: float, vf_coef: float) -> tuple[torch.Tensor, dict]:
    """L = -E[A logp] + vf_coef * E[(R - V)^2] - ent_coef * E[H]; all tensors [B]."""
    pg_loss = -(advantages * log_probs).mean()
    v_loss = (returns - values).square().mean()
    ent = entropy.mean()
    loss = pg_loss + vf_coef * v_loss - ent_coef * ent
    return loss, {"policy_loss": pg_loss.detach(), "value_loss": v_loss.detach(), "entropy": ent.detach()}


@register
class A2C(OnPolicyAlgorithm):
    """Advantage Actor-Critic. ``A2C(env, **hyperparameters)``; see A2CConfig for the fields."""

    name = "a2c"
    config_class = A2CConfig
    supports_recurrent = True

    def _make_optimizer(self) -> torch.optim.Optimizer:
        c = self.config
        if c.optimizer == "adam":
            return adam(self.policy.parameters(), c.learning_rate)
        return torch.optim.RMSprop(self.policy.parameters(), lr=c.learning_rate, alpha=c.rms_alpha, eps=c.rms_eps,
                                   foreach=True)

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
        loss, stats = a2c_loss(log_probs, entropy, values, advantages, returns, ent_coef=c.ent_coef,
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
