"""The deterministic actor-critic family (DDPG, TD3, TD3+BC): what the three share that is not their update.

Config fields (``DeterministicActorConfig``, ``TargetSmoothingConfig``); the networks (``DeterministicActorCritic``:
a deterministic actor mu(s) = center + scale tanh(MLP(s)) and a critic ensemble, each with a target copy and its own
Adam); acting (training actions add Gaussian noise of ``exploration_noise`` times the action half-range); the saved
state; and the "handwritten" gradient backend of TD3 and DDPG (``compiled_steps``: their update with every gradient
written by hand). Each algorithm's update is written out in its own file: ``rapidrl.algos.td3.TD3._update_step``,
``rapidrl.algos.ddpg.DDPG._update_step``, ``rapidrl.algos.td3_bc.TD3BC._update_step``. Nothing here is overridden
to change the maths.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass

import numpy as np
import torch

from rapidrl.algos.offpolicy import CriticEnsembleConfig
from rapidrl.algos.offpolicy_losses import critic_loss, polyak_update, td3_target
from rapidrl.algos.offpolicy_networks import (
    actor_trunk,
    critic_ensemble,
    network_optimizer,
    simba_without_handwritten,
    simbav2_actor,
)
from rapidrl.nn.deploy import frozen_copy
from rapidrl.nn.mlp_grad import ensemble_backward, ensemble_forward
from rapidrl.nn.numba_mlp import ACTING_FORWARD_MAX_ROWS, MLPForward, MLPGrad
from rapidrl.nn.optim import optimizer_step
from rapidrl.nn.qnets import CriticEnsemble, DeterministicActor
from rapidrl.train.config import check_positive

__all__ = ["DeterministicActorConfig", "DeterministicActorCritic", "TargetSmoothingConfig", "compiled_actor_step",
           "compiled_critic_step", "compiled_steps"]


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
    """DDPG, TD3 and TD3+BC (module docstring): networks (``_build_actor_critic``), the handwritten backend's set-up
    (``_bind_backend``), acting, saved state. Each subclass writes its own ``_build_networks``,
    ``_gradient_backends`` and ``_update_step``.

    Gradient backends: "torch" (autograd on the losses of ``rapidrl.algos.offpolicy_losses``: the reference, what
    torch.compile traces) and, for DDPG and TD3 on the CPU in float32, "handwritten" (``compiled_steps``): the same
    steps with every gradient written by hand, the critics' forward and backward in a few batched PyTorch calls
    (``rapidrl.nn.mlp_grad``), the actor's in compiled code (``rapidrl.nn.numba_mlp.MLPGrad``), no autograd graph,
    and acting on a few observations through the compiled forward."""

    stat_names = ("critic_loss", "q_values", "actor_loss")
    saved_state = ("actor", "actor_target", "critic", "critic_target", "actor_optimizer", "critic_optimizer")
    box_actions_only = True

    def _build_actor_critic(self, n_critics: int) -> None:
        """The actor, ``n_critics`` critics (one ``CriticEnsemble``), their targets and Adams."""
        space, c = self.action_space, self.config
        low, high = torch.as_tensor(space.low), torch.as_tensor(space.high)
        trunk = actor_trunk(c, self.obs_dim)  # network="simba": SimBa's trunk and head gain
        simba = dict(trunk=trunk, head_gain=1.0) if trunk is not None else {}
        v2 = simbav2_actor(c, self.obs_dim, int(space.shape[0]), heads=1)  # SimbaV2's whole network
        if v2 is not None:
            simba = dict(network=v2)
        if simba:  # SimBa's bf16 learning is untested: precision="auto" keeps float32
            self.bf16_learning_tested = False
        self.actor = DeterministicActor(self.obs_dim, low, high, c.hidden, **simba).to(self.device)
        self.actor_target = copy.deepcopy(self.actor).requires_grad_(False)
        self.critic = critic_ensemble(c, n_critics, self.obs_dim, int(space.shape[0]), c.hidden).to(self.device)
        self.critic_target = copy.deepcopy(self.critic).requires_grad_(False)
        self.actor_optimizer = network_optimizer(self.actor.parameters(), c)
        self.critic_optimizer = network_optimizer(self.critic.parameters(), c)
        self._online_params = [*self.actor.parameters(), *self.critic.parameters()]
        self._target_params = [*self.actor_target.parameters(), *self.critic_target.parameters()]
        self._last_actor_loss = torch.zeros((), device=self.device)  # the latest actor step's (a statistic)
        self._half_range = ((high - low) / 2).numpy()

    def _gradient_backends(self) -> dict:
        """The handwritten backend where the algorithm has one, refused for the SimBa networks."""
        if self.handwritten is None:
            return super()._gradient_backends()
        return self._handwritten_or_torch(lambda: simba_without_handwritten(self.config))

    def _bind_backend(self) -> None:
        """The handwritten backend: the actor's forward and backward for the update (``MLPGrad``); a compiled forward
        for acting (its own buffers: acting must not overwrite the update's saved activations; also under
        precision="bf16" on the CPU: ``_acts_compiled``) and NumPy views of the action bounds."""
        self._acting_forward = None
        if self.gradient_backend == "handwritten":
            self._actor_grad = MLPGrad(self.actor.net, "relu")
        if self._acts_compiled():
            self._acting_forward = MLPForward(self.actor.net, "relu")
            self._scale_np, self._center_np = self.actor.scale.numpy(), self.actor.center.numpy()

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
        raw = self._acting_forward(self._normalized_obs(obs).reshape(obs.shape[0], -1))
        actions = self._center_np + self._scale_np * np.tanh(raw)
        return actions if deterministic else self._exploration_noise(actions)

    def _explore_actions(self, obs: np.ndarray) -> np.ndarray:
        return self._policy_actions(obs, deterministic=False)

    def _actor_module(self) -> torch.nn.Module:
        return frozen_copy(self.actor)


# -- the handwritten backend: TD3's and DDPG's steps with hand-written gradients --------------------------------------
@torch.no_grad()
def compiled_steps(model: DeterministicActorCritic, batch, next_actions: torch.Tensor) -> torch.Tensor:
    """``rapidrl.algos.td3.td3_steps`` (TD3's and DDPG's update after their target actions a' [B, A]) on the
    handwritten backend: ``compiled_critic_step``, then every ``policy_delay``-th step ``compiled_actor_step`` and the
    Polyak update of every target. Returns [critic_loss, q_values, actor_loss]."""
    loss_q, q_mean = compiled_critic_step(model.critic, model.critic_target, model.critic_optimizer, batch,
                                          next_actions)
    if (model.num_gradient_steps + 1) % model.config.policy_delay == 0:  # num_gradient_steps: the steps before
        model._last_actor_loss = compiled_actor_step(model.actor, model._actor_grad, model.critic,
                                                     model.actor_optimizer, batch.obs)
        polyak_update(model._target_params, model._online_params, model.config.tau)
    return torch.stack([loss_q, q_mean, model._last_actor_loss])


@torch.no_grad()
def compiled_critic_step(critic: CriticEnsemble, critic_target: CriticEnsemble, optimizer: torch.optim.Adam, batch,
                         next_actions: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``rapidrl.algos.td3.critic_step`` by hand: d critic_loss / d q = (q - target) / B, back through the ensemble
    into each parameter's ``.grad``, then the Adam step. next_actions a' [B, A]; returns (critic loss, mean Q)."""
    target_w, target_b = list(critic_target.weights), list(critic_target.biases)
    next_x = torch.cat([batch.next_obs, next_actions], 1)  # [B, O + A]
    target = td3_target(batch.rewards, batch.discounts, ensemble_forward(next_x, target_w, target_b)[0][..., 0])
    weights, biases = list(critic.weights), list(critic.biases)
    q, inputs = ensemble_forward(torch.cat([batch.obs, batch.actions], 1), weights, biases)
    q = q[..., 0]  # [n, B]
    ensemble_backward(((q - target) / q.shape[1]).unsqueeze(-1), inputs, weights, biases)
    optimizer_step(optimizer)
    return critic_loss(q, target), q.mean()


@torch.no_grad()
def compiled_actor_step(actor: DeterministicActor, actor_grad: MLPGrad, critic: CriticEnsemble,
                        optimizer: torch.optim.Adam, obs: torch.Tensor) -> torch.Tensor:
    """The actor's Adam step on -mean Q_1(s, mu(s)) by hand: the action gradient through the first critic's layers
    (weights held constant), through tanh into the actor's compiled backward (``actor_grad``, the MLP of
    ``actor.net``). obs [B, O]; returns the actor loss []."""
    rows, obs_dim = obs.shape[0], obs.shape[1]
    tanh_raw = torch.from_numpy(actor_grad(obs.numpy())).tanh()  # [B, A]
    mu = actor.center + actor.scale * tanh_raw
    weights, biases = [w[:1] for w in critic.weights], [b[:1] for b in critic.biases]
    q_pi, inputs = ensemble_forward(torch.cat([obs, mu], 1), weights, biases)  # [1, B, 1]
    d_x = ensemble_backward(torch.full_like(q_pi, -1.0 / rows), inputs, weights, biases, param_rows=0)
    d_raw = (d_x[0, :, obs_dim:] * actor.scale * (1.0 - tanh_raw.square())).contiguous()  # [B, A]
    actor_grad.backward(d_raw.numpy())
    optimizer_step(optimizer)
    return -q_pi.mean()
