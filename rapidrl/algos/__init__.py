"""Algorithms: each is a loop, pure losses and a buffer."""

from rapidrl.algos.a2c import A2C, A2CConfig
from rapidrl.algos.ppo import PPO, PPOConfig

ALGORITHMS = {"ppo": PPO, "a2c": A2C}

__all__ = ["A2C", "ALGORITHMS", "PPO", "A2CConfig", "PPOConfig"]
