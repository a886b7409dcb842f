"""CQL, Conservative Q-Learning (Kumar et al. 2020): SAC whose critics are pushed down on out-of-dataset actions;
and its discrete form on a DQN Q network.

Read top to bottom: the configs, the losses (pure functions), the updates, acting. The maths of one CQL update
(``CQL._update_step``, written out) reads three files: this one; ``rapidrl.algos.offpolicy_losses`` (``td3_target`` or
``soft_target``, ``soft_actor_loss``, ``temperature_loss``, ``polyak_update``); ``rapidrl.nn.qnets``
(``squashed_gaussian``, the actor's sampling). The networks' and temperature's construction and acting are the squashed
Gaussian actor-critic's (``rapidrl.algos.soft_actor_critic``). One discrete CQL update (``DiscreteCQL._update_step``,
then ``DiscreteCQL._after_update``'s target update) reads this file and ``rapidrl.algos.offpolicy_losses``
(``dqn_loss``, ``polyak_update``). The dataset, the steps and online fine-tuning come from the offline core
(``rapidrl.algos.offline``).

Continuous CQL (CORL's ``cql.py``, CQL(H) with importance sampling, a fixed ``conservative_weight``): the SAC actor and
temperature losses, and per critic the TD loss towards r + discount min_i Q'_i(s', a' ~ pi(s')) plus conservative_weight
times (logsumexp over M = 3 ``cql_n_actions`` actions of Q(s, a_m) - log density(a_m)) - Q(s, a_data)), the actions
uniform in the bounds, from pi(s) and from pi(s'), each less its log-density (importance sampling). One update is one
backward pass and two Adam steps (actor and temperature at ``actor_learning_rate``, critics at ``learning_rate``) on the
sum of the three losses, which touch disjoint parameters, then a Polyak update: equal to CORL's sequential steps, since
each loss reads the others' parameters as of before the step. The policy's proposals are ``cql_n_actions`` samples of
the distribution the actor computes once per state (as d3rlpy; CORL runs the actor on each state repeated
``cql_n_actions`` times: the same distribution, ten times the actor's forward passes).

Discrete CQL (as d3rlpy's DiscreteCQL): Double DQN's Huber TD loss plus conservative_weight * (logsumexp_a Q(s, a)
- Q(s, a_data)), a hard target update every ``target_update_gradient_steps`` gradient steps.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import ClassVar

import numpy as np
import torch

from rapidrl.algos.offline import OfflineAlgorithm, OfflineConfig
from rapidrl.algos.offpolicy import CriticEnsembleConfig
from rapidrl.algos.offpolicy_losses import (
    dqn_loss,
    polyak_update,
    soft_actor_loss,
    soft_target,
    td3_target,
    temperature_loss,
)
from rapidrl.algos.registry import register
from rapidrl.algos.soft_actor_critic import EntropyConfig, SquashedGaussianActorCritic
from rapidrl.nn.deploy import ArgmaxQ
from rapidrl.nn.dtypes import full_precision
from rapidrl.nn.optim import adam, optimizer_step
from rapidrl.nn.qnets import QNetwork, squashed_gaussian
from rapidrl.train.config import GradientClipConfig, check_positive, check_unit_interval, with_defaults
from rapidrl.train.spaces import check_discrete_actions


@dataclass
@with_defaults(hidden=(256, 256, 256))  # CORL: q_n_hidden_layers 3, the actor three layers too
class CQLConfig(OfflineConfig, EntropyConfig, CriticEnsembleConfig):
    """CORL's ``cql.py`` (``configs/offline/cql/*`` for the D4RL locomotion tasks): critics lr 3e-4, actor and
    temperature 3e-5, conservative weight 10, 10 sampled actions, importance sampling, no Lagrange tuning, no
    entropy in the target, tau 0.005, batch 256, three hidden layers of 256, states normalised."""

    learning_rate: float = 3e-4
    """Adam learning rate of the critics (CORL's qf_lr)."""
    actor_learning_rate: float = 3e-5
    """Adam learning rate of the actor and the temperature (CORL's policy_lr)."""
    conservative_weight: float = 10.0
    """Weight of the conservative penalty (the paper's alpha, CORL's cql_alpha; not the entropy temperature
    ``ent_coef``)."""
    cql_n_actions: int = 10
    """Actions sampled per state from each of the three proposals (uniform, pi(s), pi(s'))."""
    cql_temperature: float = 1.0
    """Temperature of the logsumexp (CORL's cql_temp)."""
    backup_entropy: bool = False
    """Subtract alpha log pi(a'|s') in the TD target (SAC's soft target; CORL: False)."""

    def validate(self) -> None:
        super().validate()
        self.validate_entropy()
        self.validate_critics()
        check_positive(self, "cql_n_actions", "cql_temperature", "actor_learning_rate")
        check_positive(self, "conservative_weight", allow_zero=True)

    # the name of older rapidrl versions (CORL's)
    renamed_settings: ClassVar[dict[str, str]] = {"cql_alpha": "conservative_weight"}


def conservative_penalty(q_proposals: torch.Tensor, log_density: torch.Tensor, q_data: torch.Tensor,
                         temperature: float) -> torch.Tensor:
    """CQL(H)'s penalty per critic with importance sampling: mean over the batch of
    temperature * logsumexp_m((Q(s, a_m) - log density(a_m)) / temperature) - Q(s, a_data).

    q_proposals [n, B, M], log_density [B, M] (of each proposal under what drew it), q_data [n, B] -> [n].
    """
    ood = torch.logsumexp((q_proposals - log_density) / temperature, dim=-1) * temperature  # [n, B]
    return (ood - q_data).mean(-1)


def cql_critic_loss(q_data: torch.Tensor, target: torch.Tensor, penalty: torch.Tensor, conservative_weight: float
                    ) -> torch.Tensor:
    """sum over critics of the mean squared TD error plus conservative_weight times the penalty (CORL's qf_loss):
    q_data [n, B], target [B], penalty [n] -> []."""
    return (q_data - target).square().mean(-1).sum() + conservative_weight * penalty.sum()


@register
class CQL(SquashedGaussianActorCritic, OfflineAlgorithm):
    """Conservative Q-Learning, offline (Box actions; DiscreteCQL for Discrete ones).

    ``CQL(env, dataset=ID, **hyperparameters)``; see CQLConfig."""

    name = "cql"
    config_class = CQLConfig
    stat_names = ("critic_loss", "penalty", "actor_loss", "ent_coef", "q_values", "entropy")
    saved_state = ("actor", "critic", "critic_target", "log_alpha", "actor_optimizer", "critic_optimizer")

    def _build_networks(self) -> None:
        c = self.config
        self._build_actor_and_critics()
        actor_params = [*self.actor.parameters(), self.log_alpha] if self.tune_alpha else list(self.actor.parameters())
        self.actor_optimizer = adam(actor_params, c.actor_learning_rate)
        self.critic_optimizer = adam(self.critic.parameters(), c.learning_rate)
        low, high = torch.as_tensor(self.action_space.low), torch.as_tensor(self.action_space.high)
        self._uniform_log_density = -float(torch.log(high - low).sum())  # of a uniform action in the bounds
        self._low, self._high = low.to(self.device), high.to(self.device)

    # -- update ----------------------------------------------------------------------------------------------------
    def _update_step(self, batch) -> torch.Tensor:
        """One update; returns the statistics named by ``stat_names``."""
        c = self.config
        b, m = batch.obs.shape[0], c.cql_n_actions
        alpha = self.log_alpha.detach().exp()  # [1]
        actor = self.actor
        obs_m = batch.obs.repeat_interleave(m, 0)  # [B M, O]: each state m times
        with self._autocast():
            head = full_precision(actor.head(actor.trunk(batch.obs)))  # [B, 2A]: pi(.|s)
            noise = torch.randn(b, head.shape[1] // 2, device=head.device, generator=self.torch_rng)
            actions_pi, log_prob, _ = squashed_gaussian(head, noise, actor.scale, actor.center, actor.log_std_min,
                                                        actor.log_std_max)  # [B, A], [B]
            q_pi = self.critic(batch.obs, actions_pi, detach_params=True)  # [n, B]: gradients reach the actor only
            with torch.no_grad():  # the target's next actions and the proposals: m samples per distribution
                head_next = full_precision(actor.head(actor.trunk(batch.next_obs)))  # [B, 2A]: pi(.|s')
                heads = torch.cat([head_next, head.detach().repeat_interleave(m, 0),
                                   head_next.repeat_interleave(m, 0)])  # [B + 2 B M, 2A]
                sampled, sampled_log_prob, _ = squashed_gaussian(
                    heads, torch.randn(heads.shape[0], noise.shape[1], device=head.device, generator=self.torch_rng),
                    actor.scale, actor.center, actor.log_std_min, actor.log_std_max)
                next_actions, next_log_prob = sampled[:b], sampled_log_prob[:b]
                next_q = self.critic_target(batch.next_obs, next_actions)  # [n, B]
                if c.backup_entropy:
                    target = soft_target(batch.rewards, batch.discounts, next_q, next_log_prob, alpha)  # [B]
                else:
                    target = td3_target(batch.rewards, batch.discounts, next_q)
            uniform = torch.rand(b * m, batch.actions.shape[1], device=self.device, generator=self.torch_rng)
            uniform = uniform * (self._high - self._low) + self._low  # [B M, A]
            proposals = torch.cat([uniform, sampled[b:]])  # [3 B M, A]: uniform, pi(s), pi(s') (all at s)
            q_all = self.critic(torch.cat([batch.obs, obs_m.repeat(3, 1)]), torch.cat([batch.actions, proposals]))
        q_data = q_all[:, :b]  # [n, B]
        q_prop = q_all[:, b:].reshape(c.n_critics, 3, b, m).permute(0, 2, 1, 3).reshape(c.n_critics, b, 3 * m)
        log_density = torch.cat([torch.full((b, m), self._uniform_log_density, device=self.device),
                                 sampled_log_prob[b:].reshape(2, b, m).permute(1, 0, 2).reshape(b, 2 * m)], 1)
        penalty = conservative_penalty(q_prop, log_density, q_data, c.cql_temperature)  # [n]
        loss_q = cql_critic_loss(q_data, target, penalty, c.conservative_weight)
        loss_pi = soft_actor_loss(q_pi, log_prob, alpha)
        loss = loss_q + loss_pi
        if self.tune_alpha:
            loss = loss + temperature_loss(self.log_alpha, log_prob, self.target_entropy)
        self.actor_optimizer.zero_grad(set_to_none=False)
        self.critic_optimizer.zero_grad(set_to_none=False)
        loss.backward()
        optimizer_step(self.actor_optimizer)
        optimizer_step(self.critic_optimizer)
        polyak_update(self._target_params, self._critic_params, c.tau)
        return torch.stack([loss_q.detach(), penalty.detach().mean(), loss_pi.detach(), alpha[0],
                            q_data.detach().mean(), -log_prob.detach().mean()])


# -- discrete ----------------------------------------------------------------------------------------------------------
@dataclass
@with_defaults(learning_rate=6.25e-5, batch_size=32, tau=1.0)
class DiscreteCQLConfig(OfflineConfig, GradientClipConfig):
    """d3rlpy's DiscreteCQLConfig (Double DQN, Huber TD loss, alpha 1, hard target updates, no gradient clip; its
    Atari settings: lr 6.25e-5, batch 32, target update every 8,000 steps); the presets set their task's values."""

    target_update_gradient_steps: int = 8000
    """Gradient steps between two target-network updates (each moves the target by ``tau``: 1, a copy; DQN's
    ``target_update_interval`` counts env steps)."""
    conservative_weight: float = 1.0
    """Weight of the conservative penalty (the paper's alpha, d3rlpy's alpha)."""
    double_q: bool = True
    """Double DQN targets: the online network picks the next action, the target network values it."""
    exploration_final_eps: float = 0.01
    """Online phase: epsilon of epsilon-greedy acting, constant (DQN's and PQN's epsilon after their decay: the
    offline-trained network starts where their schedule ends)."""

    def validate(self) -> None:
        super().validate()
        check_positive(self, "target_update_gradient_steps")
        check_positive(self, "conservative_weight", "max_grad_norm", allow_zero=True)
        check_unit_interval(self, "exploration_final_eps")

    # names of older rapidrl versions (target_update_interval counted gradient steps here, env steps in DQN)
    renamed_settings: ClassVar[dict[str, str]] = {"target_update_interval": "target_update_gradient_steps",
                                                  "cql_alpha": "conservative_weight",
                                                  "exploration_eps": "exploration_final_eps"}


def discrete_conservative_penalty(q_all: torch.Tensor, actions: torch.Tensor) -> torch.Tensor:
    """mean_b logsumexp_a Q(s_b, a) - Q(s_b, a_b): q_all [B, K], actions [B] int -> []."""
    q_data = q_all.gather(1, actions.long().unsqueeze(1)).squeeze(1)
    return (torch.logsumexp(q_all, dim=1) - q_data).mean()


@register
class DiscreteCQL(OfflineAlgorithm):
    """Conservative Q-Learning on a Double DQN, offline (Discrete actions).

    ``DiscreteCQL(env, dataset=ID, **hyperparameters)``; see DiscreteCQLConfig."""

    name = "discrete_cql"
    config_class = DiscreteCQLConfig
    stat_names = ("loss", "td_loss", "penalty", "q_values")
    saved_state = ("q_net", "q_target", "optimizer")

    def _check_spaces(self) -> None:
        super()._check_spaces()
        check_discrete_actions("DiscreteCQL", self.action_space, "CQL takes Box actions")

    def _build_networks(self) -> None:
        c = self.config
        self.q_net = QNetwork(self.obs_dim, int(self.action_space.n), c.hidden).to(self.device)
        self.q_target = copy.deepcopy(self.q_net).requires_grad_(False)
        self.optimizer = adam(self.q_net.parameters(), c.learning_rate)
        self._params = list(self.q_net.parameters())
        self._target_params = list(self.q_target.parameters())

    # -- update ----------------------------------------------------------------------------------------------------
    def _update_step(self, batch) -> torch.Tensor:
        c = self.config
        with self._autocast():
            q_all = self.q_net(batch.obs)  # [B, K]
        with torch.no_grad(), self._autocast():
            next_target = self.q_target(batch.next_obs)  # [B, K]
            if c.double_q:
                pick = self.q_net(batch.next_obs).argmax(1, keepdim=True)
                next_q = next_target.gather(1, pick).squeeze(1)
            else:
                next_q = next_target.max(1).values
        q = q_all.gather(1, batch.actions.long().unsqueeze(1)).squeeze(1)  # [B]
        td_loss, _ = dqn_loss(q, next_q, batch.rewards, batch.discounts)
        penalty = discrete_conservative_penalty(q_all, batch.actions)
        loss = td_loss + c.conservative_weight * penalty
        self.optimizer.zero_grad(set_to_none=False)
        loss.backward()
        optimizer_step(self.optimizer, c.max_grad_norm)
        return torch.stack([loss.detach(), td_loss.detach(), penalty.detach(), q.detach().mean()])

    def _after_update(self, batch, out: torch.Tensor) -> torch.Tensor:
        # num_gradient_steps counts the steps before this one
        if (self.num_gradient_steps + 1) % self.config.target_update_gradient_steps == 0:
            polyak_update(self._target_params, self._params, self.config.tau)
        return out

    # -- acting ----------------------------------------------------------------------------------------------------
    def _act(self, x: torch.Tensor, deterministic: bool) -> np.ndarray:
        actions = self.q_net(x).argmax(1).cpu().numpy()
        if not deterministic:
            explore = self.np_rng.random(len(actions)) < self.config.exploration_final_eps
            actions[explore] = self.np_rng.integers(self.action_space.n, size=int(explore.sum()))
        return actions

    def _actor_module(self) -> torch.nn.Module:
        return ArgmaxQ(self.q_net)
