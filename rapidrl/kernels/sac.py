"""SAC's elementwise parts in compiled calls (CPU): the squashed-Gaussian sample and its backward, and the
loss head (soft targets, the three losses, the gradients with respect to the critics' outputs).

Around the matmuls of an update these are ~60 small PyTorch operator calls on [B, A] and [n, B] tensors,
~2 ms per update on this CPU; here they are three calls (SAC's "handwritten" gradient backend). The PyTorch
definitions stay the reference and the "torch" backend: ``rapidrl.nn.qnets.squashed_gaussian`` and the losses
of ``rapidrl.algos.sac``; tests compare each kernel with them and with autograd through them. Arguments are
float32 and C-contiguous, checked by the wrappers.

The backward is derived by hand: with t = tanh(u), u = mean + noise * std, d a / d u = scale (1 - t^2),
d log_prob / d u = 2 t, and log_prob depends on log std directly (-1) and through u (noise * std).
"""

from __future__ import annotations

import math

import numba
import numpy as np

from rapidrl.kernels import distributions
from rapidrl.kernels.cache import invalidate_stale_cache
from rapidrl.kernels.distributions import squashed_gaussian_log_prob
from rapidrl.kernels.validation import check_array, check_like

F32 = np.dtype(np.float32)


@numba.njit(cache=True, nogil=True)
def _squash(head, noise, scale, center, log_std_min, log_std_max, actions, log_prob, tanh_u, std,
            tanh_raw):  # pragma: no cover
    rows, act_dim = noise.shape
    half_range = 0.5 * (log_std_max - log_std_min)
    for r in range(rows):
        total = 0.0
        for j in range(act_dim):
            tr = math.tanh(head[r, act_dim + j])
            log_std = log_std_min + half_range * (tr + 1.0)
            s = math.exp(log_std)
            eps = noise[r, j]
            u = head[r, j] + eps * s
            t = math.tanh(u)
            total += squashed_gaussian_log_prob(eps, log_std, u, scale[j])
            actions[r, j] = center[j] + scale[j] * t
            tanh_u[r, j] = t
            std[r, j] = s
            tanh_raw[r, j] = tr
        log_prob[r] = total


def squash(head: np.ndarray, noise: np.ndarray, scale: np.ndarray, center: np.ndarray, log_std_min: float,
           log_std_max: float, actions: np.ndarray, log_prob: np.ndarray, tanh_u: np.ndarray, std: np.ndarray,
           tanh_raw: np.ndarray) -> None:
    """``squashed_gaussian`` into the given arrays: head [R, 2A], noise [R, A], scale/center [A] ->
    actions [R, A], log_prob [R], and the saved tanh(u), std, tanh(raw log std) [R, A]."""
    rows, act_dim = check_array("noise", noise, ndim=2, dtypes=[F32]).shape
    check_like("head", head, like="noise", dtype=F32, shape=(rows, 2 * act_dim))
    for name, x in (("scale", scale), ("center", center)):
        check_like(name, x, like="noise", dtype=F32, shape=(act_dim,))
    for name, x in (("actions", actions), ("tanh_u", tanh_u), ("std", std), ("tanh_raw", tanh_raw)):
        check_like(name, x, like="noise", dtype=F32, shape=(rows, act_dim))
    check_like("log_prob", log_prob, like="noise", dtype=F32, shape=(rows,))
    _squash(head, noise, scale, center, float(log_std_min), float(log_std_max), actions, log_prob, tanh_u, std,
            tanh_raw)


@numba.njit(cache=True, nogil=True)
def _squash_backward(d_x, d_log_prob, noise, scale, tanh_u, std, tanh_raw, log_std_min, log_std_max,
                     d_head):  # pragma: no cover
    n, _, width = d_x.shape
    b, act_dim = noise.shape
    half_range = 0.5 * (log_std_max - log_std_min)
    for i in range(b):
        for j in range(act_dim):
            d_a = 0.0
            for k in range(n):  # d actor loss / d a: the action columns of the rows after the first b
                d_a += d_x[k, b + i, width - act_dim + j]
            t = tanh_u[i, j]
            d_u = d_a * scale[j] * (1.0 - t * t) + d_log_prob * 2.0 * t
            d_log_std = d_u * noise[i, j] * std[i, j] - d_log_prob
            tr = tanh_raw[i, j]
            d_head[i, j] = d_u
            d_head[i, act_dim + j] = d_log_std * half_range * (1.0 - tr * tr)


