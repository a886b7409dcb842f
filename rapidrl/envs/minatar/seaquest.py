"""MinAtar Seaquest for one env row: the rules of ``minatar.environments.seaquest``, exactly.

The submarine shoots enemy fish and subs (+1 each), avoids them and the subs' bullets, collects divers
(up to 6) and must surface before its oxygen (200 steps) runs out: surfacing with no diver ends the
episode; with 6 it gives ``oxygen * 10 // 200`` and empties the diver count; each surfacing refills the
oxygen and (ramping) speeds enemies up.

Exactness with Python lists. The package keeps fish, subs, divers and both kinds of bullets in Python
lists, iterates them with ``reversed(...)`` while removing items, and removes with ``list.remove``
(the first item *equal* to the given one). The order of items changes what happens (which bullet hits
first, the order of later removals), so each list is emulated as an ordered fixed-capacity array:
``remove`` deletes the first slot with equal fields, and the reversed iteration follows CPython's
``listreviterator`` (an index that counts down and stops once it is past the end). Quirks reproduced:
a sub removed this step still fires if its shot timer is due (the bullet leaves the screen the same
step only when the sub left it); surfacing with 6 divers leaves the count at -1 (0, then the
unconditional ``-= 1``), after which surfacing is never terminal.

Draws (``draws.py``): an enemy spawn is ``rand()`` (from the left if < 1/2), ``rand()`` (sub if < 1/3),
``randint(1, 9)`` (row); a diver spawn is ``rand()``, ``randint(1, 9)``. Enemy spawns come first.

State row (int32; column 0 is the shared last action): the scalars below, the list lengths, then the
lists: friendly bullets (x, y, moving right), enemy bullets (same), fish (x, y, moving right, move
timer), subs (x, y, moving right, move timer, shot timer), divers (x, y, moving right, move timer).
Capacities bound the live counts with margin (at most one enemy spawns per step and lives at most
~30 steps at the fastest speeds; a sub fires every 11 steps; a diver spawns every 30 steps); an
append to a full list is dropped, which the bounds keep from happening.
Channels: 0 sub front, 1 sub back, 2 friendly bullet, 3 trail, 4 enemy bullet, 5 fish, 6 enemy sub,
7 oxygen gauge, 8 diver gauge, 9 diver.
"""

from __future__ import annotations

import numba

from rapidrl.envs.minatar.draws import rand, randint
from rapidrl.envs.minatar.moves import moved

CHANNELS = 10
MINIMAL_ACTIONS = (0, 1, 2, 3, 4, 5)
RAMP_INTERVAL = 100
MAX_OXYGEN = 200
INIT_SPAWN_SPEED = 20
DIVER_SPAWN_SPEED = 30
INIT_MOVE_INTERVAL = 5
SHOT_COOL_DOWN = 5
ENEMY_SHOT_INTERVAL = 10
DIVER_MOVE_INTERVAL = 5

(OXYGEN, DIVER_COUNT, SUB_X, SUB_Y, SUB_OR, E_SPAWN_SPEED, E_SPAWN_TIMER, D_SPAWN_TIMER, MOVE_SPEED,
 RAMP_INDEX, SHOT_TIMER, SURFACE, N_FB, N_EB, N_FISH, N_SUBS, N_DIVERS) = range(1, 18)
CAP_FB, CAP_EB, CAP_FISH, CAP_SUBS, CAP_DIVERS = 8, 96, 64, 64, 8
FB = 18  # friendly bullets: 3 fields
EB = FB + 3 * CAP_FB  # enemy bullets: 3 fields
FISH = EB + 3 * CAP_EB  # 4 fields
SUBS = FISH + 4 * CAP_FISH  # 5 fields
DIVERS = SUBS + 5 * CAP_SUBS  # 4 fields
STATE_SIZE = DIVERS + 4 * CAP_DIVERS


@numba.njit(cache=True, inline="always")
def _append(state, i, base, nf, n_col, cap, v0, v1, v2, v3, v4):
    """``list.append([v0, ..., v_{nf-1}])`` (dropped if the list is full)."""
    n = state[i, n_col]
    if n >= cap:
        return
    s = base + nf * n
    state[i, s] = v0
    state[i, s + 1] = v1
    state[i, s + 2] = v2
    if nf > 3:
        state[i, s + 3] = v3
    if nf > 4:
        state[i, s + 4] = v4
    state[i, n_col] = n + 1


