"""The squashed-Gaussian actor-critic family (SAC, TQC, CrossQ, CQL): the entropy temperature's settings and initial
value, the networks, acting and saved state.

The temperature alpha weighs the policy's entropy in the targets and the actor loss. Fixed (``ent_coef`` a number),
or tuned by gradient descent on log alpha towards a target entropy (``ent_coef="auto"``, Haarnoja et al. 2018b;
``rapidrl.algos.offpolicy_losses.temperature_loss``), target entropy -(action dimensions) by default.
"""

from __future__ import annotations

import copy
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from rapidrl.algos.offpolicy_losses import critic_loss, polyak_update, soft_actor_loss, soft_target, temperature_loss
from rapidrl.nn.deploy import SquashedMean
from rapidrl.nn.optim import adam, optimizer_step
from rapidrl.nn.qnets import CriticEnsemble, SquashedGaussianActor
from rapidrl.train.config import check_positive, require

__all__ = ["EntropyConfig", "SquashedGaussianActorCritic", "initial_log_alpha"]


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


# -- squashed Gaussian actor: SAC, TQC, CrossQ, CQL --------------------------------------------------------------------
class SquashedGaussianActorCritic:
    """SAC, TQC, CrossQ and CQL (module docstring). ``_build_actor_and_critics`` makes the networks and the
    temperature; ``_soft_update`` is the one-step update of SAC and TQC, with the hooks ``_soft_target``,
    ``_critic_loss`` and ``_soft_actor_loss`` (SAC's by default)."""

    box_actions_only = True

    def _build_actor_and_critics(self, critic_hidden: Sequence[int] | None = None, *, out_dim: int = 1,
                                 batch_renorm: dict[str, Any] | None = None, target: bool = True) -> None:
        """self.actor, self.critic (``n_critics`` members of ``critic_hidden``, default ``hidden``), with target:
        self.critic_target and the parameter lists of the Polyak update; self.log_alpha, tune_alpha,
        target_entropy."""
        space, c = self.action_space, self.config
        low, high = torch.as_tensor(space.low), torch.as_tensor(space.high)
        act_dim = int(space.shape[0])
        self.actor = SquashedGaussianActor(self.obs_dim, low, high, c.hidden).to(self.device)
        self.critic = CriticEnsemble(c.n_critics, self.obs_dim, act_dim, c.hidden if critic_hidden is None
                                     else critic_hidden, out_dim=out_dim, batch_renorm=batch_renorm).to(self.device)
        if target:
            self.critic_target = copy.deepcopy(self.critic).requires_grad_(False)
            self._critic_params = list(self.critic.parameters())
            self._target_params = list(self.critic_target.parameters())
        self.log_alpha, self.tune_alpha, self.target_entropy = initial_log_alpha(c, act_dim, self.device)

    def _build_joint_optimizer(self) -> None:
        """self.optimizer: one Adam over actor, critics and (when tuned) the temperature, for ``_soft_update``."""
        params = [*self.actor.parameters(), *self.critic.parameters()]
        self.optimizer = adam([*params, self.log_alpha] if self.tune_alpha else params, self.config.learning_rate)

    # -- SAC's and TQC's update ------------------------------------------------------------------------------------
    def _soft_target(self, batch, next_q: torch.Tensor, next_log_prob: torch.Tensor, alpha: torch.Tensor
                     ) -> torch.Tensor:
        return soft_target(batch.rewards, batch.discounts, next_q, next_log_prob, alpha)

    def _critic_loss(self, q: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        return critic_loss(q, target)

    def _soft_actor_loss(self, q_pi: torch.Tensor, log_prob: torch.Tensor, alpha: torch.Tensor) -> torch.Tensor:
        return soft_actor_loss(q_pi, log_prob, alpha)

    def _soft_update(self, batch) -> torch.Tensor:
        """One backward pass and one Adam step (``self.optimizer``) for actor, critics and temperature, then the
        Polyak update of the target critics. The actor runs once on [s; s']; its loss goes through the critics of
        before this step with their weights held constant. Returns [critic loss, actor loss, temperature loss,
        alpha, mean Q, entropy estimate]."""
        b = batch.obs.shape[0]
        alpha = self.log_alpha.detach().exp()  # [1]
        with self._autocast():  # bf16 autocast under precision="bf16" (the networks return float32)
            actions_pi, log_prob = self.actor(torch.cat([batch.obs, batch.next_obs]), generator=self.torch_rng)
            with torch.no_grad():
                next_q = self.critic_target(batch.next_obs, actions_pi[b:])  # [n, B] (TQC: [n, B, Q])
            q = self.critic(batch.obs, batch.actions)
            q_pi = self.critic(batch.obs, actions_pi[:b], detach_params=True)  # gradients reach the actor only
        with torch.no_grad():
            target = self._soft_target(batch, next_q, log_prob[b:], alpha)
        loss_q = self._critic_loss(q, target)
        loss_pi = self._soft_actor_loss(q_pi, log_prob[:b], alpha)
        loss = loss_q + loss_pi
        if self.tune_alpha:
            loss_alpha = temperature_loss(self.log_alpha, log_prob[:b], self.target_entropy)
            loss = loss + loss_alpha
        else:
            loss_alpha = torch.zeros((), device=self.device)
        self.optimizer.zero_grad(set_to_none=False)
        loss.backward()
        optimizer_step(self.optimizer)
        polyak_update(self._target_params, self._critic_params, self.config.tau)
        return torch.stack([loss_q.detach(), loss_pi.detach(), loss_alpha.detach(), alpha[0],
                            q.detach().mean(), -log_prob[:b].detach().mean()])

    # -- acting ----------------------------------------------------------------------------------------------------
    def _act(self, x: torch.Tensor, deterministic: bool) -> np.ndarray:
        return self.actor(x, deterministic, self.torch_rng)[0].cpu().numpy()

    def _actor_module(self) -> torch.nn.Module:
        return SquashedMean(self.actor)
