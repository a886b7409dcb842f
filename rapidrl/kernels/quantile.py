"""The quantile Huber losses and their gradients in one compiled pass (CPU): TQC's (``quantile_huber``) and QR-DQN's
loss head (``qrdqn_grads``).

With quantiles z [n, B, Q] at fractions tau_j = (j + 0.5) / Q and targets t [B, M] (constants),
delta_ibjk = t_bk - z_ibj, w = |tau_j - 1{delta < 0}| and huber(x) = x^2 / 2 for |x| <= 1, else |x| - 1/2:

    loss = 1 / (n B Q M) * sum_{i, b, j, k} w huber(delta)
    d loss / d z_ibj = -1 / (n B Q M) * sum_k w clip(delta, -1, 1)

In PyTorch the pairwise [n, B, Q, M] tensor (3.7M elements for TQC's 5 critics x 25 quantiles at batch 256) is
written and read by ~15 elementwise operators, forward and backward: ~40 ms of a ~60 ms update on this CPU. Here
it is never stored. The PyTorch definition (``rapidrl.algos.offpolicy_losses.quantile_huber_loss``) stays the
reference and the "torch" gradient backend; tests compare both, loss and gradient. Arguments are float32 and
C-contiguous, checked by the wrapper.
"""

from __future__ import annotations

import numba
import numpy as np

from rapidrl.kernels.td import NO_MASK, check_loss_head, refuse_bad_action
from rapidrl.kernels.validation import check_array, check_like

F32 = np.dtype(np.float32)
_HALF = np.float32(0.5)
_ONE = np.float32(1.0)


@numba.njit(cache=True, nogil=True, fastmath={"reassoc", "nsz"})
def _quantile_huber(quantiles, target, grad):  # pragma: no cover
    n, rows, q = quantiles.shape
    m = target.shape[1]
    scale = 1.0 / (n * rows * q * m)
    total = 0.0
    for j in range(q):
        tau = np.float32((j + 0.5) / q)
        below = _ONE - tau  # the weight where delta < 0
        for i in range(n):
            for r in range(rows):
                z = quantiles[i, r, j]
                loss_row = np.float32(0.0)
                grad_row = np.float32(0.0)
                for k in range(m):
                    d = target[r, k] - z
                    w = below if d < 0 else tau
                    a = abs(d)
                    loss_row += w * (a - _HALF if a > _ONE else _HALF * d * d)
                    grad_row += w * max(-_ONE, min(_ONE, d))
                total += loss_row
                grad[i, r, j] = -grad_row * scale
    return total * scale


def quantile_huber(quantiles: np.ndarray, target: np.ndarray, grad: np.ndarray) -> float:
    """The mean quantile Huber loss (module docstring) of quantiles [n, B, Q] towards target [B, M]; writes its
    gradient with respect to ``quantiles`` into ``grad`` [n, B, Q]. float32, C-contiguous."""
    n, rows, q = check_array("quantiles", quantiles, ndim=3, dtypes=[F32]).shape
    check_array("target", target, shape=(rows, None), dtypes=[F32])
    check_like("grad", grad, like="quantiles", dtype=F32, shape=(n, rows, q))
    return float(_quantile_huber(quantiles, target, grad))


@numba.njit(cache=True, nogil=True)
def _qrdqn_grads(q_both, next_target, actions, rewards, discounts, weights, use_weights, double_q, n, d_out, out,
                 next_mask, use_mask):  # pragma: no cover
    b = next_target.shape[0]
    num_actions = next_target.shape[1] // n
    loss_sum = 0.0
    q_sum = 0.0
    td_sum = 0.0
    target = np.empty(n, np.float32)
    for i in range(b):
        if actions[i] < 0 or actions[i] >= num_actions:
            return i
        select = q_both[b + i] if double_q else next_target[i]  # [A * N]: the greedy action's chooser
        best = -1
        best_mean = -np.inf
        for a in range(num_actions):
            if use_mask and not next_mask[i, a]:
                continue
            s = np.float32(0.0)
            for j in range(n):
                s += select[a * n + j]
            mean = s / n
            if best < 0 or mean > best_mean:
                best, best_mean = a, mean
        target_mean = 0.0
        for k in range(n):
            nq = next_target[i, best * n + k] if best >= 0 else np.float32(0.0)  # no valid action: worth 0
            target[k] = rewards[i] + discounts[i] * nq
            target_mean += target[k]
        target_mean /= n
        a_i = actions[i]
        w_i = weights[i] if use_weights else np.float32(1.0)
        loss_i = 0.0
        q_mean = 0.0
        for c in range(num_actions * n):
            d_out[i, c] = 0.0
        for j in range(n):
            z = q_both[i, a_i * n + j]
            q_mean += z
            tau = np.float32((j + 0.5) / n)
            row_loss = 0.0
            row_grad = 0.0
            for k in range(n):
                d = target[k] - z
                w = tau - _ONE if d < 0 else tau
                w = abs(w)
                ad = abs(d)
                row_loss += w * (ad - _HALF if ad > _ONE else _HALF * d * d)
                row_grad += w * max(-_ONE, min(_ONE, d))
            loss_i += row_loss / n
            d_out[i, a_i * n + j] = -row_grad / n * w_i / b
        q_mean /= n
        out[3 + i] = loss_i
        loss_sum += loss_i * w_i
        q_sum += q_mean
        td_sum += abs(target_mean - q_mean)
    out[0] = loss_sum / b
    out[1] = q_sum / b
    out[2] = td_sum / b
    return -1


def qrdqn_grads(q_both: np.ndarray, next_target: np.ndarray, actions: np.ndarray, rewards: np.ndarray,
                discounts: np.ndarray, weights: np.ndarray | None, double_q: bool, n_quantiles: int, d_out: np.ndarray,
                out: np.ndarray, next_mask: np.ndarray | None = None) -> None:
    """QR-DQN's loss head in one pass: ``quantile_greedy_next``, the target r + discount * Z'(s', a*) and
    ``quantile_regression_loss`` at the midpoint fractions, with its gradient with respect to the network's output.

    q_both [B or 2B, A * N]: the online network's output on s (rows :B) and, for double Q, on s' (rows B:2B);
    next_target [B, A * N] the target network's on s'; N = n_quantiles per action, action a's at columns a N to
    a N + N - 1 (the ``QNetwork`` layout); actions [B] int64; rewards, discounts (gamma^n, 0 after termination),
    weights [B] float32; next_mask [B, A] bool, the valid actions of s' (None: all; a state without one is worth 0).
    Fills d_out [B, A * N] with d loss / d output (non-zero at the taken action's N columns only) and out [3 + B] with
    (loss, mean Q of the taken actions, mean |mean target - Q|, the per-sample losses, unweighted: the priorities).
    float32, C-contiguous.
    """
    if n_quantiles < 1:
        raise ValueError(f"n_quantiles must be >= 1, got {n_quantiles}")
    num_actions, next_mask = check_loss_head(q_both, next_target, actions, rewards, discounts, weights, double_q,
                                             d_out, out, next_mask, n_quantiles)
    bad = _qrdqn_grads(q_both, next_target, actions, rewards, discounts, rewards if weights is None else weights,
                       weights is not None, bool(double_q), int(n_quantiles), d_out, out,
                       NO_MASK if next_mask is None else next_mask, next_mask is not None)
    refuse_bad_action(bad, actions, num_actions)
