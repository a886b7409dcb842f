"""Acrobot-v1 as Numba functions on one env's state (and in PyTorch): Gymnasium's ``AcrobotEnv`` ("book"), exactly.

State float64[4, N]: rows theta1, theta2, dtheta1, dtheta2. Observation float32[N, 6] =
(cos th1, sin th1, cos th2, sin th2, dth1, dth2). Actions 0/1/2 = torque -1/0/+1 on the second
joint. One RK4 step of dt = 0.2 (Gymnasium's ``rk4`` with t = [0, dt]), angles wrapped to [-pi, pi],
velocities clipped to 4 pi and 9 pi. Terminated when -cos th1 - cos(th1 + th2) > 1; reward -1 per
step, 0 on the terminal step; TimeLimit 500. Initial state uniform in [low, high) = [-0.1, 0.1) per
variable, rounded to float32 as Gymnasium does.

params: [max_episode_steps, low, high].
"""

from __future__ import annotations

from math import pi

import gymnasium as gym
import numba
import numpy as np

from rapidrl.envs.classic import render as _render
from rapidrl.envs.classic.common import reset_bounds_check, torch_uniform
from rapidrl.envs.core.numba_env import NumbaEnv
from rapidrl.kernels.rng import next_uniform

DT = 0.2
LINK_LENGTH_1 = 1.0
LINK_LENGTH_2 = 1.0
LINK_MASS_1 = 1.0
LINK_MASS_2 = 1.0
LINK_COM_POS_1 = 0.5
LINK_COM_POS_2 = 0.5
LINK_MOI = 1.0
MAX_VEL_1 = 4 * pi
MAX_VEL_2 = 9 * pi
NUM_ACTIONS = 3
G = 9.8
# Products of constants as Gymnasium's left-to-right evaluation forms them (exact in binary).
_M1, _M2, _L1 = LINK_MASS_1, LINK_MASS_2, LINK_LENGTH_1
_LC1, _LC2, _I1, _I2 = LINK_COM_POS_1, LINK_COM_POS_2, LINK_MOI, LINK_MOI
_D1_CONST = _M1 * _LC1**2
_D1_INNER = _L1**2 + _LC2**2
_D1_COS = 2 * _L1 * _LC2
_D2_COS = _L1 * _LC2
_PHI2_C = _M2 * _LC2 * G
_PHI1_A = -_M2 * _L1 * _LC2
_PHI1_B = 2 * _M2 * _L1 * _LC2
_PHI1_C = (_M1 * _LC1 + _M2 * _L1) * G
_DD2_C = _M2 * _L1 * _LC2
_DD2_DEN = _M2 * _LC2**2 + _I2


@numba.njit(cache=True, inline="always")
def _dsdt(a, theta1, theta2, dtheta1, dtheta2):
    """Gymnasium's ``AcrobotEnv._dsdt`` ("book"): (dtheta1, dtheta2, ddtheta1, ddtheta2)."""
    d1 = _D1_CONST + _M2 * (_D1_INNER + _D1_COS * np.cos(theta2)) + _I1 + _I2
    d2 = _M2 * (_LC2**2 + _D2_COS * np.cos(theta2)) + _I2
    phi2 = _PHI2_C * np.cos(theta1 + theta2 - pi / 2.0)
    phi1 = (
        _PHI1_A * (dtheta2 * dtheta2) * np.sin(theta2)
        - _PHI1_B * dtheta2 * dtheta1 * np.sin(theta2)
        + _PHI1_C * np.cos(theta1 - pi / 2)
        + phi2
    )
    ddtheta2 = (a + d2 / d1 * phi1 - _DD2_C * (dtheta1 * dtheta1) * np.sin(theta2) - phi2) / (
        _DD2_DEN - (d2 * d2) / d1
    )
    ddtheta1 = -(d2 * ddtheta2 + phi1) / d1
    return dtheta1, dtheta2, ddtheta1, ddtheta2


@numba.njit(cache=True, inline="always")
def _wrap(x):
    diff = pi - -pi
    while x > pi:
        x = x - diff
    while x < -pi:
        x = x + diff
    return x


@numba.njit(cache=True, inline="always")
def step(state, i, actions, params, elapsed, rng_key, rng_counter):
    """One RK4 step of env i under torque (action - 1); returns (reward, terminated)."""
    a = np.int64(actions[i]) - 1.0
    y0 = state[0, i]
    y1 = state[1, i]
    y2 = state[2, i]
    y3 = state[3, i]
    dt = DT
    dt2 = dt / 2.0
    k10, k11, k12, k13 = _dsdt(a, y0, y1, y2, y3)
    k20, k21, k22, k23 = _dsdt(a, y0 + dt2 * k10, y1 + dt2 * k11, y2 + dt2 * k12, y3 + dt2 * k13)
    k30, k31, k32, k33 = _dsdt(a, y0 + dt2 * k20, y1 + dt2 * k21, y2 + dt2 * k22, y3 + dt2 * k23)
    k40, k41, k42, k43 = _dsdt(a, y0 + dt * k30, y1 + dt * k31, y2 + dt * k32, y3 + dt * k33)
    h = dt / 6.0
    s0 = _wrap(y0 + h * (k10 + 2 * k20 + 2 * k30 + k40))
    s1 = _wrap(y1 + h * (k11 + 2 * k21 + 2 * k31 + k41))
    s2 = min(max(y2 + h * (k12 + 2 * k22 + 2 * k32 + k42), -MAX_VEL_1), MAX_VEL_1)
    s3 = min(max(y3 + h * (k13 + 2 * k23 + 2 * k33 + k43), -MAX_VEL_2), MAX_VEL_2)
    state[0, i] = s0
    state[1, i] = s1
    state[2, i] = s2
    state[3, i] = s3
    term = -np.cos(s0) - np.cos(s1 + s0) > 1.0
    return (0.0 if term else -1.0), term


