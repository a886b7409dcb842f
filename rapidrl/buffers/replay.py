"""Uniform experience replay: a preallocated ring buffer of transitions with optional n-step returns.

Storage is one array per field, row-major over transitions (``obs[capacity, *obs_shape]``, ...), in the
dtypes given at construction (uint8 images stay uint8). ``add`` writes a batch of rows (a vector env's
output, one row per env) with one compiled call; ``sample`` draws uniform rows with the buffer's own
NumPy ``Generator`` and gathers every field into preallocated arrays with one compiled call.

Rows and envs. Rows written by one ``add`` are different envs of one time step. With ``n_step > 1``
every ``add`` must carry exactly ``num_envs`` rows, so row ``r`` belongs to env ``r % num_envs`` and
that env's next step is row ``r + num_envs`` (modulo ``capacity``, a multiple of ``num_envs``).

Episode ends and n-step returns. At an episode end the caller passes the *true final observation* as
``next_obs`` (gymnasium's ``info["final_obs"]``), never the reset observation. A sampled row ``t`` of
env ``e`` looks ahead along ``e``'s stream for ``m <= n_step`` steps::

    rewards   = sum_{k<m} gamma^k r[t+k]
    discounts = gamma^m, or 0 if step t+m-1 is terminated (no bootstrap)
    next_obs  = next_obs[t+m-1]   (the observation to bootstrap from)
    terminated, truncated = the flags of step t+m-1

where the look-ahead stops after a terminated or truncated step (a truncated step bootstraps from
its own true final ``next_obs``) and at the write head (the newest stored step). The learner's target
is ``rewards + discounts * V(next_obs)`` for any ``n_step`` (``discounts = gamma * (1 - terminated)``
for ``n_step = 1``). This equals ``rapidrl.kernels.n_step_returns`` on the same data.

Thread safety. One lock guards the storage and the bookkeeping: ``sample``/``sample_into`` hold it
while they draw indices and gather, a checked ``add`` while it writes rows and moves the head. The fast
``add`` (inputs already in the storage dtypes, C-contiguous, under 64 KiB) is one compiled call that
holds the GIL and writes only while nobody holds the lock (else ``add`` takes the locked path). A
collector thread may therefore ``add`` while a learner thread samples, and every sampled transition
comes from a single ``add``. The other compiled cores release the GIL. The arrays a ``sample``
returns are *reused*: the next ``sample`` with the same batch size overwrites them (use ``sample_into``
for caller-owned storage).
"""

from __future__ import annotations

import os
import threading
from pathlib import Path
from typing import Any, NamedTuple

import numba
import numpy as np
import torch
from llvmlite import ir
from numba.core import cgutils, types
from numba.core.errors import TypingError
from numba.extending import intrinsic, overload
from numba.np import numpy_support

from rapidrl.buffers.persist import read_buffer_dir, storage_array, write_buffer_dir
from rapidrl.kernels import rng as _rng_module
from rapidrl.kernels import sumtree as _sumtree_module
from rapidrl.kernels.cache import invalidate_stale_cache
from rapidrl.kernels.rng import derive_keys, uniform
from rapidrl.kernels.sumtree import _sample_core
from rapidrl.kernels.validation import check_array, check_int, check_scalar

__all__ = ["ReplayBatch", "ReplayBuffer", "ReplaySampler"]

_F32 = np.dtype(np.float32)
_BOOL = np.dtype(np.bool_)
_INT64 = np.dtype(np.int64)
_FIELDS = ("obs", "actions", "rewards", "next_obs", "terminated", "truncated")


class ReplayBatch(NamedTuple):
    """A sampled minibatch (NumPy arrays, or torch tensors with ``as_torch=True``), B rows.

    ``rewards``/``discounts``/``next_obs``/``terminated``/``truncated`` describe the (n-step) target
    ``rewards + discounts * V(next_obs)``; see the module docstring.
    """

    obs: Any  # [B, *obs_shape] obs_dtype
    actions: Any  # [B, *action_shape] action_dtype
    rewards: Any  # [B] float32, n-step discounted reward sum
    next_obs: Any  # [B, *obs_shape] obs_dtype, observation to bootstrap from
    terminated: Any  # [B] bool, of the last step looked at
    truncated: Any  # [B] bool, of the last step looked at
    discounts: Any  # [B] float32, gamma^m, 0 after a termination
    weights: Any  # [B] float32 importance weights (all 1 for uniform replay)
    indices: Any  # [B] int64 rows sampled (for update_priorities)


# ------------------------------------------------------------------------------------------ cores

# The fast add. A Numba call costs about one unboxing per array argument, and releasing and retaking the
# GIL costs more than copying a few rows, so ``add`` passes the address of the buffer's int64 table
# (head, size, capacity, and per field: storage address, row bytes, dtype number, row shape) and the six
# input arrays to ``_add_fast_core``, which checks them, copies bytes and moves the head while holding
# the GIL. Every other section that touches storage holds ``_Guard`` (the lock + the table's busy flag);
# the fast core then declines (returns -1) and ``add`` takes the checked, locked path.
_T_POS, _T_SIZE, _T_CAP, _T_ROWS, _T_BUSY, _T_MAXBYTES, _T_ALLBYTES = range(7)
_T_ADDR, _T_ROWBYTES, _T_DTYPE, _T_SHAPE = 8, 14, 20, 26  # 6 words each; _T_SHAPE: 9 per field
_T_MAXDIM = 8  # row dims a table holds (more: no fast path)
_T_LEN = _T_SHAPE + 6 * (1 + _T_MAXDIM)
_FAST_MAX_BYTES = 1 << 16  # larger adds take the locked path, which releases the GIL while it copies


@intrinsic
def _address(typingctx, addr):
    """An int64 address as a void pointer (compiled code only)."""
    def codegen(context, builder, signature, args):
        return builder.inttoptr(args[0], context.get_value_type(types.voidptr))

    return types.voidptr(types.int64), codegen


@intrinsic
def _memmove(typingctx, dst, src, nbytes):
    """Copy nbytes from address src to address dst (int64 addresses, overlap allowed; compiled code only)."""
    def codegen(context, builder, signature, args):
        i8p = ir.IntType(8).as_pointer()
        cgutils.raw_memmove(builder, builder.inttoptr(args[0], i8p), builder.inttoptr(args[1], i8p), args[2], 1)
        return context.get_dummy_value()

    return types.void(types.int64, types.int64, types.int64), codegen


