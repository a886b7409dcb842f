"""MaskedCue-v0: a task that needs both memory and action masks (the recurrent-with-masks test task).

A cue (one of ``num_cues``) is shown on the first step only; ``delay`` steps later the observation's query flag asks
for an answer, and only a random subset of ``valid`` actions is valid at that step (the mask; every action is valid
before). The answer is the first valid action at or after the cue, counting cyclically: the cue itself when it is
valid, else the next valid one. It earns 1, anything else 0, and the episode ends.

Neither memory nor the mask alone is enough: without memory the cue is gone at the query, without the mask the valid
set is unknown (it is never observed). With the defaults (6 cues, 3 valid) the best a policy can score is 1 with both,
0.5 with memory but no mask (the cue, valid half the time) and 0.42 with the mask but no memory (the best fixed
preference among the valid actions), per episode.

State int64 [N, 3 + num_cues]: the cue, the step, the query flag, then one valid flag per action.
"""

from __future__ import annotations

import functools

import gymnasium as gym
import numba
import numpy as np

from rapidrl.envs.core.numba_env import NumbaEnv
from rapidrl.envs.masked import size_arg
from rapidrl.kernels.rng import next_uniform

__all__ = ["masked_cue_env"]

ENV_ID = "MaskedCue-v0"


CUE, T, QUERY, FLAGS = 0, 1, 2, 3  # state columns: the cue, the step, the query flag, then the valid flags


@numba.njit(cache=True)
def answer(state, i):
    """The first valid action at or after the cue (cyclically)."""
    k = state.shape[1] - FLAGS
    a = state[i, CUE]
    for _ in range(k):
        if state[i, FLAGS + a] != 0:
            return a
        a = a + 1 if a + 1 < k else 0
    return -1


@numba.njit(cache=True)
def reset(state, i, params, rng_key, rng_counter):
    k = state.shape[1] - FLAGS
    state[i, CUE] = min(int(k * next_uniform(rng_key, rng_counter, i)), k - 1)
    state[i, T] = 0
    state[i, QUERY] = 0
    for a in range(k):
        state[i, FLAGS + a] = 1


@numba.njit(cache=True)
def step(state, i, actions, params, elapsed, rng_key, rng_counter):
    k = state.shape[1] - FLAGS
    query = state[i, QUERY] != 0
    reward = 1.0 if query and actions[i] == answer(state, i) else 0.0
    state[i, T] += 1
    if state[i, T] == int(params[1]):  # the query step: a uniform subset of ``valid`` actions (selection sampling)
        state[i, QUERY] = 1
        need, left = int(params[2]), k
        for a in range(k):
            valid = need > 0 and next_uniform(rng_key, rng_counter, i) * left < need
            state[i, FLAGS + a] = valid
            need -= valid
            left -= 1
    return reward, query


@numba.njit(cache=True)
def observe(state, i, obs):
    obs[i, :] = 0.0
    if state[i, T] == 0:
        obs[i, state[i, CUE]] = 1.0
    obs[i, obs.shape[1] - 1] = state[i, QUERY]


@numba.njit(cache=True)
def mask(state, i, mask_out):
    for a in range(mask_out.shape[1]):
        mask_out[i, a] = state[i, FLAGS + a] != 0


def _check_params(params: np.ndarray, num_cues: int) -> None:
    delay, valid = params[1], params[2]
    if delay != int(delay) or delay < 1:
        raise ValueError(f"{ENV_ID}: delay must be an int >= 1, got {delay}")
    if valid != int(valid) or not 1 <= valid <= num_cues:
        raise ValueError(f"{ENV_ID}: valid must be an int in [1, {num_cues}], got {valid}")


@functools.cache
def masked_cue_env(num_cues: int = 6) -> NumbaEnv:
    """The definition with ``num_cues`` cues and actions (params: ``delay`` 2, ``valid`` 3)."""
    k = size_arg(ENV_ID, "num_cues", num_cues)
    return NumbaEnv(id=ENV_ID, observation_space=gym.spaces.Box(0.0, 1.0, (k + 1,), np.float32),
                    action_space=gym.spaces.Discrete(k), state_shape=(None, FLAGS + k), state_dtype=np.int64,
                    reset=reset, step=step, observe=observe, mask=mask, params={"delay": 2, "valid": k // 2},
                    check_params=functools.partial(_check_params, num_cues=k), reward_threshold=1.0)
