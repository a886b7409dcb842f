"""Epsilon-greedy actions from Q values, drawn from counter-based per-env random streams (``rapidrl.kernels.rng``).

One definition of the choice, used by PQN's step collection (after a PyTorch forward) and by compiled collection
loops (``epsilon_greedy_row`` inside the loop). For env ``i`` with draw counter ``c = counter[i]``:

    u = uniform(key[i], c),  v = uniform(key[i], c + 1)        (counter[i] advances by 2, explored or not)
    action[i] = floor(v * A)                 if u < epsilon     (uniform over the A actions)
              = argmax_a q[i, a]             otherwise          (the first maximal index, as NumPy and PyTorch)
    value[i]  = max_a q[i, a]                                   (the greedy value, whichever action is taken)

With an action mask (``mask[i]`` [A] bool, the env's valid actions) the same draws choose among the valid actions
only: the greedy action and the value are the argmax and max over the valid actions, and an exploring env takes the
floor(v * V)-th of its V valid actions (``rapidrl.kernels.distributions.nth_valid``); with every action valid this
is the unmasked choice exactly.

The draws of a call depend only on the keys and counters, never on the thread or on the other envs, so two paths
that compute the same Q values take the same actions. ``value`` is what Q(lambda) bootstraps from
(``rapidrl.kernels.lambda_returns`` with ``values = max_a Q``).
"""

from __future__ import annotations

import numba
import numpy as np

from rapidrl.kernels.distributions import masked_max, nth_valid
from rapidrl.kernels.rng import uniform
from rapidrl.kernels.validation import FLOAT_DTYPES, check_array, check_unit_scalar

__all__ = ["epsilon_greedy", "epsilon_greedy_row", "masked_epsilon_greedy_row"]

_TWO = np.uint64(2)
_ONE = np.uint64(1)


@numba.njit(cache=True, inline="always")
def epsilon_greedy_row(q_row, epsilon, key, counter):
    """(action, max_a q_row[a]) of one env: q_row [A], epsilon float, key/counter uint64 (the counter is not
    advanced here: the caller adds 2)."""
    n_actions = q_row.shape[0]
    best = 0
    m = q_row[0]
    for a in range(1, n_actions):
        if q_row[a] > m:
            m = q_row[a]
            best = a
    if uniform(key, counter) < epsilon:
        best = min(int(uniform(key, counter + _ONE) * n_actions), n_actions - 1)
    return best, m


@numba.njit(cache=True, inline="always")
def masked_epsilon_greedy_row(q_row, mask_row, epsilon, key, counter):
    """``epsilon_greedy_row`` over the valid actions of ``mask_row`` [A] bool (at least one valid): (action, max of
    q_row over the valid actions)."""
    best, m = masked_max(q_row, mask_row)
    if uniform(key, counter) < epsilon:
        best = nth_valid(mask_row, uniform(key, counter + _ONE))
    return best, m


@numba.njit(cache=True, nogil=True)
def _epsilon_greedy_core(q, epsilon, keys, counters, actions, values):
    for i in range(q.shape[0]):
        a, m = epsilon_greedy_row(q[i], epsilon, keys[i], counters[i])
        counters[i] += _TWO
        actions[i] = a
        values[i] = m


@numba.njit(cache=True, nogil=True)
def _masked_epsilon_greedy_core(q, mask, epsilon, keys, counters, actions, values):
    for i in range(q.shape[0]):
        a, m = masked_epsilon_greedy_row(q[i], mask[i], epsilon, keys[i], counters[i])
        counters[i] += _TWO
        actions[i] = a
        values[i] = m


def epsilon_greedy(q, epsilon, keys, counters, *, mask=None, out_actions=None, out_values=None):
    """Epsilon-greedy actions and greedy values of N envs (see the module docstring); advances ``counters`` by 2.

    Args:
        q: [N, A] Q values, float32 or float64, C-contiguous.
        epsilon: exploration probability in [0, 1].
        keys: [N] uint64 per-env stream keys (``rapidrl.kernels.rng.derive_keys``).
        counters: [N] uint64 draw counters, updated in place.
        mask: optional [N, A] bool, the valid actions (at least one per row).
        out_actions: optional [N] int64 output; out_values: optional [N] output of q's dtype.

    Returns:
        (actions [N] int64, values [N] of q's dtype).
    """
    q = check_array("q", q, ndim=2, dtypes=FLOAT_DTYPES)
    n = q.shape[0]
    eps = check_unit_scalar("epsilon", epsilon)
    keys = check_array("keys", keys, dtypes=(np.uint64,), shape=(n,))
    counters = check_array("counters", counters, dtypes=(np.uint64,), shape=(n,))
    if not counters.flags.writeable:
        raise ValueError("counters must be writable (they advance in place)")
    if out_actions is None:
        out_actions = np.empty(n, np.int64)
    if out_values is None:
        out_values = np.empty(n, q.dtype)
    out_actions = check_array("out_actions", out_actions, dtypes=(np.int64,), shape=(n,))
    out_values = check_array("out_values", out_values, dtypes=(q.dtype,), shape=(n,))
    if mask is None:
        _epsilon_greedy_core(q, eps, keys, counters, out_actions, out_values)
        return out_actions, out_values
    mask = check_array("mask", mask, dtypes=(np.bool_,), shape=q.shape)
    if n and not mask.any(1).all():
        raise ValueError(f"mask: row {int(np.flatnonzero(~mask.any(1))[0])} has no valid action")
    _masked_epsilon_greedy_core(q, mask, eps, keys, counters, out_actions, out_values)
    return out_actions, out_values