@numba.njit(cache=True, inline="always")
def _remove_equal(state, i, base, nf, n_col, k):
    """``list.remove(item k)``: delete the first item whose fields equal item k's; returns its index."""
    n = state[i, n_col]
    j = 0
    for j in range(k + 1):
        same = True
        for f in range(nf):
            if state[i, base + nf * j + f] != state[i, base + nf * k + f]:
                same = False
                break
        if same:
            break
    for m in range(base + nf * j, base + nf * (n - 1)):
        state[i, m] = state[i, m + nf]
    state[i, n_col] = n - 1
    return j


@numba.njit(cache=True, inline="always")
def _after_delete(cur, j):
    """Position of the item at ``cur`` after item ``j`` was deleted (-1: it was the deleted one)."""
    if cur == j:
        return -1
    return cur - 1 if j < cur else cur


@numba.njit(cache=True, inline="always")
def _step_x(x, right):
    return x + 1 if right else x - 1


@numba.njit(cache=True)
def reset(state, i, ramping, rng_key, rng_counter):
    """Start a new episode in row i (no draws)."""
    for k in range(1, STATE_SIZE):
        state[i, k] = 0
    state[i, OXYGEN] = MAX_OXYGEN
    state[i, SUB_X] = 5
    state[i, E_SPAWN_SPEED] = INIT_SPAWN_SPEED
    state[i, E_SPAWN_TIMER] = INIT_SPAWN_SPEED
    state[i, D_SPAWN_TIMER] = DIVER_SPAWN_SPEED
    state[i, MOVE_SPEED] = INIT_MOVE_INTERVAL
    state[i, SURFACE] = 1


@numba.njit(cache=True)
def _spawn_enemy(state, i, rng_key, rng_counter):
    lr = rand(rng_key, rng_counter, i) < 1 / 2
    is_sub = rand(rng_key, rng_counter, i) < 1 / 3
    x = 0 if lr else 9
    y = randint(rng_key, rng_counter, i, 1, 9)
    for k in range(state[i, N_SUBS]):  # no spawn in a row with an enemy going the other way
        s = SUBS + 5 * k
        if state[i, s + 1] == y and state[i, s + 2] != lr:
            return
    for k in range(state[i, N_FISH]):
        s = FISH + 4 * k
        if state[i, s + 1] == y and state[i, s + 2] != lr:
            return
    if is_sub:
        _append(state, i, SUBS, 5, N_SUBS, CAP_SUBS, x, y, lr, state[i, MOVE_SPEED], ENEMY_SHOT_INTERVAL)
    else:
        _append(state, i, FISH, 4, N_FISH, CAP_FISH, x, y, lr, state[i, MOVE_SPEED], 0)


@numba.njit(cache=True)
def _spawn_diver(state, i, rng_key, rng_counter):
    lr = rand(rng_key, rng_counter, i) < 1 / 2
    y = randint(rng_key, rng_counter, i, 1, 9)
    _append(state, i, DIVERS, 4, N_DIVERS, CAP_DIVERS, 0 if lr else 9, y, lr, DIVER_MOVE_INTERVAL, 0)


@numba.njit(cache=True)
def _hit_by_friendly_bullet(state, i, base, nf, n_col, cur, x, y):
    """The enemy list item ``cur`` at (x, y) meets a friendly bullet (first in list order): both removed.

    Returns (reward, new position of ``cur``).
    """
    for k in range(state[i, N_FB]):
        b = FB + 3 * k
        if state[i, b] == x and state[i, b + 1] == y:
            j = _remove_equal(state, i, base, nf, n_col, cur)
            cur = _after_delete(cur, j)
            _remove_equal(state, i, FB, 3, N_FB, k)
            return 1, cur
    return 0, cur


@numba.njit(cache=True)
def _move_friendly_bullets(state, i):
    """The package's reversed loop over friendly bullets: move, leave the screen or hit fish, then subs."""
    reward = 0
    idx = state[i, N_FB] - 1
    while 0 <= idx < state[i, N_FB]:
        b = FB + 3 * idx
        x = _step_x(state[i, b], state[i, b + 2])
        state[i, b] = x
        y = state[i, b + 1]
        if x < 0 or x > 9:
            _remove_equal(state, i, FB, 3, N_FB, idx)
        else:
            removed = False
            for k in range(state[i, N_FISH]):
                f = FISH + 4 * k
                if state[i, f] == x and state[i, f + 1] == y:
                    _remove_equal(state, i, FISH, 4, N_FISH, k)
                    _remove_equal(state, i, FB, 3, N_FB, idx)
                    reward += 1
                    removed = True
                    break
            if not removed:
                for k in range(state[i, N_SUBS]):
                    s = SUBS + 5 * k
                    if state[i, s] == x and state[i, s + 1] == y:
                        _remove_equal(state, i, SUBS, 5, N_SUBS, k)
                        _remove_equal(state, i, FB, 3, N_FB, idx)
                        reward += 1
                        break
        idx -= 1
    return reward


