"""TD3+BC (Fujimoto and Gu 2021): TD3 whose actor also regresses onto the dataset's actions.

Read top to bottom: the config, the loss (a pure function), the update, acting. The dataset, the steps and online
fine-tuning come from the offline core (``rapidrl.algos.offline``); the critic target is TD3's
(``rapidrl.algos.offpolicy.td3_target`` with target policy smoothing).

Every gradient step updates the twin critics (one ``CriticEnsemble``) towards r + discount * min_i Q'_i(s', a'~);
every ``policy_delay``-th step also updates the actor on -lambda Q_1(s, mu(s)) + mean (mu(s) - a)^2 with
lambda = alpha / mean |Q_1(s, mu(s))| (the Q term normalised, without gradient through lambda) and moves the
targets by Polyak averaging.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass

import numpy as np
import torch

from rapidrl.algos.offline import OfflineAlgorithm, OfflineConfig
from rapidrl.algos.offpolicy import (
    check_box_actions,
    critic_loss,
    maybe_compile,
    polyak_update,
    smoothed_target_actions,
    td3_target,
)
from rapidrl.algos.registry import register
from rapidrl.nn.deploy import frozen_copy
from rapidrl.nn.optim import adam, optimizer_step
from rapidrl.nn.qnets import CriticEnsemble, DeterministicActor
from rapidrl.train.config import check_positive


@dataclass
class TD3BCConfig(OfflineConfig):
    """CORL's ``td3_bc.py`` (``configs/offline/td3_bc/*``): alpha 2.5, policy noise 0.2 clipped at 0.5, actor every
    2nd step, tau 0.005, Adam 3e-4, batch 256, 256x256 networks, states normalised."""

    learning_rate: float = 3e-4
    """Adam learning rate of actor and critics."""
    alpha: float = 2.5
    """Weight of the Q term against the behaviour-cloning term (after dividing it by its mean |Q|)."""
    n_critics: int = 2
    """Critics in the ensemble (targets take the minimum over all of them)."""
    policy_delay: int = 2
    """Critic updates per actor (and target) update."""
    target_policy_noise: float = 0.2
    """Std of the Gaussian smoothing noise on target actions, as a fraction of the action half-range."""
    target_noise_clip: float = 0.5
    """Clip of that noise, as a fraction of the action half-range."""
    exploration_noise: float = 0.1
    """Online phase: std of the Gaussian noise on the actor's actions (a fraction of the half-range; CORL's
    expl_noise)."""

    def validate(self) -> None:
        super().validate()
        check_positive(self, "n_critics", "policy_delay")
        check_positive(self, "alpha", "target_policy_noise", "target_noise_clip", "exploration_noise",
                       allow_zero=True)


def td3_bc_actor_loss(q_pi: torch.Tensor, predicted: torch.Tensor, actions: torch.Tensor, alpha: float
                      ) -> torch.Tensor:
    """-lambda mean Q(s, mu(s)) + mean (mu(s) - a)^2, lambda = alpha / mean |Q(s, mu(s))| held constant.

    q_pi [B] (the first critic's values of the actor's actions), predicted and actions [B, A] -> [].
    """
    lam = alpha / q_pi.abs().mean().detach()
    return -lam * q_pi.mean() + (predicted - actions).square().mean()


@register
class TD3BC(OfflineAlgorithm):
    """TD3+BC: TD3 with a behaviour-cloning term, offline (Box actions).

    ``TD3BC(env, dataset=ID, **hyperparameters)``; see TD3BCConfig."""

    name = "td3_bc"
    config_class = TD3BCConfig
    bf16_learning_tested = True  # tests/test_offline.py's learning tests, in bf16 too
    stat_names = ("critic_loss", "q_values", "actor_loss")

    def _check_spaces(self) -> None:
        super()._check_spaces()
        check_box_actions("TD3+BC", self.action_space)

    def _build_networks(self) -> None:
        space, c = self.action_space, self.config
        low, high = torch.as_tensor(space.low), torch.as_tensor(space.high)
        self.actor = DeterministicActor(self.obs_dim, low, high, c.hidden).to(self.device)
        self.actor_target = copy.deepcopy(self.actor).requires_grad_(False)
        self.critic = CriticEnsemble(c.n_critics, self.obs_dim, int(space.shape[0]), c.hidden).to(self.device)
        self.critic_target = copy.deepcopy(self.critic).requires_grad_(False)
        self.actor_optimizer = adam(self.actor.parameters(), c.learning_rate)
        self.critic_optimizer = adam(self.critic.parameters(), c.learning_rate)
        self._online_params = [*self.actor.parameters(), *self.critic.parameters()]
        self._target_params = [*self.actor_target.parameters(), *self.critic_target.parameters()]
        self._actor_update_fn = maybe_compile(self._actor_update, c.torch_compile)
        self._last_actor_loss = torch.zeros((), device=self.device)
        self._half_range = ((high - low) / 2).numpy()

    # -- update ----------------------------------------------------------------------------------------------------
    def _update_step(self, batch) -> torch.Tensor:
        """Critic step; returns [critic loss, mean Q]."""
        c, actor = self.config, self.actor
        with torch.no_grad(), self._autocast():
            noise = torch.randn_like(batch.actions)
            next_actions = smoothed_target_actions(self.actor_target(batch.next_obs), noise, actor.scale, actor.center,
                                                   c.target_policy_noise, c.target_noise_clip)
            target = td3_target(batch.rewards, batch.discounts, self.critic_target(batch.next_obs, next_actions))
        with self._autocast():
            q = self.critic(batch.obs, batch.actions)  # [n, B]
        loss_q = critic_loss(q, target)
        self.critic_optimizer.zero_grad(set_to_none=True)
        loss_q.backward()
        optimizer_step(self.critic_optimizer)
        return torch.stack([loss_q.detach(), q.detach().mean()])

    def _actor_update(self, obs: torch.Tensor, actions: torch.Tensor) -> torch.Tensor:
        """Actor step on ``td3_bc_actor_loss`` and the Polyak update of every target; returns the actor loss."""
        with self._autocast():
            predicted = self.actor(obs)  # [B, A]
            q_pi = self.critic(obs, predicted, members=1, detach_params=True)[0]  # [B]
        loss_pi = td3_bc_actor_loss(q_pi, predicted, actions, self.config.alpha)
        self.actor_optimizer.zero_grad(set_to_none=True)
        loss_pi.backward()
        optimizer_step(self.actor_optimizer)
        polyak_update(self._target_params, self._online_params, self.config.tau)
        return loss_pi.detach()

    def _after_update(self, batch, out: torch.Tensor) -> torch.Tensor:
        # num_gradient_steps counts the critic steps before this one
        if (self.num_gradient_steps + 1) % self.config.policy_delay == 0:
            self._last_actor_loss = self._actor_update_fn(batch.obs, batch.actions)
        return torch.cat([out, self._last_actor_loss.reshape(1)])  # actor_loss: the latest actor step's

    # -- acting ----------------------------------------------------------------------------------------------------
    def _act(self, x: torch.Tensor, deterministic: bool) -> np.ndarray:
        actions = self.actor(x).cpu().numpy()
        if deterministic:
            return actions
        actions += self.np_rng.normal(0.0, self.config.exploration_noise, actions.shape) * self._half_range
        return np.clip(actions, self.action_space.low, self.action_space.high)

    def _actor_module(self) -> torch.nn.Module:
        return frozen_copy(self.actor)

    # -- persistence -----------------------------------------------------------------------------------------------
    def _networks_state(self) -> dict:
        return {"actor": self.actor.state_dict(), "actor_target": self.actor_target.state_dict(),
                "critic": self.critic.state_dict(), "critic_target": self.critic_target.state_dict(),
                "actor_optimizer": self.actor_optimizer.state_dict(),
                "critic_optimizer": self.critic_optimizer.state_dict()}

    def _load_networks_state(self, state: dict) -> None:
        for name in ("actor", "actor_target", "critic", "critic_target", "actor_optimizer", "critic_optimizer"):
            getattr(self, name).load_state_dict(state[name])
