"""DDPG (Lillicrap et al. 2016) as CleanRL's ``ddpg_continuous_action.py``: one critic, a deterministic actor, targets.

Read top to bottom: the config, the loss (a pure function), the update, acting. Collection, replay and the update
driver come from the shared off-policy core (``rapidrl.algos.offpolicy``).

Every gradient step updates the critic on r + discount * Q'(s', mu'(s')); every ``policy_frequency``-th step also
updates the actor on -Q(s, mu(s)) and moves both targets by Polyak averaging; exploration adds Gaussian noise of
``exploration_noise`` times the action half-range. The differences from TD3: one critic, no target smoothing, no
minimum over critics. CleanRL's settings, with rapidrl's layer initialisation (orthogonal, as every rapidrl network;
CleanRL keeps PyTorch's default) and its critic loss 0.5 * MSE (CleanRL: MSE; Adam's step does not depend on the
loss's scale, up to its eps).
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
)
from rapidrl.algos.registry import register
from rapidrl.nn.deploy import frozen_copy
from rapidrl.nn.optim import adam
from rapidrl.nn.qnets import CriticEnsemble, DeterministicActor
from rapidrl.train.config import check_positive


@dataclass
class DDPGConfig(OffPolicyConfig):
    """CleanRL's ddpg_continuous_action.py defaults (learning_starts 25,000 is its MuJoCo setting; the presets say
    theirs)."""

    torch_threads: int | None = 0
    """torch.set_num_threads at construction; 0 (every core) since the 256x256 critic's matmuls gain from threads."""
    learning_rate: float = 3e-4
    """Adam learning rate of actor and critic."""
    learning_starts: int = 25_000
    """Env steps (over all envs) taken with uniform-random actions before the first update."""
    policy_frequency: int = 2
    """Critic updates per actor (and target) update."""
    exploration_noise: float = 0.1
    """Std of the Gaussian noise on training actions, as a fraction of the action half-range."""

    def validate(self) -> None:
        super().validate()
        check_positive(self, "policy_frequency")
        check_positive(self, "exploration_noise", allow_zero=True)


def ddpg_target(rewards: torch.Tensor, discounts: torch.Tensor, next_q: torch.Tensor) -> torch.Tensor:
    """r + discount * Q'(s', mu'(s')): next_q [1, B] (the one target critic), the rest [B]."""
    return rewards + discounts * next_q[0]


@register
class DDPG(OffPolicyAlgorithm):
    """Deep Deterministic Policy Gradient for Box action spaces. ``DDPG(env, **hyperparameters)``; see DDPGConfig."""

    name = "ddpg"
    config_class = DDPGConfig
    stat_names = ("critic_loss", "q_values", "actor_loss")

    def _check_spaces(self) -> None:
        super()._check_spaces()
        check_box_actions("DDPG", self.action_space)

    def _build_networks(self) -> None:
        space, c = self.action_space, self.config
        low, high = torch.as_tensor(space.low), torch.as_tensor(space.high)
        self.actor = DeterministicActor(self.obs_dim, low, high, c.hidden).to(self.device)
        self.actor_target = copy.deepcopy(self.actor).requires_grad_(False)
        self.critic = CriticEnsemble(1, self.obs_dim, int(space.shape[0]), c.hidden).to(self.device)
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
        with torch.no_grad(), self._autocast():  # bf16 autocast under precision="bf16" (networks return float32)
            next_q = self.critic_target(batch.next_obs, self.actor_target(batch.next_obs))  # [1, B]
            target = ddpg_target(batch.rewards, batch.discounts, next_q)
        with self._autocast():
            q = self.critic(batch.obs, batch.actions)  # [1, B]
        loss_q = critic_loss(q, target)
        self.critic_optimizer.zero_grad(set_to_none=True)
        loss_q.backward()
        self.critic_optimizer.step()
        return torch.stack([loss_q.detach(), q.detach().mean()])

    def _actor_update(self, obs: torch.Tensor) -> torch.Tensor:
        """Actor step on -Q(s, mu(s)) and Polyak update of both targets; returns the actor loss."""
        with self._autocast():
            q_pi = self.critic(obs, self.actor(obs), detach_params=True)  # [1, B]
        loss_pi = -q_pi.mean()
        self.actor_optimizer.zero_grad(set_to_none=True)
        loss_pi.backward()
        self.actor_optimizer.step()
        polyak_update(self._target_params, self._online_params, self.config.tau)
        return loss_pi.detach()

    def _after_update(self, batch, out: torch.Tensor) -> torch.Tensor:
        # num_gradient_steps counts the critic steps before this one
        if (self.num_gradient_steps + 1) % self.config.policy_frequency == 0:
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
        return {name: getattr(self, name).state_dict() for name in
                ("actor", "actor_target", "critic", "critic_target", "actor_optimizer", "critic_optimizer")}

    def _load_state(self, state: dict) -> None:
        for name in ("actor", "actor_target", "critic", "critic_target", "actor_optimizer", "critic_optimizer"):
            getattr(self, name).load_state_dict(state[name])
