"""Algorithms: each is a loop, pure losses and a buffer."""

from rapidrl.algos.a2c import A2C, A2CConfig
from rapidrl.algos.dqn import DQN, DQNConfig
from rapidrl.algos.impala import IMPALA, IMPALAConfig
from rapidrl.algos.mappo import IPPO, MAPPO, IPPOConfig, MAPPOConfig
from rapidrl.algos.ppo import PPO, PPOConfig
from rapidrl.algos.sac import SAC, SACConfig
from rapidrl.algos.td3 import TD3, TD3Config

ALGORITHMS = {"ppo": PPO, "a2c": A2C, "impala": IMPALA, "dqn": DQN, "sac": SAC, "td3": TD3, "mappo": MAPPO,
              "ippo": IPPO}

__all__ = ["A2C", "ALGORITHMS", "DQN", "IMPALA", "IPPO", "MAPPO", "PPO", "SAC", "TD3", "A2CConfig", "DQNConfig",
           "IMPALAConfig", "IPPOConfig", "MAPPOConfig", "PPOConfig", "SACConfig", "TD3Config"]
