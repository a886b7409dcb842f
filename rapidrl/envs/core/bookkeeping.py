"""Autoreset bookkeeping and episode statistics, written once (compiled; inlined into every step loop).

One step of env i (``rapidrl.envs.core.kernels``; envs stepped in Python go through ``record_steps`` there, which
calls the same functions) is:

- if ``needs_reset[i]`` (NEXT_STEP: its episode ended on the previous step): ``restart_env`` and ``skip_row`` for
  each of its rows (reward 0, flags False, nothing counted), then a reset;
- else its dynamics, ``count_step`` (the time limit: ``truncated`` when ``elapsed >= params[0]``, also when
  terminated, as Gymnasium's ``TimeLimit``), and ``finish_row`` for each row (flags, reward, episode return and
  length). If the episode ended: SAME_STEP writes the final observation and resets the env in the same step;
  NEXT_STEP sets ``needs_reset[i]`` so that the next step resets it.

Episode statistics: ``ep_return``/``ep_length`` are the running sums of the current episode (float32 sum of the
float32 rewards, as Gymnasium's ``RecordEpisodeStatistics`` of a float32 reward); when an episode ends they move
to ``done_return``/``done_length`` (valid where ``done``) and restart from zero.
"""

from __future__ import annotations

import numba
import numpy as np


@numba.njit(cache=True, inline="always")
def count_step(i, params, elapsed):
    """Count one step of env i; True when the time limit ``params[0]`` is reached (truncation)."""
    t = elapsed[i] + 1
    elapsed[i] = t
    return t >= params[0]


@numba.njit(cache=True, inline="always")
def finish_row(r, reward, term, trunc, rewards, terminated, truncated, ep_return, ep_length, done_return,
               done_length, done):
    """Write row r's reward and flags and count its episode; True when its episode ended."""
    rewards[r] = reward
    terminated[r] = term
    truncated[r] = trunc
    ret = ep_return[r] + np.float32(reward)
    length = ep_length[r] + 1
    ended = term or trunc
    done[r] = ended
    if not ended:
        ep_return[r] = ret
        ep_length[r] = length
        return False
    done_return[r] = ret
    done_length[r] = length
    ep_return[r] = 0.0
    ep_length[r] = 0
    return True


@numba.njit(cache=True, inline="always")
def skip_row(r, rewards, terminated, truncated, ep_return, ep_length, done):
    """Row r of a NEXT_STEP reset step: reward 0, flags False, a fresh episode."""
    rewards[r] = 0.0
    terminated[r] = False
    truncated[r] = False
    done[r] = False
    ep_return[r] = 0.0
    ep_length[r] = 0


@numba.njit(cache=True, inline="always")
def cut_row(r, rewards, terminated, truncated, ep_return, ep_length, done_return, done_length, done):
    """Row r's episode ends without a step (its engine failed): reward 0, truncated, statistics up to the last
    step."""
    rewards[r] = 0.0
    terminated[r] = False
    truncated[r] = True
    done[r] = True
    done_return[r] = ep_return[r]
    done_length[r] = ep_length[r]
    ep_return[r] = 0.0
    ep_length[r] = 0


@numba.njit(cache=True, inline="always")
def restart_env(i, elapsed, needs_reset):
    """Counters of env i that starts a new episode."""
    elapsed[i] = 0
    needs_reset[i] = False
