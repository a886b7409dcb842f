"""TD3+BC (Fujimoto and Gu 2021): TD3 whose actor also regresses onto the dataset's actions.

Read top to bottom: the config, the actor loss (a pure function, ``td3_bc_actor_loss``), then one update,
``TD3BC._update_step`` (the offline core samples the normalised minibatch and calls it):

1. target actions a' = clip(mu'(s') + clip(eps, -c, c)), eps ~ N(0, sigma^2) (TD3's target policy smoothing);
2. TD3's critic step (``rapidrl.algos.td3.critic_step``) towards r + discount * min_i Q'_i(s', a') on the twin
   critics (one ``CriticEnsemble``);
3. every ``policy_delay``-th step, the actor step on -lambda Q_1(s, mu(s)) + mean (mu(s) - a)^2 with
   lambda = q_weight / mean |Q_1(s, mu(s))| (the Q term normalised, without gradient through lambda) and the Polyak
   update of every target (``rapidrl.algos.td3.actor_step``).

One update reads four files: this one, rapidrl/algos/td3.py (the critic and actor steps),
rapidrl/algos/offpolicy_losses.py (target, losses, Polyak update) and rapidrl/nn/optim.py (the Adam step). The "torch"
gradient backend only: the cloning term has no hand-written gradient. The networks and acting are the family's
(rapidrl/algos/deterministic_actor_critic.py); the dataset, the steps and online fine-tuning the offline core's
(rapidrl/algos/offline.py).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import torch

from rapidrl.algos.deterministic_actor_critic import (
    DeterministicActorConfig,
    DeterministicActorCritic,
    TargetSmoothingConfig,
)
from rapidrl.algos.offline import OfflineAlgorithm, OfflineConfig
from rapidrl.algos.offpolicy_losses import smoothed_target_actions
from rapidrl.algos.registry import register
from rapidrl.algos.td3 import actor_step, critic_step
from rapidrl.train.config import check_positive


@dataclass
class TD3BCConfig(OfflineConfig, DeterministicActorConfig, TargetSmoothingConfig):
    """CORL's ``td3_bc.py`` (``configs/offline/td3_bc/*``): alpha (here ``q_weight``) 2.5, policy noise 0.2 clipped
    at 0.5, actor every 2nd step, tau 0.005, Adam 3e-4, batch 256, 256x256 networks, states normalised; online
    exploration noise 0.1 (CORL's expl_noise)."""

    q_weight: float = 2.5
    """Weight of the Q term against the behaviour-cloning term (after dividing it by its mean |Q|): the paper's and
    CORL's alpha (not SAC's temperature)."""

    def validate(self) -> None:
        super().validate()
        self.validate_deterministic_actor()
        self.validate_target_smoothing()
        check_positive(self, "q_weight", allow_zero=True)

    # the name of older rapidrl versions (the paper's and CORL's)
    renamed_settings: ClassVar[dict[str, str]] = {"alpha": "q_weight"}


def td3_bc_actor_loss(q_pi: torch.Tensor, predicted: torch.Tensor, actions: torch.Tensor, q_weight: float
                      ) -> torch.Tensor:
    """-lambda mean Q(s, mu(s)) + mean (mu(s) - a)^2, lambda = q_weight / mean |Q(s, mu(s))| held constant.

    q_pi [B] (the first critic's values of the actor's actions), predicted and actions [B, A] -> [].
    """
    lam = q_weight / q_pi.abs().mean().detach()
    return -lam * q_pi.mean() + (predicted - actions).square().mean()


@register
class TD3BC(DeterministicActorCritic, OfflineAlgorithm):
    """TD3+BC: TD3 with a behaviour-cloning term, offline (Box actions).

    ``TD3BC(env, dataset=ID, **hyperparameters)``; see TD3BCConfig."""

    name = "td3_bc"
    config_class = TD3BCConfig

    def _build_networks(self) -> None:
        self._build_actor_critic(n_critics=self.config.n_critics)

    def _update_step(self, batch) -> torch.Tensor:
        """One TD3+BC update on a sampled, normalised minibatch (module docstring). Returns [critic_loss, q_values,
        actor_loss] (actor_loss: the latest actor step's)."""
        c, actor = self.config, self.actor
        with torch.no_grad(), self._autocast():  # bf16 autocast under precision="bf16" (networks return float32)
            noise = torch.empty_like(batch.actions).normal_(generator=self.torch_rng)  # eps / sigma ~ N(0, 1) [B, A]
            next_actions = smoothed_target_actions(self.actor_target(batch.next_obs), noise, actor.scale,
                                                   actor.center, c.target_policy_noise, c.target_noise_clip)
        loss_q, q = critic_step(self.critic, self.critic_target, self.critic_optimizer, batch, next_actions,
                                self._autocast)
        if (self.num_gradient_steps + 1) % c.policy_delay == 0:  # num_gradient_steps: the steps before this one
            with self._autocast():
                predicted = actor(batch.obs)  # mu(s) [B, A]
                q_pi = self.critic(batch.obs, predicted, members=1, detach_params=True)[0]  # Q_1(s, mu(s)) [B]
            loss_pi = td3_bc_actor_loss(q_pi, predicted, batch.actions, c.q_weight)
            self._last_actor_loss = actor_step(self, loss_pi)
        return torch.stack([loss_q, q.mean(), self._last_actor_loss])
