"""TD3 (Fujimoto et al. 2018): twin critics (one batched ensemble), target policy smoothing, delayed actor.

Read top to bottom: the config, then one update, ``TD3._update_step`` (the driver samples the minibatch and calls it:
``OffPolicyAlgorithm._train_step``, rapidrl/algos/offpolicy.py):

1. target actions a' = clip(mu'(s') + clip(eps, -c, c)), eps ~ N(0, sigma^2) (``smoothed_target_actions``);
2. ``td3_steps``: the critic step (``critic_step``: target r + discount * min_i Q'_i(s', a'), ``td3_target``; loss
   0.5 * MSE summed over the critics, ``critic_loss``; one Adam step, ``optimizer_step``), then, every
   ``policy_delay``-th step, the actor step on -mean Q_1(s, mu(s)) and the Polyak update of every target
   (``actor_step``).

One update reads three files: this one, rapidrl/algos/offpolicy_losses.py (the target, the losses, the Polyak update)
and rapidrl/nn/optim.py (the Adam step). ``td3_steps``, ``critic_step`` and ``actor_step`` are DDPG's too (its a' =
mu'(s'), one critic); TD3+BC's update calls ``critic_step`` and ``actor_step``. The networks, acting and the
"handwritten" backend (the same steps with hand-written gradients, ``compiled_steps``) are the family's
(rapidrl/algos/deterministic_actor_critic.py); collection, replay and the update driver are the off-policy core's.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch

from rapidrl.algos.deterministic_actor_critic import (
    DeterministicActorConfig,
    DeterministicActorCritic,
    TargetSmoothingConfig,
    compiled_steps,
)
from rapidrl.algos.offpolicy import OffPolicyAlgorithm, OffPolicyConfig
from rapidrl.algos.offpolicy_losses import critic_loss, polyak_update, smoothed_target_actions, td3_target
from rapidrl.algos.offpolicy_networks import NetworkConfig
from rapidrl.algos.registry import register
from rapidrl.nn.optim import optimizer_step
from rapidrl.nn.qnets import CriticEnsemble
from rapidrl.train.config import with_defaults
from rapidrl.train.path_settings import HandwrittenBackend


@dataclass
@with_defaults(learning_rate=1e-3)
class TD3Config(OffPolicyConfig, DeterministicActorConfig, TargetSmoothingConfig, NetworkConfig):
    def validate(self) -> None:
        super().validate()
        self.validate_deterministic_actor()
        self.validate_target_smoothing()
        self.validate_network()


@register
class TD3(DeterministicActorCritic, OffPolicyAlgorithm):
    """Twin Delayed DDPG for Box action spaces. ``TD3(env, **hyperparameters)``; see TD3Config."""

    name = "td3"
    config_class = TD3Config

    def _build_networks(self) -> None:
        self._build_actor_critic(n_critics=self.config.n_critics)

    bf16_learning_tested = True  # tests/test_learning_bf16.py: Pendulum at the float32 test's settings, seeds 0-2
    handwritten = HandwrittenBackend(  # gives way: update batch 256, 256x256, Zen 4, 2 threads: 5.1 ms bf16, 7.1 fp32
        by_hand="the critic ensemble's forward and backward in batched PyTorch (`rapidrl.nn.mlp_grad`); the actor "
                "MLP's backward in Numba (`rapidrl.nn.numba_mlp.MLPGrad`); the loss gradients in PyTorch "
                "(`rapidrl.algos.deterministic_actor_critic.compiled_steps`)", gives_way_to_bf16=True)

    def _update_step(self, batch) -> torch.Tensor:
        """One TD3 update on a sampled minibatch (module docstring): smoothed target actions, then ``td3_steps``.
        Returns [critic_loss, q_values, actor_loss] (actor_loss: the latest actor step's)."""
        c, actor = self.config, self.actor
        with torch.no_grad(), self._autocast():  # bf16 autocast under precision="bf16" (networks return float32)
            noise = torch.empty_like(batch.actions).normal_(generator=self.torch_rng)  # eps / sigma ~ N(0, 1) [B, A]
            next_actions = smoothed_target_actions(self.actor_target(batch.next_obs), noise, actor.scale,
                                                   actor.center, c.target_policy_noise, c.target_noise_clip)
        return td3_steps(self, batch, next_actions)


def td3_steps(model: DeterministicActorCritic, batch, next_actions: torch.Tensor) -> torch.Tensor:
    """TD3's update after its target actions a' [B, A] (DDPG's too): the critic step, then every ``policy_delay``-th
    step the actor step on -mean Q_1(s, mu(s)) with the Polyak update. Returns [critic_loss, q_values, actor_loss]."""
    if model.gradient_backend == "handwritten":  # the same steps, every gradient written by hand
        return compiled_steps(model, batch, next_actions)
    loss_q, q = critic_step(model.critic, model.critic_target, model.critic_optimizer, batch, next_actions,
                            model._autocast)
    if (model.num_gradient_steps + 1) % model.config.policy_delay == 0:  # num_gradient_steps: the steps before
        with model._autocast():
            q_pi = model.critic(batch.obs, model.actor(batch.obs), members=1, detach_params=True)  # Q_1 [1, B]
        model._last_actor_loss = actor_step(model, -q_pi.mean())
    return torch.stack([loss_q, q.mean(), model._last_actor_loss])


def critic_step(critic: CriticEnsemble, critic_target: CriticEnsemble, optimizer: torch.optim.Optimizer, batch,
                next_actions: torch.Tensor, autocast: Callable) -> tuple[torch.Tensor, torch.Tensor]:
    """One Adam step of the critics on ``critic_loss`` towards r + discount * min_i Q'_i(s', a') (``td3_target``):
    TD3's, DDPG's (n = 1) and TD3+BC's. next_actions a' [B, A]; autocast: the model's ``_autocast``. Returns the loss
    [] and the critics' values Q_i(s, a) [n, B], detached."""
    with torch.no_grad(), autocast():
        next_q = critic_target(batch.next_obs, next_actions)  # [n, B]
        target = td3_target(batch.rewards, batch.discounts, next_q)  # [B]
    with autocast():
        q = critic(batch.obs, batch.actions)  # [n, B]
    loss = critic_loss(q, target)
    optimizer.zero_grad(set_to_none=False)
    loss.backward()
    optimizer_step(optimizer)
    return loss.detach(), q.detach()


def actor_step(model: DeterministicActorCritic, loss: torch.Tensor) -> torch.Tensor:
    """One Adam step of the actor on ``loss`` [], then the Polyak update of every target (TD3's, DDPG's, TD3+BC's).
    Returns the loss, detached."""
    model.actor_optimizer.zero_grad(set_to_none=False)
    loss.backward()
    optimizer_step(model.actor_optimizer)
    polyak_update(model._target_params, model._online_params, model.config.tau)
    return loss.detach()
