"""The replay buffer's raw-pointer table: the GIL-holding fast ``add`` and the addresses the bound sampler reads.

Why. A Numba call costs about one unboxing per array argument, and releasing and retaking the GIL costs more than
copying a few rows. ``ReplayBuffer.add`` therefore passes one int64 table (head, size, capacity, and per field:
the storage address, row bytes, dtype number and row shape) and the six input arrays to ``add_fast_core``, which
checks them, copies bytes with ``memmove`` and moves the head while holding the GIL; the bound sampler
(``rapidrl.buffers.sampler``) reads the storage through the same table (one argument instead of six arrays).
Measured when written: ~1 us saved per ``add`` (``replay.py`` history); an end-to-end DQN or SAC run decides whether
it is worth keeping (``benchmarks/bench_replay_add.py`` runs them with and without it).

What it relies on: llvmlite's ``inttoptr`` and ``cgutils.raw_memmove`` (``address``, ``memmove``), Numba's
``numba.carray`` over an address, ``numba.np.numpy_support`` dtype numbers, and NumPy's ``ndarray.ctypes.data``.

Safety argument.
- Owner: every address in a table points into arrays the ``ReplayBuffer`` owns: its storage (``buffer._store``,
  allocated once in ``_allocate``) and the table itself (``buffer._table``). A ``ReplaySampler`` also stores the
  addresses of its own output arrays and of the prioritized buffer's tree arrays (``SumMinTree.arrays``); it holds
  references to all of them (``_keep``), so none is freed while it can be called.
- Lifetime: storage arrays are never replaced after construction (``load`` copies into them; memory-mapped storage
  stays mapped for the buffer's lifetime), and the sum/min tree is reset in place, never reallocated. Code that
  replaced one of them would have to call ``describe_storage`` again; ``tests/test_unsafe.py`` checks that the
  table matches the arrays after add, save, load and clear.
- Aliasing and concurrency: only compiled code holding the GIL (``add_fast_core``, the sampler's fast core) or a
  thread holding the buffer's lock (``Guard``: the lock plus the table's busy flag) touches storage. The fast cores
  decline (return -1) while the busy flag is set, and the locked paths set it, so the two never overlap. The inputs
  of ``add`` are copied with ``memmove`` (overlap-safe) after their dtype, shape and C-contiguity were checked
  against the table, so no out-of-bounds write is possible from a bad argument.
- When it breaks: an llvmlite or Numba upgrade that changes these APIs fails at import or compile time (loudly);
  ``tests/test_unsafe.py`` exercises the fast add and the sampler and compares them with the checked path.
"""

from __future__ import annotations

import threading

import numba
import numpy as np
from llvmlite import ir
from numba.core import cgutils, types
from numba.extending import intrinsic, overload
from numba.np import numpy_support

__all__ = [
    "FAST_MAX_BYTES",
    "T_BUSY",
    "T_CAP",
    "T_DRAWS",
    "T_LEN",
    "T_POS",
    "T_SIZE",
    "Guard",
    "add_fast_core",
    "address",
    "canonical_num",
    "describe_storage",
    "table_matches",
    "table_store",
]

# int64 table layout: scalars, then per field (6, in the order obs, actions, rewards, next_obs, terminated,
# truncated) its storage address, row bytes, dtype number and row shape (ndim + up to T_MAXDIM sizes).
T_POS, T_SIZE, T_CAP, T_ROWS, T_BUSY, T_MAXBYTES, T_ALLBYTES, T_DRAWS = range(8)
T_ADDR, T_ROWBYTES, T_DTYPE, T_SHAPE = 8, 14, 20, 26
T_MAXDIM = 8  # row dims a table holds (more: no fast add)
T_LEN = T_SHAPE + 6 * (1 + T_MAXDIM)
FAST_MAX_BYTES = 1 << 16  # larger adds take the locked path, which releases the GIL while it copies


@intrinsic
def address(typingctx, addr):
    """An int64 address as a void pointer (compiled code only)."""
    def codegen(context, builder, signature, args):
        return builder.inttoptr(args[0], context.get_value_type(types.voidptr))

    return types.voidptr(types.int64), codegen


@intrinsic
def memmove(typingctx, dst, src, nbytes):
    """Copy nbytes from address src to address dst (int64 addresses, overlap allowed; compiled code only)."""
    def codegen(context, builder, signature, args):
        i8p = ir.IntType(8).as_pointer()
        cgutils.raw_memmove(builder, builder.inttoptr(args[0], i8p), builder.inttoptr(args[1], i8p), args[2], 1)
        return context.get_dummy_value()

    return types.void(types.int64, types.int64, types.int64), codegen


def dtype_num(x):
    """The canonical NumPy dtype number of array x's dtype (compiled: a constant)."""
    return canonical_num(x.dtype)


@overload(dtype_num, inline="always")
def _dtype_num_overload(x):
    if not isinstance(x, types.Array):
        return None  # a typing error: the caller takes the checked path
    num = numpy_support.as_dtype(x.dtype).num
    return lambda x: num


def c_data(x):
    """The data address of a C-contiguous array, 0 for any other layout (compiled code only)."""


@overload(c_data, inline="always")
def _c_data_overload(x):
    if not isinstance(x, types.Array):
        return None
    if x.layout == "C":
        return lambda x: np.int64(x.ctypes.data)
    return lambda x: np.int64(0)


def canonical_num(dt: np.dtype) -> int:
    """dtype number as compiled code sees it (int64 is one type, 'l' or 'q'); -1 if Numba has none."""
    try:
        return numpy_support.as_dtype(numpy_support.from_dtype(dt)).num
    except (NotImplementedError, KeyError):
        return -1


