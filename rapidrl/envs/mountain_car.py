"""MountainCar-v0 for N envs in one Numba kernel: Gymnasium's ``MountainCarEnv`` equations, exactly.

State float64[2, N]: rows position, velocity. Observation float32[N, 2] = the state. Actions 0/1/2
(push left, none, right). velocity += (a - 1) * 0.001 - 0.0025 cos(3 position), clipped to
[-0.07, 0.07]; position += velocity, clipped to [-1.2, 0.6] (velocity zeroed at the left wall).
Terminated when position >= 0.5 and velocity >= goal_velocity; reward -1 per step; TimeLimit 200.
Initial position uniform in [low, high) = [-0.6, -0.4), velocity 0.

params: [max_episode_steps, goal_velocity, low, high].
"""

from __future__ import annotations

import math

import numba
import numpy as np

from rapidrl.envs import render as _render
from rapidrl.envs.builtin import BuiltinSpec, env_kernels
from rapidrl.kernels.rng import next_uniform

MIN_POSITION = -1.2
MAX_POSITION = 0.6
MAX_SPEED = 0.07
GOAL_POSITION = 0.5
FORCE = 0.001
GRAVITY = 0.0025
NUM_ACTIONS = 3


@numba.njit(cache=True, inline="always")
def _dynamics(state, i, actions, params, elapsed):
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
def _draw_initial(state, i, params, rng_key, rng_counter):
    """position uniform in [low, high), velocity 0."""
    low = params[2]
    high = params[3]
    state[0, i] = low + (high - low) * next_uniform(rng_key, rng_counter, i)
    state[1, i] = 0.0


# The batched kernels (the uniform protocol of builtin.py): thin wrappers around the shared loops.
step, step_parallel, step_packed, step_packed_parallel, reset = env_kernels("MountainCar-v0")


def set_state(state, i, gym_state):
    """Column i of ``state`` := Gymnasium's ``env.unwrapped.state`` (position, velocity)."""
    state[:, i] = np.asarray(gym_state, dtype=np.float64).reshape(2)


def get_state(state, i):
    """Gymnasium's state vector of env i."""
    return state[:, i].copy()


def check_params(params):
    """Reset bounds must be ordered (Gymnasium's ``maybe_parse_reset_bounds``)."""
    if params[2] > params[3]:
        raise ValueError(f"Lower bound ({params[2]}) must be lower than higher bound ({params[3]}).")


SPEC = BuiltinSpec(
    id="MountainCar-v0",
    state_dim=2,
    obs_low=np.array([MIN_POSITION, -MAX_SPEED], dtype=np.float32),
    obs_high=np.array([MAX_POSITION, MAX_SPEED], dtype=np.float32),
    action_kind="discrete",
    action_size=NUM_ACTIONS,
    action_low=None,
    action_high=None,
    max_episode_steps=200,
    param_names=("goal_velocity", "low", "high"),
    default_params=(0.0, -0.6, -0.4),
    reset_options={"low": "low", "high": "high"},
    step=step,
    step_parallel=step_parallel,
    step_packed=step_packed,
    step_packed_parallel=step_packed_parallel,
    reset=reset,
    observe=observe,
    check_params=check_params,
    set_state=set_state,
    get_state=get_state,
    render=_render.mountain_car,
    render_fps=30,
    reward_threshold=-110.0,
)
