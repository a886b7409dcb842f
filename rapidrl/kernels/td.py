"""The DQN loss head in one compiled call: TD targets, Huber loss, its gradient with respect to the Q
network's output, and the statistics (CPU).

``rapidrl.algos.dqn.dqn_loss`` is the definition (the "torch" gradient backend differentiates it with autograd);
this kernel, part of DQN's "handwritten" backend, computes the same loss and its gradient with respect to the Q
network's output in one call instead of ~25 small operator calls (~0.45 ms per update on this CPU, about a
quarter of a DQN update on CartPole). Tests compare it with autograd through ``dqn_loss``.

With q = Q(s, a), next_q = Q_target(s', a') where a' = argmax Q(s', .) (double DQN, the first maximum on
ties like ``torch.argmax``) or next_q = max Q_target(s', .), target = r + discount * next_q and
td = q - target: loss = mean_b w_b huber(td_b), d loss / d Q(s_b, a_b) = w_b clamp(td_b, -1, 1) / B. With
``next_mask`` (the valid actions of s', action masks) the argmax and max run over the valid actions, and a state
without a valid action is worth 0 (``rapidrl.nn.distributions.masked_max``).
"""

from __future__ import annotations

import numba
import numpy as np

from rapidrl.kernels.distributions import masked_max
from rapidrl.kernels.validation import check_array, check_like


@numba.njit(cache=True, nogil=True)
def _dqn_td_grads(q_both, next_target, actions, rewards, discounts, weights, use_weights, double_q, d_out,
                  out, next_mask, use_mask):  # pragma: no cover
    b, num_actions = next_target.shape
    loss_sum = 0.0
    q_sum = 0.0
    td_sum = 0.0
    for i in range(b):
        if use_mask:
            if double_q:
                best, _ = masked_max(q_both[b + i], next_mask[i])
                next_q = next_target[i, best] if best >= 0 else np.float32(0.0)
            else:
                next_q = np.float32(masked_max(next_target[i], next_mask[i])[1])
        elif double_q:
            best = 0
            for j in range(1, num_actions):
                if q_both[b + i, j] > q_both[b + i, best]:
                    best = j
            next_q = next_target[i, best]
        else:
            next_q = next_target[i, 0]
            for j in range(1, num_actions):
                next_q = max(next_q, next_target[i, j])
        if actions[i] < 0 or actions[i] >= num_actions:
            return i  # checked here rather than with two reductions in the wrapper
        q = q_both[i, actions[i]]
        td = q - (rewards[i] + discounts[i] * next_q)
        abs_td = abs(td)
        loss = 0.5 * td * td if abs_td < 1.0 else abs_td - 0.5
        grad = min(max(td, np.float32(-1.0)), np.float32(1.0))
        if use_weights:
            loss = loss * weights[i]
            grad = grad * weights[i]
        for j in range(num_actions):
            d_out[i, j] = 0.0
        d_out[i, actions[i]] = grad / b
        loss_sum += loss
        q_sum += q
        td_sum += abs_td
        out[3 + i] = abs_td
    out[0] = loss_sum / b
    out[1] = q_sum / b
    out[2] = td_sum / b
    return -1


NO_MASK = np.ones((1, 1), np.bool_)
"""What the compiled loss heads receive for ``next_mask`` without action masks (typed, unused)."""
F32 = np.dtype(np.float32)


def check_loss_head(q_both, next_target, actions, rewards, discounts, weights, double_q: bool, d_out, out,
                    next_mask, outputs_per_action: int = 1) -> tuple[int, np.ndarray | None]:
    """Check the arguments every compiled loss head of the DQN family takes (``dqn_td_grads``,
    ``rapidrl.kernels.quantile.qrdqn_grads``, ``rapidrl.kernels.categorical.c51_grads``): next_target [B, A * K]
    float32 with K = ``outputs_per_action`` columns per action; q_both [B or 2B (double Q), A * K]; actions [B] int64;
    rewards, discounts, weights (or None) [B] float32; d_out like next_target; out [3 + B] float32; next_mask [B, A]
    bool or None. Returns (A, next_mask as a bool array, or None)."""
    b, width = check_array("next_target", next_target, ndim=2, dtypes=[F32]).shape
    if width % outputs_per_action:
        raise ValueError(f"next_target's {width} columns are not a whole number of actions x {outputs_per_action} "
                         "outputs per action")
    check_like("q_both", q_both, like="next_target", dtype=F32, shape=(2 * b if double_q else b, width))
    check_like("actions", actions, like="next_target's rows", dtype=np.dtype(np.int64), shape=(b,))
    check_like("rewards", rewards, like="next_target", dtype=F32, shape=(b,))
    check_like("discounts", discounts, like="next_target", dtype=F32, shape=(b,))
    if weights is not None:
        check_like("weights", weights, like="next_target", dtype=F32, shape=(b,))
    check_like("d_out", d_out, like="next_target", dtype=F32, shape=(b, width))
    check_like("out", out, like="next_target", dtype=F32, shape=(3 + b,))
    num_actions = width // outputs_per_action
    if next_mask is not None:
        next_mask = check_like("next_mask", next_mask, like="next_target", dtype=np.dtype(np.bool_),
                               shape=(b, num_actions))
    return num_actions, next_mask


def refuse_bad_action(bad: int, actions: np.ndarray, num_actions: int) -> None:
    """A compiled loss head's verdict on the actions: ``bad`` >= 0 is the first row whose action is out of range."""
    if bad >= 0:
        raise ValueError(f"actions must lie in [0, {num_actions}), got actions[{bad}] = {actions[bad]}")


def dqn_td_grads(q_both: np.ndarray, next_target: np.ndarray, actions: np.ndarray, rewards: np.ndarray,
                 discounts: np.ndarray, weights: np.ndarray | None, double_q: bool, d_out: np.ndarray,
                 out: np.ndarray, next_mask: np.ndarray | None = None) -> None:
    """Fill d_out [B, A] with d loss / d Q(s, .) and out [3 + B] with (loss, mean Q(s, a), mean |td|, |td|...).

    q_both: the online network's output on s (rows :B) and, for double DQN, on s' (rows B:2B), float32;
    next_target [B, A] float32; actions [B] int64 in [0, A); rewards, discounts, weights [B] float32; next_mask
    [B, A] bool, the valid actions of s' (None: all).
    """
    num_actions, next_mask = check_loss_head(q_both, next_target, actions, rewards, discounts, weights, double_q,
                                             d_out, out, next_mask)
    bad = _dqn_td_grads(q_both, next_target, actions, rewards, discounts, rewards if weights is None else weights,
                        weights is not None, bool(double_q), d_out, out,
                        NO_MASK if next_mask is None else next_mask, next_mask is not None)
    refuse_bad_action(bad, actions, num_actions)