def describe_storage(table: np.ndarray, store: tuple, capacity: int, rows_per_add: int, fast_add: bool) -> None:
    """Write the addresses, row sizes, dtypes and shapes of the six storage arrays ``store`` into ``table``;
    ``fast_add`` False (or storage the table cannot describe) makes every ``add_fast_core`` call decline."""
    t = table
    t[T_CAP], t[T_ROWS] = capacity, rows_per_add
    ok = fast_add
    for k, arr in enumerate(store):
        shape = arr.shape[1:]
        num = canonical_num(arr.dtype)
        ok = ok and num >= 0 and len(shape) <= T_MAXDIM and arr.flags.c_contiguous
        t[T_ADDR + k], t[T_ROWBYTES + k], t[T_DTYPE + k] = arr.ctypes.data, arr[:1].nbytes, num
        s = T_SHAPE + (1 + T_MAXDIM) * k
        t[s] = len(shape)
        t[s + 1:s + 1 + min(len(shape), T_MAXDIM)] = shape[:T_MAXDIM]
    t[T_ALLBYTES] = sum(int(x) for x in t[T_ROWBYTES:T_ROWBYTES + 6])
    t[T_MAXBYTES] = FAST_MAX_BYTES if ok else -1


def table_matches(table: np.ndarray, store: tuple) -> bool:
    """True when ``table`` describes exactly the arrays ``store`` (addresses and row bytes): the invariant the
    safety argument rests on, checked by tests after every operation that could move storage."""
    return all(int(table[T_ADDR + k]) == arr.ctypes.data and int(table[T_ROWBYTES + k]) == arr[:1].nbytes
               for k, arr in enumerate(store))


@numba.njit(cache=True, inline="always")
def _fast_mismatch(tab, k, x, n):
    """True unless x is a C-contiguous [n, *row shape of field k] array of field k's dtype."""
    s = T_SHAPE + (1 + T_MAXDIM) * k
    if dtype_num(x) != tab[T_DTYPE + k] or x.ndim - 1 != tab[s] or x.shape[0] != n:
        return True
    for d in range(1, x.ndim):
        if x.shape[d] != tab[s + d]:
            return True
    return c_data(x) == 0


@numba.njit(cache=True, inline="always")
def _fast_put(tab, k, x, pos, n, C):
    """Copy the n rows of x to field k's rows pos, pos + 1, ... (wrapping at C)."""
    R = tab[T_ROWBYTES + k]
    dst = tab[T_ADDR + k]
    src = c_data(x)
    first = min(n, C - pos)
    memmove(dst + pos * R, src, first * R)
    if first < n:
        memmove(dst, src + first * R, (n - first) * R)


@numba.njit(cache=True)  # holds the GIL: atomic with respect to every other Python thread
def add_fast_core(table_addr, obs, act, rew, nobs, term, trunc):
    """``add`` for inputs stored as they are: 0 when written, else nonzero and nothing written (-1 busy or too
    large, 1-8 as ``rapidrl.kernels.replay.write_rows``'s codes, also for dtype/layout)."""
    tab = numba.carray(address(table_addr), T_LEN, np.int64)
    if tab[T_BUSY]:
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
    pos, size, C, rows = tab[T_POS], tab[T_SIZE], tab[T_CAP], tab[T_ROWS]
    if n == 0 or n > C:
        return 7
    if rows > 0 and n != rows:
        return 8
    if n * tab[T_ALLBYTES] > tab[T_MAXBYTES]:
        return -1
    _fast_put(tab, 0, obs, pos, n, C)
    _fast_put(tab, 1, act, pos, n, C)
    _fast_put(tab, 2, rew, pos, n, C)
    _fast_put(tab, 3, nobs, pos, n, C)
    _fast_put(tab, 4, term, pos, n, C)
    _fast_put(tab, 5, trunc, pos, n, C)
    pos += n
    tab[T_POS] = pos - C if pos >= C else pos
    tab[T_SIZE] = min(size + n, C)
    return 0


@numba.njit(cache=True, inline="always")
def table_store(table_addr, obs_o, act_o, rew_o, nobs_o, term_o, trunc_o):
    """The storage row views [C, D] / [C] from the table, typed like the outputs (which have the storage dtypes
    and row sizes)."""
    tab = numba.carray(address(table_addr), T_LEN, np.int64)
    C = tab[T_CAP]
    return (numba.carray(address(tab[T_ADDR]), (C, obs_o.shape[1]), obs_o.dtype),
            numba.carray(address(tab[T_ADDR + 1]), (C, act_o.shape[1]), act_o.dtype),
            numba.carray(address(tab[T_ADDR + 2]), C, rew_o.dtype),
            numba.carray(address(tab[T_ADDR + 3]), (C, nobs_o.shape[1]), nobs_o.dtype),
            numba.carray(address(tab[T_ADDR + 4]), C, term_o.dtype),
            numba.carray(address(tab[T_ADDR + 5]), C, trunc_o.dtype))


class Guard:
    """The buffer's lock: ``with guard:`` holds the threading lock and sets the table's busy flag, so that the
    GIL-holding fast cores never run inside a section that touches storage."""

    __slots__ = ("lock", "table")

    def __init__(self, table: np.ndarray):
        self.lock = threading.Lock()
        self.table = table

    def __enter__(self):
        self.lock.acquire()
        self.table[T_BUSY] = 1
        return self

    def __exit__(self, *exc):
        self.table[T_BUSY] = 0
        self.lock.release()
