"""MountainCarContinuous-v0 as Numba functions on one env's state (and in PyTorch): Gymnasium's
``Continuous_MountainCarEnv``, exactly.

State float64[2, N]: rows position, velocity. Observation float32[N, 2] = the state. Action float[N, 1],
the force, clipped to [-1, 1]. velocity += force * 0.0015 - 0.0025 cos(3 position), clipped to
[-0.07, 0.07]; position += velocity, clipped to [-1.2, 0.6] (velocity zeroed at the left wall).
Terminated when position >= 0.45 and velocity >= goal_velocity; reward 100 on termination minus
0.1 * action^2 (the unclipped action) every step; TimeLimit 999. Initial position uniform in
[low, high) = [-0.6, -0.4), velocity 0.

Float rounding, reproduced exactly: Gymnasium stores this env's state as float32 after every step,
and NumPy 2 evaluates ``float32 op python_float`` in float32. So the first step after a reset (state
still float64, ``elapsed == 0``) runs in float64 except the float32 force term, later steps run in
float32; a clipped force is a Python float. The kernel follows the same promotions.

params: [max_episode_steps, goal_velocity, low, high].
"""

from __future__ import annotations

import dataclasses
import math

import gymnasium as gym
import numba
import numpy as np

from rapidrl.envs.classic import mountain_car
from rapidrl.envs.classic import render as _render
from rapidrl.envs.classic.mountain_car import check_params, observe, reset, torch_initial, torch_observe

MIN_ACTION = -1.0
MAX_ACTION = 1.0
MIN_POSITION = -1.2
MAX_POSITION = 0.6
MAX_SPEED = 0.07
GOAL_POSITION = 0.45
POWER = 0.0015
_F32 = np.float32
_F64 = np.float64
_POWER32 = _F32(POWER)
_MIN_POSITION32 = _F32(MIN_POSITION)
_MAX_POSITION32 = _F32(MAX_POSITION)
_MAX_SPEED32 = _F32(MAX_SPEED)
_GOAL_POSITION32 = _F32(GOAL_POSITION)


@numba.njit(cache=True, inline="always")
def step(state, i, actions, params, elapsed, rng_key, rng_counter):
    """Advance env i one step under force ``actions[i, 0]``; returns (reward, terminated)."""
    position = state[0, i]
    velocity = state[1, i]
    a = _F32(actions[i, 0])
    clipped = a > MAX_ACTION or a < MIN_ACTION
    fresh = elapsed[i] == 0  # state still float64 from reset
    if fresh:
        gravity_term = 0.0025 * math.cos(3 * position)
    else:
        gravity_term = 0.0025 * math.cos(_F64(_F32(3 * position)))
    if clipped:  # force is a Python float: the increment is float64
        dv = (MAX_ACTION if a > MAX_ACTION else MIN_ACTION) * POWER - gravity_term
    else:  # float32 force: float32 increment
        dv = _F64(_F32(_F32(a * _POWER32) - _F32(gravity_term)))
    if fresh:
        velocity = velocity + dv
        velocity = min(max(velocity, -MAX_SPEED), MAX_SPEED)
        position = position + velocity
        position = min(max(position, MIN_POSITION), MAX_POSITION)
        at_wall = position == MIN_POSITION
        term = position >= GOAL_POSITION and velocity >= params[1]
    else:
        velocity = _F64(_F32(velocity + _F64(_F32(dv))))
        if velocity > _MAX_SPEED32:
            velocity = _F64(_MAX_SPEED32)
        if velocity < -_MAX_SPEED32:
            velocity = -_F64(_MAX_SPEED32)
        position = _F64(_F32(position + velocity))
        term_pos = position >= _GOAL_POSITION32
        at_wall = position == _MIN_POSITION32
        if position > _MAX_POSITION32:
            position = MAX_POSITION
            term_pos = True
        if position < _MIN_POSITION32:
            position = MIN_POSITION
            at_wall = True
            term_pos = False
        term = term_pos and velocity >= _F32(params[1])
    if at_wall and velocity < 0:
        velocity = 0.0
        term = term and 0.0 >= params[1]
    state[0, i] = _F64(_F32(position))
    state[1, i] = _F64(_F32(velocity))
    reward = (100.0 if term else 0.0) - _F64(a) * _F64(a) * 0.1
    return reward, term


# observe, reset (position uniform in [low, high), velocity 0) and their PyTorch forms are MountainCar-v0's.

# -- the same dynamics in PyTorch (classic.torch_vec.TorchVecEnv): state [2, N] in place -------------------------
# (evaluated in the env's dtype throughout: close to Gymnasium's float32 promotions, not bitwise)

def torch_step(state, actions, params):
    """All envs one step: state [2, N] (modified), actions [N, 1] -> (reward [N], terminated [N])."""
    import torch

    position, velocity = state
    a = actions[:, 0].to(state.dtype)
    force = a.clamp(MIN_ACTION, MAX_ACTION)
    velocity = (velocity + force * POWER - 0.0025 * torch.cos(3 * position)).clamp(-MAX_SPEED, MAX_SPEED)
    position = (position + velocity).clamp(MIN_POSITION, MAX_POSITION)
    velocity = torch.where((position == MIN_POSITION) & (velocity < 0), 0.0, velocity)
    state[0], state[1] = position, velocity
    term = (position >= GOAL_POSITION) & (velocity >= params[1])
    return torch.where(term, 100.0, 0.0).to(state.dtype) - a * a * 0.1, term


__all__ = ["SPEC", "check_params", "observe", "reset", "step", "torch_initial", "torch_observe", "torch_step"]

# MountainCar-v0's definition (observation space, state, reset, observe, params and their check) with its own action
# space, step, time limit, rendering and threshold
SPEC = dataclasses.replace(
    mountain_car.SPEC,
    id="MountainCarContinuous-v0",
    action_space=gym.spaces.Box(MIN_ACTION, MAX_ACTION, shape=(1,), dtype=np.float32),
    step=step,
    max_episode_steps=999,
    render=_render.mountain_car_continuous,
    reward_threshold=90.0,
)
