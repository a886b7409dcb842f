"""IQL, Implicit Q-Learning (Kostrikov, Nair and Levine 2022): in-sample value learning and advantage-weighted cloning.

Read top to bottom: the config, the losses (pure functions), the update, acting. The dataset, the steps and online
fine-tuning (``offline_steps``: IQL is the offline-to-online algorithm of CORL's ``finetune/iql.py``) come from the
offline core (``rapidrl.algos.offline``).

No action outside the dataset is ever evaluated. One update is one backward pass and two Adam steps on the sum of
- the value loss: the expectile ``expectile`` of min_i Q'_i(s, a) - V(s) (an upper expectile approximates a max over
  the dataset's actions),
- the critic loss towards r + discount V(s') (twin critics, one ``CriticEnsemble``),
- the actor loss: the dataset's actions cloned with weights exp(beta (min_i Q'_i(s, a) - V(s))), clipped at 100,
then a Polyak update of the target critics. The three losses touch disjoint parameters and read each other only
through values of before the step, so this equals CORL's three sequential steps. The actor is a Gaussian with a
state-independent std around center + scale tanh(MLP(s)) (clone loss -log pi(a|s)), or deterministic
(``deterministic_actor``, clone loss the squared error summed over action dimensions); its learning rate follows
CORL's cosine schedule.
"""

from __future__ import annotations

import copy
import math
from dataclasses import dataclass

import numpy as np
import torch
from torch import nn

from rapidrl.algos.offline import OfflineAlgorithm, OfflineConfig
from rapidrl.algos.offpolicy import CriticEnsembleConfig
from rapidrl.algos.offpolicy_losses import critic_loss, polyak_update
from rapidrl.algos.registry import register
from rapidrl.nn.deploy import frozen_copy
from rapidrl.nn.distributions import gaussian_log_prob
from rapidrl.nn.dtypes import full_precision
from rapidrl.nn.optim import adam, optimizer_step
from rapidrl.nn.policies import mlp
from rapidrl.nn.qnets import CriticEnsemble, DeterministicActor
from rapidrl.train.config import check_positive, require

LOG_STD_MIN, LOG_STD_MAX = -20.0, 2.0
"""The clamp of the actor's log std (CORL's iql.py)."""


@dataclass
class IQLConfig(OfflineConfig, CriticEnsembleConfig):
    """CORL's ``iql.py`` (``configs/offline/iql/*``): beta 3, expectile 0.7, tau 0.005, Adam 3e-4 for value, critics
    and actor (cosine-annealed), batch 256, 256x256 networks, advantage weights clipped at 100, states normalised."""

    learning_rate: float = 3e-4
    """Adam learning rate of value, critics and (at the start of its schedule) actor."""
    expectile: float = 0.7
    """Expectile of the value loss (CORL's iql_tau; 0.5 is the mean, towards 1 a max over the dataset's actions)."""
    beta: float = 3.0
    """Inverse temperature of the advantage weights (small: cloning; large: greedy in Q)."""
    max_weight: float = 100.0
    """Clip of the advantage weights exp(beta A) (CORL's EXP_ADV_MAX)."""
    deterministic_actor: bool = False
    """A deterministic actor cloned by squared error (CORL's iql_deterministic), instead of a Gaussian."""
    actor_lr_schedule: str = "cosine"
    """"cosine": the actor's learning rate lr (1 + cos(pi t / T)) / 2 at gradient step t, T the offline steps
    (``offline_steps``, else the end of the learn call): CORL's CosineAnnealingLR, periodic beyond T as PyTorch's;
    "constant"."""
    exploration_noise: float = 0.03
    """Online phase, deterministic actor: std of the Gaussian noise on its actions, as a fraction of the half-range,
    clipped at 0.5 (CORL's finetune expl_noise); a Gaussian actor samples instead."""

    def validate(self) -> None:
        super().validate()
        self.validate_critics()
        check_positive(self, "max_weight")
        check_positive(self, "beta", "exploration_noise", allow_zero=True)
        require(0.0 < self.expectile < 1.0, f"expectile must be in (0, 1), got {self.expectile}")
        require(self.actor_lr_schedule in ("cosine", "constant"),
                f"actor_lr_schedule must be 'cosine' or 'constant', got {self.actor_lr_schedule!r}")


def expectile_loss(diff: torch.Tensor, expectile: float) -> torch.Tensor:
    """mean |expectile - 1(diff < 0)| diff^2: diff = Q(s, a) - V(s) [B] -> []."""
    weight = torch.where(diff < 0, 1.0 - expectile, expectile)
    return (weight * diff.square()).mean()


def iql_q_target(rewards: torch.Tensor, discounts: torch.Tensor, next_v: torch.Tensor) -> torch.Tensor:
    """r + discount * V(s'): every tensor [B] (discount = gamma, 0 after a termination)."""
    return rewards + discounts * next_v


def advantage_weighted_loss(advantage: torch.Tensor, clone_loss: torch.Tensor, beta: float, max_weight: float
                            ) -> torch.Tensor:
    """mean min(exp(beta A), max_weight) * clone loss: advantage A (held constant) and clone_loss [B] -> []."""
    weights = torch.exp(beta * advantage.detach()).clamp(max=max_weight)
    return (weights * clone_loss).mean()


def cosine_lr(lr: float, step: int, horizon: int) -> float:
    """lr (1 + cos(pi step / horizon)) / 2 (PyTorch's CosineAnnealingLR with eta_min 0, periodic past the horizon)."""
    return lr * 0.5 * (1.0 + math.cos(math.pi * step / max(1, horizon)))


