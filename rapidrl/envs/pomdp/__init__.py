"""Partially observed tasks, built in: they need memory, which is what recurrent policies are tested on.

- ``CartPoleNoVel-v1`` (``cartpole_novel.py``): CartPole-v1 with the velocities hidden; observations are (cart
  position, pole angle) only (the name and the observation of rl-zoo3's benchmark env for sb3-contrib's
  RecurrentPPO). CartPole's own Numba functions with another ``observe``, so its dynamics are exactly Gymnasium's.
- ``PendulumNoVel-v1`` (``pendulum_novel.py``): Pendulum-v1 with the angular velocity hidden; observations are
  (cos theta, sin theta) only (a continuous-control memory task, as pomdp-baselines' "-P" tasks). Pendulum's own
  Numba functions with another ``observe``.
- ``MemoryCue-v0`` (``memory_cue.py``): a cue (one of ``num_cues``) is shown on the first step only; ``delay`` steps
  later the observation's query flag asks for it, and the action at that step earns 1 if it names the cue, else
  0; the episode then ends. Any policy without memory scores 1 / num_cues on average, a policy with memory 1.

Each exists as a single Gymnasium env too (``gymnasium.make("CartPoleNoVel-v1")`` after importing rapidrl), which is
how the tests check the batched versions step by step and how other libraries train on the same task.
"""

from __future__ import annotations

import gymnasium as gym

from rapidrl.envs.pomdp.cartpole_novel import CARTPOLE_POSITIONS, MaskVelocity, make_cartpole_novel
from rapidrl.envs.pomdp.memory_cue import MemoryCueEnv, MemoryCueVecEnv
from rapidrl.envs.pomdp.pendulum_novel import PENDULUM_POSITIONS, make_pendulum_novel

POMDP_ENVS = ("CartPoleNoVel-v1", "PendulumNoVel-v1", "MemoryCue-v0")

__all__ = ["CARTPOLE_POSITIONS", "PENDULUM_POSITIONS", "POMDP_ENVS", "MaskVelocity", "MemoryCueEnv", "MemoryCueVecEnv",
           "make_cartpole_novel", "make_pendulum_novel", "register_envs"]


def register_envs() -> None:
    """Register both ids with Gymnasium (idempotent)."""
    if "CartPoleNoVel-v1" not in gym.registry:
        gym.register("CartPoleNoVel-v1", entry_point="rapidrl.envs.pomdp.cartpole_novel:make_cartpole_novel")
    if "PendulumNoVel-v1" not in gym.registry:
        gym.register("PendulumNoVel-v1", entry_point="rapidrl.envs.pomdp.pendulum_novel:make_pendulum_novel")
    if "MemoryCue-v0" not in gym.registry:
        gym.register("MemoryCue-v0", entry_point="rapidrl.envs.pomdp.memory_cue:MemoryCueEnv")
