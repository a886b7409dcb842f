"""Algorithms: each is one module with its config, its losses and its update on the ``rapidrl.train`` base.

Every algorithm registers itself (``rapidrl.algos.registry``); ``from rapidrl.algos import PPO, PPOConfig`` looks
the class up there by name, so adding an algorithm needs no edit here (``docs/extending.md``).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

__all__ = ["A2C", "ALGORITHMS", "DQN", "IMPALA", "IPPO", "MAPPO", "PPO", "PQN", "SAC", "TD3", "A2CConfig", "DQNConfig",
           "IMPALAConfig", "IPPOConfig", "MAPPOConfig", "PPOConfig", "PQNConfig", "SACConfig",
           "TD3Config"]


def __getattr__(name: str):
    registry = importlib.import_module("rapidrl.algos.registry")
    if name == "ALGORITHMS":  # the registry's {name: class}, for code written before it existed
        return registry.algorithms()
    found = registry.by_class_name(name)
    if found is None:
        raise AttributeError(f"module 'rapidrl.algos' has no attribute {name!r}")
    return found


def __dir__():
    return sorted(__all__)


if TYPE_CHECKING:  # pragma: no cover
    from rapidrl.algos.a2c import A2C, A2CConfig
    from rapidrl.algos.dqn import DQN, DQNConfig
    from rapidrl.algos.impala import IMPALA, IMPALAConfig
    from rapidrl.algos.mappo import IPPO, MAPPO, IPPOConfig, MAPPOConfig
    from rapidrl.algos.ppo import PPO, PPOConfig
    from rapidrl.algos.pqn import PQN, PQNConfig
    from rapidrl.algos.sac import SAC, SACConfig
    from rapidrl.algos.td3 import TD3, TD3Config
