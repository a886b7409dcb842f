"""Sampling from a replay buffer: ``ReplaySampler``, the one sampling path (``ReplayBuffer.sample`` calls it).

A sampler is ``sample(batch_size)`` bound once: the output arrays are allocated and the checks done at
construction, and each call is one compiled call that draws the random numbers, picks the rows (uniform:
floor(u * size); prioritized: stratified u, the sum-tree search and the importance weights (q_i / q_min)^-beta read
from the tree's leaves) and gathers every field with the n-step targets (``rapidrl.kernels.replay.gather``).

Random numbers come from a counter-based stream (``rapidrl.kernels.rng``): the k-th uniform of a stream is a pure
function of (key, k). Each buffer has one stream, keyed by its seed, that every ``sample`` call continues
(``buffer.draws`` uniforms used so far; saved with the buffer). ``buffer.sampler(B, seed=...)`` makes a sampler
with a stream of its own (its key from ``seed``, default the buffer's; ``sampler.draws`` its own counter).

The sampler's state is one int64 array: the stream key and the address of its draw counter, the batch size, the
addresses of the output arrays whose dtype is fixed and of the scratch arrays, float64 parameters stored as bits
and, for prioritized replay, the tree; the storage is read through the buffer's table
(``rapidrl._unsafe.replay_table``, where the safety argument for these addresses is), so a call unboxes three
arrays.
"""

from __future__ import annotations

import numba
import numpy as np

from rapidrl._unsafe import replay_table
from rapidrl._unsafe.replay_table import (
    FAST_MAX_BYTES,
    T_BUSY,
    T_CAP,
    T_DRAWS,
    T_LEN,
    T_POS,
    T_SIZE,
    address,
    table_store,
)
from rapidrl.buffers.batch import BatchSlot, ReplayBatch
from rapidrl.kernels import replay as _replay_cores
from rapidrl.kernels import rng as _rng_module
from rapidrl.kernels import sumtree as _sumtree_module
from rapidrl.kernels.cache import invalidate_stale_cache
from rapidrl.kernels.replay import gather, stratify
from rapidrl.kernels.rng import derive_keys, uniform
from rapidrl.kernels.sumtree import sample_core
from rapidrl.kernels.validation import check_int

__all__ = ["ReplaySampler"]

S_KEY, S_COUNTER, S_B, S_NSTEP, S_ENVS = range(5)  # S_COUNTER: the address of the int64 draw counter
S_REW, S_NOBS, S_TERM, S_TRUNC, S_DISC, S_WEIGHTS, S_IDX, S_U, S_MASS = range(5, 14)
S_GAMMA, S_BETA = 14, 15  # float64 values stored as their bits
S_SUM, S_MIN, S_TREE_P = 16, 17, 18  # prioritized only: tree arrays (float64 [2P]) and P
S_LEN = 19
SAMPLE_BUSY, SAMPLE_EMPTY, SAMPLE_TOO_FEW, SAMPLE_NO_MASS = -1, -2, -3, -4