class IQLActor(nn.Module):
    """The actor: mean [B, A] = center + scale tanh(MLP(s)) (``DeterministicActor``), and for a Gaussian actor a
    state-independent log std [A] (initially 0, clamped to [-20, 2])."""

    def __init__(self, obs_dim: int, low: torch.Tensor, high: torch.Tensor, hidden, deterministic: bool):
        super().__init__()
        self.mean = DeterministicActor(obs_dim, low, high, hidden)
        self.deterministic = deterministic
        if not deterministic:
            self.log_std = nn.Parameter(torch.zeros(int(low.shape[0])))

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        return self.mean(obs)

    def clone_loss(self, obs: torch.Tensor, actions: torch.Tensor) -> torch.Tensor:
        """Per-sample clone loss [B]: -log pi(a|s), or sum_j (mu_j(s) - a_j)^2 for a deterministic actor."""
        mean = self.mean(obs)
        if self.deterministic:
            return (mean - actions).square().sum(-1)
        return -gaussian_log_prob(actions, mean, self.log_std.clamp(LOG_STD_MIN, LOG_STD_MAX))

    def std(self) -> torch.Tensor:
        return self.log_std.clamp(LOG_STD_MIN, LOG_STD_MAX).exp()


@register
class IQL(OfflineAlgorithm):
    """Implicit Q-Learning, offline and offline-to-online (Box actions).

    ``IQL(env, dataset=ID, **hyperparameters)``; see IQLConfig."""

    name = "iql"
    config_class = IQLConfig
    stat_names = ("value_loss", "critic_loss", "actor_loss", "q_values", "advantage")
    saved_state = ("actor", "critic", "critic_target", "value", "optimizer", "actor_optimizer")
    box_actions_only = True
    auto_keeps_fp32 = (
        "IQL's advantage weights exp(beta (Q - V)) amplify bf16's rounding of the values: on hopper-medium-replay at "
        "300k steps (|Q| ~50) 16% of the weights came out off by more than 2x in bf16 (2% with the value heads in "
        "float32, as explicit bf16 runs them), and float32 ended at 38.5 against bf16's 26.0 (docs/offline.md)")

    def _build_networks(self) -> None:
        space, c = self.action_space, self.config
        low, high = torch.as_tensor(space.low), torch.as_tensor(space.high)
        self.actor = IQLActor(self.obs_dim, low, high, c.hidden, c.deterministic_actor).to(self.device)
        # the value and critic outputs in float32 under bf16: the advantage weights exponentiate their difference
        self.critic = CriticEnsemble(c.n_critics, self.obs_dim, int(space.shape[0]), c.hidden,
                                     float32_output=True).to(self.device)
        self.critic_target = copy.deepcopy(self.critic).requires_grad_(False)
        self.value = mlp(self.obs_dim, c.hidden, 1, "relu", float32_output=True).to(self.device)
        self.optimizer = adam([*self.value.parameters(), *self.critic.parameters()], c.learning_rate)
        self.actor_optimizer = adam(self.actor.parameters(), c.learning_rate)
        self._critic_params = list(self.critic.parameters())
        self._target_params = list(self.critic_target.parameters())
        self._half_range = ((high - low) / 2).numpy()

    def _values(self, obs: torch.Tensor) -> torch.Tensor:
        return full_precision(self.value(obs)).squeeze(-1)  # [B]

    # -- update ----------------------------------------------------------------------------------------------------
    def _actor_lr(self) -> float:
        c = self.config
        if c.actor_lr_schedule == "constant":
            return c.learning_rate
        horizon = c.offline_steps if c.offline_steps is not None else sum(self._schedule or (0, 1))
        return cosine_lr(c.learning_rate, self.num_gradient_steps, horizon)

    def _update_step(self, batch) -> torch.Tensor:
        """One update; returns the statistics named by ``stat_names``."""
        c = self.config
        with torch.no_grad(), self._autocast():
            target_q = self.critic_target(batch.obs, batch.actions).min(0).values  # [B]
            next_v = self._values(batch.next_obs)  # [B]
        with self._autocast():
            v = self._values(batch.obs)  # [B]
            q = self.critic(batch.obs, batch.actions)  # [n, B]
            clone = self.actor.clone_loss(batch.obs, batch.actions)  # [B]
        advantage = target_q - v  # [B]
        loss_v = expectile_loss(advantage, c.expectile)
        loss_q = critic_loss(q, iql_q_target(batch.rewards, batch.discounts, next_v))
        loss_pi = advantage_weighted_loss(advantage, clone, c.beta, c.max_weight)
        self.optimizer.zero_grad(set_to_none=False)
        self.actor_optimizer.zero_grad(set_to_none=False)
        (loss_v + loss_q + loss_pi).backward()
        optimizer_step(self.optimizer)
        self.actor_optimizer.param_groups[0]["lr"] = self._actor_lr()
        optimizer_step(self.actor_optimizer)
        polyak_update(self._target_params, self._critic_params, c.tau)
        return torch.stack([loss_v.detach(), loss_q.detach(), loss_pi.detach(), q.detach().mean(),
                            advantage.detach().mean()])

    # -- acting ----------------------------------------------------------------------------------------------------
    def _act(self, x: torch.Tensor, deterministic: bool) -> np.ndarray:
        mean = self.actor(x)
        if deterministic:
            return mean.cpu().numpy()
        if self.actor.deterministic:  # CORL's finetune: clipped Gaussian noise on the deterministic action
            noise = np.clip(self.np_rng.normal(0.0, self.config.exploration_noise, mean.shape), -0.5, 0.5)
            actions = mean.cpu().numpy() + noise * self._half_range
        else:
            actions = (mean + self.actor.std() * torch.empty_like(mean).normal_(generator=self.torch_rng)).cpu().numpy()
        return np.clip(actions, self.action_space.low, self.action_space.high)

    def _actor_module(self) -> torch.nn.Module:
        return frozen_copy(self.actor.mean)
