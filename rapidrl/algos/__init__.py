"""Algorithms: each is one module with its config, its losses and its update on the ``rapidrl.train`` base.

Every algorithm registers itself (``rapidrl.algos.registry``); ``from rapidrl.algos import PPO, PPOConfig`` looks
the class up there by name, so adding an algorithm needs no edit here (``docs/extending.md``).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

__all__ = [
    "A2C",
    "ALGORITHMS",
    "BC",
    "C51",
    "CQL",
    "DDPG",
    "DQN",
    "IMPALA",
    "IPPO",
    "IQL",
    "IQN",
    "MAPPO",
    "PPO",
    "PQN",
    "QRDQN",
    "R2D2",
    "SAC",
    "TD3",
    "TD3BC",
    "TQC",
    "A2CConfig",
    "BCConfig",
    "C51Config",
    "CQLConfig",
    "CrossQ",
    "CrossQConfig",
    "DDPGConfig",
    "DQNConfig",
    "DiscreteCQL",
    "DiscreteCQLConfig",
    "IMPALAConfig",
    "IPPOConfig",
    "IQLConfig",
    "IQNConfig",
    "MAPPOConfig",
    "PPOConfig",
    "PQNConfig",
    "QRDQNConfig",
    "R2D2Config",
    "Rainbow",
    "RainbowConfig",
    "RecurrentSAC",
    "RecurrentSACConfig",
    "RecurrentTD3",
    "RecurrentTD3Config",
    "SACConfig",
    "SACDiscrete",
    "SACDiscreteConfig",
    "TD3BCConfig",
    "TD3Config",
    "TQCConfig",
]
"""Every algorithm shipped in this package and its config (``tests/test_extending.py`` checks it against the
registry)."""


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
    from rapidrl.algos.bc import BC, BCConfig
    from rapidrl.algos.c51 import C51, C51Config, Rainbow, RainbowConfig
    from rapidrl.algos.cql import CQL, CQLConfig, DiscreteCQL, DiscreteCQLConfig
    from rapidrl.algos.crossq import CrossQ, CrossQConfig
    from rapidrl.algos.ddpg import DDPG, DDPGConfig
    from rapidrl.algos.dqn import DQN, DQNConfig
    from rapidrl.algos.impala import IMPALA, IMPALAConfig
    from rapidrl.algos.iql import IQL, IQLConfig
    from rapidrl.algos.iqn import IQN, IQNConfig
    from rapidrl.algos.mappo import IPPO, MAPPO, IPPOConfig, MAPPOConfig
    from rapidrl.algos.ppo import PPO, PPOConfig
    from rapidrl.algos.pqn import PQN, PQNConfig
    from rapidrl.algos.qrdqn import QRDQN, QRDQNConfig
    from rapidrl.algos.r2d2 import R2D2, R2D2Config
    from rapidrl.algos.recurrent_sac import RecurrentSAC, RecurrentSACConfig
    from rapidrl.algos.recurrent_td3 import RecurrentTD3, RecurrentTD3Config
    from rapidrl.algos.sac import SAC, SACConfig
    from rapidrl.algos.sac_discrete import SACDiscrete, SACDiscreteConfig
    from rapidrl.algos.td3 import TD3, TD3Config
    from rapidrl.algos.td3_bc import TD3BC, TD3BCConfig
    from rapidrl.algos.tqc import TQC, TQCConfig