@numba.njit(cache=True)
def _move_divers(state, i, sx, sy):
    idx = state[i, N_DIVERS] - 1
    while 0 <= idx < state[i, N_DIVERS]:
        d = DIVERS + 4 * idx
        if state[i, d] == sx and state[i, d + 1] == sy and state[i, DIVER_COUNT] < 6:
            _remove_equal(state, i, DIVERS, 4, N_DIVERS, idx)
            state[i, DIVER_COUNT] += 1
        elif state[i, d + 3] == 0:
            state[i, d + 3] = DIVER_MOVE_INTERVAL
            x = _step_x(state[i, d], state[i, d + 2])
            state[i, d] = x
            if x < 0 or x > 9:
                _remove_equal(state, i, DIVERS, 4, N_DIVERS, idx)
            elif x == sx and state[i, d + 1] == sy and state[i, DIVER_COUNT] < 6:
                _remove_equal(state, i, DIVERS, 4, N_DIVERS, idx)
                state[i, DIVER_COUNT] += 1
        else:
            state[i, d + 3] -= 1
        idx -= 1


@numba.njit(cache=True)
def _move_subs(state, i, sx, sy):
    """The reversed loop over enemy subs; returns (reward, terminal)."""
    reward = 0
    terminal = False
    idx = state[i, N_SUBS] - 1
    while 0 <= idx < state[i, N_SUBS]:
        cur = idx
        s = SUBS + 5 * cur
        x = state[i, s]
        y = state[i, s + 1]
        right = state[i, s + 2]
        shot = state[i, s + 4]
        if x == sx and y == sy:
            terminal = True
        if state[i, s + 3] == 0:
            state[i, s + 3] = state[i, MOVE_SPEED]
            x = _step_x(x, right)
            state[i, s] = x
            if x < 0 or x > 9:
                cur = _after_delete(cur, _remove_equal(state, i, SUBS, 5, N_SUBS, cur))
            elif x == sx and y == sy:
                terminal = True
            else:
                r, cur = _hit_by_friendly_bullet(state, i, SUBS, 5, N_SUBS, cur, x, y)
                reward += r
        else:
            state[i, s + 3] -= 1
        # the package updates the shot timer of the sub object even if it just left the list
        if shot == 0:
            shot = ENEMY_SHOT_INTERVAL
            _append(state, i, EB, 3, N_EB, CAP_EB, x, y, right, 0, 0)
        else:
            shot -= 1
        if cur >= 0:
            state[i, SUBS + 5 * cur + 4] = shot
        idx -= 1
    return reward, terminal


@numba.njit(cache=True)
def _move_enemy_bullets(state, i, sx, sy):
    terminal = False
    idx = state[i, N_EB] - 1
    while 0 <= idx < state[i, N_EB]:
        b = EB + 3 * idx
        if state[i, b] == sx and state[i, b + 1] == sy:
            terminal = True
        x = _step_x(state[i, b], state[i, b + 2])
        state[i, b] = x
        if x < 0 or x > 9:
            _remove_equal(state, i, EB, 3, N_EB, idx)
        elif x == sx and state[i, b + 1] == sy:
            terminal = True
        idx -= 1
    return terminal


@numba.njit(cache=True)
def _move_fish(state, i, sx, sy):
    """The reversed loop over fish; returns (reward, terminal)."""
    reward = 0
    terminal = False
    idx = state[i, N_FISH] - 1
    while 0 <= idx < state[i, N_FISH]:
        f = FISH + 4 * idx
        x = state[i, f]
        y = state[i, f + 1]
        if x == sx and y == sy:
            terminal = True
        if state[i, f + 3] == 0:
            state[i, f + 3] = state[i, MOVE_SPEED]
            x = _step_x(x, state[i, f + 2])
            state[i, f] = x
            if x < 0 or x > 9:
                _remove_equal(state, i, FISH, 4, N_FISH, idx)
            elif x == sx and y == sy:
                terminal = True
            else:
                r, _ = _hit_by_friendly_bullet(state, i, FISH, 4, N_FISH, idx, x, y)
                reward += r
        else:
            state[i, f + 3] -= 1
        idx -= 1
    return reward, terminal


@numba.njit(cache=True)
def _surface(state, i, ramping):
    """The package's ``_surface``: reward for 6 divers, oxygen refill, one diver less, ramp."""
    state[i, SURFACE] = 1
    reward = 0
    if state[i, DIVER_COUNT] == 6:
        state[i, DIVER_COUNT] = 0
        reward = state[i, OXYGEN] * 10 // MAX_OXYGEN
    state[i, OXYGEN] = MAX_OXYGEN
    state[i, DIVER_COUNT] -= 1
    if ramping and (state[i, E_SPAWN_SPEED] > 1 or state[i, MOVE_SPEED] > 2):
        if state[i, MOVE_SPEED] > 2 and state[i, RAMP_INDEX] % 2:
            state[i, MOVE_SPEED] -= 1
        if state[i, E_SPAWN_SPEED] > 1:
            state[i, E_SPAWN_SPEED] -= 1
        state[i, RAMP_INDEX] += 1
    return reward


