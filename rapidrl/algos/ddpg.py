"""DDPG (Lillicrap et al. 2016) as CleanRL's ``ddpg_continuous_action.py``: one critic, a deterministic actor, targets.

Read top to bottom: the config, then one update, ``DDPG._update_step`` (the driver samples the minibatch and calls it:
``OffPolicyAlgorithm._train_step``): target actions a' = mu'(s') (no smoothing), then TD3's steps
(``rapidrl.algos.td3.td3_steps``) with the one critic: the critic step towards r + discount * Q'(s', a') and, every
``policy_delay``-th step, the actor step on -mean Q(s, mu(s)) and the Polyak update of both targets. One update reads
four files: this one, rapidrl/algos/td3.py (the steps), rapidrl/algos/offpolicy_losses.py (target, losses, Polyak
update) and rapidrl/nn/optim.py (the Adam step). The networks, acting and the "handwritten" backend are the family's
(rapidrl/algos/deterministic_actor_critic.py); collection, replay and the driver the off-policy core's.

Exploration adds Gaussian noise of ``exploration_noise`` times the action half-range. The differences from TD3: one
critic, no target smoothing (hence no minimum over critics). CleanRL's settings, with rapidrl's layer initialisation
(orthogonal, as every rapidrl network; CleanRL keeps PyTorch's default) and its critic loss 0.5 * MSE (CleanRL: MSE;
Adam's step does not depend on the loss's scale, up to its eps).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import torch

from rapidrl.algos.deterministic_actor_critic import DeterministicActorConfig, DeterministicActorCritic
from rapidrl.algos.offpolicy import OffPolicyAlgorithm, OffPolicyConfig
from rapidrl.algos.offpolicy_networks import NetworkConfig
from rapidrl.algos.registry import register
from rapidrl.algos.td3 import td3_steps
from rapidrl.train.config import with_defaults
from rapidrl.train.path_settings import HandwrittenBackend


@dataclass
@with_defaults(learning_starts=25_000)
class DDPGConfig(OffPolicyConfig, DeterministicActorConfig, NetworkConfig):
    """CleanRL's ddpg_continuous_action.py defaults (its policy_frequency is ``policy_delay``; learning_starts 25,000
    is its MuJoCo setting; the presets say theirs)."""

    def validate(self) -> None:
        super().validate()
        self.validate_deterministic_actor()
        self.validate_network()

    # CleanRL's name, used by older rapidrl versions
    renamed_settings: ClassVar[dict[str, str]] = {"policy_frequency": "policy_delay"}


@register
class DDPG(DeterministicActorCritic, OffPolicyAlgorithm):
    """Deep Deterministic Policy Gradient for Box action spaces. ``DDPG(env, **hyperparameters)``; see DDPGConfig."""

    name = "ddpg"
    config_class = DDPGConfig

    def _build_networks(self) -> None:
        self._build_actor_critic(n_critics=1)

    handwritten = HandwrittenBackend(
        by_hand="the critic ensemble's forward and backward in batched PyTorch (`rapidrl.nn.mlp_grad`); the actor "
                "MLP's backward in Numba (`rapidrl.nn.numba_mlp.MLPGrad`); the loss gradients in PyTorch "
                "(`rapidrl.algos.deterministic_actor_critic.compiled_steps`)")

    def _update_step(self, batch) -> torch.Tensor:
        """One DDPG update on a sampled minibatch (module docstring): target actions a' = mu'(s') [B, A], then
        ``td3_steps``. Returns [critic_loss, q_values, actor_loss] (actor_loss: the latest actor step's)."""
        with torch.no_grad(), self._autocast():
            next_actions = self.actor_target(batch.next_obs)  # [B, A]
        return td3_steps(self, batch, next_actions)