@numba.njit(cache=True, inline="always")
def _sampler_body(table_addr, state, obs_o, act_o, locked, prioritized):
    """One sampler call: draw B uniforms (draws counter .. counter + B - 1 of the stream), pick rows, gather.
    Returns 0, or a negative code and writes nothing (busy when not ``locked``, empty buffer, batch larger than
    the stored rows, no priority mass)."""
    tab = numba.carray(address(table_addr), T_LEN, np.int64)
    if not locked and tab[T_BUSY]:
        return SAMPLE_BUSY
    size, C, pos = tab[T_SIZE], tab[T_CAP], tab[T_POS]
    B = state[S_B]
    if size == 0:
        return SAMPLE_EMPTY
    if B > size:
        return SAMPLE_TOO_FEW
    par = numba.carray(address(state.ctypes.data), S_LEN, np.float64)
    f32 = np.float32
    rew_o = numba.carray(address(state[S_REW]), B, f32)
    nobs_o = numba.carray(address(state[S_NOBS]), (B, obs_o.shape[1]), obs_o.dtype)
    term_o = numba.carray(address(state[S_TERM]), B, np.bool_)
    trunc_o = numba.carray(address(state[S_TRUNC]), B, np.bool_)
    disc_o = numba.carray(address(state[S_DISC]), B, f32)
    w_o = numba.carray(address(state[S_WEIGHTS]), B, f32)
    idx = numba.carray(address(state[S_IDX]), B, np.int64)
    u = numba.carray(address(state[S_U]), B, np.float64)
    if prioritized:
        P = state[S_TREE_P]
        sum_tree = numba.carray(address(state[S_SUM]), 2 * P, np.float64)
        min_tree = numba.carray(address(state[S_MIN]), 2 * P, np.float64)
        total = sum_tree[1]
        if not (total > 0.0 and total < np.inf):
            return SAMPLE_NO_MASS
    counter_cell = numba.carray(address(state[S_COUNTER]), 1, np.int64)
    key = np.uint64(state[S_KEY])
    counter = np.uint64(counter_cell[0])
    for k in range(B):
        u[k] = uniform(key, counter + np.uint64(k))
    counter_cell[0] = np.int64(counter + np.uint64(B))
    obs_s, act_s, rew_s, nobs_s, term_s, trunc_s = table_store(table_addr, obs_o, act_o, rew_o, nobs_o, term_o,
                                                               trunc_o)
    E = state[S_ENVS]
    oldest = pos // E if size == C else 0
    if prioritized:
        stratify(u)
        sample_core(sum_tree, u, idx, numba.carray(address(state[S_MASS]), B, np.float64))
        q_min = min_tree[1]
        beta = par[S_BETA]
        for k in range(B):
            w_o[k] = (sum_tree[P + idx[k]] / q_min) ** -beta  # the leaf the search just read
    gather(u, not prioritized, size, idx, obs_s, act_s, rew_s, nobs_s, term_s, trunc_s, obs_o, act_o, rew_o,
           nobs_o, term_o, trunc_o, disc_o, state[S_NSTEP], par[S_GAMMA], E, oldest)
    return 0


@numba.njit(cache=True)  # holds the GIL: atomic with respect to other Python threads (like the fast add)
def _sampler_fast_core(table_addr, state, obs_o, act_o, prioritized):
    """``_sampler_body`` for small batches, declining (``SAMPLE_BUSY``) while a locked section runs."""
    return _sampler_body(table_addr, state, obs_o, act_o, False, prioritized)


@numba.njit(cache=True, nogil=True)
def _sampler_locked_core(table_addr, state, obs_o, act_o, prioritized):
    """``_sampler_body`` for a caller holding the buffer's lock (releases the GIL)."""
    return _sampler_body(table_addr, state, obs_o, act_o, True, prioritized)


