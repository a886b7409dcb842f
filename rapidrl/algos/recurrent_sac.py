"""Recurrent SAC: SAC (Haarnoja et al. 2018) whose actor and critics have memory, trained on sequences from replay
with R2D2's stored states and burn-in, for partially observed continuous control (pomdp-baselines' recurrent SAC,
Ni et al. 2022: separate recurrent encoders for the actor and the critics).

Read top to bottom: the config, one update. The networks (``rapidrl.nn.recurrent_offpolicy``): the actor is a
``RecurrentEncoder`` (MLP of ``hidden`` -> LSTM/GRU of ``recurrent_size``) with a squashed Gaussian head; the critics
share one encoder of their own, whose features h_t feed ``n_critics`` MLP heads Q_i([h_t, a]) (one batched
``CriticEnsemble``); the target critic is a Polyak copy. Collection, sequence replay, acting with a state and
checkpoints are the recurrent off-policy core's (``rapidrl.algos.recurrent_offpolicy``); the losses are SAC's pure
functions (``rapidrl.algos.offpolicy_losses``).

One update, on B sequences of L = ``sequence_length`` steps, every step after the burn-in a SAC sample:
1. burn-in: the actor's, the critic's and the target critic's encoders run over the first ``burn_in`` steps from the
   stored states without gradients;
2. each unrolls over the remaining T steps (resets where episodes start) in one call of the fused layer
   (``RecurrentEncoder.unroll``, with the bootstrap step after each episode segment);
3. the bootstrap: a' ~ pi(next_obs_t) and Q'(next_obs_t, a'), each one cell step after the state after step t (so a
   truncation bootstraps from the true final observation), target r + discount (min_i Q'_i - alpha log pi(a'));
4. the losses over the T * B samples: the critics' squared TD errors; the actor's alpha log pi(a|h) - min_i Q_i(h, a),
   a ~ pi, through the critic heads held constant on the critic's features detached (so the actor loss moves the
   actor only); the temperature's (``ent_coef="auto"``);
5. one backward pass and one Adam step for all of them, then the Polyak update of the target critic.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import ClassVar

import numpy as np
import torch

from rapidrl.algos.offpolicy import CriticEnsembleConfig, OffPolicyAlgorithm, OffPolicyConfig
from rapidrl.algos.offpolicy_losses import critic_loss, soft_actor_loss, soft_target, temperature_loss
from rapidrl.algos.recurrent_offpolicy import RecurrentActorCritic, RecurrentActorCriticConfig, burn_in
from rapidrl.algos.registry import register
from rapidrl.algos.soft_actor_critic import EntropyConfig, initial_log_alpha, joint_step, soft_stats
from rapidrl.nn.optim import adam
from rapidrl.nn.recurrent import segment_layout
from rapidrl.nn.recurrent_offpolicy import RecurrentCritic, RecurrentSquashedGaussianActor
from rapidrl.train.config import with_defaults


@dataclass
@with_defaults(learning_rate=3e-4, buffer_size=100_000, learning_starts=1_000, batch_size=32, hidden=(64,),
               recurrent_size=64, sequence_length=32, burn_in=8)
class RecurrentSACConfig(OffPolicyConfig, EntropyConfig, CriticEnsembleConfig, RecurrentActorCriticConfig):
    """SAC's settings (``hidden``: the MLP before each recurrent layer) plus the memory's and the sequences'."""
    hidden_may_be_empty: ClassVar[bool] = True  # hidden=(): the observation straight into the recurrent layer

    def validate(self) -> None:
        super().validate()
        self.validate_entropy()
        self.validate_critics()
        self.validate_recurrent_actor_critic("recurrent SAC")


