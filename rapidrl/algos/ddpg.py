"""DDPG (Lillicrap et al. 2016) as CleanRL's ``ddpg_continuous_action.py``: one critic, a deterministic actor, targets.

Read top to bottom: the config and what differs from TD3. The networks, the update and acting are the deterministic
actor-critic's (``rapidrl.train.offpolicy_actors.DeterministicActorCritic``, shared with TD3 and TD3+BC); collection,
replay and the update driver come from the shared off-policy core (``rapidrl.algos.offpolicy``).

Every gradient step updates the critic on r + discount * Q'(s', mu'(s')); every ``policy_delay``-th step also
updates the actor on -Q(s, mu(s)) and moves both targets by Polyak averaging; exploration adds Gaussian noise of
``exploration_noise`` times the action half-range. The differences from TD3: one critic, no target smoothing, no
minimum over critics. CleanRL's settings, with rapidrl's layer initialisation (orthogonal, as every rapidrl network;
CleanRL keeps PyTorch's default) and its critic loss 0.5 * MSE (CleanRL: MSE; Adam's step does not depend on the
loss's scale, up to its eps).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from rapidrl.algos.deterministic_actor_critic import DeterministicActorConfig, DeterministicActorCritic
from rapidrl.algos.offpolicy import OffPolicyAlgorithm, OffPolicyConfig
from rapidrl.algos.registry import register
from rapidrl.train.config import with_defaults


@dataclass
@with_defaults(learning_starts=25_000)
class DDPGConfig(OffPolicyConfig, DeterministicActorConfig):
    """CleanRL's ddpg_continuous_action.py defaults (its policy_frequency is ``policy_delay``; learning_starts 25,000
    is its MuJoCo setting; the presets say theirs)."""

    def validate(self) -> None:
        super().validate()
        self.validate_deterministic_actor()

    @classmethod
    def upgrade_legacy(cls, values: dict[str, Any]) -> dict[str, Any]:
        """Settings of older rapidrl versions: ``policy_frequency`` (CleanRL's name: ``policy_delay``)."""
        values = super().upgrade_legacy(values)
        if "policy_frequency" in values:
            values.setdefault("policy_delay", values.pop("policy_frequency"))
        return values


@register
class DDPG(DeterministicActorCritic, OffPolicyAlgorithm):
    """Deep Deterministic Policy Gradient for Box action spaces. ``DDPG(env, **hyperparameters)``; see DDPGConfig."""

    name = "ddpg"
    config_class = DDPGConfig

    def _n_critics(self) -> int:
        return 1

    def _target_actions(self, batch) -> torch.Tensor:
        """a' = mu'(s'): no target policy smoothing."""
        return self.actor_target(batch.next_obs)
