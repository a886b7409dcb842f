"""TD3 (Fujimoto et al. 2018): twin critics (one batched ensemble), target policy smoothing, delayed actor.

The networks, the update and acting are the deterministic actor-critic's
(``rapidrl.train.offpolicy_actors.DeterministicActorCritic``, shared with DDPG and TD3+BC; its target and losses in
``rapidrl.algos.offpolicy_losses``); collection, replay and the update driver come from the shared off-policy core
(``rapidrl.algos.offpolicy``).

Every gradient step updates the critics on r + discount * min_i Q'_i(s', clip(mu'(s') + clip(eps, -c, c))),
eps ~ N(0, sigma^2); every ``policy_delay``-th step also updates the actor on -Q_1(s, mu(s)) and moves all
targets by Polyak averaging. The two parts are separate update functions, so both have static graphs.
"""

from __future__ import annotations

from dataclasses import dataclass

from rapidrl.algos.deterministic_actor_critic import (
    DeterministicActorConfig,
    DeterministicActorCritic,
    TargetSmoothingConfig,
)
from rapidrl.algos.offpolicy import OffPolicyAlgorithm, OffPolicyConfig
from rapidrl.algos.registry import register
from rapidrl.train.config import with_defaults


@dataclass
@with_defaults(learning_rate=1e-3)
class TD3Config(OffPolicyConfig, DeterministicActorConfig, TargetSmoothingConfig):
    def validate(self) -> None:
        super().validate()
        self.validate_deterministic_actor()
        self.validate_target_smoothing()


@register
class TD3(DeterministicActorCritic, OffPolicyAlgorithm):
    """Twin Delayed DDPG for Box action spaces. ``TD3(env, **hyperparameters)``; see TD3Config."""

    name = "td3"
    config_class = TD3Config
