"""Recurrent TD3: TD3 (Fujimoto et al. 2018) whose actor and critics have memory, trained on sequences from replay with
R2D2's stored states and burn-in, for partially observed continuous control (pomdp-baselines' recurrent TD3, Ni et
al. 2022: separate recurrent encoders for the actor and the critics).

The networks (``rapidrl.nn.recurrent_offpolicy``): the actor is a ``RecurrentEncoder`` with a tanh output layer in the
action bounds; the critics share one encoder whose features h_t feed ``n_critics`` MLP heads Q_i([h_t, a]); each has
a Polyak target copy. Collection, sequence replay, acting with a state and checkpoints are the recurrent off-policy
core's (``rapidrl.algos.recurrent_offpolicy``); the losses are TD3's pure functions
(``rapidrl.algos.offpolicy_losses``).

One update, on B sequences of L = ``sequence_length`` steps, every step after the burn-in a TD3 sample:
1. burn-in: the four encoders (actor, critic and their targets) run over the first ``burn_in`` steps from the stored
   states without gradients;
2. the critic step: the target actor's and target critic's encoders unroll (one call of the fused layer each,
   ``RecurrentEncoder.unroll``, with the bootstrap step after each episode segment); the target action a' =
   mu'(next_obs_t) + clipped Gaussian smoothing noise and Q'_i(next_obs_t, a'), each one cell step after the state
   after step t (a truncation bootstraps from the true final observation); target r + discount min_i
   Q'_i; the critics' squared TD errors on the critic encoder's unroll; one Adam step;
3. every ``policy_delay``-th update the actor step: -mean Q_1(h_t, mu(s_t)) through the first critic head held
   constant, on the (updated) critic encoder's features detached, so it moves the actor only; one Adam step; then the
   Polyak update of both targets.
Acting adds Gaussian noise of ``exploration_noise`` times the action half-range to mu, clipped to the bounds.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import ClassVar

import numpy as np
import torch

from rapidrl.algos.deterministic_actor_critic import DeterministicActorConfig, TargetSmoothingConfig
from rapidrl.algos.offpolicy import OffPolicyAlgorithm, OffPolicyConfig
from rapidrl.algos.offpolicy_losses import critic_loss, polyak_update, smoothed_target_actions, td3_target
from rapidrl.algos.recurrent_offpolicy import RecurrentActorCritic, RecurrentActorCriticConfig, burn_in
from rapidrl.algos.registry import register
from rapidrl.nn.optim import adam, optimizer_step
from rapidrl.nn.recurrent import segment_layout
from rapidrl.nn.recurrent_offpolicy import RecurrentCritic, RecurrentDeterministicActor
from rapidrl.train.config import with_defaults


@dataclass
@with_defaults(learning_rate=1e-3, buffer_size=100_000, learning_starts=1_000, batch_size=32, hidden=(64,),
               recurrent_size=64, sequence_length=32, burn_in=8)
class RecurrentTD3Config(OffPolicyConfig, DeterministicActorConfig, TargetSmoothingConfig,
                         RecurrentActorCriticConfig):
    """TD3's settings (``hidden``: the MLP before each recurrent layer) plus the memory's and the sequences'."""
    hidden_may_be_empty: ClassVar[bool] = True  # hidden=(): the observation straight into the recurrent layer

    def validate(self) -> None:
        super().validate()
        self.validate_deterministic_actor()
        self.validate_target_smoothing()
        self.validate_recurrent_actor_critic("recurrent TD3")


