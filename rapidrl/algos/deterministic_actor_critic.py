"""The deterministic actor-critic family (DDPG, TD3, TD3+BC): config fields, networks, acting and saved state.

A deterministic actor mu(s) = center + scale tanh(MLP(s)) and a critic ensemble, each with a target copy and its own
Adam. Training actions add Gaussian noise of ``exploration_noise`` times the action half-range.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass

import numpy as np
import torch

from rapidrl.algos.offpolicy import CriticEnsembleConfig
from rapidrl.algos.offpolicy_losses import (
    critic_loss,
    polyak_update,
    smoothed_target_actions,
    td3_target,
)
from rapidrl.nn.deploy import frozen_copy
from rapidrl.nn.mlp_grad import ensemble_backward, ensemble_forward
from rapidrl.nn.numba_mlp import ACTING_FORWARD_MAX_ROWS, MLPForward, MLPGrad
from rapidrl.nn.optim import adam, optimizer_step
from rapidrl.nn.qnets import CriticEnsemble, DeterministicActor
from rapidrl.train.compile import maybe_compile
from rapidrl.train.config import check_positive

__all__ = ["DeterministicActorConfig", "DeterministicActorCritic", "TargetSmoothingConfig"]


# -- deterministic actor: DDPG, TD3, TD3+BC ----------------------------------------------------------------------------
@dataclass
class DeterministicActorConfig:
    """The deterministic actor's fields (a dataclass mixin of DDPG's, TD3's and TD3+BC's configs)."""

    policy_delay: int = 2
    """Critic updates per actor (and target) update."""
    exploration_noise: float = 0.1
    """Std of the Gaussian noise on training actions (offline algorithms: in the online phase), as a fraction of the
    action half-range."""

    def validate_deterministic_actor(self) -> None:
        check_positive(self, "policy_delay")
        check_positive(self, "exploration_noise", allow_zero=True)


@dataclass
class TargetSmoothingConfig(CriticEnsembleConfig):
    """TD3's twin critics and target policy smoothing (a dataclass mixin of TD3's and TD3+BC's configs)."""

    target_policy_noise: float = 0.2
    """Std of the Gaussian smoothing noise on target actions, as a fraction of the action half-range."""
    target_noise_clip: float = 0.5
    """Clip of that noise, as a fraction of the action half-range."""

    def validate_target_smoothing(self) -> None:
        self.validate_critics()
        check_positive(self, "target_policy_noise", "target_noise_clip", allow_zero=True)


