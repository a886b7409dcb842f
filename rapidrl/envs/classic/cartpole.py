"""CartPole-v1 as Numba functions on one env's state (and in PyTorch): Gymnasium's ``CartPoleEnv``, exactly.

State float64[4, N]: rows x, x_dot, theta, theta_dot. Observation float32[N, 4] = the state.
Explicit Euler with tau = 0.02; terminated when |x| > 2.4 or |theta| > 12 degrees; reward +1 on
every step including the terminal one (``sutton_barto_reward=True``: 0 per step, -1 on termination).
Initial state uniform in [low, high) = [-0.05, 0.05) per variable. TimeLimit 500.
An env is reset when its episode ends, so Gymnasium's "stepping after termination" path
(``steps_beyond_terminated``, reward 0) never occurs.

params: [max_episode_steps, sutton_barto_reward (0/1), low, high].
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

# Constants computed with Gymnasium's expressions, so they round identically.
GRAVITY = 9.8
MASSCART = 1.0
MASSPOLE = 0.1
TOTAL_MASS = MASSPOLE + MASSCART
LENGTH = 0.5  # half the pole's length
POLEMASS_LENGTH = MASSPOLE * LENGTH
FORCE_MAG = 10.0
TAU = 0.02
THETA_THRESHOLD = 12 * 2 * math.pi / 360
X_THRESHOLD = 2.4
NUM_ACTIONS = 2


@numba.njit(cache=True, inline="always")
def step(state, i, actions, params, elapsed, rng_key, rng_counter):
    """Advance env i one Euler step (action 0 = push left, 1 = right); returns (reward, terminated)."""
    x = state[0, i]
    x_dot = state[1, i]
    theta = state[2, i]
    theta_dot = state[3, i]
    force = FORCE_MAG if actions[i] == 1 else -FORCE_MAG
    costheta = np.cos(theta)
    sintheta = np.sin(theta)
    temp = (force + POLEMASS_LENGTH * (theta_dot * theta_dot) * sintheta) / TOTAL_MASS
    thetaacc = (GRAVITY * sintheta - costheta * temp) / (
        LENGTH * (4.0 / 3.0 - MASSPOLE * (costheta * costheta) / TOTAL_MASS)
    )
    xacc = temp - POLEMASS_LENGTH * thetaacc * costheta / TOTAL_MASS
    x = x + TAU * x_dot
    x_dot = x_dot + TAU * xacc
    theta = theta + TAU * theta_dot
    theta_dot = theta_dot + TAU * thetaacc
    state[0, i] = x
    state[1, i] = x_dot
    state[2, i] = theta
    state[3, i] = theta_dot
    term = x < -X_THRESHOLD or x > X_THRESHOLD or theta < -THETA_THRESHOLD or theta > THETA_THRESHOLD
    if params[1] != 0.0:
        return (-1.0 if term else 0.0), term
    return 1.0, term


@numba.njit(cache=True, inline="always")
def observe(state, i, obs):
    """obs[i] = float32(state[:, i])."""
    for j in range(4):
        obs[i, j] = np.float32(state[j, i])


@numba.njit(cache=True, inline="always")
def reset(state, i, params, rng_key, rng_counter):
    """Each state variable uniform in [low, high)."""
    low = params[2]
    high = params[3]
    for j in range(4):
        state[j, i] = low + (high - low) * next_uniform(rng_key, rng_counter, i)


# -- the same dynamics in PyTorch (classic.torch_vec.TorchVecEnv): state [4, N] in place -------------------------

def torch_step(state, actions, params):
    """All envs one Euler step: state [4, N] (modified), actions [N] -> (reward [N], terminated [N])."""
    import torch

    x, x_dot, theta, theta_dot = state
    force = torch.where(actions == 1, FORCE_MAG, -FORCE_MAG).to(state.dtype)
    costheta, sintheta = torch.cos(theta), torch.sin(theta)
    temp = (force + POLEMASS_LENGTH * (theta_dot * theta_dot) * sintheta) / TOTAL_MASS
    thetaacc = (GRAVITY * sintheta - costheta * temp) / (
        LENGTH * (4.0 / 3.0 - MASSPOLE * (costheta * costheta) / TOTAL_MASS))
    xacc = temp - POLEMASS_LENGTH * thetaacc * costheta / TOTAL_MASS
    state.copy_(torch.stack([x + TAU * x_dot, x_dot + TAU * xacc, theta + TAU * theta_dot, theta_dot + TAU * thetaacc]))
    x, theta = state[0], state[2]
    term = (x < -X_THRESHOLD) | (x > X_THRESHOLD) | (theta < -THETA_THRESHOLD) | (theta > THETA_THRESHOLD)
    if params[1] != 0.0:
        return -term.to(state.dtype), term
    return torch.ones_like(x), term


def torch_observe(state):
    """[N, 4] = the state."""
    return state.T


def torch_initial(gen, n, params, like):
    """[4, n] initial states, each variable uniform in [low, high)."""
    return torch_uniform(gen, (4, n), params[2], params[3], like)


check_params = reset_bounds_check(2)


_HIGH = np.array([X_THRESHOLD * 2, np.inf, THETA_THRESHOLD * 2, np.inf], dtype=np.float32)

SPEC = NumbaEnv(
    id="CartPole-v1",
    observation_space=gym.spaces.Box(-_HIGH, _HIGH, dtype=np.float32),
    action_space=gym.spaces.Discrete(NUM_ACTIONS),
    state_shape=(4, None),
    reset=reset,
    step=step,
    observe=observe,
    params={"sutton_barto_reward": 0.0, "low": -0.05, "high": 0.05},
    max_episode_steps=500,
    reset_params=("low", "high"),
    check_params=check_params,
    render=_render.cartpole,
    render_fps=50,
    reward_threshold=475.0,
)
