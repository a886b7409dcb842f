"""MinAtar Breakout for one env row: the rules of ``minatar.environments.breakout``, exactly.

The paddle (bottom row) bounces a ball that moves along diagonals and breaks 3 rows of bricks (+1 each);
when no brick is left and the ball reaches the bottom row the bricks come back. The episode terminates
when the ball reaches the bottom row beside the paddle. No random draws except at reset (the ball starts
top-left moving down-right or top-right moving down-left: one ``randint(2)``). No difficulty ramp.

State row (int32, see ``rapidrl.envs.minatar.vec`` for the shared column 0 = last action):
ball x/y, ball direction (0 up-left, 1 up-right, 2 down-right, 3 down-left), paddle x, the strike flag
(a brick was hit last step: the next brick the ball enters is not broken), the ball's previous x/y (the
trail channel), the number of bricks, then the 10x10 brick map (row-major, 1 = brick).
Channels: 0 paddle, 1 ball, 2 trail, 3 brick.
"""

from __future__ import annotations

import numba

from rapidrl.envs.minatar.draws import randint

CHANNELS = 4
MINIMAL_ACTIONS = (0, 1, 3)  # n, l, r
BALL_X, BALL_Y, BALL_DIR, POS, STRIKE, LAST_X, LAST_Y, BRICK_COUNT = range(1, 9)
BRICKS = 9  # first of the 100 brick cells (y * 10 + x)
STATE_SIZE = BRICKS + 100


@numba.njit(cache=True, inline="always")
def _fill_bricks(state, i):
    """Bricks on rows 1-3, as ``brick_map[1:4, :] = 1``."""
    for k in range(10, 40):
        state[i, BRICKS + k] = 1
    state[i, BRICK_COUNT] = 30


@numba.njit(cache=True)
def reset(state, i, ramping, rng_key, rng_counter):
    """Start a new episode in row i (one draw: which top corner the ball starts from)."""
    for k in range(100):
        state[i, BRICKS + k] = 0
    _fill_bricks(state, i)
    state[i, BALL_Y] = 3
    if randint(rng_key, rng_counter, i, 0, 2) == 0:
        state[i, BALL_X] = 0
        state[i, BALL_DIR] = 2
    else:
        state[i, BALL_X] = 9
        state[i, BALL_DIR] = 3
    state[i, POS] = 4
    state[i, STRIKE] = 0
    state[i, LAST_X] = state[i, BALL_X]
    state[i, LAST_Y] = 3


@numba.njit(cache=True, inline="always")
def act(state, i, a, ramping, rng_key, rng_counter):
    """Advance row i by one step with full action ``a`` (0..5); returns (reward, terminal)."""
    reward = 0
    terminal = False
    pos = state[i, POS]
    if a == 1:
        pos = max(0, pos - 1)
    elif a == 3:
        pos = min(9, pos + 1)
    state[i, POS] = pos

    ball_x = state[i, BALL_X]
    ball_y = state[i, BALL_Y]
    d = state[i, BALL_DIR]
    state[i, LAST_X] = ball_x
    state[i, LAST_Y] = ball_y
    new_x = ball_x - 1 if d == 0 or d == 3 else ball_x + 1
    new_y = ball_y - 1 if d <= 1 else ball_y + 1

    strike_toggle = False
    if new_x < 0 or new_x > 9:
        new_x = 0 if new_x < 0 else 9
        d = d ^ 1  # [1, 0, 3, 2][d]
    if new_y < 0:
        new_y = 0
        d = 3 - d  # [3, 2, 1, 0][d]
    elif state[i, BRICKS + new_y * 10 + new_x] == 1:
        strike_toggle = True
        if state[i, STRIKE] == 0:
            reward += 1
            state[i, STRIKE] = 1
            state[i, BRICKS + new_y * 10 + new_x] = 0
            state[i, BRICK_COUNT] -= 1
            new_y = ball_y
            d = 3 - d
    elif new_y == 9:
        if state[i, BRICK_COUNT] == 0:
            _fill_bricks(state, i)
        if ball_x == pos:
            d = 3 - d
            new_y = ball_y
        elif new_x == pos:
            d = (d + 2) & 3  # [2, 3, 0, 1][d]
            new_y = ball_y
        else:
            terminal = True
    if not strike_toggle:
        state[i, STRIKE] = 0
    state[i, BALL_DIR] = d
    state[i, BALL_X] = new_x
    state[i, BALL_Y] = new_y
    return reward, terminal


@numba.njit(cache=True, inline="always")
def observe(state, i, obs):
    """obs[i] (uint8[4, 10, 10]) := the package's ``state()`` of row i, channels first."""
    o = obs[i]
    o[:] = 0
    for y in range(1, 4):  # bricks only ever exist on rows 1-3 (measured: 2x faster than all 100 cells)
        for x in range(10):
            o[3, y, x] = state[i, BRICKS + y * 10 + x]
    o[1, state[i, BALL_Y], state[i, BALL_X]] = 1
    o[0, 9, state[i, POS]] = 1
    o[2, state[i, LAST_Y], state[i, LAST_X]] = 1