@register
class RecurrentTD3(RecurrentActorCritic, OffPolicyAlgorithm):
    """TD3 with memory for Box action spaces. ``RecurrentTD3(env, **hyperparameters)``; see RecurrentTD3Config."""

    name = "recurrent_td3"
    config_class = RecurrentTD3Config
    stat_names = ("critic_loss", "q_values", "actor_loss")
    saved_state = ("actor", "actor_target", "critic", "critic_target", "actor_optimizer", "critic_optimizer")

    def _build_networks(self) -> None:
        c, space = self.config, self.action_space
        low, high = torch.as_tensor(space.low), torch.as_tensor(space.high)
        self.actor = RecurrentDeterministicActor(self.obs_dim, low, high, c.hidden, cell=c.cell,
                                                 size=c.recurrent_size).to(self.device)
        self.critic = RecurrentCritic(self.obs_dim, int(space.shape[0]), c.hidden, c.n_critics, cell=c.cell,
                                      size=c.recurrent_size, head_hidden=c.head_hidden).to(self.device)
        self.actor_target = copy.deepcopy(self.actor).requires_grad_(False)
        self.critic_target = copy.deepcopy(self.critic).requires_grad_(False)
        self.actor_optimizer = adam(self.actor.parameters(), c.learning_rate)
        self.critic_optimizer = adam(self.critic.parameters(), c.learning_rate)
        self._online_params = [*self.actor.parameters(), *self.critic.parameters()]
        self._target_params = [*self.actor_target.parameters(), *self.critic_target.parameters()]
        self._last_actor_loss = torch.zeros((), device=self.device)
        self._half_range = ((high - low) / 2).numpy()

    # -- update ----------------------------------------------------------------------------------
    def _update_step(self, batch) -> torch.Tensor:
        """One update on B sequences (module docstring); returns [critic_loss, q_values, actor_loss]."""
        c, actor, critic = self.config, self.actor, self.critic
        k, sa = c.burn_in, self._state_sizes()[0]
        s_actor, s_critic = batch.state[:, :sa], batch.state[:, sa:]
        state_a, state_c, state_at, state_ct = burn_in(
            [actor.encoder, critic.encoder, self.actor_target.encoder, self.critic_target.encoder], batch.obs[:k],
            [s_actor, s_critic, s_actor, s_critic], batch.starts[:k])
        obs, next_obs, starts = batch.obs[k:], batch.next_obs[k:], batch.starts[k:]
        m = obs.shape[0] * obs.shape[1]
        layout = segment_layout(starts, with_next=True)  # one for the four networks
        with torch.no_grad():
            _, h_at_next = self.actor_target.encoder.unroll(obs, state_at, starts, next_obs, layout)
            _, h_ct_next = self.critic_target.encoder.unroll(obs, state_ct, starts, next_obs, layout)
            target_mu = self.actor_target.mu(h_at_next.reshape(m, -1))
            noise = torch.empty_like(target_mu).normal_(generator=self.torch_rng)
            next_actions = smoothed_target_actions(target_mu, noise, actor.scale, actor.center,
                                                   c.target_policy_noise, c.target_noise_clip)
            next_q = self.critic_target.heads(h_ct_next.reshape(m, -1), next_actions)
            discounts = c.gamma * (~batch.terminated[k:]).float().reshape(m)
            y = td3_target(batch.rewards[k:].reshape(m), discounts, next_q)  # [T * B]
        h_critic, _ = critic.encoder.unroll(obs, state_c, starts, layout=layout)
        q = critic.heads(h_critic.reshape(m, -1), batch.actions[k:].reshape(m, -1))  # [n, T * B]
        loss_q = critic_loss(q, y)
        self.critic_optimizer.zero_grad(set_to_none=False)
        loss_q.backward()
        optimizer_step(self.critic_optimizer)
        if (self.num_gradient_steps + 1) % c.policy_delay == 0:  # num_gradient_steps: the updates before this one
            h_actor, _ = actor.encoder.unroll(obs, state_a, starts, layout=layout)
            state_c = burn_in([critic.encoder], batch.obs[:k], [s_critic], batch.starts[:k])[0]  # the critic after
            with torch.no_grad():  # its step, burn-in included
                h_c = critic.encoder.unroll(obs, state_c, starts, layout=layout)[0].reshape(m, -1)
            q_pi = critic.heads(h_c, actor.mu(h_actor.reshape(m, -1)), members=1, detach_params=True)  # Q_1
            loss_pi = -q_pi.mean()
            self.actor_optimizer.zero_grad(set_to_none=False)
            loss_pi.backward()
            optimizer_step(self.actor_optimizer)
            polyak_update(self._target_params, self._online_params, c.tau)
            self._last_actor_loss = loss_pi.detach()
        return torch.stack([loss_q.detach(), q.detach().mean(), self._last_actor_loss])

    # -- acting ----------------------------------------------------------------------------------
    def _explore_from(self, h: torch.Tensor, obs: np.ndarray, action_masks: np.ndarray | None) -> np.ndarray:
        with torch.no_grad():
            return self._predicted(self.actor.mu(h).cpu().numpy(), False, None)

    def _predicted(self, actions: np.ndarray, deterministic: bool, masks: np.ndarray | None) -> np.ndarray:
        """mu, or (not deterministic) mu + Gaussian noise of ``exploration_noise`` times the half-range, clipped."""
        if deterministic:
            return actions
        actions = actions + self.np_rng.normal(0.0, self.config.exploration_noise, actions.shape) * self._half_range
        return np.clip(actions, self.action_space.low, self.action_space.high).astype(np.float32)
