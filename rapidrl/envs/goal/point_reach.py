"""PointReach-v0: a point in the plane must reach a goal, the sparse-reward reach task of FetchReach in two dimensions.

State float64[N, 4]: position (x, y), goal (x, y), both drawn uniformly in [-1, 1]^2 at reset. Action Box(-1, 1,
(2,)): the position moves by ``STEP * action`` and is clipped to [-1, 1]^2. Reward -1 while the position is more
than ``THRESHOLD`` from the goal, else 0 (FetchReach's ``-(d > threshold)``); never terminates; TimeLimit 25.
Observation float32[6] = achieved_goal (the position) | desired_goal (the goal) | observation (the position): the
flat encoding of the Gymnasium twin's Dict (``PointReachEnv``, the reference of the alignment test).
"""

from __future__ import annotations

from typing import ClassVar

import gymnasium as gym
import numba
import numpy as np

from rapidrl.envs.goal.base import GoalNumbaEnv
from rapidrl.kernels.rng import next_uniform

STEP = 0.2
THRESHOLD = 0.15
MAX_EPISODE_STEPS = 25


def compute_reward(achieved_goal: np.ndarray, desired_goal: np.ndarray, info=None) -> np.ndarray:
    """-(|achieved - desired| > THRESHOLD) for [..., 2] goals -> [...] float32."""
    d = np.linalg.norm(np.asarray(achieved_goal, np.float64) - np.asarray(desired_goal, np.float64), axis=-1)
    return -(d > THRESHOLD).astype(np.float32)


@numba.njit(cache=True, inline="always")
def reset(state, i, params, rng_key, rng_counter):
    """Position, then goal, each coordinate uniform in [-1, 1)."""
    for j in range(4):
        state[i, j] = -1.0 + 2.0 * next_uniform(rng_key, rng_counter, i)


@numba.njit(cache=True, inline="always")
def step(state, i, actions, params, elapsed, rng_key, rng_counter):
    """Move by STEP * clip(action, -1, 1) within [-1, 1]^2; returns (reward, terminated=False)."""
    for j in range(2):
        a = min(max(float(actions[i, j]), -1.0), 1.0)
        state[i, j] = min(max(state[i, j] + STEP * a, -1.0), 1.0)
    dx, dy = state[i, 0] - state[i, 2], state[i, 1] - state[i, 3]
    return (-1.0 if np.sqrt(dx * dx + dy * dy) > THRESHOLD else 0.0), False


@numba.njit(cache=True, inline="always")
def observe(state, i, obs):
    """obs[i] = position | goal | position."""
    for j in range(2):
        obs[i, j] = np.float32(state[i, j])
        obs[i, 2 + j] = np.float32(state[i, 2 + j])
        obs[i, 4 + j] = np.float32(state[i, j])


POINT_REACH = GoalNumbaEnv(
    id="PointReach-v0",
    observation_space=gym.spaces.Box(-1.0, 1.0, (6,), np.float32),
    action_space=gym.spaces.Box(-1.0, 1.0, (2,), np.float32),
    state_shape=(None, 4),
    reset=reset, step=step, observe=observe,
    max_episode_steps=MAX_EPISODE_STEPS,
    goal_widths=(2, 2, 2),
    compute_reward=compute_reward,
)


class PointReachEnv(gym.Env):
    """The task as one Gymnasium env with Dict observations and ``compute_reward``: the reference of the built-in
    env and the goal-conditioned env the Gymnasium adapters train on (as gymnasium-robotics' Fetch tasks)."""

    metadata: ClassVar[dict] = {"render_modes": []}

    def __init__(self):
        box = gym.spaces.Box(-1.0, 1.0, (2,), np.float32)
        self.observation_space = gym.spaces.Dict({"observation": box, "achieved_goal": box, "desired_goal": box})
        self.action_space = gym.spaces.Box(-1.0, 1.0, (2,), np.float32)
        self.state = np.zeros(4)

    def _obs(self) -> dict:
        pos, goal = self.state[:2].astype(np.float32), self.state[2:].astype(np.float32)
        return {"observation": pos, "achieved_goal": pos.copy(), "desired_goal": goal}

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        super().reset(seed=seed)
        self.state = self.np_random.uniform(-1.0, 1.0, 4)
        return self._obs(), {}

    def step(self, action):
        action = np.clip(np.asarray(action, np.float64), -1.0, 1.0)
        self.state[:2] = np.clip(self.state[:2] + STEP * action, -1.0, 1.0)
        reward = float(compute_reward(self.state[:2], self.state[2:]))
        return self._obs(), reward, False, False, {"is_success": reward == 0.0}

    compute_reward = staticmethod(compute_reward)
