"""MinAtar SpaceInvaders for one env row: the rules of ``minatar.environments.space_invaders``, exactly.

The cannon (bottom row) shoots aliens (+1 each) of a 4x6 block that moves sideways and steps down at
the walls; the alien nearest the cannon shoots every 10 steps. The episode terminates when an alien
bullet or an alien reaches the cannon, or aliens step down from the bottom row. A cleared block comes
back; with ramping its move interval shrinks (12 -> 6). No random draws.

The three 10x10 maps (friendly bullets, alien bullets, aliens) are stored as 10 row bit masks each
(bit x = column x), so the package's ``np.roll`` (with its wrap-around) is a row rotation or a 10-bit
rotation. State row (int32; column 0 is the shared last action): cannon x, alien direction (-1/+1),
alien move interval, alien move timer, alien shot timer, ramp index, shot cool-down, then the masks.
Channels: 0 cannon, 1 alien, 2 alien moving left, 3 alien moving right, 4 friendly bullet, 5 enemy bullet.
"""

from __future__ import annotations

import numba

CHANNELS = 6
MINIMAL_ACTIONS = (0, 1, 3, 5)  # n, l, r, f
SHOT_COOL_DOWN = 5
ENEMY_MOVE_INTERVAL = 12
ENEMY_SHOT_INTERVAL = 10
POS, ALIEN_DIR, MOVE_INTERVAL, MOVE_TIMER, ALIEN_SHOT_TIMER, RAMP_INDEX, SHOT_TIMER = range(1, 8)
F_BULLETS = 8  # 10 row masks of friendly bullets
E_BULLETS = 18  # 10 row masks of enemy bullets
ALIENS = 28  # 10 row masks of aliens
STATE_SIZE = 38
FULL = 0x3FF
BLOCK = 0xFC  # columns 2..7


@numba.njit(cache=True, inline="always")
def _popcount(m):
    """Number of set bits of a 10-bit mask (branch-free SWAR sum)."""
    m = m - ((m >> 1) & 0x155)
    m = (m & 0x333) + ((m >> 2) & 0x333)
    m = (m + (m >> 4)) & 0x30F
    return (m + (m >> 8)) & 0x1F


@numba.njit(cache=True, inline="always")
def _alien_count(state, i):
    c = 0
    for y in range(10):
        c += _popcount(state[i, ALIENS + y])
    return c


@numba.njit(cache=True, inline="always")
def _fill_aliens(state, i):
    """``alien_map[0:4, 2:8] = 1``."""
    for y in range(4):
        state[i, ALIENS + y] |= BLOCK


@numba.njit(cache=True)
def reset(state, i, ramping, rng_key, rng_counter):
    """Start a new episode in row i (no draws)."""
    for k in range(F_BULLETS, STATE_SIZE):
        state[i, k] = 0
    _fill_aliens(state, i)
    state[i, POS] = 5
    state[i, ALIEN_DIR] = -1
    state[i, MOVE_INTERVAL] = ENEMY_MOVE_INTERVAL
    state[i, MOVE_TIMER] = ENEMY_MOVE_INTERVAL
    state[i, ALIEN_SHOT_TIMER] = ENEMY_SHOT_INTERVAL
    state[i, RAMP_INDEX] = 0
    state[i, SHOT_TIMER] = 0