@numba.njit(cache=True)
def act(state, i, a, ramping, rng_key, rng_counter):
    """Advance row i by one step with full action ``a`` (0..5); returns (reward, terminal)."""
    if state[i, E_SPAWN_TIMER] == 0:
        _spawn_enemy(state, i, rng_key, rng_counter)
        state[i, E_SPAWN_TIMER] = state[i, E_SPAWN_SPEED]
    if state[i, D_SPAWN_TIMER] == 0:
        _spawn_diver(state, i, rng_key, rng_counter)
        state[i, D_SPAWN_TIMER] = DIVER_SPAWN_SPEED

    sx = state[i, SUB_X]
    sy = state[i, SUB_Y]
    if a == 5 and state[i, SHOT_TIMER] == 0:
        _append(state, i, FB, 3, N_FB, CAP_FB, sx, sy, state[i, SUB_OR], 0, 0)
        state[i, SHOT_TIMER] = SHOT_COOL_DOWN
    else:
        sx, sy = moved(a, sx, sy, 0)
        if a == 1:
            state[i, SUB_OR] = 0  # facing left
        elif a == 3:
            state[i, SUB_OR] = 1  # facing right
    state[i, SUB_X] = sx
    state[i, SUB_Y] = sy

    reward = _move_friendly_bullets(state, i)
    _move_divers(state, i, sx, sy)
    r, terminal = _move_subs(state, i, sx, sy)
    reward += r
    if _move_enemy_bullets(state, i, sx, sy):
        terminal = True
    r, t = _move_fish(state, i, sx, sy)
    reward += r
    terminal = terminal or t

    if state[i, E_SPAWN_TIMER] > 0:
        state[i, E_SPAWN_TIMER] -= 1
    if state[i, D_SPAWN_TIMER] > 0:
        state[i, D_SPAWN_TIMER] -= 1
    if state[i, SHOT_TIMER] > 0:
        state[i, SHOT_TIMER] -= 1
    if state[i, OXYGEN] <= 0:
        terminal = True
    if sy > 0:
        state[i, OXYGEN] -= 1
        state[i, SURFACE] = 0
    elif not state[i, SURFACE]:
        if state[i, DIVER_COUNT] == 0:
            terminal = True
        else:
            reward += _surface(state, i, ramping)
    return reward, terminal


@numba.njit(cache=True)
def _with_trail(o, channel, x, y, right):
    """An entity at (x, y) and the trail cell behind it (if on screen)."""
    o[channel, y, x] = 1
    back_x = x - 1 if right else x + 1
    if 0 <= back_x <= 9:
        o[3, y, back_x] = 1


@numba.njit(cache=True)
def observe(state, i, obs):
    """obs[i] (uint8[10, 10, 10]) := the package's ``state()`` of row i, channels first."""
    o = obs[i]
    o[:] = 0
    sx = state[i, SUB_X]
    sy = state[i, SUB_Y]
    o[0, sy, sx] = 1
    back_x = sx - 1 if state[i, SUB_OR] else sx + 1
    o[1, sy, back_x % 10] = 1  # as Python indexing: -1 is column 9 (a right-facing sub is never at x = 0)
    for x in range(max(0, state[i, OXYGEN]) * 10 // MAX_OXYGEN):
        o[7, 9, x] = 1
    for x in range(max(0, 9 - state[i, DIVER_COUNT]), 9):  # the package's slice 9 - count : 9
        o[8, 9, x] = 1
    for k in range(state[i, N_FB]):
        b = FB + 3 * k
        o[2, state[i, b + 1], state[i, b]] = 1
    for k in range(state[i, N_EB]):
        b = EB + 3 * k
        o[4, state[i, b + 1], state[i, b]] = 1
    for k in range(state[i, N_FISH]):
        f = FISH + 4 * k
        _with_trail(o, 5, state[i, f], state[i, f + 1], state[i, f + 2])
    for k in range(state[i, N_SUBS]):
        s = SUBS + 5 * k
        _with_trail(o, 6, state[i, s], state[i, s + 1], state[i, s + 2])
    for k in range(state[i, N_DIVERS]):
        d = DIVERS + 4 * k
        _with_trail(o, 9, state[i, d], state[i, d + 1], state[i, d + 2])
