"""Sum tree + min tree over ``capacity`` non-negative float64 priorities (prioritized replay's base).

Layout: two flat float64 arrays of length 2P, P = capacity rounded up to a power of two; node 1 is
the root, node k has children 2k and 2k + 1, leaf i lives at P + i. ``sum[k]`` is the sum of its
children (recomputed from them on every update, so no drift accumulates), ``min[k]`` their minimum.
Leaves never set hold 0 in the sum tree and +inf in the min tree. All work runs in ``@njit`` cores;
the class only validates and holds the arrays. Not thread-safe (``sample`` uses a scratch buffer).
"""

from __future__ import annotations

import numba
import numpy as np

from rapidrl.kernels.validation import check_array, check_int

__all__ = ["SumMinTree", "sample_core"]

_INT64 = np.dtype(np.int64)
_FLOAT64 = np.dtype(np.float64)


@numba.njit(cache=True)
def _set_core(sum_tree, min_tree, capacity, indices, values):
    """Write values[k] at leaf indices[k] in order (the last of duplicate indices wins) and update
    the ancestors. Checks everything first and writes nothing on bad input.
    Returns -1, k for a bad index at position k, or K + k for a bad value at position k."""
    K = indices.shape[0]
    for k in range(K):
        if indices[k] < 0 or indices[k] >= capacity:
            return k
        if not (values[k] >= 0.0 and values[k] < np.inf):
            return K + k
    size = sum_tree.shape[0] // 2
    for k in range(K):
        node = indices[k] + size
        sum_tree[node] = values[k]
        min_tree[node] = values[k]
        node >>= 1
        while node >= 1:
            left = 2 * node
            sum_tree[node] = sum_tree[left] + sum_tree[left + 1]
            min_tree[node] = min(min_tree[left], min_tree[left + 1])
            node >>= 1
    return -1


@numba.njit(cache=True)
def _get_core(sum_tree, capacity, indices, out):
    """out[k] = leaf indices[k]; returns -1 or the position of the first out-of-range index."""
    size = sum_tree.shape[0] // 2
    for k in range(indices.shape[0]):
        if indices[k] < 0 or indices[k] >= capacity:
            return k
    for k in range(indices.shape[0]):
        out[k] = sum_tree[indices[k] + size]
    return -1


@numba.njit(cache=True)
def sample_core(sum_tree, u, out, mass):
    """Prefix-sum search: out[k] = the leaf i with prefix(i) <= u[k] * total < prefix(i) + value(i).

    All K searches descend one level at a time together, so their memory loads overlap (the deep
    levels of a large tree miss the cache). At a node with remaining mass m: go left if
    m < sum(left); else go right, subtracting sum(left), unless sum(right) == 0 (possible only
    through round-off at the right edge), in which case go left. Every node entered thus has a
    positive sum, so a zero-valued leaf is never returned (needs total > 0).
    Returns -1, or the position of the first u outside [0, 1) (nothing written then)."""
    K = u.shape[0]
    for k in range(K):
        if not (u[k] >= 0.0 and u[k] < 1.0):
            return k
    size = sum_tree.shape[0] // 2
    total = sum_tree[1]
    for k in range(K):
        mass[k] = u[k] * total
        out[k] = 1
    width = size
    while width > 1:
        for k in range(K):
            left = 2 * out[k]
            m = mass[k]
            s_left = sum_tree[left]
            if m >= s_left and sum_tree[left + 1] > 0.0:
                mass[k] = m - s_left
                out[k] = left + 1
            else:
                out[k] = left
        width >>= 1
    for k in range(K):
        out[k] -= size
    return -1


