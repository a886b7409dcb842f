"""What the squashed-Gaussian actor-critic family (SAC, TQC, CrossQ, CQL) shares that is not an update: the entropy
temperature's settings and initial value, the networks, acting, and three plain functions SAC's and TQC's updates
call (``soft_passes``, ``joint_step``, ``soft_stats``). Each algorithm writes its update out in its own module.

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

from rapidrl.algos.offpolicy_losses import polyak_update
from rapidrl.algos.offpolicy_networks import (
    SIMBA_LOG_STD_MIN,
    actor_trunk,
    critic_ensemble,
    network_optimizer,
    simba_without_handwritten,
    simbav2_actor,
)
from rapidrl.nn.deploy import SquashedMean
from rapidrl.nn.optim import optimizer_step
from rapidrl.nn.qnets import CriticEnsemble, SquashedGaussianActor
from rapidrl.train.config import check_positive, require

__all__ = ["EntropyConfig", "SquashedGaussianActorCritic", "initial_log_alpha", "joint_step", "soft_passes",
           "soft_stats"]


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


# -- the pieces of SAC's and TQC's updates -----------------------------------------------------------------------------
def soft_passes(actor: SquashedGaussianActor, critic: CriticEnsemble, critic_target: CriticEnsemble, batch,
                generator: torch.Generator | None) -> tuple[torch.Tensor, ...]:
    """The network passes of SAC's and TQC's update: a ~ pi(s) and a' ~ pi(s') from one actor pass over the 2B rows
    [s; s'] (one draw of [2B, A] standard normal noise from ``generator``); the target critics at (s', a'), without
    gradients; the critics at the data's (s, a); the critics at (s, a ~ pi(s)) with their weights held constant, so
    gradients reach the actor only. Returns (Q(s, a_data), Q(s, a ~ pi(s)), Q'(s', a'), log pi(a|s) [B],
    log pi(a'|s') [B]), the critics' outputs [n, B] (TQC's: [n, B, Q])."""
    b = batch.obs.shape[0]
    actions, log_prob = actor(torch.cat([batch.obs, batch.next_obs]), generator=generator)  # [2B, A], [2B]
    with torch.no_grad():
        next_q = critic_target(batch.next_obs, actions[b:])
    q = critic(batch.obs, batch.actions)
    q_pi = critic(batch.obs, actions[:b], detach_params=True)
    return q, q_pi, next_q, log_prob[:b], log_prob[b:]


def joint_step(optimizer: torch.optim.Optimizer, losses: Sequence[torch.Tensor | None], target_params: list,
               online_params: list, tau: float) -> None:
    """One backward pass of the sum of ``losses`` (left to right, None skipped: a fixed temperature's), one step of
    ``optimizer``, then the Polyak update target <- target + tau (online - target)."""
    loss = losses[0]
    for term in losses[1:]:
        if term is not None:
            loss = loss + term
    optimizer.zero_grad(set_to_none=False)
    loss.backward()
    optimizer_step(optimizer)
    polyak_update(target_params, online_params, tau)


def soft_stats(loss_q: torch.Tensor, loss_pi: torch.Tensor, loss_alpha: torch.Tensor | None, alpha: torch.Tensor,
               q: torch.Tensor, log_prob: torch.Tensor) -> torch.Tensor:
    """[critic loss, actor loss, temperature loss (0 when fixed), alpha, mean of q, entropy estimate -mean log pi]
    (SAC's and TQC's ``stat_names``); alpha [1], q any shape, log_prob [B]."""
    temperature = torch.zeros((), device=alpha.device) if loss_alpha is None else loss_alpha.detach()
    return torch.stack([loss_q.detach(), loss_pi.detach(), temperature, alpha[0], q.detach().mean(),
                        -log_prob.detach().mean()])


# -- squashed Gaussian actor: SAC, TQC, CrossQ, CQL --------------------------------------------------------------------
class SquashedGaussianActorCritic:
    """SAC, TQC, CrossQ and CQL: ``_build_actor_and_critics`` makes the networks and the temperature,
    ``_build_joint_optimizer`` the one Adam of SAC and TQC; acting samples the actor (``_act``), the exported policy
    is its squashed mean. No update: each algorithm writes its own."""

    box_actions_only = True

    def _build_actor_and_critics(self, critic_hidden: Sequence[int] | None = None, *, out_dim: int = 1,
                                 batch_renorm: dict[str, Any] | None = None, target: bool = True) -> None:
        """self.actor, self.critic (``n_critics`` members of ``critic_hidden``, default ``hidden``), with target:
        self.critic_target and the parameter lists of the Polyak update; self.log_alpha, tune_alpha,
        target_entropy."""
        space, c = self.action_space, self.config
        low, high = torch.as_tensor(space.low), torch.as_tensor(space.high)
        act_dim = int(space.shape[0])
        trunk = actor_trunk(c, self.obs_dim)  # network="simba": SimBa's trunk, head gain and log-std floor
        simba = dict(trunk=trunk, head_gain=1.0, log_std_min=SIMBA_LOG_STD_MIN) if trunk is not None else {}
        v2 = simbav2_actor(c, self.obs_dim, act_dim, heads=2)  # SimbaV2's whole actor: means and log stds
        if v2 is not None:
            simba = dict(trunk=v2, head=torch.nn.Identity(), log_std_min=SIMBA_LOG_STD_MIN)
        if simba:  # SimBa's bf16 learning is untested: precision="auto" keeps float32
            self.bf16_learning_tested = False
        self.actor = SquashedGaussianActor(self.obs_dim, low, high, c.hidden, **simba).to(self.device)
        self.critic = critic_ensemble(c, c.n_critics, self.obs_dim, act_dim, c.hidden if critic_hidden is None
                                      else critic_hidden, out_dim=out_dim, batch_renorm=batch_renorm).to(self.device)
        if target:
            self.critic_target = copy.deepcopy(self.critic).requires_grad_(False)
            self._critic_params = list(self.critic.parameters())
            self._target_params = list(self.critic_target.parameters())
        self.log_alpha, self.tune_alpha, self.target_entropy = initial_log_alpha(c, act_dim, self.device)

    def _build_joint_optimizer(self) -> None:
        """self.optimizer: one Adam over actor, critics and (when tuned) the temperature (SAC's and TQC's)."""
        params = [*self.actor.parameters(), *self.critic.parameters()]
        self.optimizer = network_optimizer(params, self.config, undecayed=[self.log_alpha] if self.tune_alpha else [])

    def _gradient_backends(self) -> dict:
        """The handwritten backend where the algorithm has one, refused for the SimBa networks."""
        if self.handwritten is None:
            return super()._gradient_backends()
        return self._handwritten_or_torch(lambda: simba_without_handwritten(self.config))

    # -- acting ----------------------------------------------------------------------------------------------------
    def _act(self, x: torch.Tensor, deterministic: bool) -> np.ndarray:
        return self.actor(x, deterministic, self.torch_rng)[0].cpu().numpy()

    def _actor_module(self) -> torch.nn.Module:
        return SquashedMean(self.actor)
