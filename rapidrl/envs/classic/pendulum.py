"""Pendulum-v1 as Numba functions on one env's state (and in PyTorch): Gymnasium's ``PendulumEnv``, exactly.

State float64[2, N]: rows theta (0 = upright), theta_dot. Observation float32[N, 3] =
(cos theta, sin theta, theta_dot). Action float[N, 1], the torque, clipped to [-2, 2].
Reward -(angle_normalize(theta)^2 + 0.1 theta_dot^2 + 0.001 u^2) from the state *before* the step;
never terminates; TimeLimit 200. Initial theta uniform in [-x_init, x_init) = [-pi, pi), theta_dot in
[-y_init, y_init) = [-1, 1). Gymnasium evaluates the torque terms in float32 (NumPy 2 promotes
``python_float * float32`` to float32); the kernel rounds the same way.

params: [max_episode_steps, g, x_init, y_init].
"""

from __future__ import annotations

import gymnasium as gym
import numba
import numpy as np

from rapidrl.envs.classic import render as _render
from rapidrl.envs.classic.common import torch_uniform
from rapidrl.envs.core.numba_env import NumbaEnv
from rapidrl.kernels.rng import next_uniform

MAX_SPEED = 8
MAX_TORQUE = 2.0
DT = 0.05
MASS = 1.0
LENGTH = 1.0
_F32_0_001 = np.float32(0.001)
_F32_ACC = np.float32(3.0 / (MASS * LENGTH**2))
_TWO_PI = 2 * np.pi


@numba.njit(cache=True, inline="always")
def step(state, i, actions, params, elapsed, rng_key, rng_counter):
    """Advance env i one step under torque ``actions[i, 0]``; returns (reward, terminated=False)."""
    th = state[0, i]
    thdot = state[1, i]
    g = params[1]
    u = np.float32(actions[i, 0])
    if u > MAX_TORQUE:
        u = np.float32(MAX_TORQUE)
    elif u < -MAX_TORQUE:
        u = np.float32(-MAX_TORQUE)
    an = ((th + np.pi) % _TWO_PI) - np.pi
    costs = an * an + 0.1 * (thdot * thdot) + np.float64(np.float32(u * u) * _F32_0_001)
    acc = 3 * g / (2 * LENGTH) * np.sin(th) + np.float64(np.float32(_F32_ACC * u))
    newthdot = thdot + acc * DT
    if newthdot > MAX_SPEED:
        newthdot = float(MAX_SPEED)
    elif newthdot < -MAX_SPEED:
        newthdot = float(-MAX_SPEED)
    state[0, i] = th + newthdot * DT
    state[1, i] = newthdot
    return -costs, False


@numba.njit(cache=True, inline="always")
def observe(state, i, obs):
    """obs[i] = float32(cos theta, sin theta, theta_dot)."""
    th = state[0, i]
    obs[i, 0] = np.float32(np.cos(th))
    obs[i, 1] = np.float32(np.sin(th))
    obs[i, 2] = np.float32(state[1, i])


@numba.njit(cache=True, inline="always")
def reset(state, i, params, rng_key, rng_counter):
    """theta uniform in [-x_init, x_init), theta_dot in [-y_init, y_init) (Gymnasium's order)."""
    for j in range(2):
        high = params[2 + j]
        state[j, i] = -high + (high - -high) * next_uniform(rng_key, rng_counter, i)


# -- the same dynamics in PyTorch (classic.torch_vec.TorchVecEnv): state [2, N] in place -------------------------

def torch_step(state, actions, params):
    """All envs one step: state [2, N] (modified), actions [N, 1] -> (reward [N], terminated [N])."""
    import torch

    th, thdot = state
    u = actions[:, 0].to(torch.float32).clamp(-MAX_TORQUE, MAX_TORQUE)  # torque terms in float32, as Gymnasium
    an = torch.remainder(th + np.pi, 2 * np.pi) - np.pi
    costs = an * an + 0.1 * (thdot * thdot) + (0.001 * (u * u)).to(state.dtype)
    g = params[1]
    torque = (3.0 / (MASS * LENGTH**2) * u).to(state.dtype)
    newthdot = thdot + (3 * g / (2 * LENGTH) * torch.sin(th) + torque) * DT
    newthdot = newthdot.clamp(-MAX_SPEED, MAX_SPEED)
    state[0], state[1] = th + newthdot * DT, newthdot
    return -costs, torch.zeros_like(th, dtype=torch.bool)


def torch_observe(state):
    """[N, 3] = (cos theta, sin theta, theta_dot)."""
    import torch

    return torch.stack([torch.cos(state[0]), torch.sin(state[0]), state[1]], dim=1)


def torch_initial(gen, n, params, like):
    """[2, n] initial states: theta uniform in [-x_init, x_init), theta_dot in [-y_init, y_init)."""
    import torch

    x, y = params[2], params[3]
    return torch.stack([torch_uniform(gen, (n,), -x, x, like), torch_uniform(gen, (n,), -y, y, like)])


_HIGH = np.array([1.0, 1.0, MAX_SPEED], dtype=np.float32)

SPEC = NumbaEnv(
    id="Pendulum-v1",
    observation_space=gym.spaces.Box(-_HIGH, _HIGH, dtype=np.float32),
    action_space=gym.spaces.Box(-MAX_TORQUE, MAX_TORQUE, shape=(1,), dtype=np.float32),
    state_shape=(2, None),
    reset=reset,
    step=step,
    observe=observe,
    params={"g": 10.0, "x_init": np.pi, "y_init": 1.0},
    max_episode_steps=200,
    reset_params=("x_init", "y_init"),
    render=_render.pendulum,
    render_fps=30,
)