@numba.njit(cache=True, inline="always")
def act(state, i, a, ramping, rng_key, rng_counter):
    """Advance row i by one step with full action ``a`` (0..5); returns (reward, terminal)."""
    terminal = False
    pos = state[i, POS]
    if a == 5 and state[i, SHOT_TIMER] == 0:
        state[i, F_BULLETS + 9] |= 1 << pos
        state[i, SHOT_TIMER] = SHOT_COOL_DOWN
    elif a == 1:
        pos = max(0, pos - 1)
    elif a == 3:
        pos = min(9, pos + 1)
    state[i, POS] = pos
    bit = 1 << pos

    # friendly bullets up one row (np.roll -1 on rows, then the wrapped row 9 cleared)
    for y in range(9):
        state[i, F_BULLETS + y] = state[i, F_BULLETS + y + 1]
    state[i, F_BULLETS + 9] = 0
    # enemy bullets down one row (np.roll +1, then the wrapped row 0 cleared)
    for y in range(9, 0, -1):
        state[i, E_BULLETS + y] = state[i, E_BULLETS + y - 1]
    state[i, E_BULLETS] = 0
    if state[i, E_BULLETS + 9] & bit:
        terminal = True

    if state[i, ALIENS + 9] & bit:
        terminal = True
    if state[i, MOVE_TIMER] == 0:
        state[i, MOVE_TIMER] = min(_alien_count(state, i), state[i, MOVE_INTERVAL])
        left = 0
        right = 0
        for y in range(10):
            left |= state[i, ALIENS + y] & 1
            right |= state[i, ALIENS + y] & (1 << 9)
        d = state[i, ALIEN_DIR]
        if (left and d < 0) or (right and d > 0):
            state[i, ALIEN_DIR] = -d
            if state[i, ALIENS + 9]:
                terminal = True
            last = state[i, ALIENS + 9]  # np.roll(+1, rows) wraps row 9 to row 0
            for y in range(9, 0, -1):
                state[i, ALIENS + y] = state[i, ALIENS + y - 1]
            state[i, ALIENS] = last
        else:
            for y in range(10):
                m = state[i, ALIENS + y]
                if d > 0:  # np.roll(+1, columns), 10-bit rotation
                    state[i, ALIENS + y] = ((m << 1) | (m >> 9)) & FULL
                else:
                    state[i, ALIENS + y] = (m >> 1) | ((m & 1) << 9)
        if state[i, ALIENS + 9] & bit:
            terminal = True
    if state[i, ALIEN_SHOT_TIMER] == 0:
        state[i, ALIEN_SHOT_TIMER] = ENEMY_SHOT_INTERVAL
        # the alien nearest the cannon: columns by distance (ties: the left one), lowest alien in it
        for k in range(19):
            dist = k // 2
            x = pos - dist if k % 2 == 0 else pos + dist
            if (k % 2 == 1 and dist == 0) or x < 0 or x > 9:
                continue
            found = -1
            for y in range(9, -1, -1):
                if state[i, ALIENS + y] & (1 << x):
                    found = y
                    break
            if found >= 0:
                state[i, E_BULLETS + found] |= 1 << x
                break

    reward = 0
    for y in range(10):
        kill = state[i, ALIENS + y] & state[i, F_BULLETS + y]
        if kill:
            reward += _popcount(kill)
            state[i, ALIENS + y] &= ~kill
            state[i, F_BULLETS + y] &= ~kill

    if state[i, SHOT_TIMER] > 0:
        state[i, SHOT_TIMER] -= 1
    state[i, MOVE_TIMER] -= 1
    state[i, ALIEN_SHOT_TIMER] -= 1
    if _alien_count(state, i) == 0:
        if state[i, MOVE_INTERVAL] > 6 and ramping:
            state[i, MOVE_INTERVAL] -= 1
            state[i, RAMP_INDEX] += 1
        _fill_aliens(state, i)
    return reward, terminal


@numba.njit(cache=True)
def _draw_mask(o, channel, y, m):
    """Set o[channel, y, x] for every bit x of the row mask m."""
    x = 0
    while m:
        if m & 1:
            o[channel, y, x] = 1
        m >>= 1
        x += 1


@numba.njit(cache=True)
def observe(state, i, obs):
    """obs[i] (uint8[6, 10, 10]) := the package's ``state()`` of row i, channels first."""
    o = obs[i]
    o[:] = 0
    moving = 2 if state[i, ALIEN_DIR] < 0 else 3
    for y in range(10):
        al = state[i, ALIENS + y]
        if al:
            _draw_mask(o, 1, y, al)
            _draw_mask(o, moving, y, al)
        _draw_mask(o, 4, y, state[i, F_BULLETS + y])
        _draw_mask(o, 5, y, state[i, E_BULLETS + y])
    o[0, 9, state[i, POS]] = 1