def _dtype_num(x):
    """The canonical NumPy dtype number of array x's dtype (compiled: a constant)."""
    return _canonical_num(x.dtype)


@overload(_dtype_num, inline="always")
def _dtype_num_overload(x):
    if not isinstance(x, types.Array):
        return None  # a typing error: the caller takes the checked path
    num = numpy_support.as_dtype(x.dtype).num
    return lambda x: num


def _c_data(x):
    """The data address of a C-contiguous array, 0 for any other layout (compiled code only)."""


@overload(_c_data, inline="always")
def _c_data_overload(x):
    if not isinstance(x, types.Array):
        return None
    if x.layout == "C":
        return lambda x: np.int64(x.ctypes.data)
    return lambda x: np.int64(0)


def _canonical_num(dt: np.dtype) -> int:
    """dtype number as compiled code sees it (int64 is one type, 'l' or 'q'); -1 if Numba has none."""
    try:
        return numpy_support.as_dtype(numpy_support.from_dtype(dt)).num
    except (NotImplementedError, KeyError):
        return -1


@numba.njit(cache=True, inline="always")
def _fast_mismatch(tab, k, x, n):
    """True unless x is a C-contiguous [n, *row shape of field k] array of field k's dtype."""
    s = _T_SHAPE + (1 + _T_MAXDIM) * k
    if _dtype_num(x) != tab[_T_DTYPE + k] or x.ndim - 1 != tab[s] or x.shape[0] != n:
        return True
    for d in range(1, x.ndim):
        if x.shape[d] != tab[s + d]:
            return True
    return _c_data(x) == 0


@numba.njit(cache=True, inline="always")
def _fast_put(tab, k, x, pos, n, C):
    """Copy the n rows of x to field k's rows pos, pos + 1, ... (wrapping at C)."""
    R = tab[_T_ROWBYTES + k]
    dst = tab[_T_ADDR + k]
    src = _c_data(x)
    first = min(n, C - pos)
    _memmove(dst + pos * R, src, first * R)
    if first < n:
        _memmove(dst, src + first * R, (n - first) * R)


@numba.njit(cache=True)  # holds the GIL: atomic with respect to every other Python thread
def _add_fast_core(table_addr, obs, act, rew, nobs, term, trunc):
    """``add`` for inputs stored as they are (see the table above): 0 when written, else nonzero and
    nothing written (-1 busy or too large, 1-8 as ``_write_core``'s codes, also for dtype/layout)."""
    tab = numba.carray(_address(table_addr), _T_LEN, np.int64)
    if tab[_T_BUSY]:
        return -1
    n = obs.shape[0]
    if _fast_mismatch(tab, 0, obs, n):
        return 1
    if _fast_mismatch(tab, 1, act, n):
        return 2
    if _fast_mismatch(tab, 2, rew, n):
        return 3
    if _fast_mismatch(tab, 3, nobs, n):
        return 4
    if _fast_mismatch(tab, 4, term, n):
        return 5
    if _fast_mismatch(tab, 5, trunc, n):
        return 6
    pos, size, C, rows = tab[_T_POS], tab[_T_SIZE], tab[_T_CAP], tab[_T_ROWS]
    if n == 0 or n > C:
        return 7
    if rows > 0 and n != rows:
        return 8
    if n * tab[_T_ALLBYTES] > tab[_T_MAXBYTES]:
        return -1
    _fast_put(tab, 0, obs, pos, n, C)
    _fast_put(tab, 1, act, pos, n, C)
    _fast_put(tab, 2, rew, pos, n, C)
    _fast_put(tab, 3, nobs, pos, n, C)
    _fast_put(tab, 4, term, pos, n, C)
    _fast_put(tab, 5, trunc, pos, n, C)
    pos += n
    tab[_T_POS] = pos - C if pos >= C else pos
    tab[_T_SIZE] = min(size + n, C)
    return 0



@numba.njit(cache=True, nogil=True)
def _write_core(pos, rows_per_add, obs_s, act_s, rew_s, nobs_s, term_s, trunc_s,
                obs, act, rew, nobs, term, trunc):
    """Write n = obs.shape[0] rows at ``pos`` (wrapping at capacity). Checks every shape first and
    writes nothing on bad input: returns 0 when written, else the code of the first failed check
    (1-6 a bad argument in ``_FIELDS`` order, 7 n == 0 or n > capacity, 8 n != rows_per_add > 0);
    the caller re-runs the checks in Python for the message."""
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
def _gather_rows(src, idx, out):
    """out[k, :] = src[idx[k], :] for 2-D arrays; rows are independent, so cache misses overlap."""
    D = src.shape[1]
    for k in range(idx.shape[0]):
        i = idx[k]
        for d in range(D):
            out[k, d] = src[i, d]


@numba.njit(cache=True, nogil=True)
def _gather_core(u, draw, size, idx, obs_s, act_s, rew_s, nobs_s, term_s, trunc_s,
                 obs_o, act_o, rew_o, nobs_o, term_o, trunc_o, disc_o, n_step, gamma, num_envs,
                 oldest_slot):
    """Gather B = idx.shape[0] transitions with n-step targets (see the module docstring).

    draw: idx[k] = floor(u[k] * size) (uniform over the stored rows), else idx is given.
    Storage obs/next_obs/actions are 2-D row views [capacity, D]. A "slot" is one time step of all
    num_envs envs (rows slot * num_envs ... + num_envs - 1); oldest_slot is the oldest stored one.
    Fields are gathered one at a time over all rows (independent loads, overlapping misses).
    """
    B = idx.shape[0]
    if draw:
        for k in range(B):
            i = int(u[k] * size)
            idx[k] = i if i < size else size - 1
    _gather_rows(obs_s, idx, obs_o)
    _gather_rows(act_s, idx, act_o)
    if n_step == 1:
        for k in range(B):
            i = idx[k]
            rew_o[k] = rew_s[i]
            t = term_s[i]
            term_o[k] = t
            trunc_o[k] = trunc_s[i]
            disc_o[k] = 0.0 if t else gamma
        _gather_rows(nobs_s, idx, nobs_o)
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
def _weighted_gather_core(q, q_min, beta, w_o, size, idx, obs_s, act_s, rew_s, nobs_s, term_s, trunc_s,
                          obs_o, act_o, rew_o, nobs_o, term_o, trunc_o, disc_o, n_step, gamma, num_envs,
                          oldest_slot):
    """Prioritized replay: w_o[k] = (q[idx[k]] / q_min)^-beta, then ``_gather_core`` at the given idx
    (its ``u`` is unused then; w_o stands in). Defined beside ``_gather_core`` so that Numba's
    per-file cache never pairs it with a stale compiled copy of the callee."""
    for k in range(idx.shape[0]):
        w_o[k] = (q[idx[k]] / q_min) ** -beta
    _gather_core(w_o, False, size, idx, obs_s, act_s, rew_s, nobs_s, term_s, trunc_s, obs_o, act_o, rew_o,
                 nobs_o, term_o, trunc_o, disc_o, n_step, gamma, num_envs, oldest_slot)


