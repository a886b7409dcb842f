"""Replay-buffer cores: writing rows into ring storage and gathering sampled rows with n-step targets.

Pure functions on arrays (Numba, the GIL released), called by ``rapidrl.buffers.replay`` and its bound sampler;
tests run them compiled and through ``.py_func``. Storage is one array per field over C rows (the ring);
observations and actions are read as row views ``[C, D]``.

n-step targets (``gather``): a sampled row ``t`` of env ``e`` (row = slot * num_envs + e; a slot is one time step
of all envs) looks ahead along e's stream for m <= n_step steps, stopping after a terminated or truncated step and
at the newest stored slot::

    rewards = sum_{k<m} gamma^k r[t+k];  discounts = gamma^m, or 0 after a termination;
    next_obs = next_obs[t+m-1];  terminated, truncated = the flags of step t+m-1

so the learner's target is ``rewards + discounts * V(next_obs)`` for any n_step.
"""

from __future__ import annotations

import numba
import numpy as np

__all__ = ["gather", "gather_rows", "stratify", "write_rows"]


@numba.njit(cache=True, nogil=True)
def write_rows(pos, rows_per_add, obs_s, act_s, rew_s, nobs_s, term_s, trunc_s, obs, act, rew, nobs, term, trunc):
    """Write n = obs.shape[0] rows at ``pos`` (wrapping at the capacity C = obs_s.shape[0]). Checks every shape
    first and writes nothing on bad input: returns 0 when written, else the code of the first failed check (1-6 a
    bad argument in the order obs, actions, rewards, next_obs, terminated, truncated; 7 n == 0 or n > C; 8
    n != rows_per_add > 0); the caller re-runs the checks in Python for the message."""
    n = obs.shape[0]
    C = obs_s.shape[0]
    if obs.shape[1:] != obs_s.shape[1:]:
        return 1
    if act.shape[0] != n or act.shape[1:] != act_s.shape[1:]:
        return 2
    if rew.shape[0] != n or rew.shape[1:] != rew_s.shape[1:]:
        return 3
    if nobs.shape[0] != n or nobs.shape[1:] != nobs_s.shape[1:]:
        return 4
    if term.shape[0] != n or term.shape[1:] != term_s.shape[1:]:
        return 5
    if trunc.shape[0] != n or trunc.shape[1:] != trunc_s.shape[1:]:
        return 6
    if n == 0 or n > C:
        return 7
    if rows_per_add > 0 and n != rows_per_add:
        return 8
    for i in range(n):
        j = pos + i
        if j >= C:
            j -= C
        obs_s[j] = obs[i]
        act_s[j] = act[i]
        rew_s[j] = rew[i]
        nobs_s[j] = nobs[i]
        term_s[j] = term[i]
        trunc_s[j] = trunc[i]
    return 0


@numba.njit(cache=True, nogil=True, inline="always")
def gather_rows(src, idx, out):
    """out[k, :] = src[idx[k], :] for 2-D arrays; rows are independent, so cache misses overlap."""
    D = src.shape[1]
    for k in range(idx.shape[0]):
        i = idx[k]
        for d in range(D):
            out[k, d] = src[i, d]


@numba.njit(cache=True, nogil=True)
def gather(u, draw, size, idx, obs_s, act_s, rew_s, nobs_s, term_s, trunc_s,
           obs_o, act_o, rew_o, nobs_o, term_o, trunc_o, disc_o, n_step, gamma, num_envs, oldest_slot):
    """Gather B = idx.shape[0] transitions with n-step targets (module docstring).

    draw: idx[k] = floor(u[k] * size) (uniform over the ``size`` stored rows, u in [0, 1)), else idx is given.
    Storage obs/next_obs/actions are 2-D row views [C, D], outputs [B, D]; oldest_slot is the oldest stored slot.
    Fields are gathered one at a time over all rows (independent loads, overlapping misses).
    """
    B = idx.shape[0]
    if draw:
        for k in range(B):
            i = int(u[k] * size)
            idx[k] = i if i < size else size - 1
    gather_rows(obs_s, idx, obs_o)
    gather_rows(act_s, idx, act_o)
    if n_step == 1:
        for k in range(B):
            i = idx[k]
            rew_o[k] = rew_s[i]
            t = term_s[i]
            term_o[k] = t
            trunc_o[k] = trunc_s[i]
            disc_o[k] = 0.0 if t else gamma
        gather_rows(nobs_s, idx, nobs_o)
        return
    num_slots = obs_s.shape[0] // num_envs
    size_slots = size // num_envs
    for k in range(B):
        i = idx[k]
        s = i // num_envs
        e = i - s * num_envs
        age = s - oldest_slot
        if age < 0:
            age += num_slots
        steps = min(n_step, size_slots - age)
        g = 0.0
        disc = 1.0
        last = i
        for m in range(steps):
            slot = s + m
            if slot >= num_slots:
                slot -= num_slots
            row = slot * num_envs + e
            g += disc * rew_s[row]
            disc *= gamma
            last = row
            if term_s[row]:
                disc = 0.0
                break
            if trunc_s[row]:
                break
        rew_o[k] = g
        disc_o[k] = disc
        term_o[k] = term_s[last]
        trunc_o[k] = trunc_s[last]
        for d in range(nobs_s.shape[1]):  # next_obs of the last step looked at
            nobs_o[k, d] = nobs_s[last, d]


@numba.njit(cache=True, nogil=True)
def stratify(u):
    """u[k] <- (k + u[k]) / B, kept strictly below 1 (u[k] in [0, 1) on entry): the k-th of B draws lies in
    [k/B, (k+1)/B) (prioritized replay's stratified sampling)."""
    B = u.shape[0]
    for k in range(B):
        v = (k + u[k]) / B
        u[k] = v if v < 1.0 else np.nextafter(1.0, 0.0)
