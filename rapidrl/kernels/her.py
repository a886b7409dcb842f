"""Hindsight goal selection (Andrychowicz et al. 2017) on a replay ring of per-env streams: ``her_goals``.

The replay storage holds ``capacity`` rows; row ``r`` is time slot ``r // E`` of env ``r % E`` (every write adds one
row per env, so env e's steps are rows e, e + E, e + 2E, ... modulo ``capacity``, a multiple of E). A step ends an
episode when its ``terminated`` or ``truncated`` flag is set. For a sampled row t, its episode's steps run from its
start (the step after the previous episode end of that env, or the env's oldest stored step) to its end (the first
episode end at or after t, or the env's newest stored step while the episode is still running).

With probability ``ratio`` (uniform u1 < ratio) the row gets a hindsight goal: the achieved goal of the *next*
observation of step j, with j (u2 uniform in [0, 1)):

    future (0):  uniform in [t, end]          final (1): end          episode (2): uniform in [start, end]

and ``desired`` columns of both its observation and its next observation are overwritten with it. ``goal_rows[b]`` is
j's row, or -1 where the row keeps its goal. The uniforms are draws ``counter + 2b`` and ``counter + 2b + 1`` of the
counter-based stream ``key`` (``rapidrl.kernels.rng``). Cost: O(episode length) per relabelled row (the walk to the
episode's ends).
"""

from __future__ import annotations

import numba
import numpy as np

from rapidrl.kernels.rng import uniform

__all__ = ["EPISODE", "FINAL", "FUTURE", "GOAL_SELECTION_CODES", "her_goals"]

FUTURE, FINAL, EPISODE = 0, 1, 2
GOAL_SELECTION_CODES = {"future": FUTURE, "final": FINAL, "episode": EPISODE}
"""``goal_selection`` (the buffer's argument, the config's ``her_goal_selection``) -> the kernel's code."""


@numba.njit(cache=True)
def her_goals(indices, key, counter, ratio, goal_selection, terminated, truncated, num_envs, pos, size, next_obs_store,
              achieved_start, desired_start, goal_dim, obs_out, next_obs_out, goal_rows):
    """Pick hindsight goals for the sampled ``indices`` [B] and write them into ``obs_out``/``next_obs_out`` [B, D]
    (module docstring). terminated, truncated: the storage's flags [C]; next_obs_store [C, D]; pos: the next row to
    write (a multiple of num_envs); size: rows stored. Returns the number of rows relabelled."""
    E = num_envs
    C = terminated.shape[0]
    K = C // E
    full = size == C
    newest = (pos // E - 1) % K
    oldest = (pos // E) % K if full else 0
    key = np.uint64(key)
    n = 0
    for b in range(indices.shape[0]):
        u1 = uniform(key, np.uint64(counter + 2 * b))
        u2 = uniform(key, np.uint64(counter + 2 * b + 1))
        goal_rows[b] = -1
        if u1 >= ratio:
            continue
        r = indices[b]
        e, k = r % E, r // E
        end = k
        while not (terminated[end * E + e] or truncated[end * E + e]) and end != newest:
            end = (end + 1) % K
        if goal_selection == FINAL:
            j = end
        else:
            start = k
            if goal_selection == EPISODE:
                while start != oldest:
                    prev = (start - 1) % K
                    if terminated[prev * E + e] or truncated[prev * E + e]:
                        break
                    start = prev
            length = (end - start) % K + 1
            j = (start + min(int(u2 * length), length - 1)) % K
        row = j * E + e
        goal_rows[b] = row
        for c in range(goal_dim):
            g = next_obs_store[row, achieved_start + c]
            obs_out[b, desired_start + c] = g
            next_obs_out[b, desired_start + c] = g
        n += 1
    return n