@numba.njit(cache=True, inline="always")
def _table_store(table_addr, obs_o, act_o, rew_o, nobs_o, term_o, trunc_o):
    """The storage row views [capacity, D] / [capacity] from the table, typed like the outputs (which have
    the storage dtypes and row sizes)."""
    tab = numba.carray(_address(table_addr), _T_LEN, np.int64)
    C = tab[_T_CAP]
    return (numba.carray(_address(tab[_T_ADDR]), (C, obs_o.shape[1]), obs_o.dtype),
            numba.carray(_address(tab[_T_ADDR + 1]), (C, act_o.shape[1]), act_o.dtype),
            numba.carray(_address(tab[_T_ADDR + 2]), C, rew_o.dtype),
            numba.carray(_address(tab[_T_ADDR + 3]), (C, nobs_o.shape[1]), nobs_o.dtype),
            numba.carray(_address(tab[_T_ADDR + 4]), C, term_o.dtype),
            numba.carray(_address(tab[_T_ADDR + 5]), C, trunc_o.dtype))


@numba.njit(cache=True, nogil=True)
def _gather_table_core(table_addr, u, size, idx, obs_o, act_o, rew_o, nobs_o, term_o, trunc_o, disc_o, n_step,
                       gamma, num_envs, oldest_slot):
    """``_gather_core`` drawing idx from u, with the storage read through the table (one argument instead
    of six arrays: each array argument costs an unboxing)."""
    obs_s, act_s, rew_s, nobs_s, term_s, trunc_s = _table_store(table_addr, obs_o, act_o, rew_o, nobs_o, term_o,
                                                                trunc_o)
    _gather_core(u, True, size, idx, obs_s, act_s, rew_s, nobs_s, term_s, trunc_s, obs_o, act_o, rew_o, nobs_o,
                 term_o, trunc_o, disc_o, n_step, gamma, num_envs, oldest_slot)


@numba.njit(cache=True, nogil=True)
def _weighted_gather_table_core(q, q_min, beta, w_o, size, idx, table_addr, obs_o, act_o, rew_o, nobs_o, term_o,
                                trunc_o, disc_o, n_step, gamma, num_envs, oldest_slot):
    """``_weighted_gather_core`` with the storage read through the table (see ``_gather_table_core``)."""
    obs_s, act_s, rew_s, nobs_s, term_s, trunc_s = _table_store(table_addr, obs_o, act_o, rew_o, nobs_o, term_o,
                                                                trunc_o)
    _weighted_gather_core(q, q_min, beta, w_o, size, idx, obs_s, act_s, rew_s, nobs_s, term_s, trunc_s, obs_o, act_o,
                          rew_o, nobs_o, term_o, trunc_o, disc_o, n_step, gamma, num_envs, oldest_slot)


# The bound sampler (``ReplayBuffer.sampler``). Its state is one int64 array: the stream key and draw counter,
# the batch size, the addresses of the outputs whose dtype is fixed and of the scratch arrays, float64
# parameters (as bits) and, for prioritized replay, the sum/min tree. The storage is read through the table,
# and obs/actions outputs give the typing of obs/next_obs/actions, so a call unboxes only three arrays.
_S_KEY, _S_COUNTER, _S_B, _S_NSTEP, _S_ENVS = range(5)
_S_REW, _S_NOBS, _S_TERM, _S_TRUNC, _S_DISC, _S_WEIGHTS, _S_IDX, _S_U, _S_MASS = range(5, 14)
_S_GAMMA, _S_BETA = 14, 15  # float64 values stored as their bits
_S_SUM, _S_MIN = 16, 17  # prioritized only: tree arrays (float64[2P]) and P
_S_TREE_P = 18
_S_LEN = 19
_SAMPLE_BUSY, _SAMPLE_EMPTY, _SAMPLE_TOO_FEW, _SAMPLE_NO_MASS = -1, -2, -3, -4


