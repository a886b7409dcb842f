"""The Taxi env of the custom-env tutorial (docs/custom-envs.md), as the ``custom`` benchmark suite measures it
(``rapidrl.benchmarks.bench_custom_env``): the tutorial's definition blocks, verbatim below the marker line, so that
the suite runs from an installed package too. ``tests/test_custom_envs_doc.py`` fails when this file and the doc
differ: copy the doc's blocks (all but those that check, align and train) here.
"""

# -- docs/custom-envs.md, verbatim --
import gymnasium as gym
import numba
import numpy as np

import rapidrl as rr
from rapidrl.kernels.rng import next_uniform

# Gymnasium's Taxi map (gymnasium/envs/toy_text/taxi.py): 5x5 cells, ':' between cells a taxi can cross, '|' walls.
MAP = ["+---------+",
       "|R: | : :G|",
       "| : | : : |",
       "| : : : : |",
       "| | : | : |",
       "|Y| : |B: |",
       "+---------+"]
EAST = np.array([[MAP[1 + r][2 * c + 2] == ":" for c in range(5)] for r in range(5)])  # may move east from (r, c)
WEST = np.array([[MAP[1 + r][2 * c] == ":" for c in range(5)] for r in range(5)])
STANDS = np.array([[0, 0], [0, 4], [4, 0], [4, 3]])  # R, G, Y, B as (row, column)
ROW, COL, PASSENGER, DEST = range(4)  # the state's columns
IN_TAXI = 4


@numba.njit(cache=True)
def reset(state, i, params, rng_key, rng_counter):
    """Env i's first state: the taxi anywhere, the passenger at a stand, the destination at another stand (uniform
    over these 300 states, Gymnasium's initial distribution)."""
    state[i, ROW] = int(5 * next_uniform(rng_key, rng_counter, i))
    state[i, COL] = int(5 * next_uniform(rng_key, rng_counter, i))
    state[i, PASSENGER] = int(4 * next_uniform(rng_key, rng_counter, i))
    dest = int(3 * next_uniform(rng_key, rng_counter, i))
    state[i, DEST] = dest + (dest >= state[i, PASSENGER])


@numba.njit(cache=True)
def step(state, i, actions, params, elapsed, rng_key, rng_counter):
    """Env i takes actions[i] (0 south, 1 north, 2 east, 3 west, 4 pick up, 5 drop off); returns (reward,
    terminated): -1 a step, -10 for a pick-up or drop-off in the wrong place, 20 for the delivery (the end)."""
    row, col, passenger, dest = state[i, ROW], state[i, COL], state[i, PASSENGER], state[i, DEST]
    a = actions[i]
    reward, terminated = -1.0, False
    if a == 0:
        row = min(row + 1, 4)
    elif a == 1:
        row = max(row - 1, 0)
    elif a == 2 and EAST[row, col]:
        col += 1
    elif a == 3 and WEST[row, col]:
        col -= 1
    elif a == 4:
        if passenger < IN_TAXI and row == STANDS[passenger, 0] and col == STANDS[passenger, 1]:
            passenger = IN_TAXI
        else:
            reward = -10.0
    elif a == 5:
        stand = -1
        for k in range(4):
            if row == STANDS[k, 0] and col == STANDS[k, 1]:
                stand = k
        if passenger == IN_TAXI and stand == dest:
            passenger, reward, terminated = dest, 20.0, True
        elif passenger == IN_TAXI and stand >= 0:
            passenger = stand  # dropped at another stand
        else:
            reward = -10.0
    state[i, ROW], state[i, COL], state[i, PASSENGER] = row, col, passenger
    return reward, terminated


@numba.njit(cache=True)
def observe(state, i, obs):
    """obs[i] = one-hot row (5) | column (5) | passenger (5) | destination (4): what an MLP learns from."""
    obs[i, :] = 0.0
    obs[i, state[i, ROW]] = 1.0
    obs[i, 5 + state[i, COL]] = 1.0
    obs[i, 10 + state[i, PASSENGER]] = 1.0
    obs[i, 15 + state[i, DEST]] = 1.0


TAXI = rr.envs.NumbaEnv(
    id="NumbaTaxi-v4",
    observation_space=gym.spaces.Box(0.0, 1.0, (19,), np.float32),
    action_space=gym.spaces.Discrete(6),
    state_shape=(None, 4),     # [N, 4]: env i is row i
    state_dtype=np.int64,
    reset=reset,
    step=step,
    observe=observe,
    max_episode_steps=200,     # Taxi-v4's TimeLimit
    reward_threshold=8.0,
)
envs = TAXI.make_vec(64, seed=0)          # a NumbaVecEnv: gymnasium.vector.VectorEnv
obs, info = envs.reset(seed=0)            # obs: float32 [64, 19], a view the next call overwrites
obs, rewards, terminated, truncated, info = envs.step(np.zeros(64, np.int64))
