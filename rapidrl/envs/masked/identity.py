"""InvalidActionDiscrete-v0: sb3-contrib's ``InvalidActionEnvDiscrete`` as an env written as Numba functions.

The identity task with invalid actions (sb3-contrib ``sb3_contrib/common/envs/invalid_actions_env.py`` on SB3's
``IdentityEnv``): the observation is the one-hot of a target among ``dim``; the reward is 1 when the action names
the target, else 0; a new target (uniform) is drawn after every step, with ``n_invalid_actions`` actions other than
the target drawn invalid (a uniform subset, Knuth's selection sampling); episodes are truncated after ``ep_length``
(100) steps. The target is always valid. A policy that picks valid actions at random scores 100 / (dim -
n_invalid_actions) per episode; sb3-contrib's test passes MaskablePPO at >= 90 with dim 70 and 55 invalid. An invalid
action earns ``invalid_reward`` (0, sb3-contrib's: like any wrong action; the tests set -100, so that a run that ever
acts invalidly shows it in its rewards).

State int64 [N, 1 + dim]: the target, then one valid flag per action. The same functions serve every ``dim`` (read
from the state's width); ``invalid_action_env(dim)`` makes the definition of one ``dim``.
"""

from __future__ import annotations

import functools

import gymnasium as gym
import numba
import numpy as np

from rapidrl.envs.core.numba_env import NumbaEnv
from rapidrl.envs.masked import size_arg
from rapidrl.kernels.rng import next_uniform

__all__ = ["invalid_action_env"]

ENV_ID = "InvalidActionDiscrete-v0"


@numba.njit(cache=True)
def _draw(state, i, params, rng_key, rng_counter):
    """A new target and a uniform subset of ``params[1]`` invalid actions among the others."""
    dim = state.shape[1] - 1
    target = min(int(dim * next_uniform(rng_key, rng_counter, i)), dim - 1)
    state[i, 0] = target
    need, left = int(params[1]), dim - 1  # invalid actions still to pick, candidates still to see
    for a in range(dim):
        state[i, 1 + a] = 1
        if a == target:
            continue
        if need > 0 and next_uniform(rng_key, rng_counter, i) * left < need:
            state[i, 1 + a] = 0
            need -= 1
        left -= 1


@numba.njit(cache=True)
def reset(state, i, params, rng_key, rng_counter):
    _draw(state, i, params, rng_key, rng_counter)


@numba.njit(cache=True)
def step(state, i, actions, params, elapsed, rng_key, rng_counter):
    reward = 1.0 if actions[i] == state[i, 0] else 0.0 if state[i, 1 + actions[i]] != 0 else params[2]
    _draw(state, i, params, rng_key, rng_counter)
    return reward, False


@numba.njit(cache=True)
def observe(state, i, obs):
    obs[i, :] = 0.0
    obs[i, state[i, 0]] = 1.0


@numba.njit(cache=True)
def mask(state, i, mask_out):
    for a in range(mask_out.shape[1]):
        mask_out[i, a] = state[i, 1 + a] != 0


def _check_params(params: np.ndarray, dim: int) -> None:
    n = params[1]
    if n != int(n) or not 0 <= n < dim:
        raise ValueError(f"{ENV_ID}: n_invalid_actions must be an int in [0, {dim}) (the target stays valid), got {n}")


@functools.cache
def invalid_action_env(dim: int = 70) -> NumbaEnv:
    """The definition with ``dim`` actions (and a one-hot observation of ``dim``)."""
    dim = size_arg(ENV_ID, "dim", dim)
    return NumbaEnv(id=ENV_ID, observation_space=gym.spaces.Box(0.0, 1.0, (dim,), np.float32),
                    action_space=gym.spaces.Discrete(dim), state_shape=(None, 1 + dim), state_dtype=np.int64,
                    reset=reset, step=step, observe=observe, mask=mask,
                    params={"n_invalid_actions": 0, "invalid_reward": 0.0},
                    max_episode_steps=100, check_params=functools.partial(_check_params, dim=dim))
