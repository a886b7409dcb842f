"""Goal-conditioned tasks, built in: what hindsight experience replay (``rapidrl.buffers.her``) is tested and learnt on.

- ``PointReach-v0`` (``point_reach.py``): a point in the plane reaches a goal, FetchReach's sparse reward in 2-D;
  Box actions (SAC, TD3, DDPG, TQC, CrossQ).
- ``BitFlipping-v0`` (``bit_flipping.py``): HER's original test, 10 bits; Discrete actions (DQN).

Each is a ``GoalNumbaEnv`` (``base.py``): a NumbaEnv whose flat observation is the encoding of the Dict
``{achieved_goal, desired_goal, observation}`` and which carries its vectorised ``compute_reward``. Both exist as
single Gymnasium envs with Dict observations too (``gymnasium.make("PointReach-v0")`` after importing rapidrl): the
references of the alignment tests, and goal-conditioned envs for the Gymnasium adapters (``vectorization="sync"``),
the path gymnasium-robotics' Fetch tasks take. ``spec.py`` finds what HER needs in either (``goal_spec``).
"""

from __future__ import annotations

import gymnasium as gym

from rapidrl.envs.goal.base import GoalNumbaEnv
from rapidrl.envs.goal.spec import GOAL_KEYS, GoalSpec, goal_spec

GOAL_ENVS = ("PointReach-v0", "BitFlipping-v0")

__all__ = ["GOAL_ENVS", "GOAL_KEYS", "GoalNumbaEnv", "GoalSpec", "goal_definition", "goal_spec", "register_envs"]


def goal_definition(env_id: str) -> GoalNumbaEnv:
    """The ``GoalNumbaEnv`` of a built-in goal task id."""
    if env_id == "PointReach-v0":
        from rapidrl.envs.goal.point_reach import POINT_REACH

        return POINT_REACH
    if env_id == "BitFlipping-v0":
        from rapidrl.envs.goal.bit_flipping import BIT_FLIPPING

        return BIT_FLIPPING
    raise ValueError(f"{env_id!r} is not a built-in goal task ({', '.join(GOAL_ENVS)})")


def make_goal_vec(env_id: str, num_envs: int, *, vectorization: str, device, **kwargs):
    """The ``NumbaVecEnv`` of a built-in goal task (``rapidrl.envs.registry``'s family entry)."""
    from rapidrl.envs.core.numba_env import NumbaVecEnv

    return NumbaVecEnv(goal_definition(env_id), num_envs, **kwargs)


def register_envs() -> None:
    """Register both ids with Gymnasium (idempotent): the Dict-observation twins."""
    if "PointReach-v0" not in gym.registry:
        gym.register("PointReach-v0", entry_point="rapidrl.envs.goal.point_reach:PointReachEnv", max_episode_steps=25)
    if "BitFlipping-v0" not in gym.registry:
        gym.register("BitFlipping-v0", entry_point="rapidrl.envs.goal.bit_flipping:BitFlippingEnv",
                     max_episode_steps=10)