@numba.njit(cache=True, inline="always")
def observe(state, i, obs):
    """obs[i] = float32(cos th1, sin th1, cos th2, sin th2, dth1, dth2)."""
    obs[i, 0] = np.float32(np.cos(state[0, i]))
    obs[i, 1] = np.float32(np.sin(state[0, i]))
    obs[i, 2] = np.float32(np.cos(state[1, i]))
    obs[i, 3] = np.float32(np.sin(state[1, i]))
    obs[i, 4] = np.float32(state[2, i])
    obs[i, 5] = np.float32(state[3, i])


@numba.njit(cache=True, inline="always")
def reset(state, i, params, rng_key, rng_counter):
    """Each variable uniform in [low, high), rounded to float32 (Gymnasium's ``.astype(np.float32)``)."""
    low = params[1]
    high = params[2]
    for j in range(4):
        state[j, i] = np.float64(np.float32(low + (high - low) * next_uniform(rng_key, rng_counter, i)))


# -- the same dynamics in PyTorch (classic.torch_vec.TorchVecEnv): state [4, N] in place -------------------------

def _torch_dsdt(a, th1, th2, dth1, dth2):
    import torch

    d1 = _D1_CONST + _M2 * (_D1_INNER + _D1_COS * torch.cos(th2)) + _I1 + _I2
    d2 = _M2 * (_LC2**2 + _D2_COS * torch.cos(th2)) + _I2
    phi2 = _PHI2_C * torch.cos(th1 + th2 - pi / 2.0)
    phi1 = (_PHI1_A * (dth2 * dth2) * torch.sin(th2) - _PHI1_B * dth2 * dth1 * torch.sin(th2)
            + _PHI1_C * torch.cos(th1 - pi / 2) + phi2)
    ddth2 = (a + d2 / d1 * phi1 - _DD2_C * (dth1 * dth1) * torch.sin(th2) - phi2) / (_DD2_DEN - d2 * d2 / d1)
    ddth1 = -(d2 * ddth2 + phi1) / d1
    return torch.stack([dth1, dth2, ddth1, ddth2])


def _torch_wrap(x):
    """Gymnasium's ``wrap`` to [-pi, pi] (one turn at most is ever needed after a 0.2 s step)."""
    import torch

    two_pi = 2 * pi
    x = torch.where(x > pi, x - two_pi, x)
    return torch.where(x < -pi, x + two_pi, x)


def torch_step(state, actions, params):
    """All envs one RK4 step: state [4, N] (modified), actions [N] -> (reward [N], terminated [N])."""
    import torch

    a = actions.to(state.dtype) - 1.0
    y = state.clone()
    dt, dt2 = DT, DT / 2.0
    k1 = _torch_dsdt(a, *y)
    k2 = _torch_dsdt(a, *(y + dt2 * k1))
    k3 = _torch_dsdt(a, *(y + dt2 * k2))
    k4 = _torch_dsdt(a, *(y + dt * k3))
    ns = y + dt / 6.0 * (k1 + 2 * k2 + 2 * k3 + k4)
    state[0] = _torch_wrap(ns[0])
    state[1] = _torch_wrap(ns[1])
    state[2] = ns[2].clamp(-MAX_VEL_1, MAX_VEL_1)
    state[3] = ns[3].clamp(-MAX_VEL_2, MAX_VEL_2)
    term = -torch.cos(state[0]) - torch.cos(state[1] + state[0]) > 1.0
    return torch.where(term, 0.0, -1.0).to(state.dtype), term


def torch_observe(state):
    """[N, 6] = (cos th1, sin th1, cos th2, sin th2, dth1, dth2)."""
    import torch

    return torch.stack([torch.cos(state[0]), torch.sin(state[0]), torch.cos(state[1]), torch.sin(state[1]),
                        state[2], state[3]], dim=1)


def torch_initial(gen, n, params, like):
    """[4, n] initial states, uniform in [low, high), rounded to float32 (as Gymnasium)."""
    import torch

    return torch_uniform(gen, (4, n), params[1], params[2], like).to(torch.float32).to(like.dtype)


check_params = reset_bounds_check(1)


_HIGH = np.array([1.0, 1.0, 1.0, 1.0, MAX_VEL_1, MAX_VEL_2], dtype=np.float32)

SPEC = NumbaEnv(
    id="Acrobot-v1",
    observation_space=gym.spaces.Box(-_HIGH, _HIGH, dtype=np.float32),
    action_space=gym.spaces.Discrete(NUM_ACTIONS),
    state_shape=(4, None),
    reset=reset,
    step=step,
    observe=observe,
    params={"low": -0.1, "high": 0.1},
    max_episode_steps=500,
    reset_params=("low", "high"),
    check_params=check_params,
    render=_render.acrobot,
    render_fps=15,
    reward_threshold=-100.0,
)
