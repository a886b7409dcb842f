"""BitFlipping-v0: HER's original test (Andrychowicz et al. 2017): flip bits until they equal a goal pattern.

State int64[N, 2 * N_BITS]: the bits, then the goal, each bit drawn uniformly at reset. Action Discrete(N_BITS): flip
that bit. Reward -1 while bits and goal differ, else 0; reaching the goal ends the episode (``compute_terminated``,
as SB3's ``BitFlippingEnv``); TimeLimit N_BITS steps, enough from any start. Observation float32[3 * N_BITS] =
achieved_goal (the bits) | desired_goal (the goal) | observation (the bits): the flat encoding of the Gymnasium
twin's Dict (``BitFlippingEnv``). Without relabelling the reward is almost never seen for N_BITS = 10 (a random
policy meets the goal about once in 2^10 states); with HER, DQN learns it in a few thousand steps.
"""

from __future__ import annotations

from typing import ClassVar

import gymnasium as gym
import numba
import numpy as np

from rapidrl.envs.goal.base import GoalNumbaEnv
from rapidrl.kernels.rng import next_uniform

N_BITS = 10


def compute_reward(achieved_goal: np.ndarray, desired_goal: np.ndarray, info=None) -> np.ndarray:
    """-1 where the [..., N_BITS] patterns differ anywhere, else 0 -> [...] float32."""
    return -(np.asarray(achieved_goal) != np.asarray(desired_goal)).any(-1).astype(np.float32)


def compute_terminated(achieved_goal: np.ndarray, desired_goal: np.ndarray, info=None) -> np.ndarray:
    """True where the patterns are equal (the goal is reached) -> [...] bool."""
    return (np.asarray(achieved_goal) == np.asarray(desired_goal)).all(-1)


@numba.njit(cache=True, inline="always")
def reset(state, i, params, rng_key, rng_counter):
    """Bits, then goal, each 0 or 1 with probability 1/2."""
    for j in range(2 * N_BITS):
        state[i, j] = 1 if next_uniform(rng_key, rng_counter, i) < 0.5 else 0


@numba.njit(cache=True, inline="always")
def step(state, i, actions, params, elapsed, rng_key, rng_counter):
    """Flip bit actions[i]; returns (0, True) at the goal, else (-1, False)."""
    state[i, actions[i]] = 1 - state[i, actions[i]]
    for j in range(N_BITS):
        if state[i, j] != state[i, N_BITS + j]:
            return -1.0, False
    return 0.0, True


@numba.njit(cache=True, inline="always")
def observe(state, i, obs):
    """obs[i] = bits | goal | bits."""
    for j in range(N_BITS):
        obs[i, j] = np.float32(state[i, j])
        obs[i, N_BITS + j] = np.float32(state[i, N_BITS + j])
        obs[i, 2 * N_BITS + j] = np.float32(state[i, j])


BIT_FLIPPING = GoalNumbaEnv(
    id="BitFlipping-v0",
    observation_space=gym.spaces.Box(0.0, 1.0, (3 * N_BITS,), np.float32),
    action_space=gym.spaces.Discrete(N_BITS),
    state_shape=(None, 2 * N_BITS),
    state_dtype=np.int64,
    reset=reset, step=step, observe=observe,
    max_episode_steps=N_BITS,
    goal_widths=(N_BITS, N_BITS, N_BITS),
    compute_reward=compute_reward,
    compute_terminated=compute_terminated,
)


class BitFlippingEnv(gym.Env):
    """The task as one Gymnasium env with Dict observations, ``compute_reward`` and ``compute_terminated`` (the
    reference of the built-in env, and a goal-conditioned env for the Gymnasium adapters)."""

    metadata: ClassVar[dict] = {"render_modes": []}

    def __init__(self):
        bits = gym.spaces.MultiBinary(N_BITS)
        self.observation_space = gym.spaces.Dict({"observation": bits, "achieved_goal": bits, "desired_goal": bits})
        self.action_space = gym.spaces.Discrete(N_BITS)
        self.state = np.zeros(2 * N_BITS, np.int64)

    def _obs(self) -> dict:
        bits, goal = self.state[:N_BITS].astype(np.int8), self.state[N_BITS:].astype(np.int8)
        return {"observation": bits, "achieved_goal": bits.copy(), "desired_goal": goal}

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        super().reset(seed=seed)
        self.state = self.np_random.integers(0, 2, 2 * N_BITS)
        return self._obs(), {}

    def step(self, action):
        self.state[int(action)] = 1 - self.state[int(action)]
        reward = float(compute_reward(self.state[:N_BITS], self.state[N_BITS:]))
        return self._obs(), reward, bool(reward == 0.0), False, {"is_success": reward == 0.0}

    compute_reward = staticmethod(compute_reward)
    compute_terminated = staticmethod(compute_terminated)
