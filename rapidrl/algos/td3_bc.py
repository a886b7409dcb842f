"""TD3+BC (Fujimoto and Gu 2021): TD3 whose actor also regresses onto the dataset's actions.

Read top to bottom: the config, the actor loss (a pure function). The networks, the critic update (TD3's, with target
policy smoothing) and acting are the deterministic actor-critic's (``rapidrl.train.offpolicy_actors``, shared with
DDPG and TD3); the dataset, the steps and online fine-tuning come from the offline core (``rapidrl.algos.offline``).

Every gradient step updates the twin critics (one ``CriticEnsemble``) towards r + discount * min_i Q'_i(s', a'~);
every ``policy_delay``-th step also updates the actor on -lambda Q_1(s, mu(s)) + mean (mu(s) - a)^2 with
lambda = alpha / mean |Q_1(s, mu(s))| (the Q term normalised, without gradient through lambda) and moves the
targets by Polyak averaging.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from rapidrl.algos.deterministic_actor_critic import (
    DeterministicActorConfig,
    DeterministicActorCritic,
    TargetSmoothingConfig,
)
from rapidrl.algos.offline import OfflineAlgorithm, OfflineConfig
from rapidrl.algos.registry import register
from rapidrl.train.config import check_positive


@dataclass
class TD3BCConfig(OfflineConfig, DeterministicActorConfig, TargetSmoothingConfig):
    """CORL's ``td3_bc.py`` (``configs/offline/td3_bc/*``): alpha 2.5, policy noise 0.2 clipped at 0.5, actor every
    2nd step, tau 0.005, Adam 3e-4, batch 256, 256x256 networks, states normalised; online exploration noise 0.1
    (CORL's expl_noise)."""

    alpha: float = 2.5
    """Weight of the Q term against the behaviour-cloning term (after dividing it by its mean |Q|)."""

    def validate(self) -> None:
        super().validate()
        self.validate_deterministic_actor()
        self.validate_target_smoothing()
        check_positive(self, "alpha", allow_zero=True)


def td3_bc_actor_loss(q_pi: torch.Tensor, predicted: torch.Tensor, actions: torch.Tensor, alpha: float
                      ) -> torch.Tensor:
    """-lambda mean Q(s, mu(s)) + mean (mu(s) - a)^2, lambda = alpha / mean |Q(s, mu(s))| held constant.

    q_pi [B] (the first critic's values of the actor's actions), predicted and actions [B, A] -> [].
    """
    lam = alpha / q_pi.abs().mean().detach()
    return -lam * q_pi.mean() + (predicted - actions).square().mean()


@register
class TD3BC(DeterministicActorCritic, OfflineAlgorithm):
    """TD3+BC: TD3 with a behaviour-cloning term, offline (Box actions).

    ``TD3BC(env, dataset=ID, **hyperparameters)``; see TD3BCConfig."""

    name = "td3_bc"
    config_class = TD3BCConfig

    def _actor_loss(self, obs: torch.Tensor, actions: torch.Tensor) -> torch.Tensor:
        """``td3_bc_actor_loss`` of the actor's actions mu(s) and the dataset's actions [B, A]."""
        with self._autocast():
            predicted = self.actor(obs)  # [B, A]
            q_pi = self.critic(obs, predicted, members=1, detach_params=True)[0]  # [B]
        return td3_bc_actor_loss(q_pi, predicted, actions, self.config.alpha)
