"""SAC (Haarnoja et al. 2018) with twin critics as one batched ensemble and automatic entropy tuning.

Read top to bottom: the config, one update on its two gradient backends, acting. One update on the "torch" backend
(``SAC._autograd_step``) reads three files: this one; ``rapidrl.algos.offpolicy_losses`` (``soft_target``,
``critic_loss``, ``soft_actor_loss``, ``temperature_loss``, ``polyak_update``); ``rapidrl.algos.soft_actor_critic``
(``soft_passes``, ``joint_step``, ``soft_stats``, and the networks' and temperature's construction). The
"handwritten" backend (``SAC._compiled_step``, the CPU default) is the same update with its gradients written by hand
(``rapidrl.kernels.sac``, ``rapidrl.nn.mlp_grad``). Collection, replay and the update driver come from the shared
off-policy core (``rapidrl.algos.offpolicy``).

One update is one backward pass and one Adam step for all of actor, critics and temperature, on the sum of
- the critic loss towards r + discount * (min_i Q'_i(s', a') - alpha log pi(a'|s')), a' ~ pi(s'),
- the actor loss alpha log pi(a|s) - min_i Q_i(s, a), a ~ pi(s), through critics whose weights are held
  constant (so it only moves the actor; it sees the critics of before this step's critic update),
- the temperature loss,
then a Polyak target update (one ``torch._foreach_lerp_``). The losses touch disjoint parameters, so the
gradients equal those of three separate steps; one step instead of three is what makes the update cheap
(it is overhead-bound at these sizes). The actor runs once on [s; s'], each critic call evaluates all
members at once (``CriticEnsemble``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch

from rapidrl.algos.offpolicy import CriticEnsembleConfig, OffPolicyAlgorithm, OffPolicyConfig
from rapidrl.algos.offpolicy_losses import (
    categorical_critic_loss,
    categorical_soft_target,
    categorical_values,
    critic_loss,
    polyak_update,
    soft_actor_loss,
    soft_target,
    temperature_loss,
)
from rapidrl.algos.offpolicy_networks import NetworkConfig
from rapidrl.algos.registry import register
from rapidrl.algos.soft_actor_critic import (
    EntropyConfig,
    SquashedGaussianActorCritic,
    joint_step,
    soft_passes,
    soft_stats,
)
from rapidrl.kernels import sac as sac_kernels
from rapidrl.nn.mlp_grad import ensemble_backward, ensemble_forward
from rapidrl.nn.numba_mlp import ACTING_FORWARD_MAX_ROWS, MLPForward, MLPGrad
from rapidrl.nn.optim import optimizer_step
from rapidrl.train.config import with_defaults
from rapidrl.train.path_settings import HandwrittenBackend


@dataclass
@with_defaults(learning_rate=1e-3)
class SACConfig(OffPolicyConfig, EntropyConfig, CriticEnsembleConfig, NetworkConfig):
    def validate(self) -> None:
        super().validate()
        self.validate_entropy()
        self.validate_critics()
        self.validate_network()


@register
class SAC(SquashedGaussianActorCritic, OffPolicyAlgorithm):
    """Soft Actor-Critic for Box action spaces. ``SAC(env, **hyperparameters)``; see SACConfig."""

    name = "sac"
    config_class = SACConfig
    bf16_learning_tested = True
    handwritten = HandwrittenBackend(  # gives way: update batch 256, 256x256, 1 thread: 8.4 ms bf16 vs 11.1 ms fp32
        by_hand="the actor MLP's forward and backward in Numba (`rapidrl.kernels.mlp`); sampling, the losses and "
                "their gradients in three Numba calls (`rapidrl.kernels.sac`); the critic ensemble's forward and "
                "backward in batched PyTorch (`rapidrl.nn.mlp_grad`)", gives_way_to_bf16=True)
    stat_names = ("critic_loss", "actor_loss", "ent_coef_loss", "ent_coef", "q_values", "entropy")
    saved_state = ("actor", "critic", "critic_target", "log_alpha", "optimizer")

    def _build_networks(self) -> None:
        c = self.config
        self._value_support = None  # network="simbav2": the atoms of its categorical critics
        if c.network == "simbav2":
            self._value_support = torch.linspace(-c.value_range, c.value_range, c.critic_bins, device=self.device)
        self._build_actor_and_critics(out_dim=1 if self._value_support is None else c.critic_bins)
        self._build_joint_optimizer()

    # -- gradient backends -----------------------------------------------------------------------
    def _bind_backend(self) -> None:
        """The handwritten backend: the actor's layers for the hand-written backward, NumPy views of its bounds for
        the kernels, and the compiled MLP forward for acting on a few observations (also under precision="bf16" on
        the CPU: ``_acts_compiled``)."""
        self._acting_forward = None
        if self._acts_compiled():
            self._acting_forward = MLPForward([*self.actor.trunk, self.actor.head], "relu")
            self._scale_np, self._center_np = self.actor.scale.numpy(), self.actor.center.numpy()
        if self.gradient_backend == "handwritten":
            self._actor_grad = MLPGrad([*self.actor.trunk, self.actor.head], "relu")

    # -- update ----------------------------------------------------------------------------------
    def _update_step(self, batch) -> torch.Tensor:
        """One update; returns the statistics named by ``stat_names``."""
        return self._compiled_step(batch) if self.gradient_backend == "handwritten" else self._autograd_step(batch)

    def _autograd_step(self, batch) -> torch.Tensor:
        """The "torch" backend: the update through autograd (the reference of ``_compiled_step``; what torch.compile
        traces); returns ``stat_names``' statistics. With network="simbav2" the critics are categorical
        (``categorical_soft_target``, ``categorical_critic_loss``; the actor maximises their expected values) and
        the off-policy core puts every weight back onto the unit sphere after the step."""
        alpha = self.log_alpha.detach().exp()  # [1]
        with self._autocast():  # bf16 autocast under precision="bf16" (the networks return float32)
            q, q_pi, next_q, log_prob, next_log_prob = soft_passes(self.actor, self.critic, self.critic_target, batch,
                                                                    self.torch_rng)  # [n, B] each, [B], [B]
        support = self._value_support
        if support is None:
            with torch.no_grad():
                target = soft_target(batch.rewards, batch.discounts, next_q, next_log_prob, alpha)  # [B]
            loss_q = critic_loss(q, target)
        else:  # [n, B, N] logits
            with torch.no_grad():
                target = categorical_soft_target(batch.rewards, batch.discounts, next_q, next_log_prob, alpha,
                                                 support)  # [B, N]
            loss_q = categorical_critic_loss(q, target)
            q, q_pi = categorical_values(q.detach(), support), categorical_values(q_pi, support)  # [n, B]
        loss_pi = soft_actor_loss(q_pi, log_prob, alpha)
        loss_alpha = temperature_loss(self.log_alpha, log_prob, self.target_entropy) if self.tune_alpha else None
        joint_step(self.optimizer, [loss_q, loss_pi, loss_alpha], self._target_params, self._critic_params,
                   self.config.tau)  # one backward pass, one Adam step, the Polyak update
        return soft_stats(loss_q, loss_pi, loss_alpha, alpha, q, log_prob)

    @torch.no_grad()
    def _compiled_step(self, batch) -> torch.Tensor:
        """The "handwritten" backend: ``_autograd_step`` with every gradient written by hand, the elementwise parts
        (sampling, losses, their gradients) in three compiled calls (``rapidrl.kernels.sac``), the actor's forward
        and backward compiled (``rapidrl.kernels.mlp``), the critic ensemble's in PyTorch (``rapidrl.nn.mlp_grad``):
        the same update in a fraction of the PyTorch calls, and the actor's backward over the B rows of s only.

        The critics evaluate (s, a) and (s, a ~ pi(s)) in one batched pass over 2B rows; the parameter
        gradients come from the first B rows (critic loss), the action gradient of the actor loss from the
        last B (``ensemble_backward``'s ``param_rows``): the critics of before this step, as in autograd.
        """
        c, actor = self.config, self.actor
        b, act_dim = batch.obs.shape[0], batch.actions.shape[1]
        lo, hi = actor.log_std_min, actor.log_std_max
        head = self._actor_grad(torch.cat([batch.obs, batch.next_obs]).numpy())  # [2B, 2A]
        noise = torch.randn(2 * b, act_dim, generator=self.torch_rng)
        actions_pi, log_prob = torch.empty_like(noise), torch.empty(2 * b)
        saved = (torch.empty_like(noise), torch.empty_like(noise), torch.empty_like(noise))
        sac_kernels.squash(head, noise.numpy(), self._scale_np, self._center_np, lo, hi,
                           actions_pi.numpy(), log_prob.numpy(), *(t.numpy() for t in saved))
        critic_w, critic_b = list(self.critic.weights), list(self.critic.biases)
        target_w, target_b = list(self.critic_target.weights), list(self.critic_target.biases)
        next_q = ensemble_forward(torch.cat([batch.next_obs, actions_pi[b:]], 1), target_w, target_b)[0].squeeze(-1)
        critic_x = torch.cat([batch.obs.repeat(2, 1), torch.cat([batch.actions, actions_pi[:b]])], 1)
        q_both, critic_inputs = ensemble_forward(critic_x, critic_w, critic_b)
        q_both = q_both.squeeze(-1)  # [n, 2B]: Q(s, a), then Q(s, a ~ pi(s))
        log_alpha = float(self.log_alpha)
        alpha = math.exp(log_alpha)
        d_q_both, out = torch.empty_like(q_both), torch.empty(7)
        sac_kernels.loss_head(q_both.numpy(), next_q.numpy(), batch.rewards.numpy(), batch.discounts.numpy(),
                              log_prob.numpy(), alpha, log_alpha if self.tune_alpha else 0.0, self.target_entropy,
                              d_q_both.numpy(), out.numpy())
        d_x = ensemble_backward(d_q_both.unsqueeze(-1), critic_inputs, critic_w, critic_b, param_rows=b)
        d_head = np.empty((b, 2 * act_dim), np.float32)
        sac_kernels.squash_backward(d_x.numpy(), alpha / b, noise[:b].numpy(), self._scale_np,
                                    *(t[:b].numpy() for t in saved), lo, hi, d_head)
        stats, d_log_alpha = out[:6], out[6:]
        self._actor_grad.backward(d_head)  # the B rows of s -> the actor's .grad
        if self.tune_alpha:  # into the existing .grad: optimizer_step keeps its views while tensors stay
            if self.log_alpha.grad is None:
                self.log_alpha.grad = torch.empty_like(self.log_alpha)
            self.log_alpha.grad.copy_(d_log_alpha)
        optimizer_step(self.optimizer)
        polyak_update(self._target_params, self._critic_params, c.tau)
        return stats

    # -- acting ----------------------------------------------------------------------------------
    def _policy_actions(self, obs: np.ndarray, deterministic: bool) -> np.ndarray:
        """Through the compiled forward and sampling kernel for up to ACTING_FORWARD_MAX_ROWS observations where
        ``_bind_backend`` made one, else the PyTorch actor (``_act``)."""
        if self._acting_forward is None or obs.shape[0] > ACTING_FORWARD_MAX_ROWS:
            return super()._policy_actions(obs, deterministic)
        actor = self.actor
        head = self._acting_forward(self._normalized_obs(obs).reshape(obs.shape[0], -1))
        noise = np.zeros((obs.shape[0], head.shape[1] // 2), np.float32)
        if not deterministic:
            noise[:] = torch.randn(noise.shape, generator=self.torch_rng).numpy()  # as the PyTorch path draws
        actions, log_prob, *saved = (np.empty_like(noise), np.empty(len(noise), np.float32),
                                     *(np.empty_like(noise) for _ in range(3)))
        sac_kernels.squash(head, noise, self._scale_np, self._center_np, actor.log_std_min, actor.log_std_max,
                           actions, log_prob, *saved)
        return actions

    def _explore_actions(self, obs: np.ndarray) -> np.ndarray:
        return self._policy_actions(obs, deterministic=False)