class ReplaySampler:
    """``buffer.sample(batch_size)`` bound once (module docstring). ``sampler()`` returns a ``ReplayBatch`` (the
    sampler's arrays, overwritten by its next call); ``sampler(as_torch=True)`` the same batch as tensors on the
    buffer's device.

    Made by ``ReplayBuffer.sampler(batch_size, seed=...)``, with its own stream: call ``c`` uses draws
    ``c*B .. c*B + B - 1`` of the stream of ``seed``, so the rows drawn are a pure function of (seed, call number,
    buffer contents). ``draws`` is the number of uniforms used so far; it can be set to resume a stream. Thread
    safety is the buffer's: small batches run holding the GIL while no locked section runs, larger ones take the
    buffer's lock and release the GIL.
    """

    __slots__ = ("_act", "_counter", "_fast", "_keep", "_obs", "_slot", "_state", "_table_addr", "_tree",
                 "batch_size", "buffer", "seed")

    def __init__(self, buffer, batch_size: int, *, seed: int | None = None, _buffer_stream: bool = False):
        if not callable(getattr(buffer, "_priority_tree", None)):  # (replay.py imports this module, not back)
            raise TypeError(f"buffer must be a ReplayBuffer, got {type(buffer).__name__}")
        B = self.batch_size = check_int("batch_size", batch_size, low=1)
        if B > buffer.capacity:
            raise ValueError(f"batch_size={B} is larger than the buffer's capacity={buffer.capacity}")
        self.buffer = buffer
        self._slot = slot = BatchSlot(buffer, B)
        mass = np.empty(B, dtype=np.float64)  # the sum-tree search's scratch
        self._obs, act, rew, nobs, term, trunc, disc = slot.flat
        self._act = act
        state = self._state = np.zeros(S_LEN, dtype=np.int64)
        if _buffer_stream:  # the buffer's own stream: its key, its counter in the buffer's table
            self.seed = buffer.seed
            state[S_KEY] = buffer._stream_key
            self._counter = buffer._table[T_DRAWS:T_DRAWS + 1]
        else:
            self.seed = seed
            state[S_KEY] = derive_keys(seed, 1)[0].astype(np.int64)
            self._counter = np.zeros(1, dtype=np.int64)
        state[S_COUNTER] = self._counter.ctypes.data
        state[S_B], state[S_NSTEP], state[S_ENVS] = B, buffer.n_step, buffer._stream_envs
        for k, arr in ((S_REW, rew), (S_NOBS, nobs), (S_TERM, term), (S_TRUNC, trunc), (S_DISC, disc),
                       (S_WEIGHTS, slot.arrays.weights), (S_IDX, slot.arrays.indices), (S_U, slot.u), (S_MASS, mass)):
            state[k] = arr.ctypes.data
        state.view(np.float64)[S_GAMMA] = buffer.gamma
        self._tree = tree = buffer._priority_tree()
        if tree is not None:
            sum_tree, min_tree = tree.arrays  # reset in place, never replaced (their addresses hold)
            state[S_SUM], state[S_MIN], state[S_TREE_P] = sum_tree.ctypes.data, min_tree.ctypes.data, len(sum_tree) // 2
        # every array whose address the state holds stays referenced (and so alive) as long as the sampler
        self._keep = (slot, mass, self._counter, buffer._table, *(tree.arrays if tree is not None else ()))
        self._table_addr = buffer._table_addr
        self._fast = B * sum(a[:1].nbytes for a in slot.arrays) <= FAST_MAX_BYTES

    @property
    def draws(self) -> int:
        """Uniforms drawn from the stream so far (``batch_size`` per call)."""
        return int(self._counter[0])

    @draws.setter
    def draws(self, value: int) -> None:
        self._counter[0] = check_int("draws", value, low=0)

    def __call__(self, *, as_torch: bool = False) -> ReplayBatch:
        buf, slot = self.buffer, self._slot
        slot.wait()  # a previous asynchronous copy must finish reading the host arrays
        per = self._tree is not None
        if per:
            self._state.view(np.float64)[S_BETA] = buf.beta
        code = _sampler_fast_core(self._table_addr, self._state, self._obs, self._act, per) if self._fast else (
            SAMPLE_BUSY)
        if code:
            with buf._lock:
                code = _sampler_locked_core(self._table_addr, self._state, self._obs, self._act, per)
                if code == SAMPLE_NO_MASS:
                    raise ValueError(f"cannot sample: total priority is {self._tree.total()} (must be finite and > 0)")
                if code:
                    buf._check_can_sample(self.batch_size)  # raises the empty / too-few message
        if per:
            buf._count_sample()
        if buf._relabel is not None:  # HER (rapidrl.buffers.her): goals relabelled in the host arrays, then delivered
            buf._relabel(slot.arrays)
        return slot.deliver(as_torch, buf.device, buf.pin_memory)

    def __repr__(self) -> str:
        return f"ReplaySampler(batch_size={self.batch_size}, seed={self.seed}, draws={self.draws})"


# The sampler cores inline the counter-based RNG, the sum-tree search, the gather and the table code of other
# modules: recompile them whenever one of those sources changes.
invalidate_stale_cache(_sampler_fast_core, [m.__file__ for m in (_rng_module, _sumtree_module, _replay_cores,
                                                                  replay_table)])
