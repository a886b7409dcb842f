"""Algorithms: each is a loop, pure losses and a buffer."""

from rapidrl.algos.a2c import A2C, A2CConfig
from rapidrl.algos.dqn import DQN, DQNConfig
from rapidrl.algos.impala import IMPALA, IMPALAConfig
from rapidrl.algos.ppo import PPO, PPOConfig
from rapidrl.algos.sac import SAC, SACConfig
from rapidrl.algos.td3 import TD3, TD3Config

ALGORITHMS = {"ppo": PPO, "a2c": A2C, "impala": IMPALA, "dqn": DQN, "sac": SAC, "td3": TD3}

__all__ = ["A2C", "ALGORITHMS", "DQN", "IMPALA", "PPO", "SAC", "TD3", "A2CConfig", "DQNConfig", "IMPALAConfig",
           "PPOConfig", "SACConfig", "TD3Config"]
