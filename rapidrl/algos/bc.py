"""Behaviour cloning: supervised learning of the dataset's actions (the baseline of offline RL).

Read top to bottom: the config, the loss (a pure function), the update, acting. The dataset, the steps and online
fine-tuning come from the offline core (``rapidrl.algos.offline``).

Box actions: a deterministic actor a = center + scale tanh(MLP(s)) regressed onto the dataset's actions with the mean
squared error (CORL's ``any_percent_bc.py`` at frac 1.0). Discrete actions: a categorical policy (logits of an MLP)
trained by cross-entropy, acting greedily.
"""

from __future__ import annotations

from dataclasses import dataclass

import gymnasium as gym
import numpy as np
import torch

from rapidrl.algos.offline import OfflineAlgorithm, OfflineConfig
from rapidrl.algos.registry import register
from rapidrl.nn.deploy import ArgmaxQ, frozen_copy
from rapidrl.nn.distributions import categorical_log_probs
from rapidrl.nn.optim import adam, optimizer_step
from rapidrl.nn.qnets import DeterministicActor, QNetwork
from rapidrl.train.config import check_positive


@dataclass
class BCConfig(OfflineConfig):
    """CORL's ``any_percent_bc.py`` (``configs/offline/bc/*``): Adam 3e-4, batch 256, 256x256 ReLU actor, states
    normalised."""

    learning_rate: float = 3e-4
    """Adam learning rate of the actor."""
    exploration_noise: float = 0.1
    """Online phase: std of the Gaussian noise on the actor's actions (a fraction of the half-range; Box actions)."""

    def validate(self) -> None:
        super().validate()
        check_positive(self, "exploration_noise", allow_zero=True)


def bc_loss(predicted: torch.Tensor, actions: torch.Tensor) -> torch.Tensor:
    """Mean squared error between the actor's and the dataset's actions: predicted, actions [B, A] -> []."""
    return (predicted - actions).square().mean()


def bc_discrete_loss(logits: torch.Tensor, actions: torch.Tensor) -> torch.Tensor:
    """Cross-entropy of the dataset's actions under the categorical policy: logits [B, K], actions [B] int -> []."""
    return -categorical_log_probs(logits).gather(1, actions.long().unsqueeze(1)).mean()


@register
class BC(OfflineAlgorithm):
    """Behaviour cloning from a dataset (Box or Discrete actions).

    ``BC(env, dataset=ID, **hyperparameters)``; see BCConfig."""

    name = "bc"
    config_class = BCConfig
    stat_names = ("actor_loss",)
    saved_state = ("actor", "optimizer")

    def _build_networks(self) -> None:
        c = self.config
        if self.discrete:
            self.actor = QNetwork(self.obs_dim, int(self.action_space.n), c.hidden).to(self.device)  # logits
        else:
            low, high = torch.as_tensor(self.action_space.low), torch.as_tensor(self.action_space.high)
            self.actor = DeterministicActor(self.obs_dim, low, high, c.hidden).to(self.device)
            self._half_range = ((high - low) / 2).numpy()
        self.optimizer = adam(self.actor.parameters(), c.learning_rate)

    def _check_spaces(self) -> None:
        super()._check_spaces()
        if isinstance(self.action_space, gym.spaces.Box) and len(self.action_space.shape) != 1:
            raise TypeError(f"BC needs Discrete or 1-D Box actions, got {self.action_space}")

    # -- update ----------------------------------------------------------------------------------------------------
    def _update_step(self, batch) -> torch.Tensor:
        with self._autocast():
            out = self.actor(batch.obs)  # [B, A] actions or [B, K] logits
        loss = bc_discrete_loss(out, batch.actions) if self.discrete else bc_loss(out, batch.actions)
        self.optimizer.zero_grad(set_to_none=False)
        loss.backward()
        optimizer_step(self.optimizer)
        return loss.detach().reshape(1)

    # -- acting ----------------------------------------------------------------------------------------------------
    def _act(self, x: torch.Tensor, deterministic: bool) -> np.ndarray:
        out = self.actor(x)
        if self.discrete:
            if deterministic:
                return out.argmax(1).cpu().numpy()
            picked = torch.multinomial(categorical_log_probs(out).exp(), 1, generator=self.torch_rng)
            return picked.squeeze(1).cpu().numpy()
        actions = out.cpu().numpy()
        if deterministic:
            return actions
        actions += self.np_rng.normal(0.0, self.config.exploration_noise, actions.shape) * self._half_range
        return np.clip(actions, self.action_space.low, self.action_space.high)

    def _actor_module(self) -> torch.nn.Module:
        return ArgmaxQ(self.actor) if self.discrete else frozen_copy(self.actor)