class SumMinTree:
    """Sum and min over ``capacity`` priorities, with O(log capacity) batched updates and sampling.

    ``set(indices, values)``: indices int64 [K] in [0, capacity), values float64 [K] finite >= 0;
    applied in order, so for duplicate indices the last value wins.
    ``get(indices) -> float64 [K]``; ``total()`` and ``min()`` in O(1); ``sample(u) -> int64 [K]``
    maps each u in [0, 1) to the index whose prefix-sum interval holds u * total(), i.e. index i is
    drawn with probability value[i] / total() for uniform u.

    ``min()`` is over the entries that have been set (including those set to 0), +inf if none.
    """

    __slots__ = ("_capacity", "_mass", "_min", "_sum")

    def __init__(self, capacity: int):
        self._capacity = check_int("capacity", capacity, low=1)
        size = 1 << (self._capacity - 1).bit_length()
        self._sum = np.zeros(2 * size, dtype=np.float64)
        self._min = np.full(2 * size, np.inf, dtype=np.float64)
        self._mass = np.empty(0, dtype=np.float64)

    @property
    def capacity(self) -> int:
        return self._capacity

    def total(self) -> float:
        """Sum of all priorities."""
        return float(self._sum[1])

    def min(self) -> float:
        """Smallest priority set so far (+inf if none)."""
        return float(self._min[1])

    @property
    def arrays(self) -> tuple[np.ndarray, np.ndarray]:
        """The (sum, min) node arrays, float64 [2P] each (layout in the module docstring): for compiled code that
        searches the tree itself (the replay sampler). They are allocated once and reset in place, never
        replaced, so their addresses hold for the tree's lifetime."""
        return self._sum, self._min

    def clear(self) -> None:
        """Reset every priority to unset (sum 0, min +inf), in place: the arrays keep their addresses."""
        self._sum.fill(0.0)
        self._min.fill(np.inf)

    def set(self, indices: np.ndarray, values: np.ndarray) -> None:
        """Set priorities: indices int64 [K], values float64 [K] (finite, >= 0); last duplicate wins.
        Raises (and changes nothing) on any bad index or value."""
        indices = check_array("indices", indices, ndim=1, dtypes=(_INT64,))
        values = check_array("values", values, dtypes=(_FLOAT64,), shape=indices.shape)
        bad = _set_core(self._sum, self._min, self._capacity, indices, values)
        if bad >= 0:
            k = bad % indices.shape[0]
            if bad < indices.shape[0]:
                raise ValueError(f"indices[{k}] = {indices[k]} is outside [0, {self._capacity})")
            raise ValueError(f"values[{k}] = {values[k]} must be finite and >= 0")

    def get(self, indices: np.ndarray) -> np.ndarray:
        """Priorities at indices (int64 [K]) -> float64 [K]."""
        indices = check_array("indices", indices, ndim=1, dtypes=(_INT64,))
        out = np.empty(indices.shape[0], dtype=np.float64)
        bad = _get_core(self._sum, self._capacity, indices, out)
        if bad >= 0:
            raise ValueError(f"indices[{bad}] = {indices[bad]} is outside [0, {self._capacity})")
        return out

    def sample(self, u: np.ndarray) -> np.ndarray:
        """Proportional sampling: u float64 [K] in [0, 1) -> int64 [K] indices (see class docs)."""
        u = check_array("u", u, ndim=1, dtypes=(_FLOAT64,))
        return self._sample(u, np.empty(u.shape[0], dtype=np.int64))

    def sample_into(self, u: np.ndarray, out: np.ndarray) -> np.ndarray:
        """``sample`` writing into ``out`` (int64 [K], C-contiguous); returns it."""
        u = check_array("u", u, ndim=1, dtypes=(_FLOAT64,))
        return self._sample(u, check_array("out", out, dtypes=(_INT64,), shape=u.shape))

    def _sample(self, u, out):
        total = self._sum[1]
        if not (0.0 < total < np.inf):
            raise ValueError(f"cannot sample: total priority is {total} (must be finite and > 0)")
        if self._mass.shape[0] < u.shape[0]:
            self._mass = np.empty(u.shape[0], dtype=np.float64)
        bad = sample_core(self._sum, u, out, self._mass)
        if bad >= 0:
            raise ValueError(f"u[{bad}] = {u[bad]} must be in [0, 1)")
        return out
