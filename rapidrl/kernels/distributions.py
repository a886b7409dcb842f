"""The action distributions' formulas in compiled code (Numba), one definition each: the twins of
``rapidrl.nn.distributions`` that the compiled paths call (the fused rollout collector, the compiled PPO epoch,
SAC's compiled sample).

Per element: the Gaussian functions take one action dimension (the caller loops and sums over dimensions), the
categorical ones one row of logits [K]. The arithmetic runs in the arguments' precision as Numba types it (a
float32 argument of ``math.exp``/``math.log`` stays float32; a float64 argument or literal promotes), so a caller
picks its precision by what it passes. ``tests/test_distributions.py`` compares every function, compiled and as
``.py_func``, with its PyTorch definition over ordinary and extreme inputs.
"""

from __future__ import annotations

import math

import numba
import numpy as np

HALF_LOG_2PI = 0.5 * math.log(2.0 * math.pi)
LOG_2 = math.log(2.0)
SOFTPLUS_THRESHOLD = 20.0
"""Above this, softplus(x) is x (``torch.nn.functional.softplus``'s default threshold)."""
MASKED_LOGIT = -1e9
"""The logit of an invalid action (``rapidrl.nn.distributions.MASKED_LOGIT``, the same number)."""

__all__ = ["MASKED_LOGIT", "apply_action_mask", "categorical_entropy", "categorical_sample", "gaussian_entropy",
           "gaussian_log_density", "gaussian_log_prob", "log_sum_exp", "masked_max", "nth_valid", "softplus",
           "squashed_gaussian_log_prob", "tanh_log_jacobian"]


@numba.njit(cache=True, nogil=True)
def softplus(x):  # pragma: no cover
    """log(1 + exp(x)) as ``torch.nn.functional.softplus`` computes it (x itself above the threshold): finite for
    every finite x."""
    return x if x > SOFTPLUS_THRESHOLD else math.log1p(math.exp(x))


@numba.njit(cache=True, nogil=True)
def gaussian_log_density(z, log_std):  # pragma: no cover
    """log N(x; mean, std^2) of one dimension from the standardised z = (x - mean) / std and log std."""
    return -0.5 * z * z - log_std - HALF_LOG_2PI


@numba.njit(cache=True, nogil=True)
def gaussian_log_prob(x, mean, log_std):  # pragma: no cover
    """log N(x; mean, exp(log_std)^2) of one dimension."""
    return gaussian_log_density((x - mean) * math.exp(-log_std), log_std)


@numba.njit(cache=True, nogil=True)
def gaussian_entropy(log_std):  # pragma: no cover
    """Entropy of one Gaussian dimension: log std + (1 + log 2 pi) / 2."""
    return log_std + 0.5 + HALF_LOG_2PI


@numba.njit(cache=True, nogil=True)
def tanh_log_jacobian(u, scale):  # pragma: no cover
    """log |d a / d u| of a = center + scale * tanh(u) for one dimension, as log scale + log(1 - tanh(u)^2) with
    log(1 - tanh(u)^2) = 2 (log 2 - u - softplus(-2u)): finite for every u."""
    return math.log(scale) + 2.0 * (LOG_2 - u - softplus(-2.0 * u))


@numba.njit(cache=True, nogil=True)
def squashed_gaussian_log_prob(z, log_std, u, scale):  # pragma: no cover
    """One dimension of the squashed Gaussian's log-density: ``gaussian_log_density(z, log_std)`` minus
    ``tanh_log_jacobian(u, scale)``, u = mean + std * z."""
    return gaussian_log_density(z, log_std) - tanh_log_jacobian(u, scale)


@numba.njit(cache=True, nogil=True)
def log_sum_exp(logits):  # pragma: no cover
    """log sum_k exp(logits[k]) of one row [K], in float64 (the maximum is subtracted first): the categorical's
    log-normaliser, so log p_k = logits[k] - log_sum_exp(logits)."""
    m = logits[0]
    for k in range(1, logits.shape[0]):
        m = max(m, logits[k])
    total = 0.0
    for k in range(logits.shape[0]):
        total += math.exp(np.float64(logits[k]) - m)
    return m + math.log(total)


@numba.njit(cache=True, nogil=True)
def categorical_entropy(logits, lse):  # pragma: no cover
    """-sum_k p_k log p_k of one row of logits [K] with its ``log_sum_exp`` ``lse``."""
    entropy = 0.0
    for k in range(logits.shape[0]):
        lp = logits[k] - lse
        entropy -= math.exp(lp) * lp
    return entropy


@numba.njit(cache=True, nogil=True)
def categorical_sample(logits, lse, u):  # pragma: no cover
    """The category of one row of logits [K] (``log_sum_exp`` ``lse``) that a uniform draw u in [0, 1) picks by
    inverse CDF: the first k with u < p_0 + ... + p_k (if rounding leaves u above the sum, the last category of
    non-zero probability: never a masked one)."""
    acc = 0.0
    last = logits.shape[0] - 1
    for k in range(logits.shape[0]):
        p = math.exp(np.float64(logits[k]) - lse)
        acc += p
        if u < acc:
            return k
        if p > 0.0:
            last = k
    return last


@numba.njit(cache=True, nogil=True)
def apply_action_mask(logits, mask):  # pragma: no cover
    """One row of logits (or Q values) [K] in place: ``MASKED_LOGIT`` where ``mask`` [K] is False (the twin of
    ``rapidrl.nn.distributions.apply_action_mask``). The categorical functions above then give invalid actions
    probability 0 (their exp underflows to 0 exactly), entropy and log-probabilities over the valid ones only."""
    for k in range(logits.shape[0]):
        if not mask[k]:
            logits[k] = MASKED_LOGIT


@numba.njit(cache=True, nogil=True)
def masked_max(values, mask):  # pragma: no cover
    """(argmax, max) of one row of values [K] over the valid entries of ``mask`` [K] (the first maximal index); (-1,
    0.0) when none is valid (``rapidrl.nn.distributions.masked_max``'s value there)."""
    best, m = -1, 0.0
    for k in range(values.shape[0]):
        if mask[k] and (best < 0 or values[k] > m):
            best, m = k, values[k]
    return best, m


@numba.njit(cache=True, nogil=True)
def nth_valid(mask, u):  # pragma: no cover
    """The valid action of ``mask`` [K] that a uniform draw u in [0, 1) picks uniformly (the floor(u * V)-th of the
    V valid ones); -1 when none is valid."""
    count = 0
    for k in range(mask.shape[0]):
        count += mask[k]
    pick = min(int(u * count), count - 1)
    for k in range(mask.shape[0]):
        if mask[k]:
            if pick == 0:
                return k
            pick -= 1
    return -1
