"""Proportional prioritized replay (Schaul et al. 2016) on ``rapidrl.kernels.SumMinTree``.

Row i is drawn with probability P(i) = q_i / sum_j q_j, q_i = p_i^alpha, where p_i is the priority
last given by ``update_priorities`` (``|td| + eps`` is the usual choice; ``eps`` is added here too so a
zero priority stays drawable) or, for a new row, the largest priority seen so far. Sampling is
stratified: the k-th of B draws uses u in [k/B, (k+1)/B). Importance weights

    w_i = (N P(i))^-beta / max_j (N P(j))^-beta = (q_i / q_min)^-beta

with q_min the tree's O(1) minimum over stored rows, so weights lie in (0, 1]. beta is annealed
linearly from ``beta`` to ``beta_final`` over ``beta_anneal_steps`` calls of ``sample`` (constant
when None). Everything else (storage, n-step, the sampling path and stream, thread safety, persistence) is
``ReplayBuffer``'s: its sampler searches this buffer's tree and reads the weights from the tree's leaves
(``_priority_tree``); ``update_priorities`` takes the same lock. Priorities of rows overwritten between ``sample`` and
``update_priorities`` receive the stale update (the usual, harmless race).
"""

from __future__ import annotations

import numba
import numpy as np
import torch

from rapidrl.buffers.replay import ReplayBuffer
from rapidrl.kernels import SumMinTree
from rapidrl.kernels.validation import check_array, check_int, check_scalar

__all__ = ["PrioritizedReplayBuffer"]


@numba.njit(cache=True, nogil=True)
def _ring_rows(start, capacity, out):
    """out[k] = (start + k) mod capacity."""
    for k in range(out.shape[0]):
        j = start + k
        out[k] = j - capacity if j >= capacity else j


