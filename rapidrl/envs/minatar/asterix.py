"""MinAtar Asterix for one env row: the rules of ``minatar.environments.asterix``, exactly.

The player moves in rows 1-8; enemies and gold enter rows 1-8 (one per row) from the left or right
edge and cross the screen. Touching gold gives +1 and removes it; touching an enemy terminates the
episode. With ramping, every 100 steps the spawn interval (10 -> 1) and, every other time, the move
interval (5 -> 1) shrink.

Draws (``draws.py``) at each spawn: ``rand()`` (from the left if < 1/2), ``rand()`` (gold if < 1/3), then
``randint(number of free rows)`` (which free row) if a row is free.

State row (int32; column 0 is the shared last action): player x/y, spawn interval, spawn timer, move
interval, move timer, ramp timer, ramp index, then 8 entity slots of (present, x, moving right, gold)
(slot k is row k + 1). Channels: 0 player, 1 enemy, 2 trail, 3 gold.
"""

from __future__ import annotations

import numba

from rapidrl.envs.minatar.draws import rand, randint
from rapidrl.envs.minatar.moves import moved

CHANNELS = 4
MINIMAL_ACTIONS = (0, 1, 2, 3, 4)  # n, l, u, r, d
RAMP_INTERVAL = 100
INIT_SPAWN_SPEED = 10
INIT_MOVE_INTERVAL = 5
PLAYER_X, PLAYER_Y, SPAWN_SPEED, SPAWN_TIMER, MOVE_SPEED, MOVE_TIMER, RAMP_TIMER, RAMP_INDEX = range(1, 9)
ENTITIES = 9  # slot k: ENTITIES + 4k + (0: present, 1: x, 2: moving right, 3: gold)
STATE_SIZE = ENTITIES + 32


@numba.njit(cache=True, inline="always")
def _spawn_entity(state, i, rng_key, rng_counter):
    lr = rand(rng_key, rng_counter, i) < 1 / 2
    is_gold = rand(rng_key, rng_counter, i) < 1 / 3
    free = 0
    for k in range(8):
        free += state[i, ENTITIES + 4 * k] == 0
    if free == 0:
        return
    pick = randint(rng_key, rng_counter, i, 0, free)
    for k in range(8):
        e = ENTITIES + 4 * k
        if state[i, e] == 0:
            if pick == 0:
                state[i, e] = 1
                state[i, e + 1] = 0 if lr else 9
                state[i, e + 2] = lr
                state[i, e + 3] = is_gold
                return
            pick -= 1


@numba.njit(cache=True)
def reset(state, i, ramping, rng_key, rng_counter):
    """Start a new episode in row i (no draws)."""
    state[i, PLAYER_X] = 5
    state[i, PLAYER_Y] = 5
    for k in range(ENTITIES, STATE_SIZE):
        state[i, k] = 0
    state[i, SPAWN_SPEED] = INIT_SPAWN_SPEED
    state[i, SPAWN_TIMER] = INIT_SPAWN_SPEED
    state[i, MOVE_SPEED] = INIT_MOVE_INTERVAL
    state[i, MOVE_TIMER] = INIT_MOVE_INTERVAL
    state[i, RAMP_TIMER] = RAMP_INTERVAL
    state[i, RAMP_INDEX] = 0


@numba.njit(cache=True, inline="always")
def act(state, i, a, ramping, rng_key, rng_counter):
    """Advance row i by one step with full action ``a`` (0..5); returns (reward, terminal)."""
    reward = 0
    terminal = False
    if state[i, SPAWN_TIMER] == 0:
        _spawn_entity(state, i, rng_key, rng_counter)
        state[i, SPAWN_TIMER] = state[i, SPAWN_SPEED]
    px = state[i, PLAYER_X]
    py = state[i, PLAYER_Y]
    px, py = moved(a, px, py, 1)
    state[i, PLAYER_X] = px
    state[i, PLAYER_Y] = py

    for k in range(8):
        e = ENTITIES + 4 * k
        if state[i, e] and state[i, e + 1] == px and k + 1 == py:
            if state[i, e + 3]:
                state[i, e] = 0
                reward += 1
            else:
                terminal = True
    if state[i, MOVE_TIMER] == 0:
        state[i, MOVE_TIMER] = state[i, MOVE_SPEED]
        for k in range(8):
            e = ENTITIES + 4 * k
            if state[i, e]:
                x = state[i, e + 1] + (1 if state[i, e + 2] else -1)
                state[i, e + 1] = x
                if x < 0 or x > 9:
                    state[i, e] = 0
                elif x == px and k + 1 == py:
                    if state[i, e + 3]:
                        state[i, e] = 0
                        reward += 1
                    else:
                        terminal = True
    state[i, SPAWN_TIMER] -= 1
    state[i, MOVE_TIMER] -= 1

    if ramping and (state[i, SPAWN_SPEED] > 1 or state[i, MOVE_SPEED] > 1):
        if state[i, RAMP_TIMER] >= 0:
            state[i, RAMP_TIMER] -= 1
        else:
            if state[i, MOVE_SPEED] > 1 and state[i, RAMP_INDEX] % 2:
                state[i, MOVE_SPEED] -= 1
            if state[i, SPAWN_SPEED] > 1:
                state[i, SPAWN_SPEED] -= 1
            state[i, RAMP_INDEX] += 1
            state[i, RAMP_TIMER] = RAMP_INTERVAL
    return reward, terminal


@numba.njit(cache=True)
def observe(state, i, obs):
    """obs[i] (uint8[4, 10, 10]) := the package's ``state()`` of row i, channels first."""
    o = obs[i]
    o[:] = 0
    o[0, state[i, PLAYER_Y], state[i, PLAYER_X]] = 1
    for k in range(8):
        e = ENTITIES + 4 * k
        if state[i, e]:
            x = state[i, e + 1]
            o[3 if state[i, e + 3] else 1, k + 1, x] = 1
            back_x = x - 1 if state[i, e + 2] else x + 1
            if 0 <= back_x <= 9:
                o[2, k + 1, back_x] = 1
    return