@numba.njit(cache=True, inline="always")
def _sampler_body(table_addr, state, obs_o, act_o, locked, prioritized):
    """One ``ReplaySampler`` call: draw B counter-based uniforms (draws counter .. counter + B - 1 of the
    stream), pick rows (uniform: floor(u * size); prioritized: stratified u, then the sum-tree search and
    weights (q_i / q_min)^-beta), gather with n-step targets. Returns 0, or a negative code and writes nothing
    (busy when not ``locked``, empty buffer, batch larger than the stored rows, no priority mass)."""
    tab = numba.carray(_address(table_addr), _T_LEN, np.int64)
    if not locked and tab[_T_BUSY]:
        return _SAMPLE_BUSY
    size, C, pos = tab[_T_SIZE], tab[_T_CAP], tab[_T_POS]
    B = state[_S_B]
    if size == 0:
        return _SAMPLE_EMPTY
    if B > size:
        return _SAMPLE_TOO_FEW
    par = numba.carray(_address(state.ctypes.data), _S_LEN, np.float64)
    f32 = np.float32
    rew_o = numba.carray(_address(state[_S_REW]), B, f32)
    nobs_o = numba.carray(_address(state[_S_NOBS]), (B, obs_o.shape[1]), obs_o.dtype)
    term_o = numba.carray(_address(state[_S_TERM]), B, np.bool_)
    trunc_o = numba.carray(_address(state[_S_TRUNC]), B, np.bool_)
    disc_o = numba.carray(_address(state[_S_DISC]), B, f32)
    w_o = numba.carray(_address(state[_S_WEIGHTS]), B, f32)
    idx = numba.carray(_address(state[_S_IDX]), B, np.int64)
    u = numba.carray(_address(state[_S_U]), B, np.float64)
    if prioritized:
        P = state[_S_TREE_P]
        sum_tree = numba.carray(_address(state[_S_SUM]), 2 * P, np.float64)
        min_tree = numba.carray(_address(state[_S_MIN]), 2 * P, np.float64)
        total = sum_tree[1]
        if not (total > 0.0 and total < np.inf):
            return _SAMPLE_NO_MASS
    key = np.uint64(state[_S_KEY])
    counter = np.uint64(state[_S_COUNTER])
    for k in range(B):
        u[k] = uniform(key, counter + np.uint64(k))
    state[_S_COUNTER] = np.int64(counter + np.uint64(B))
    obs_s, act_s, rew_s, nobs_s, term_s, trunc_s = _table_store(table_addr, obs_o, act_o, rew_o, nobs_o, term_o,
                                                                trunc_o)
    E = state[_S_ENVS]
    oldest = pos // E if size == C else 0
    if prioritized:
        _stratify(u)
        _sample_core(sum_tree, u, idx, numba.carray(_address(state[_S_MASS]), B, np.float64))
        q_min = min_tree[1]
        beta = par[_S_BETA]
        for k in range(B):
            w_o[k] = (sum_tree[P + idx[k]] / q_min) ** -beta  # the leaf the search just read
    _gather_core(u, not prioritized, size, idx, obs_s, act_s, rew_s, nobs_s, term_s, trunc_s, obs_o, act_o, rew_o,
                 nobs_o, term_o, trunc_o, disc_o, state[_S_NSTEP], par[_S_GAMMA], E, oldest)
    return 0


@numba.njit(cache=True)  # holds the GIL: atomic with respect to other Python threads (like _add_fast_core)
def _sampler_fast_core(table_addr, state, obs_o, act_o, prioritized):
    """``_sampler_body`` for small batches, declining (``_SAMPLE_BUSY``) while a locked section runs."""
    return _sampler_body(table_addr, state, obs_o, act_o, False, prioritized)


@numba.njit(cache=True, nogil=True)
def _sampler_locked_core(table_addr, state, obs_o, act_o, prioritized):
    """``_sampler_body`` for a caller holding the buffer's lock (releases the GIL)."""
    return _sampler_body(table_addr, state, obs_o, act_o, True, prioritized)


@numba.njit(cache=True, nogil=True)
def _stratify(u):
    """u[k] <- (k + u[k]) / B, kept strictly below 1 (u[k] in [0, 1) on entry): the k-th of B draws lies in
    [k/B, (k+1)/B) (prioritized replay's stratified sampling)."""
    B = u.shape[0]
    for k in range(B):
        v = (k + u[k]) / B
        u[k] = v if v < 1.0 else np.nextafter(1.0, 0.0)


# ------------------------------------------------------------------------------------------ helpers


class _BatchSlot:
    """Preallocated output arrays (and their torch views) for one batch size."""

    __slots__ = ("arrays", "event", "flat", "host", "tensors", "u")

    def __init__(self, buf: ReplayBuffer, batch_size: int):
        B = batch_size
        pinned = buf.pin_memory and buf.device.type == "cuda"
        specs = (("obs", (B, *buf.obs_shape), buf.obs_dtype), ("actions", (B, *buf.action_shape), buf.action_dtype),
                 ("rewards", (B,), _F32), ("next_obs", (B, *buf.obs_shape), buf.obs_dtype),
                 ("terminated", (B,), _BOOL), ("truncated", (B,), _BOOL), ("discounts", (B,), _F32),
                 ("weights", (B,), _F32), ("indices", (B,), _INT64))
        if pinned:
            self.host = [torch.empty(shape, dtype=_torch_dtype(dt), pin_memory=True) for _, shape, dt in specs]
            arrays = [t.numpy() for t in self.host]
        else:
            arrays = [np.empty(shape, dtype=dt) for _, shape, dt in specs]
            self.host = None
        arrays[7].fill(1.0)  # uniform replay: weights stay 1
        self.arrays = ReplayBatch(*arrays)
        if buf.device.type == "cpu":
            self.tensors = ReplayBatch(*(torch.from_numpy(a) for a in arrays))
        else:
            self.tensors = ReplayBatch(*(torch.empty(a.shape, dtype=_torch_dtype(a.dtype), device=buf.device)
                                         for a in arrays))
        self.event = None
        self.u = np.empty(B, dtype=np.float64)
        self.flat = _flat_outputs(self.arrays)


def _flat_outputs(batch: ReplayBatch) -> tuple:
    """The gather core's output views: obs/actions/next_obs as [B, D]."""
    B = batch.rewards.shape[0]
    return (batch.obs.reshape(B, -1), batch.actions.reshape(B, -1), batch.rewards,
            batch.next_obs.reshape(B, -1), batch.terminated, batch.truncated, batch.discounts)


def _torch_dtype(dtype: np.dtype) -> torch.dtype:
    return torch.from_numpy(np.empty(0, dtype=dtype)).dtype


def _shape(name: str, shape) -> tuple[int, ...]:
    try:
        out = tuple(int(s) for s in shape)
    except TypeError:
        raise TypeError(f"{name} must be a tuple of ints, got {shape!r}") from None
    if any(s <= 0 for s in out):
        raise ValueError(f"{name} must have positive sizes, got {out}")
    return out


class _Guard:
    """The buffer's lock: ``with guard:`` holds the threading lock and sets the table's busy flag, so that
    ``_add_fast_core`` (which holds the GIL) never runs inside a section that touches storage."""

    __slots__ = ("lock", "table")

    def __init__(self, table: np.ndarray):
        self.lock = threading.Lock()
        self.table = table

    def __enter__(self):
        self.lock.acquire()
        self.table[_T_BUSY] = 1
        return self

    def __exit__(self, *exc):
        self.table[_T_BUSY] = 0
        self.lock.release()


class _hybridmethod:
    """``load``: called on the class, build a new buffer; called on an instance, load into it."""

    def __init__(self, func):
        self.func = func
        self.__doc__ = func.__doc__

    def __get__(self, obj, cls):
        return self.func.__get__(cls if obj is None else obj, cls)


