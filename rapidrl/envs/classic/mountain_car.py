"""MountainCar-v0 as Numba functions on one env's state (and in PyTorch): Gymnasium's ``MountainCarEnv``, exactly.

State float64[2, N]: rows position, velocity. Observation float32[N, 2] = the state. Actions 0/1/2
(push left, none, right). velocity += (a - 1) * 0.001 - 0.0025 cos(3 position), clipped to
[-0.07, 0.07]; position += velocity, clipped to [-1.2, 0.6] (velocity zeroed at the left wall).
Terminated when position >= 0.5 and velocity >= goal_velocity; reward -1 per step; TimeLimit 200.
Initial position uniform in [low, high) = [-0.6, -0.4), velocity 0.

params: [max_episode_steps, goal_velocity, low, high].
"""

from __future__ import annotations

import math

import gymnasium as gym
import numba
import numpy as np

from rapidrl.envs.classic import render as _render
from rapidrl.envs.classic.common import reset_bounds_check, torch_uniform
from rapidrl.envs.core.numba_env import NumbaEnv
from rapidrl.kernels.rng import next_uniform

MIN_POSITION = -1.2
MAX_POSITION = 0.6
MAX_SPEED = 0.07
GOAL_POSITION = 0.5
FORCE = 0.001
GRAVITY = 0.0025
NUM_ACTIONS = 3


@numba.njit(cache=True, inline="always")
def step(state, i, actions, params, elapsed, rng_key, rng_counter):
    """Advance env i one step; returns (reward, terminated)."""
    position = state[0, i]
    velocity = state[1, i]
    velocity = velocity + ((np.int64(actions[i]) - 1) * FORCE + math.cos(3 * position) * (-GRAVITY))
    velocity = min(max(velocity, -MAX_SPEED), MAX_SPEED)
    position = position + velocity
    position = min(max(position, MIN_POSITION), MAX_POSITION)
    if position == MIN_POSITION and velocity < 0:
        velocity = 0.0
    state[0, i] = position
    state[1, i] = velocity
    return -1.0, position >= GOAL_POSITION and velocity >= params[1]


@numba.njit(cache=True, inline="always")
def observe(state, i, obs):
    """obs[i] = float32(state[:, i])."""
    obs[i, 0] = np.float32(state[0, i])
    obs[i, 1] = np.float32(state[1, i])


@numba.njit(cache=True, inline="always")
def reset(state, i, params, rng_key, rng_counter):
    """position uniform in [low, high), velocity 0."""
    low = params[2]
    high = params[3]
    state[0, i] = low + (high - low) * next_uniform(rng_key, rng_counter, i)
    state[1, i] = 0.0


# -- the same dynamics in PyTorch (classic.torch_vec.TorchVecEnv): state [2, N] in place -------------------------

def torch_step(state, actions, params):
    """All envs one step: state [2, N] (modified), actions [N] -> (reward [N], terminated [N])."""
    import torch

    position, velocity = state
    velocity = velocity + ((actions.to(state.dtype) - 1) * FORCE + torch.cos(3 * position) * (-GRAVITY))
    velocity = velocity.clamp(-MAX_SPEED, MAX_SPEED)
    position = (position + velocity).clamp(MIN_POSITION, MAX_POSITION)
    velocity = torch.where((position == MIN_POSITION) & (velocity < 0), 0.0, velocity)
    state[0], state[1] = position, velocity
    term = (position >= GOAL_POSITION) & (velocity >= params[1])
    return torch.full_like(position, -1.0), term


def torch_observe(state):
    """[N, 2] = the state."""
    return state.T


def torch_initial(gen, n, params, like):
    """[2, n] initial states: position uniform in [low, high), velocity 0."""
    import torch

    position = torch_uniform(gen, (n,), params[2], params[3], like)
    return torch.stack([position, torch.zeros(n, dtype=like.dtype, device=like.device)])


check_params = reset_bounds_check(2)


SPEC = NumbaEnv(
    id="MountainCar-v0",
    observation_space=gym.spaces.Box(np.array([MIN_POSITION, -MAX_SPEED], dtype=np.float32),
                                     np.array([MAX_POSITION, MAX_SPEED], dtype=np.float32), dtype=np.float32),
    action_space=gym.spaces.Discrete(NUM_ACTIONS),
    state_shape=(2, None),
    reset=reset,
    step=step,
    observe=observe,
    params={"goal_velocity": 0.0, "low": -0.6, "high": -0.4},
    max_episode_steps=200,
    reset_params=("low", "high"),
    check_params=check_params,
    render=_render.mountain_car,
    render_fps=30,
    reward_threshold=-110.0,
)