class PrioritizedReplayBuffer(ReplayBuffer):
    """``ReplayBuffer`` with proportional prioritization (see the module docstring).

    Extra args: alpha >= 0 (0 = uniform), beta in [0, 1] (initial IS exponent), beta_final in [0, 1],
    beta_anneal_steps (> 0 or None), eps > 0 added to every priority. ``sample`` fills
    ``weights`` and ``indices``; pass ``indices`` back to ``update_priorities``.
    """

    @staticmethod
    def storage_bytes(capacity: int, obs_shape: tuple, action_shape: tuple = (), **kwargs) -> int:
        """``ReplayBuffer.storage_bytes`` plus the sum/min tree (2 x 2 x the next power of two float64)."""
        tree = 4 * (1 << (int(capacity) - 1).bit_length()) * 8
        return ReplayBuffer.storage_bytes(capacity, obs_shape, action_shape, **kwargs) + tree

    def __init__(self, capacity: int, obs_shape: tuple, action_shape: tuple = (), *, alpha: float = 0.6,
                 beta: float = 0.4, beta_final: float = 1.0, beta_anneal_steps: int | None = None,
                 eps: float = 1e-6, **kwargs):
        self.alpha = check_scalar("alpha", alpha, low=0.0)
        self.beta_initial = check_scalar("beta", beta, low=0.0, high=1.0)
        self.beta_final = check_scalar("beta_final", beta_final, low=0.0, high=1.0)
        self.beta_anneal_steps = None if beta_anneal_steps is None else check_int(
            "beta_anneal_steps", beta_anneal_steps, low=1)
        self.eps = check_scalar("eps", eps, low=0.0, low_open=True)
        super().__init__(capacity, obs_shape, action_shape, **kwargs)
        self._tree = SumMinTree(self.capacity)
        self._max_priority = 1.0
        self._samples = 0
        self._new_idx = np.empty(0, dtype=np.int64)
        self._new_q = np.empty(0, dtype=np.float64)
        self._on_write = self._set_new_priorities
        self._set_fast_add(False)  # new rows' priorities are set under the lock: every add is checked

    @property
    def beta(self) -> float:
        """The importance-sampling exponent the next ``sample`` uses."""
        if self.beta_anneal_steps is None:
            return self.beta_initial
        frac = min(1.0, self._samples / self.beta_anneal_steps)
        return self.beta_initial + frac * (self.beta_final - self.beta_initial)

    @property
    def max_priority(self) -> float:
        """Largest priority seen (given to new rows)."""
        return self._max_priority

    def priorities(self, indices: np.ndarray) -> np.ndarray:
        """q = p^alpha of the given rows (float64), as stored in the tree."""
        return self._tree.get(np.ascontiguousarray(indices, dtype=np.int64))

    def _set_new_priorities(self, start: int, n: int) -> None:
        """New rows [start, start + n) (mod capacity) get the max priority seen."""
        if self._new_idx.shape[0] != n:
            self._new_idx = np.empty(n, dtype=np.int64)
            self._new_q = np.empty(n, dtype=np.float64)
        _ring_rows(start, self.capacity, self._new_idx)
        self._new_q.fill(self._max_priority**self.alpha)
        self._tree.set(self._new_idx, self._new_q)

    def add(self, obs, actions, rewards, next_obs, terminated, truncated) -> None:
        self._add_checked(obs, actions, rewards, next_obs, terminated, truncated)  # the fast path is off

    add.__doc__ = ReplayBuffer.add.__doc__

    def _priority_tree(self) -> SumMinTree:
        return self._tree

    def _count_sample(self) -> None:
        self._samples += 1

    def update_priorities(self, indices, priorities) -> None:
        """Set p_i = priorities[k] + eps for rows indices[k] (later duplicates win).

        indices: [K] integer rows in [0, len); priorities: [K] finite and >= 0 (NumPy arrays or
        torch tensors, e.g. ``|td|``). Raises ValueError/TypeError and changes nothing on bad input.
        """
        if isinstance(indices, torch.Tensor):
            indices = indices.detach().cpu().numpy()
        if isinstance(priorities, torch.Tensor):
            priorities = priorities.detach().cpu().numpy()
        indices = check_array("indices", indices, ndim=1, contiguous=False)
        if indices.dtype.kind not in "iu":
            raise TypeError(f"indices must have an integer dtype, got {indices.dtype}")
        priorities = check_array("priorities", priorities, shape=indices.shape, contiguous=False)
        if priorities.dtype.kind not in "iuf":
            raise TypeError(f"priorities must have a real dtype, got {priorities.dtype}")
        p = priorities.astype(np.float64) + self.eps
        if not np.all(np.isfinite(p)) or np.any(priorities < 0):
            raise ValueError("priorities must be finite and >= 0")
        idx = indices.astype(np.int64)
        with self._lock:
            if idx.min() < 0 or idx.max() >= self._size:
                raise ValueError(f"indices must lie in [0, {self._size}), got [{idx.min()}, {idx.max()}]")
            self._tree.set(idx, p**self.alpha)  # in order: for duplicate indices the last wins
            self._max_priority = max(self._max_priority, float(p.max()))

    # -- persistence -------------------------------------------------------------------------------
    def _config(self) -> dict:
        return dict(super()._config(), alpha=self.alpha, beta=self.beta_initial, beta_final=self.beta_final,
                    beta_anneal_steps=self.beta_anneal_steps, eps=self.eps)

    def _state(self) -> tuple[dict, dict[str, np.ndarray]]:
        state, arrays = super()._state()
        state.update(max_priority=self._max_priority, samples=self._samples)
        arrays["priorities"] = self._tree.get(np.arange(self._size, dtype=np.int64))
        return state, arrays

    def _set_state(self, state: dict, arrays: dict[str, np.ndarray]) -> None:
        super()._set_state(state, arrays)
        self._max_priority = float(state["max_priority"])
        self._samples = int(state["samples"])
        q = arrays["priorities"]
        if q.shape != (self._size,):
            raise ValueError(f"priorities.npy has shape {q.shape}, expected ({self._size},)")
        self._tree.clear()  # in place: a ReplaySampler holds the tree's addresses
        if self._size:
            self._tree.set(np.arange(self._size, dtype=np.int64), np.ascontiguousarray(q, dtype=np.float64))