@register
class RecurrentSAC(RecurrentActorCritic, OffPolicyAlgorithm):
    """SAC with memory for Box action spaces. ``RecurrentSAC(env, **hyperparameters)``; see RecurrentSACConfig."""

    name = "recurrent_sac"
    config_class = RecurrentSACConfig
    stat_names = ("critic_loss", "actor_loss", "ent_coef_loss", "ent_coef", "q_values", "entropy")
    saved_state = ("actor", "critic", "critic_target", "log_alpha", "optimizer")

    def _build_networks(self) -> None:
        c, space = self.config, self.action_space
        low, high = torch.as_tensor(space.low), torch.as_tensor(space.high)
        act_dim = int(space.shape[0])
        self.actor = RecurrentSquashedGaussianActor(self.obs_dim, low, high, c.hidden, cell=c.cell,
                                                    size=c.recurrent_size).to(self.device)
        self.critic = RecurrentCritic(self.obs_dim, act_dim, c.hidden, c.n_critics, cell=c.cell, size=c.recurrent_size,
                                      head_hidden=c.head_hidden).to(self.device)
        self.critic_target = copy.deepcopy(self.critic).requires_grad_(False)
        self._critic_params, self._target_params = list(self.critic.parameters()), list(self.critic_target.parameters())
        self.log_alpha, self.tune_alpha, self.target_entropy = initial_log_alpha(c, act_dim, self.device)
        params = [*self.actor.parameters(), *self.critic.parameters()]
        self.optimizer = adam([*params, self.log_alpha] if self.tune_alpha else params, c.learning_rate)

    # -- update ----------------------------------------------------------------------------------
    def _update_step(self, batch) -> torch.Tensor:
        """One update on B sequences (module docstring); returns ``stat_names``' statistics."""
        c, actor, critic, target = self.config, self.actor, self.critic, self.critic_target
        k, sa = c.burn_in, self._state_sizes()[0]
        state_a, state_c, state_t = burn_in([actor.encoder, critic.encoder, target.encoder], batch.obs[:k],
                                            [batch.state[:, :sa], batch.state[:, sa:], batch.state[:, sa:]],
                                            batch.starts[:k])
        obs, next_obs, starts = batch.obs[k:], batch.next_obs[k:], batch.starts[k:]
        steps, b = obs.shape[0], obs.shape[1]
        m = steps * b
        alpha = self.log_alpha.detach().exp()
        layout = segment_layout(starts, with_next=True)  # one for the three networks
        h_actor, h_actor_next = actor.encoder.unroll(obs, state_a, starts, next_obs, layout)  # [T, B, size] each
        h_critic, _ = critic.encoder.unroll(obs, state_c, starts, layout=layout)
        with torch.no_grad():
            _, h_target_next = target.encoder.unroll(obs, state_t, starts, next_obs, layout)
            next_actions, next_log_prob = actor.sample(h_actor_next.detach().reshape(m, -1), generator=self.torch_rng)
            next_q = target.heads(h_target_next.reshape(m, -1), next_actions)
            discounts = c.gamma * (~batch.terminated[k:]).float().reshape(m)
            y = soft_target(batch.rewards[k:].reshape(m), discounts, next_q, next_log_prob, alpha)  # [T * B]
        h_c = h_critic.reshape(m, -1)
        q = critic.heads(h_c, batch.actions[k:].reshape(m, -1))  # [n, T * B]
        actions_pi, log_prob = actor.sample(h_actor.reshape(m, -1), generator=self.torch_rng)
        q_pi = critic.heads(h_c.detach(), actions_pi, detach_params=True)
        loss_q = critic_loss(q, y)
        loss_pi = soft_actor_loss(q_pi, log_prob, alpha)
        loss_alpha = temperature_loss(self.log_alpha, log_prob, self.target_entropy) if self.tune_alpha else None
        joint_step(self.optimizer, [loss_q, loss_pi, loss_alpha], self._target_params, self._critic_params, c.tau)
        return soft_stats(loss_q, loss_pi, loss_alpha, alpha, q, log_prob)

    # -- acting ----------------------------------------------------------------------------------
    def _explore_from(self, h: torch.Tensor, obs: np.ndarray, action_masks: np.ndarray | None) -> np.ndarray:
        with torch.no_grad():
            return self.actor.sample(h, generator=self.torch_rng)[0].cpu().numpy()
