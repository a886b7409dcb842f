"""C51's loss head in one compiled call (CPU): the greedy next action on the expected Q, its categorical projection
onto the atoms, the cross-entropy and its gradient with respect to the Q network's logits, and the statistics.

``rapidrl.algos.offpolicy_losses`` holds the definitions (``categorical_projection``, ``c51_loss``; the "torch"
gradient backend differentiates them with autograd); this kernel, part of C51's "handwritten" backend, computes the
same loss and gradient in one call instead of ~30 small operator calls. Tests compare it with autograd.

With logits z [N] of the taken action, the projected target m [N] (rows summing to 1):
loss_b = -sum_i m_i log softmax(z)_i, d loss_b / d z_i = softmax(z)_i sum(m) - m_i; the batch loss is
mean_b w_b loss_b, so d loss / d z_bi = w_b (softmax(z_b)_i sum(m_b) - m_bi) / B.
"""

from __future__ import annotations

import math

import numba
import numpy as np

from rapidrl.kernels.td import NO_MASK, check_loss_head, refuse_bad_action
from rapidrl.kernels.validation import check_array

F32 = np.dtype(np.float32)


@numba.njit(cache=True, nogil=True)
def _softmax_into(logits, first, n, e):  # pragma: no cover
    """e[:n] = exp(logits[first:first + n] - max) (unnormalized); returns (their sum, the max). One exp per atom."""
    top = logits[first]
    for j in range(1, n):
        top = max(top, logits[first + j])
    total = 0.0
    for j in range(n):
        e[j] = math.exp(logits[first + j] - top)
        total += e[j]
    return total, top


@numba.njit(cache=True, nogil=True)
def _c51_grads(q_both, next_target, actions, rewards, discounts, weights, use_weights, double_q, support, d_out,
               out, next_mask, use_mask):  # pragma: no cover
    b = next_target.shape[0]
    n = support.shape[0]
    num_actions = next_target.shape[1] // n
    v_min, v_max = support[0], support[n - 1]
    dz = (v_max - v_min) / np.float32(n - 1)
    m = np.empty(n, np.float64)
    e = np.empty(n, np.float64)  # scratch: one action's exp(logit - max)
    p = np.empty(n, np.float64)  # the greedy next action's, kept
    loss_sum = 0.0
    q_sum = 0.0
    ce_sum = 0.0
    for i in range(b):
        if actions[i] < 0 or actions[i] >= num_actions:
            return i
        select = q_both[b + i] if double_q else next_target[i]
        best = -1
        best_q = -np.inf
        p_total = 1.0
        for a in range(num_actions):
            if use_mask and not next_mask[i, a]:
                continue
            total, _ = _softmax_into(select, a * n, n, e)
            weighted = 0.0
            for j in range(n):
                weighted += e[j] * support[j]
            q = weighted / total
            if best < 0 or q > best_q:
                best, best_q = a, q
                if not double_q:  # the target's own distribution at a*: keep it
                    p_total = total
                    for j in range(n):
                        p[j] = e[j]
        discount = discounts[i]
        if best < 0:  # no valid action in s': worth 0 (all the mass on r)
            best, discount = 0, np.float32(0.0)
            p_total, _ = _softmax_into(next_target[i], 0, n, p)
        elif double_q:  # the target network's distribution at the online network's a*
            p_total, _ = _softmax_into(next_target[i], best * n, n, p)
        for j in range(n):
            m[j] = 0.0
        for j in range(n):  # atom j moves to Tz_j and shares its mass between the two atoms around it
            tz = min(max(rewards[i] + discount * support[j], v_min), v_max)
            pos = (tz - v_min) / dz
            lower = min(math.floor(pos), n - 2)
            share = pos - lower
            mass = p[j] / p_total
            m[lower] += mass * (1.0 - share)
            m[lower + 1] += mass * share
        first = actions[i] * n  # the taken action's logits
        total, top = _softmax_into(q_both[i], first, n, e)
        lse = top + math.log(total)
        w = weights[i] if use_weights else 1.0
        m_sum = 0.0
        for j in range(n):
            m_sum += m[j]
        ce = 0.0
        q = 0.0
        for c in range(num_actions * n):
            d_out[i, c] = 0.0
        for j in range(n):
            soft = e[j] / total
            ce -= m[j] * (q_both[i, first + j] - lse)
            q += soft * support[j]
            d_out[i, first + j] = w * (soft * m_sum - m[j]) / b
        out[3 + i] = ce
        loss_sum += w * ce
        q_sum += q
        ce_sum += ce
    out[0] = loss_sum / b
    out[1] = q_sum / b
    out[2] = ce_sum / b
    return -1


def c51_grads(q_both: np.ndarray, next_target: np.ndarray, actions: np.ndarray, rewards: np.ndarray,
              discounts: np.ndarray, weights: np.ndarray | None, double_q: bool, support: np.ndarray,
              d_out: np.ndarray, out: np.ndarray, next_mask: np.ndarray | None = None) -> None:
    """C51's loss head (module docstring). q_both [B or 2B, A * N]: the online network's logits on s (rows :B) and,
    for double Q, on s' (rows B:2B); next_target [B, A * N] the target network's on s'; action a's N logits at columns
    a N to a N + N - 1 (the ``QNetwork`` layout); support [N] the atoms, evenly spaced, increasing; actions [B] int64;
    rewards, discounts (gamma^n, 0 after termination), weights [B] float32; next_mask [B, A] bool, the valid actions
    of s' (None: all; a state without one is worth 0). Fills d_out [B, A * N] with d loss / d logits (non-zero at the
    taken action's N columns only) and out [3 + B] with (loss, mean expected Q of the taken actions, mean
    cross-entropy, the per-sample cross-entropies: the priorities). float32, C-contiguous."""
    n = check_array("support", support, ndim=1, dtypes=[F32]).shape[0]
    if n < 2 or not support[-1] > support[0]:
        raise ValueError(f"support needs at least 2 increasing atoms, got {support}")
    num_actions, next_mask = check_loss_head(q_both, next_target, actions, rewards, discounts, weights, double_q,
                                             d_out, out, next_mask, n)
    bad = _c51_grads(q_both, next_target, actions, rewards, discounts, rewards if weights is None else weights,
                     weights is not None, bool(double_q), support, d_out, out,
                     NO_MASK if next_mask is None else next_mask, next_mask is not None)
    refuse_bad_action(bad, actions, num_actions)