class DeterministicActorCritic:
    """DDPG, TD3 and TD3+BC (module docstring). Hooks: ``_n_critics()``, ``_target_actions(batch)``,
    ``_actor_loss(obs, actions)``.

    Gradient backends: "torch" (autograd on the losses of ``rapidrl.algos.offpolicy_losses``: the reference, what
    torch.compile traces) and, for DDPG and TD3 on the CPU in float32, "compiled": the same two steps with every
    gradient written by hand, the critics' forward and backward in a few batched PyTorch calls
    (``rapidrl.nn.mlp_grad``), the actor's in compiled code (``rapidrl.nn.numba_mlp.MLPGrad``), no autograd graph,
    and acting on a few observations through the compiled forward. TD3+BC's actor loss (its cloning term) trains
    through autograd only."""

    stat_names = ("critic_loss", "q_values", "actor_loss")
    saved_state = ("actor", "actor_target", "critic", "critic_target", "actor_optimizer", "critic_optimizer")
    box_actions_only = True

    def _n_critics(self) -> int:
        return self.config.n_critics

    def _build_networks(self) -> None:
        space, c = self.action_space, self.config
        low, high = torch.as_tensor(space.low), torch.as_tensor(space.high)
        self.actor = DeterministicActor(self.obs_dim, low, high, c.hidden).to(self.device)
        self.actor_target = copy.deepcopy(self.actor).requires_grad_(False)
        self.critic = CriticEnsemble(self._n_critics(), self.obs_dim, int(space.shape[0]), c.hidden).to(self.device)
        self.critic_target = copy.deepcopy(self.critic).requires_grad_(False)
        self.actor_optimizer = adam(self.actor.parameters(), c.learning_rate)
        self.critic_optimizer = adam(self.critic.parameters(), c.learning_rate)
        self._online_params = [*self.actor.parameters(), *self.critic.parameters()]
        self._target_params = [*self.actor_target.parameters(), *self.critic_target.parameters()]
        self._actor_update_fn = maybe_compile(self._actor_update, c.torch_compile)
        self._last_actor_loss = torch.zeros((), device=self.device)
        self._half_range = ((high - low) / 2).numpy()

    # -- gradient backends -----------------------------------------------------------------------------------------
    def _gradient_backends(self) -> dict:
        if type(self)._actor_loss is not DeterministicActorCritic._actor_loss:
            return {"torch": lambda: None}  # TD3+BC: its actor loss has no hand-written gradient
        return self._compiled_or_torch(float32_only=True)

    def _bind_backend(self) -> None:
        """The compiled backend: the actor's forward and backward for the update (``MLPGrad``), another compiled
        forward for acting (its own buffers: acting must not overwrite the update's saved activations), NumPy views
        of the action bounds."""
        self._acting_forward = None
        if self.gradient_backend == "compiled":
            self._actor_grad = MLPGrad(self.actor.net, "relu")
            self._acting_forward = MLPForward(self.actor.net, "relu")
            self._scale_np, self._center_np = self.actor.scale.numpy(), self.actor.center.numpy()
            self._actor_update_fn = self._compiled_actor_update

    # -- update ----------------------------------------------------------------------------------------------------
    def _target_actions(self, batch) -> torch.Tensor:
        """a' = clip(mu'(s') + clip(eps, -c, c)), eps ~ N(0, sigma^2) (TD3's target policy smoothing) [B, A]."""
        c, actor = self.config, self.actor
        noise = torch.empty_like(batch.actions).normal_(generator=self.torch_rng)
        return smoothed_target_actions(self.actor_target(batch.next_obs), noise, actor.scale, actor.center,
                                       c.target_policy_noise, c.target_noise_clip)

    def _update_step(self, batch) -> torch.Tensor:
        """Critic step towards r + discount * min_i Q'_i(s', a'); returns [critic loss, mean Q]."""
        if self.gradient_backend == "compiled":
            return self._compiled_critic_step(batch)
        with torch.no_grad(), self._autocast():  # bf16 autocast under precision="bf16" (networks return float32)
            next_q = self.critic_target(batch.next_obs, self._target_actions(batch))  # [n, B]
            target = td3_target(batch.rewards, batch.discounts, next_q)
        with self._autocast():
            q = self.critic(batch.obs, batch.actions)  # [n, B]
        loss_q = critic_loss(q, target)
        self.critic_optimizer.zero_grad(set_to_none=False)
        loss_q.backward()
        optimizer_step(self.critic_optimizer)
        return torch.stack([loss_q.detach(), q.detach().mean()])

    def _actor_loss(self, obs: torch.Tensor, actions: torch.Tensor) -> torch.Tensor:
        """-mean Q_1(s, mu(s)), through the first critic with its weights held constant: obs [B, O] -> []."""
        with self._autocast():
            q_pi = self.critic(obs, self.actor(obs), members=1, detach_params=True)  # [1, B]
        return -q_pi.mean()

    def _actor_update(self, obs: torch.Tensor, actions: torch.Tensor) -> torch.Tensor:
        """Actor step on ``_actor_loss`` and the Polyak update of every target; returns the actor loss."""
        loss_pi = self._actor_loss(obs, actions)
        self.actor_optimizer.zero_grad(set_to_none=False)
        loss_pi.backward()
        optimizer_step(self.actor_optimizer)
        polyak_update(self._target_params, self._online_params, self.config.tau)
        return loss_pi.detach()

    @torch.no_grad()
    def _compiled_critic_step(self, batch) -> torch.Tensor:
        """``_update_step`` on the compiled backend: d critic_loss / d q = (q - target) / B, back through the
        ensemble by hand into each parameter's ``.grad``."""
        target_w, target_b = list(self.critic_target.weights), list(self.critic_target.biases)
        next_x = torch.cat([batch.next_obs, self._target_actions(batch)], 1)  # [B, O + A]
        target = td3_target(batch.rewards, batch.discounts, ensemble_forward(next_x, target_w, target_b)[0][..., 0])
        weights, biases = list(self.critic.weights), list(self.critic.biases)
        q, inputs = ensemble_forward(torch.cat([batch.obs, batch.actions], 1), weights, biases)
        q = q[..., 0]  # [n, B]
        ensemble_backward(((q - target) / q.shape[1]).unsqueeze(-1), inputs, weights, biases)
        optimizer_step(self.critic_optimizer)
        return torch.stack([critic_loss(q, target), q.mean()])

    @torch.no_grad()
    def _compiled_actor_update(self, obs: torch.Tensor, actions: torch.Tensor) -> torch.Tensor:
        """``_actor_update`` on the compiled backend: the action gradient of -mean Q_1(s, mu(s)) through the first
        critic's layers (weights held constant), through tanh into the actor's compiled backward. obs [B, O]."""
        actor, rows, obs_dim = self.actor, obs.shape[0], obs.shape[1]
        tanh_raw = torch.from_numpy(self._actor_grad(obs.numpy())).tanh()  # [B, A]
        mu = actor.center + actor.scale * tanh_raw
        weights, biases = [w[:1] for w in self.critic.weights], [b[:1] for b in self.critic.biases]
        q_pi, inputs = ensemble_forward(torch.cat([obs, mu], 1), weights, biases)  # [1, B, 1]
        d_x = ensemble_backward(torch.full_like(q_pi, -1.0 / rows), inputs, weights, biases, param_rows=0)
        d_raw = (d_x[0, :, obs_dim:] * actor.scale * (1.0 - tanh_raw.square())).contiguous()  # [B, A]
        self._actor_grad.backward(d_raw.numpy())
        optimizer_step(self.actor_optimizer)
        polyak_update(self._target_params, self._online_params, self.config.tau)
        return -q_pi.mean()

    def _after_update(self, batch, out: torch.Tensor) -> torch.Tensor:
        # num_gradient_steps counts the critic steps before this one
        if (self.num_gradient_steps + 1) % self.config.policy_delay == 0:
            self._last_actor_loss = self._actor_update_fn(batch.obs, batch.actions)
        return torch.cat([out, self._last_actor_loss.reshape(1)])  # actor_loss: the latest actor step's

    # -- acting ----------------------------------------------------------------------------------------------------
    def _act(self, x: torch.Tensor, deterministic: bool) -> np.ndarray:
        actions = self.actor(x).cpu().numpy()
        return actions if deterministic else self._exploration_noise(actions)

    def _exploration_noise(self, actions: np.ndarray) -> np.ndarray:
        """actions [N, A] + Gaussian noise of ``exploration_noise`` times the half-range, clipped to the bounds."""
        actions += self.np_rng.normal(0.0, self.config.exploration_noise, actions.shape) * self._half_range
        return np.clip(actions, self.action_space.low, self.action_space.high)

    def _policy_actions(self, obs: np.ndarray, deterministic: bool) -> np.ndarray:
        """Through the compiled forward for up to ACTING_FORWARD_MAX_ROWS observations where ``_bind_backend`` made
        one, else the PyTorch actor (``_act``)."""
        if self._acting_forward is None or obs.shape[0] > ACTING_FORWARD_MAX_ROWS:
            return super()._policy_actions(obs, deterministic)
        raw = self._acting_forward(obs.reshape(obs.shape[0], -1))
        actions = self._center_np + self._scale_np * np.tanh(raw)
        return actions if deterministic else self._exploration_noise(actions)

    def _explore_actions(self, obs: np.ndarray) -> np.ndarray:
        return self._policy_actions(obs, deterministic=False)

    def _actor_module(self) -> torch.nn.Module:
        return frozen_copy(self.actor)