# ------------------------------------------------------------------------------------------ buffer


class ReplayBuffer:
    """Uniform replay ring buffer (see the module docstring for layout, n-step and thread safety).

    Args:
        capacity: rows kept (> 0); the oldest are overwritten. A multiple of num_envs when n_step > 1.
        obs_shape, action_shape: per-row shapes (``()`` for a discrete action).
        obs_dtype, action_dtype: storage dtypes (e.g. uint8 images, int64 discrete actions).
        seed: seed of the sampling Generator (None: fresh entropy).
        n_step: steps per return (>= 1); gamma: discount in [0, 1].
        num_envs: rows per ``add`` (the per-env stream; enforced when n_step > 1).
        storage: "memory" (NumPy arrays) or "mmap" (``.npy`` files in directory ``path``, for data
            beyond RAM; the files are created/overwritten).
        device: where ``sample(as_torch=True)`` puts tensors; pin_memory: stage through pinned host
            memory for an asynchronous copy to a CUDA device.
    """

    def __init__(self, capacity: int, obs_shape: tuple, action_shape: tuple = (), *, obs_dtype=np.float32,
                 action_dtype=np.float32, seed: int | None = None, n_step: int = 1, gamma: float = 0.99,
                 num_envs: int = 1, storage: str = "memory", path: str | os.PathLike | None = None,
                 device: str | torch.device = "cpu", pin_memory: bool = False):
        self.capacity = check_int("capacity", capacity, low=1)
        self.obs_shape = _shape("obs_shape", obs_shape)
        self.action_shape = _shape("action_shape", action_shape)
        self.obs_dtype = np.dtype(obs_dtype)
        self.action_dtype = np.dtype(action_dtype)
        for name, dt in (("obs_dtype", self.obs_dtype), ("action_dtype", self.action_dtype)):
            if dt.kind not in "biuf":
                raise TypeError(f"{name} must be a bool, integer or float dtype, got {dt}")
        self.n_step = check_int("n_step", n_step, low=1)
        self.gamma = check_scalar("gamma", gamma, low=0.0, high=1.0)
        self.num_envs = check_int("num_envs", num_envs, low=1)
        if self.n_step > 1 and self.capacity % self.num_envs:
            raise ValueError(f"capacity={self.capacity} must be a multiple of num_envs={self.num_envs} "
                             "when n_step > 1")
        if storage not in ("memory", "mmap"):
            raise ValueError(f"storage must be 'memory' or 'mmap', got {storage!r}")
        if storage == "mmap" and path is None:
            raise ValueError("storage='mmap' needs path (a directory for the .npy files)")
        self.storage = storage
        self.path = None if path is None else Path(path)
        self.device = torch.device(device)
        self.pin_memory = bool(pin_memory)
        self.seed = seed
        self._rng = np.random.default_rng(seed)
        self._table = np.zeros(_T_LEN, dtype=np.int64)  # see _add_fast_core; holds the head and size
        self._table_addr = self._table.ctypes.data
        self._lock = _Guard(self._table)
        # The per-env stream only matters for n-step look-ahead.
        self._stream_envs = self.num_envs if self.n_step > 1 else 1
        self._rows_per_add = self.num_envs if self.n_step > 1 else 0
        self._slots: dict[int, _BatchSlot] = {}
        self._dtypes = (self.obs_dtype, self.action_dtype, _F32, self.obs_dtype, _BOOL, _BOOL)  # _FIELDS order
        self._image_obs = len(self.obs_shape) > 1
        self._on_write = None  # called under the lock as f(first_row, n) after each add (see subclasses)
        self._allocate()
        self._set_fast_add(True)

    # -- storage -----------------------------------------------------------------------------------
    @staticmethod
    def storage_bytes(capacity: int, obs_shape: tuple, action_shape: tuple = (), *, obs_dtype=np.float32,
                      action_dtype=np.float32, **_ignored) -> int:
        """Bytes the stored fields of a buffer built with these arguments take (before building it): obs and
        next_obs, actions, rewards (float32) and two flags per row."""
        obs = int(np.prod(obs_shape)) * np.dtype(obs_dtype).itemsize
        action = int(np.prod(action_shape)) * np.dtype(action_dtype).itemsize
        return int(capacity) * (2 * obs + action + 4 + 2)

    def _field_specs(self) -> list[tuple[str, tuple, np.dtype]]:
        C = self.capacity
        return [("obs", (C, *self.obs_shape), self.obs_dtype), ("actions", (C, *self.action_shape), self.action_dtype),
                ("rewards", (C,), _F32), ("next_obs", (C, *self.obs_shape), self.obs_dtype),
                ("terminated", (C,), _BOOL), ("truncated", (C,), _BOOL)]

    def _allocate(self) -> None:
        if self.storage == "mmap":
            self.path.mkdir(parents=True, exist_ok=True)
        arrays = [storage_array(self.storage, self.path, name, shape, dtype)
                  for name, shape, dtype in self._field_specs()]
        self._store = tuple(arrays)  # in _FIELDS order
        C = self.capacity
        obs, act, rew, nobs, term, trunc = arrays
        # Row-flattened views: the gather core's storage, and add's for multi-dim observations.
        self._flat_store = (obs.reshape(C, -1), act.reshape(C, -1), rew, nobs.reshape(C, -1), term, trunc)
        self._flat_obs_store = (obs.reshape(C, -1), act, rew, nobs.reshape(C, -1), term, trunc)

    def _set_fast_add(self, enabled: bool) -> None:
        """Describe the storage in the table for ``_add_fast_core`` (disabled: every add is checked)."""
        t = self._table
        t[_T_CAP], t[_T_ROWS] = self.capacity, self._rows_per_add
        ok = enabled
        for k, arr in enumerate(self._store):
            shape = arr.shape[1:]
            num = _canonical_num(arr.dtype)
            ok = ok and num >= 0 and len(shape) <= _T_MAXDIM and arr.flags.c_contiguous
            t[_T_ADDR + k], t[_T_ROWBYTES + k], t[_T_DTYPE + k] = arr.ctypes.data, arr[:1].nbytes, num
            s = _T_SHAPE + (1 + _T_MAXDIM) * k
            t[s] = len(shape)
            t[s + 1:s + 1 + min(len(shape), _T_MAXDIM)] = shape[:_T_MAXDIM]
        t[_T_ALLBYTES] = sum(int(x) for x in t[_T_ROWBYTES:_T_ROWBYTES + 6])
        t[_T_MAXBYTES] = _FAST_MAX_BYTES if ok else -1

    # head and size live in the table (the fast add moves them)
    @property
    def _pos(self) -> int:
        return int(self._table[_T_POS])

    @_pos.setter
    def _pos(self, value: int) -> None:
        self._table[_T_POS] = value

    @property
    def _size(self) -> int:
        return int(self._table[_T_SIZE])

    @_size.setter
    def _size(self, value: int) -> None:
        self._table[_T_SIZE] = value


    # -- public state ------------------------------------------------------------------------------
    def __len__(self) -> int:
        return int(self._table[_T_SIZE])

    @property
    def pos(self) -> int:
        """Row the next ``add`` writes first."""
        return self._pos

    @property
    def full(self) -> bool:
        return self._size == self.capacity

    def arrays(self) -> dict[str, np.ndarray]:
        """The storage arrays by field name (rows [0, len) are valid; read-only use)."""
        return dict(zip(_FIELDS, self._store))

    def end_episodes(self) -> None:
        """Cut every episode still open at the newest ``num_envs`` rows (the last add) as truncated there: their
        targets bootstrap from their stored ``next_obs`` and n-step returns stop. For a writer whose envs restart
        without the stored episodes ending (a resumed run whose env state was not saved)."""
        with self._lock:
            n = min(self.num_envs, self._size)
            rows = (self._pos - 1 - np.arange(n)) % self.capacity
            terminated, truncated = self._store[4], self._store[5]
            truncated[rows] |= ~terminated[rows]

    # -- adding ------------------------------------------------------------------------------------
    def add(self, obs, actions, rewards, next_obs, terminated, truncated) -> None:
        """Append n transitions, one per row of every argument (n = the leading dimension).

        obs, next_obs: [n, *obs_shape]; actions: [n, *action_shape]; rewards: [n] float;
        terminated, truncated: [n] bool. Where an episode ended, next_obs must be the true final
        observation. Dtypes are stored as given when they match the storage; other dtypes are cast
        if NumPy's "same_kind" rule allows it (e.g. float64 rewards), else TypeError. Any bad argument
        raises before anything is written.
        """
        try:
            code = _add_fast_core(self._table_addr, obs, actions, rewards, next_obs, terminated, truncated)
        except Exception:  # types the fast core cannot take (lists, tensors, 0-d arrays...): checked below
            code = -1
        if code:
            self._add_checked(obs, actions, rewards, next_obs, terminated, truncated)

    def _add_checked(self, obs, actions, rewards, next_obs, terminated, truncated) -> None:
        """``add`` with the checks in Python, any dtype NumPy casts same_kind and any layout."""
        try:
            fast = (obs.dtype, actions.dtype, rewards.dtype, next_obs.dtype, terminated.dtype,
                    truncated.dtype) == self._dtypes
        except AttributeError:
            fast = False
        if not fast:
            obs, actions, rewards, next_obs, terminated, truncated = self._check_dtypes(
                (obs, actions, rewards, next_obs, terminated, truncated))
        store, o, no = self._store, obs, next_obs
        if self._image_obs:  # copy multi-dim observations as flat rows (a contiguous copy per row)
            if obs.ndim < 2 or obs.shape[1:] != self.obs_shape or next_obs.shape != obs.shape:
                self._raise_add(obs, actions, rewards, next_obs, terminated, truncated)
            store, o, no = self._flat_obs_store, obs.reshape(obs.shape[0], -1), next_obs.reshape(obs.shape[0], -1)
        with self._lock:
            try:
                code = _write_core(self._pos, self._rows_per_add, *store, o, actions, rewards, no, terminated,
                                   truncated)
            except TypingError:  # e.g. a 0-d array: numba cannot even type the copy
                code = 1
            if code:
                self._raise_add(obs, actions, rewards, next_obs, terminated, truncated)
            n = obs.shape[0]
            pos = self._pos
            if self._on_write is not None:
                self._on_write(pos, n)
            pos += n
            self._pos = pos - self.capacity if pos >= self.capacity else pos
            self._size = min(self._size + n, self.capacity)

    def _check_dtypes(self, args: tuple) -> tuple:
        out = []
        for name, x, dt in zip(_FIELDS, args, self._dtypes):
            if not isinstance(x, np.ndarray):
                raise TypeError(f"{name} must be a numpy.ndarray, got {type(x).__name__}")
            if dt == _BOOL:
                if x.dtype == np.uint8:
                    x = x.view(np.bool_)
                elif x.dtype != _BOOL:
                    raise TypeError(f"{name} must have dtype bool (or uint8 0/1), got {x.dtype}")
            elif not np.can_cast(x.dtype, dt, casting="same_kind"):
                raise TypeError(f"{name} has dtype {x.dtype}, which cannot be stored as {dt} (same_kind cast)")
            out.append(x)
        return tuple(out)

    def _raise_add(self, *args) -> None:
        """Raise the error for a rejected add (``_write_core``'s checks, in Python, on the originals)."""
        n = args[0].shape[0] if args[0].ndim else -1
        for name, x, s in zip(_FIELDS, args, self._store):
            if x.ndim == 0 or x.shape[0] != n or x.shape[1:] != s.shape[1:]:
                want = "(" + ", ".join(["n", *map(str, s.shape[1:])]) + ")"
                raise ValueError(f"{name} must have shape {want} with n = len(obs) = {n}, got {x.shape}")
        if n == 0 or n > self.capacity:
            raise ValueError(f"add needs 1 to capacity={self.capacity} rows, got {n}")
        if self._rows_per_add and n != self._rows_per_add:
            raise ValueError(f"with n_step > 1 every add must hold exactly num_envs={self.num_envs} rows, got {n}")
        raise TypeError("add: the arguments cannot be stored (unsupported array types)")

    # -- sampling ----------------------------------------------------------------------------------
    def sample(self, batch_size: int, *, as_torch: bool = False) -> ReplayBatch:
        """Draw ``batch_size`` rows uniformly (with replacement) from the stored ones.

        Returns arrays owned by the buffer and overwritten by the next ``sample`` of the same batch
        size. ``as_torch``: torch tensors on ``device`` instead (CPU: zero-copy views of the arrays;
        CUDA: one copy per field, asynchronous from pinned memory when ``pin_memory``).
        """
        slot = self._slot(batch_size)
        if slot.event is not None:  # the previous asynchronous copy must finish reading the host arrays
            slot.event.synchronize()
        lock = self._lock.lock  # ``with self._lock``, inlined on this hot path
        lock.acquire()
        self._table[_T_BUSY] = 1
        try:
            self._sample_locked(slot.arrays, slot.flat, slot.u)
        finally:
            self._table[_T_BUSY] = 0
            lock.release()
        return self._deliver(slot, as_torch)

    def _deliver(self, slot: _BatchSlot, as_torch: bool) -> ReplayBatch:
        """The sampled arrays of ``slot``, or its tensors on ``device`` (copied there unless on the CPU)."""
        if not as_torch:
            return slot.arrays
        if self.device.type != "cpu":
            for dst, src in zip(slot.tensors, slot.host or slot.arrays):
                dst.copy_(src if isinstance(src, torch.Tensor) else torch.from_numpy(src), non_blocking=self.pin_memory)
            if self.pin_memory and self.device.type == "cuda":
                slot.event = torch.cuda.Event()
                slot.event.record()
        return slot.tensors

    def sampler(self, batch_size: int, *, seed: int | None = None) -> ReplaySampler:
        """A bound fast path of ``sample(batch_size)``: see ``ReplaySampler``. ``seed`` (default: the
        buffer's ``seed``; fresh entropy when both are None) seeds the sampler's own random stream."""
        return ReplaySampler(self, batch_size, seed=self.seed if seed is None else seed)

    def sample_into(self, batch_size: int, out: ReplayBatch) -> ReplayBatch:
        """``sample`` writing into caller-owned NumPy arrays ``out`` (C-contiguous, the shapes and
        dtypes of a ``sample`` result). Returns ``out``."""
        B = check_int("batch_size", batch_size, low=1)
        if not isinstance(out, ReplayBatch):
            raise TypeError(f"out must be a ReplayBatch, got {type(out).__name__}")
        ref = self._slot(B)
        for name, x, want in zip(ReplayBatch._fields, out, ref.arrays):
            check_array(f"out.{name}", x, shape=want.shape, dtypes=(want.dtype,))
        out.weights.fill(1.0)
        with self._lock:
            self._sample_locked(out, _flat_outputs(out), ref.u)
        return out

    def _slot(self, batch_size: int) -> _BatchSlot:
        """The preallocated outputs for ``batch_size`` (created on first use)."""
        slot = self._slots.get(batch_size)
        if slot is None:
            check_int("batch_size", batch_size, low=1)
            slot = self._slots[batch_size] = _BatchSlot(self, batch_size)
        return slot

    def _check_can_sample(self, batch_size: int) -> int:
        """The number of stored rows, checked to allow a batch of ``batch_size``."""
        size = int(self._table[_T_SIZE])
        if size == 0:
            raise ValueError("cannot sample from an empty buffer")
        if batch_size > size:
            raise ValueError(f"batch_size={batch_size} is larger than the {size} stored transitions")
        return size

    def _sample_locked(self, out: ReplayBatch, flat: tuple, u: np.ndarray) -> None:
        """Draw and gather under the lock (uniform)."""
        size = self._check_can_sample(u.shape[0])
        self._rng.random(out=u)
        _gather_table_core(self._table_addr, u, size, out.indices, *flat, *self._stream_args(size))

    def _stream_args(self, size: int | None = None) -> tuple:
        """(n_step, gamma, num_envs, oldest_slot) of the gather cores (``size``: len(self) if known)."""
        E = self._stream_envs
        if size is None:
            size = self._size
        return self.n_step, self.gamma, E, (self._pos // E) if size == self.capacity else 0

    # -- persistence -------------------------------------------------------------------------------
    def _config(self) -> dict:
        return dict(capacity=self.capacity, obs_shape=list(self.obs_shape), action_shape=list(self.action_shape),
                    obs_dtype=self.obs_dtype.str, action_dtype=self.action_dtype.str, n_step=self.n_step,
                    gamma=self.gamma, num_envs=self.num_envs)

    def _state(self) -> tuple[dict, dict[str, np.ndarray]]:
        """JSON-able state and extra arrays to save (under the lock)."""
        return {"pos": self._pos, "size": self._size, "rng": self._rng.bit_generator.state}, {}

    def _set_state(self, state: dict, arrays: dict[str, np.ndarray]) -> None:
        self._pos, self._size = int(state["pos"]), int(state["size"])
        self._rng.bit_generator.state = state["rng"]

    def save(self, path: str | os.PathLike) -> Path:
        """Write the buffer to directory ``path``: one ``.npy`` per field (the stored rows) and
        ``header.json`` (configuration, head, sampler RNG state). No pickle. The directory is
        replaced atomically (written beside it, then renamed). Returns the path."""
        path = Path(path)
        if self.path is not None and path.resolve() == self.path.resolve():
            raise ValueError(f"cannot save into the buffer's own mmap directory {path}")
        with self._lock:
            state, extra = self._state()
            header = {"class": type(self).__name__, "config": self._config(), "state": state}
            arrays = {name: arr[: self._size] for name, arr in zip(_FIELDS, self._store)}
            return write_buffer_dir(path, header, {**arrays, **extra})

    @_hybridmethod
    def load(self_or_cls, source: str | os.PathLike, /, **kwargs):
        """Read a buffer written by ``save`` from directory ``source``.

        ``ReplayBuffer.load(source, **kwargs)`` builds a new buffer (kwargs: storage, path, device,
        pin_memory as in the constructor, e.g. ``storage="mmap", path=...`` to load into memory-mapped
        files); ``buffer.load(source)`` loads into an existing buffer of the same configuration.
        Returns the buffer.
        """
        source = Path(source)
        # Memory-mapped reads: a buffer larger than RAM streams from the files into its storage.
        header, arrays = read_buffer_dir(source)
        cls = self_or_cls if isinstance(self_or_cls, type) else type(self_or_cls)
        if header.get("class") != cls.__name__:
            raise ValueError(f"{source} holds a {header.get('class')}, not a {cls.__name__}")
        config = header["config"]
        if isinstance(self_or_cls, type):
            buf = self_or_cls(**config, **kwargs)
        else:
            buf = self_or_cls
            if kwargs:
                raise TypeError("buffer.load(source) takes no options; use the class method to choose them")
            if buf._config() != config or type(buf).__name__ != header["class"]:
                raise ValueError(f"{source} holds a {header['class']} with {config}, not this buffer's "
                                 f"{buf._config()}")
        state = header["state"]
        size = int(state["size"])
        with buf._lock:
            for name, dst in zip(_FIELDS, buf._store):
                src = arrays.pop(name)
                if src.shape != (size, *dst.shape[1:]) or src.dtype != dst.dtype:
                    raise ValueError(f"{source}/{name}.npy has shape {src.shape} {src.dtype}, expected "
                                     f"{(size, *dst.shape[1:])} {dst.dtype}")
                dst[:size] = src
            buf._set_state(state, arrays)
        return buf


class ReplaySampler:
    """``buffer.sample(batch_size)`` bound once: the checks and allocations happen at construction, and each
    call is one compiled call with four arguments (the draws, the row choice and the gather all compiled).

    Made by ``ReplayBuffer.sampler(batch_size, seed=...)`` (``PrioritizedReplayBuffer.sampler`` for
    prioritized replay). ``sampler()`` returns a ``ReplayBatch`` with the fields, shapes, dtypes and
    n-step targets of ``sample`` (prioritized: stratified proportional draws, importance weights, beta annealed
    per call as ``sample`` does); ``sampler(as_torch=True)`` returns the same batch as tensors on the buffer's
    device. The arrays belong to the sampler and are overwritten by its next call.

    Random numbers come from a counter-based stream (``rapidrl.kernels.rng``): call ``c`` of a sampler with
    batch size B uses draws ``c*B .. c*B + B - 1`` of the stream of its ``seed``, so the rows drawn are a pure
    function of (seed, call number, buffer contents), independent of ``sample``'s NumPy generator (whose
    draws the sampler neither uses nor advances). ``draws`` is the number of uniforms used so far; it can be
    set to resume a stream. Thread safety is ``sample``'s: small batches run holding the GIL while no locked
    section runs, larger ones take the buffer's lock and release the GIL.
    """

    __slots__ = (
        "_act",
        "_arrays",
        "_fast",
        "_mass",
        "_obs",
        "_per",
        "_slot",
        "_state",
        "_table_addr",
        "batch_size",
        "buffer",
        "seed",
    )

    def __init__(self, buffer: ReplayBuffer, batch_size: int, *, seed: int | None = None):
        if not isinstance(buffer, ReplayBuffer):
            raise TypeError(f"buffer must be a ReplayBuffer, got {type(buffer).__name__}")
        B = self.batch_size = check_int("batch_size", batch_size, low=1)
        if B > buffer.capacity:
            raise ValueError(f"batch_size={B} is larger than the buffer's capacity={buffer.capacity}")
        self.buffer = buffer
        self.seed = seed
        self._slot = slot = _BatchSlot(buffer, B)
        self._mass = np.empty(B, dtype=np.float64)  # the sum-tree search's scratch
        self._obs, act, rew, nobs, term, trunc, disc = slot.flat
        self._act = act
        state = self._state = np.zeros(_S_LEN, dtype=np.int64)
        state[_S_KEY] = derive_keys(seed, 1)[0].astype(np.int64)
        state[_S_B], state[_S_NSTEP], state[_S_ENVS] = B, buffer.n_step, buffer._stream_envs
        for k, arr in ((_S_REW, rew), (_S_NOBS, nobs), (_S_TERM, term), (_S_TRUNC, trunc), (_S_DISC, disc),
                       (_S_WEIGHTS, slot.arrays.weights), (_S_IDX, slot.arrays.indices), (_S_U, slot.u),
                       (_S_MASS, self._mass)):
            state[k] = arr.ctypes.data
        params = state.view(np.float64)
        params[_S_GAMMA] = buffer.gamma
        tree = getattr(buffer, "_tree", None)
        self._per = tree is not None
        if self._per:
            state[_S_SUM], state[_S_MIN] = tree._sum.ctypes.data, tree._min.ctypes.data
            state[_S_TREE_P] = tree._sum.shape[0] // 2
            self._arrays = (tree._sum, tree._min)  # the tree is reset in place on load, never replaced
        else:
            self._arrays = ()
        self._table_addr = buffer._table_addr
        row_bytes = sum(a[:1].nbytes for a in slot.arrays)
        self._fast = B * row_bytes <= _FAST_MAX_BYTES

    @property
    def draws(self) -> int:
        """Uniforms drawn from the stream so far (``batch_size`` per call)."""
        return int(self._state[_S_COUNTER])

    @draws.setter
    def draws(self, value: int) -> None:
        self._state[_S_COUNTER] = check_int("draws", value, low=0)

    def __call__(self, *, as_torch: bool = False) -> ReplayBatch:
        buf, slot = self.buffer, self._slot
        if slot.event is not None:  # a previous asynchronous copy must finish reading the host arrays
            slot.event.synchronize()
        per = self._per
        if per:
            self._state.view(np.float64)[_S_BETA] = buf.beta
        code = _sampler_fast_core(self._table_addr, self._state, self._obs, self._act, per) if self._fast else (
            _SAMPLE_BUSY)
        if code:
            with buf._lock:
                code = _sampler_locked_core(self._table_addr, self._state, self._obs, self._act, per)
                if code == _SAMPLE_NO_MASS:
                    raise ValueError(f"cannot sample: total priority is {buf._tree.total()} (must be finite and > 0)")
                if code:
                    buf._check_can_sample(self.batch_size)  # raises the empty / too-few message
        if per:
            buf._samples += 1
        return buf._deliver(slot, as_torch)

    def __repr__(self) -> str:
        return f"ReplaySampler(batch_size={self.batch_size}, seed={self.seed}, draws={self.draws})"


# The sampler cores call the counter-based RNG and the sum-tree search of other modules.
invalidate_stale_cache(_sampler_fast_core, [m.__file__ for m in (_rng_module, _sumtree_module)])
