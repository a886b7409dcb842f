"""Pendulum-v1 for N envs in one Numba kernel: Gymnasium's ``PendulumEnv`` equations, exactly.

State float64[2, N]: rows theta (0 = upright), theta_dot. Observation float32[N, 3] =
(cos theta, sin theta, theta_dot). Action float[N, 1], the torque, clipped to [-2, 2].
Reward -(angle_normalize(theta)^2 + 0.1 theta_dot^2 + 0.001 u^2) from the state *before* the step;
never terminates; TimeLimit 200. Initial theta uniform in [-x_init, x_init) = [-pi, pi), theta_dot in
[-y_init, y_init) = [-1, 1). Gymnasium evaluates the torque terms in float32 (NumPy 2 promotes
``python_float * float32`` to float32); the kernel rounds the same way.

params: [max_episode_steps, g, x_init, y_init].
"""

from __future__ import annotations

import numba
import numpy as np

from rapidrl.envs import render as _render
from rapidrl.envs.builtin import BuiltinSpec, env_kernels
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
def _dynamics(state, i, actions, params, elapsed):
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
def _draw_initial(state, i, params, rng_key, rng_counter):
    """theta uniform in [-x_init, x_init), theta_dot in [-y_init, y_init) (Gymnasium's order)."""
    for j in range(2):
        high = params[2 + j]
        state[j, i] = -high + (high - -high) * next_uniform(rng_key, rng_counter, i)


# The batched kernels (the uniform protocol of builtin.py): thin wrappers around the shared loops.
step, step_parallel, step_packed, step_packed_parallel, reset = env_kernels("Pendulum-v1")


def set_state(state, i, gym_state):
    """Column i of ``state`` := Gymnasium's ``env.unwrapped.state`` (theta, theta_dot)."""
    state[:, i] = np.asarray(gym_state, dtype=np.float64).reshape(2)


def get_state(state, i):
    """Gymnasium's state vector of env i."""
    return state[:, i].copy()


def check_params(params):
    """Nothing to check: Gymnasium accepts any g and reset bounds."""


_HIGH = np.array([1.0, 1.0, MAX_SPEED], dtype=np.float32)

SPEC = BuiltinSpec(
    id="Pendulum-v1",
    state_dim=2,
    obs_low=-_HIGH,
    obs_high=_HIGH,
    action_kind="box",
    action_size=1,
    action_low=-MAX_TORQUE,
    action_high=MAX_TORQUE,
    max_episode_steps=200,
    param_names=("g", "x_init", "y_init"),
    default_params=(10.0, np.pi, 1.0),
    reset_options={"x_init": "x_init", "y_init": "y_init"},
    step=step,
    step_parallel=step_parallel,
    step_packed=step_packed,
    step_packed_parallel=step_packed_parallel,
    reset=reset,
    observe=observe,
    check_params=check_params,
    set_state=set_state,
    get_state=get_state,
    render=_render.pendulum,
    render_fps=30,
)
