"""MinAtar Freeway for one env row: the rules of ``minatar.environments.freeway``, exactly.

The chicken (column 4) crosses 8 lanes of cars; reaching the top row gives +1, sends it back to the
bottom and re-draws every car's speed and direction. A car hitting the chicken sends it to the bottom.
The episode terminates after 2500 steps (the package's own timer: 2501 steps, reported as terminated,
not truncated). No difficulty ramp.

Draws (``draws.py``): each re-draw of the cars is ``randint(1, 6, 8)`` (8 speeds) then ``rand(8)``
(8 directions, ``sign(u - 0.5)``; u == 0.5 exactly, probability 2**-53, would give a car of speed 0,
which the package cannot draw either).

State row (int32; column 0 is the shared last action): chicken y, move cool-down, termination timer,
then 8 cars of (x, timer, speed) (car k drives in row k + 1; negative speed = leftwards).
Channels: 0 chicken, 1 car, 2..6 the car's trail by |speed| 1..5.
"""

from __future__ import annotations

import numba

from rapidrl.envs.minatar.draws import rand, randint

CHANNELS = 7
MINIMAL_ACTIONS = (0, 2, 4)  # n, u, d
PLAYER_SPEED = 3
TIME_LIMIT = 2500
POS, MOVE_TIMER, TERMINATE_TIMER = range(1, 4)
CARS = 4  # car k: CARS + 3k + (0: x, 1: timer, 2: speed)
STATE_SIZE = CARS + 24


@numba.njit(cache=True, inline="always")
def _randomize_cars(state, i, initialize, rng_key, rng_counter):
    """New speeds and directions for the 8 cars (and x = 0 when ``initialize``)."""
    for k in range(8):
        state[i, CARS + 3 * k + 2] = randint(rng_key, rng_counter, i, 1, 6)
    for k in range(8):
        u = rand(rng_key, rng_counter, i) - 0.5
        s = state[i, CARS + 3 * k + 2]
        s = s if u > 0 else (-s if u < 0 else 0)
        state[i, CARS + 3 * k + 2] = s
        state[i, CARS + 3 * k + 1] = abs(s)
        if initialize:
            state[i, CARS + 3 * k] = 0


@numba.njit(cache=True)
def reset(state, i, ramping, rng_key, rng_counter):
    """Start a new episode in row i (16 draws: the cars)."""
    _randomize_cars(state, i, True, rng_key, rng_counter)
    state[i, POS] = 9
    state[i, MOVE_TIMER] = PLAYER_SPEED
    state[i, TERMINATE_TIMER] = TIME_LIMIT


@numba.njit(cache=True, inline="always")
def act(state, i, a, ramping, rng_key, rng_counter):
    """Advance row i by one step with full action ``a`` (0..5); returns (reward, terminal)."""
    reward = 0
    pos = state[i, POS]
    if a == 2 and state[i, MOVE_TIMER] == 0:
        state[i, MOVE_TIMER] = PLAYER_SPEED
        pos = max(0, pos - 1)
    elif a == 4 and state[i, MOVE_TIMER] == 0:
        state[i, MOVE_TIMER] = PLAYER_SPEED
        pos = min(9, pos + 1)
    if pos == 0:
        reward += 1
        _randomize_cars(state, i, False, rng_key, rng_counter)
        pos = 9
    for k in range(8):
        c = CARS + 3 * k
        y = k + 1
        if state[i, c] == 4 and y == pos:
            pos = 9
        if state[i, c + 1] == 0:
            speed = state[i, c + 2]
            state[i, c + 1] = abs(speed)
            x = state[i, c] + (1 if speed > 0 else -1)
            if x < 0:
                x = 9
            elif x > 9:
                x = 0
            state[i, c] = x
            if x == 4 and y == pos:
                pos = 9
        else:
            state[i, c + 1] -= 1
    state[i, POS] = pos
    if state[i, MOVE_TIMER] > 0:
        state[i, MOVE_TIMER] -= 1
    state[i, TERMINATE_TIMER] -= 1
    return reward, state[i, TERMINATE_TIMER] < 0


@numba.njit(cache=True)
def observe(state, i, obs):
    """obs[i] (uint8[7, 10, 10]) := the package's ``state()`` of row i, channels first."""
    o = obs[i]
    o[:] = 0
    o[0, state[i, POS], 4] = 1
    for k in range(8):
        x = state[i, CARS + 3 * k]
        speed = state[i, CARS + 3 * k + 2]
        y = k + 1
        o[1, y, x] = 1
        back_x = x - 1 if speed > 0 else x + 1
        if back_x < 0:
            back_x = 9
        elif back_x > 9:
            back_x = 0
        if speed != 0:
            o[1 + abs(speed), y, back_x] = 1