def squash_backward(d_x: np.ndarray, d_log_prob: float, noise: np.ndarray, scale: np.ndarray, tanh_u: np.ndarray,
                    std: np.ndarray, tanh_raw: np.ndarray, log_std_min: float, log_std_max: float,
                    d_head: np.ndarray) -> None:
    """d loss / d head [B, 2A] through ``squashed_gaussian`` for the first B rows, d loss / d actions being the
    sum over critics of the last A input columns of rows B..2B of d_x [n, 2B, I] (the critics' input gradient),
    and d loss / d log_prob the constant ``d_log_prob``. noise and the saved arrays [B, A]; writes d_head [B, 2A]."""
    b, act_dim = check_array("noise", noise, ndim=2, dtypes=[F32]).shape
    _, rows, width = check_array("d_x", d_x, ndim=3, dtypes=[F32]).shape
    if rows != 2 * b or width < act_dim:
        raise ValueError(f"d_x must have shape (n, {2 * b}, >= {act_dim}), got {d_x.shape}")
    check_like("scale", scale, like="noise", dtype=F32, shape=(act_dim,))
    for name, x in (("tanh_u", tanh_u), ("std", std), ("tanh_raw", tanh_raw)):
        check_like(name, x, like="noise", dtype=F32, shape=(b, act_dim))
    check_like("d_head", d_head, like="noise", dtype=F32, shape=(b, 2 * act_dim))
    _squash_backward(d_x, float(d_log_prob), noise, scale, tanh_u, std, tanh_raw, float(log_std_min),
                     float(log_std_max), d_head)


@numba.njit(cache=True, nogil=True)
def _loss_head(q_both, next_q, rewards, discounts, log_prob, alpha, log_alpha, target_entropy, d_q,
               out):  # pragma: no cover
    n, b = next_q.shape
    critic = 0.0
    actor = 0.0
    q_sum = 0.0
    lp_sum = 0.0
    for i in range(b):
        min_next = next_q[0, i]
        for k in range(1, n):
            min_next = min(min_next, next_q[k, i])
        target = rewards[i] + discounts[i] * (min_next - alpha * log_prob[b + i])
        best = 0
        for k in range(n):
            td = q_both[k, i] - target
            critic += 0.5 * td * td
            q_sum += q_both[k, i]
            d_q[k, i] = td / b
            d_q[k, b + i] = 0.0
            if q_both[k, b + i] < q_both[best, b + i]:
                best = k
        d_q[best, b + i] = -1.0 / b  # d actor loss / d min_k Q_k(s, a ~ pi), at the first minimum
        actor += alpha * log_prob[i] - q_both[best, b + i]
        lp_sum += log_prob[i]
    mean_lp = lp_sum / b
    out[0] = critic / b  # sum over critics of 0.5 * mean squared error
    out[1] = actor / b
    out[2] = -log_alpha * (mean_lp + target_entropy)  # temperature loss
    out[3] = alpha
    out[4] = q_sum / (n * b)
    out[5] = -mean_lp  # entropy estimate
    out[6] = -(mean_lp + target_entropy)  # d temperature loss / d log alpha


def loss_head(q_both: np.ndarray, next_q: np.ndarray, rewards: np.ndarray, discounts: np.ndarray,
              log_prob: np.ndarray, alpha: float, log_alpha: float, target_entropy: float, d_q: np.ndarray,
              out: np.ndarray) -> None:
    """SAC's losses and their gradients with respect to the critics' outputs.

    q_both [n, 2B]: Q_k(s, a) in columns :B, Q_k(s, a ~ pi(s)) in B:; next_q [n, B]: target critics at
    (s', a' ~ pi(s')); log_prob [2B]: of a ~ pi(s) then a' ~ pi(s'); rewards, discounts [B]. Writes d_q
    [n, 2B] (critic loss gradient in :B, actor loss gradient in B:) and out [7] = (critic loss, actor loss,
    temperature loss, alpha, mean Q, entropy, d temperature loss / d log alpha).
    """
    n, b = check_array("next_q", next_q, ndim=2, dtypes=[F32]).shape
    check_like("q_both", q_both, like="next_q", dtype=F32, shape=(n, 2 * b))
    check_like("rewards", rewards, like="next_q", dtype=F32, shape=(b,))
    check_like("discounts", discounts, like="next_q", dtype=F32, shape=(b,))
    check_like("log_prob", log_prob, like="next_q", dtype=F32, shape=(2 * b,))
    check_like("d_q", d_q, like="next_q", dtype=F32, shape=(n, 2 * b))
    check_like("out", out, like="next_q", dtype=F32, shape=(7,))
    _loss_head(q_both, next_q, rewards, discounts, log_prob, float(alpha), float(log_alpha), float(target_entropy),
               d_q, out)


# _squash calls the distribution formulas of another module: recompile it when they change.
invalidate_stale_cache(_squash, [distributions.__file__, __file__])
