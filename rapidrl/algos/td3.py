"""TD3 (Fujimoto et al. 2018): twin critics (one batched ensemble), target policy smoothing, delayed actor.

The networks, the update and acting are the deterministic actor-critic's
(``rapidrl.train.offpolicy_actors.DeterministicActorCritic``, shared with DDPG and TD3+BC; its target and losses in
``rapidrl.train.offpolicy_losses``); collection, replay and the update driver come from the shared off-policy core
(``rapidrl.algos.offpolicy``).

Every gradient step updates the critics on r + discount * min_i Q'_i(s', clip(mu'(s') + clip(eps, -c, c))),
eps ~ N(0, sigma^2); every ``policy_delay``-th step also updates the actor on -Q_1(s, mu(s)) and moves all
targets by Polyak averaging. The two parts are separate update functions, so both have static graphs.
"""

from __future__ import annotations

from dataclasses import dataclass

from rapidrl.algos.offpolicy import OffPolicyAlgorithm, OffPolicyConfig, check_box_actions
from rapidrl.algos.registry import register
from rapidrl.train.offpolicy_actors import DeterministicActorConfig, DeterministicActorCritic, TargetSmoothingConfig


@dataclass
class TD3Config(OffPolicyConfig, DeterministicActorConfig, TargetSmoothingConfig):
    torch_threads: int | None = 0
    """torch.set_num_threads at construction; 0 (every core) since the 256x256 critics' matmuls gain from threads."""
    learning_rate: float = 1e-3
    """Adam learning rate of actor and critics."""

    def validate(self) -> None:
        super().validate()
        self.validate_deterministic_actor()
        self.validate_target_smoothing()


@register
class TD3(DeterministicActorCritic, OffPolicyAlgorithm):
    """Twin Delayed DDPG for Box action spaces. ``TD3(env, **hyperparameters)``; see TD3Config."""

    name = "td3"
    config_class = TD3Config

    def _check_spaces(self) -> None:
        super()._check_spaces()
        check_box_actions("TD3", self.action_space)
