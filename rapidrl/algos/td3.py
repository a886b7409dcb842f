"""TD3 (Fujimoto et al. 2018): twin critics (one batched ensemble), target policy smoothing, delayed actor.

Read top to bottom: the config, the losses (pure functions), the update, acting. Collection, replay and the
update driver come from the shared off-policy core (``rapidrl.algos.offpolicy``).

Every gradient step updates the critics on r + discount * min_i Q'_i(s', clip(mu'(s') + clip(eps, -c, c))),
eps ~ N(0, sigma^2); every ``policy_delay``-th step also updates the actor on -Q_1(s, mu(s)) and moves all
targets by Polyak averaging. The two parts are separate update functions, so both have static graphs.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass

import numpy as np
import torch

from rapidrl.algos.offpolicy import (
    OffPolicyAlgorithm,
    OffPolicyConfig,
    check_box_actions,
    critic_loss,
    maybe_compile,
    polyak_update,
    smoothed_target_actions,
    td3_target,
)
from rapidrl.algos.registry import register
from rapidrl.nn.deploy import frozen_copy
from rapidrl.nn.optim import adam
from rapidrl.nn.qnets import CriticEnsemble, DeterministicActor
from rapidrl.train.config import check_positive


@dataclass
class TD3Config(OffPolicyConfig):
    torch_threads: int | None = 0
    """torch.set_num_threads at construction; 0 (every core) since the 256x256 critics' matmuls gain from threads."""
    learning_rate: float = 1e-3
    """Adam learning rate of actor and critics."""
    n_critics: int = 2
    """Critics in the ensemble (targets take the minimum over all of them)."""
    policy_delay: int = 2
    """Critic updates per actor (and target) update."""
    target_policy_noise: float = 0.2
    """Std of the Gaussian smoothing noise on target actions, as a fraction of the action half-range."""
    target_noise_clip: float = 0.5
    """Clip of that noise, as a fraction of the action half-range."""
    exploration_noise: float = 0.1
    """Std of the Gaussian noise on training actions, as a fraction of the action half-range."""

    def validate(self) -> None:
        super().validate()
        check_positive(self, "n_critics", "policy_delay")
        check_positive(self, "target_policy_noise", "target_noise_clip", "exploration_noise", allow_zero=True)


@register
class TD3(OffPolicyAlgorithm):
    """Twin Delayed DDPG for Box action spaces. ``TD3(env, **hyperparameters)``; see TD3Config."""

    name = "td3"
    config_class = TD3Config
    stat_names = ("critic_loss", "q_values", "actor_loss")

    def _check_spaces(self) -> None:
        super()._check_spaces()
        check_box_actions("TD3", self.action_space)

    def _build_networks(self) -> None:
        space = self.action_space
        c = self.config
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

    # -- update ----------------------------------------------------------------------------------
    def _update_step(self, batch) -> torch.Tensor:
        """Critic step; returns [critic loss, mean Q]."""
        c, actor = self.config, self.actor
        with torch.no_grad(), self._autocast():  # bf16 autocast under precision="bf16" (networks return float32)
            noise = torch.randn_like(batch.actions)
            next_actions = smoothed_target_actions(self.actor_target(batch.next_obs), noise, actor.scale, actor.center,
                                                   c.target_policy_noise, c.target_noise_clip)
            target = td3_target(batch.rewards, batch.discounts, self.critic_target(batch.next_obs, next_actions))
        with self._autocast():
            q = self.critic(batch.obs, batch.actions)  # [n, B]
        loss_q = critic_loss(q, target)
        self.critic_optimizer.zero_grad(set_to_none=True)
        loss_q.backward()
        self.critic_optimizer.step()
        return torch.stack([loss_q.detach(), q.detach().mean()])

    def _actor_update(self, obs: torch.Tensor) -> torch.Tensor:
        """Actor step on -Q_1(s, mu(s)) and Polyak update of every target; returns the actor loss."""
        with self._autocast():
            q_pi = self.critic(obs, self.actor(obs), members=1, detach_params=True)  # [1, B]
        loss_pi = -q_pi.mean()
        self.actor_optimizer.zero_grad(set_to_none=True)
        loss_pi.backward()
        self.actor_optimizer.step()
        polyak_update(self._target_params, self._online_params, self.config.tau)
        return loss_pi.detach()

    def _after_update(self, batch, out: torch.Tensor) -> torch.Tensor:
        # num_gradient_steps counts the critic steps before this one
        if (self.num_gradient_steps + 1) % self.config.policy_delay == 0:
            self._last_actor_loss = self._actor_update_fn(batch.obs)
        return torch.cat([out, self._last_actor_loss.reshape(1)])  # actor_loss: the latest actor step's

    # -- acting ----------------------------------------------------------------------------------
    def _deterministic(self, obs: np.ndarray) -> np.ndarray:
        with torch.no_grad():
            x = torch.from_numpy(np.ascontiguousarray(obs, dtype=np.float32)).to(self.device)
            return self.actor(x.reshape(x.shape[0], -1)).cpu().numpy()

    def deterministic_module(self) -> torch.nn.Module:
        return frozen_copy(self.actor)

    def _explore_actions(self, obs: np.ndarray) -> np.ndarray:
        actions = self._deterministic(obs)
        actions += self.np_rng.normal(0.0, self.config.exploration_noise, actions.shape) * self._half_range
        return np.clip(actions, self.action_space.low, self.action_space.high)

    def _policy_actions(self, obs: np.ndarray, deterministic: bool) -> np.ndarray:
        return self._deterministic(obs) if deterministic else self._explore_actions(obs)

    # -- persistence -----------------------------------------------------------------------------
    def _state(self) -> dict:
        return {"actor": self.actor.state_dict(), "actor_target": self.actor_target.state_dict(),
                "critic": self.critic.state_dict(), "critic_target": self.critic_target.state_dict(),
                "actor_optimizer": self.actor_optimizer.state_dict(),
                "critic_optimizer": self.critic_optimizer.state_dict()}

    def _load_state(self, state: dict) -> None:
        for name in ("actor", "actor_target", "critic", "critic_target", "actor_optimizer", "critic_optimizer"):
            getattr(self, name).load_state_dict(state[name])
