"""Kernels for LLM post-training: group-relative advantages (GRPO, Dr. GRPO, RLOO) and per-token KL.

Layout: a batch of B prompts with G sampled completions each; rewards are ``[B, G]`` (or flat
``[B * G]``, grouped by consecutive runs of ``group_size``, i.e. completion j of prompt b is at
``b * G + j``); token log-probabilities are ``[B, T]`` with a bool mask ``[B, T]`` for real tokens.
float32 and float64 are supported; outputs have the input dtype. The cores release the GIL.
"""

from __future__ import annotations

import math

import numba
import numpy as np
from llvmlite import ir
from numba import types
from numba.extending import intrinsic, overload

from rapidrl.kernels.validation import check_float_fast, check_int, check_like, check_scalar

__all__ = ["group_advantages", "rloo_advantages", "sequence_kl", "token_kl"]

_ESTIMATORS = {"k1": 1, "k2": 2, "k3": 3}
_REDUCTIONS = ("mean", "sum")
_SCALES = ("std", "none")


# ------------------------------------------------------------------------------------- float32 exp


@intrinsic
def _bits_as_float32(typingctx, bits):
    """Reinterpret the low 32 bits of an integer as a float32 (compiled code only)."""
    if not isinstance(bits, types.Integer):
        return None

    def codegen(context, builder, signature, args):
        v = args[0]
        if bits.bitwidth > 32:
            v = builder.trunc(v, ir.IntType(32))
        return builder.bitcast(v, ir.FloatType())

    return types.float32(bits), codegen


def _exp(x):
    """exp(x). In compiled code float32 uses ``_expf`` (vectorizable), float64 uses libm."""
    return np.exp(x)


def _expf(x):
    """float32 exp, max relative error ~1.2e-7 (a test checks it), vectorizable by LLVM (libm's
    expf is not, and Numba here has no SVML). Cephes expf: x = k ln2 + r with |r| <= ln2/2,
    exp(r) by a degree-7 polynomial (Estrin), 2^(k-1) built from the float32 exponent bits, times 2.
    Inputs are clamped to [-86.5, 89]: below, the result is exp(-86.5) ~ 2.7e-38 instead of a
    subnormal or 0 (absolute error < 3e-38); above ln(FLT_MAX) ~ 88.72 it is inf, as libm (k <= 128
    there, so the exponent bits stay valid). NaN propagates."""
    x = min(max(x, np.float32(-86.5)), np.float32(89.0))
    # round(x / ln2) with the 1.5 * 2^23 trick (no call to floor, so the loop vectorizes)
    k = (x * np.float32(1.44269504) + np.float32(12582912.0)) - np.float32(12582912.0)
    r = (x - k * np.float32(0.693359375)) - k * np.float32(-2.12194440e-4)  # ln2 split hi + lo
    r2 = r * r
    p01 = np.float32(5.0000001201e-1) + np.float32(1.6666665459e-1) * r
    p23 = np.float32(4.1665795894e-2) + np.float32(8.3334519073e-3) * r
    p45 = np.float32(1.3981999507e-3) + np.float32(1.9875691500e-4) * r
    p = p01 + r2 * (p23 + r2 * p45)
    e = (r + np.float32(1.0)) + r2 * p
    return (e * _bits_as_float32((np.int32(k) + 126) << 23)) * np.float32(2.0)  # k in [-125, 128]


@overload(_exp, inline="always")
def _exp_overload(x):
    if x == types.float32:
        return _expf
    if isinstance(x, types.Float):
        return lambda x: np.exp(x)
    return None


# ----------------------------------------------------------------------------------------- cores


# The group reductions may be reassociated (LLVM then vectorizes the sums: 256 x 16 in ~8.5 us
# instead of ~13 us here). The order is fixed at compile time, so results still depend only on the
# row, never on threads or calls. No nnan/ninf flags: the finiteness check below must survive.
_REASSOC = {"reassoc", "nsz"}


@numba.njit(cache=True, nogil=True, fastmath=_REASSOC)
def _group_core(rewards, scale_std, eps, out):
    """Per row b of rewards [B, G]: out = (r - mean) / (std + eps) if scale_std else r - mean,
    std the sample standard deviation (ddof = 1); mean/std accumulated in float64.
    Returns the first row holding a non-finite reward, or -1."""
    B, G = rewards.shape
    for b in range(B):
        s = np.float64(0.0)  # not 0.0: run as plain Python (NEP 50), 0.0 + float32 would stay float32
        bad = 0.0
        for j in range(G):
            x = rewards[b, j]
            s += x
            bad += x - x  # 0 for finite x, NaN for +-inf or NaN
        if bad != 0.0:
            return b
        mean = s / G
        inv = 1.0
        if scale_std:
            ss = np.float64(0.0)
            for j in range(G):
                d = rewards[b, j] - mean
                ss += d * d
            inv = 1.0 / (np.sqrt(ss / (G - 1)) + eps)
        for j in range(G):
            out[b, j] = (rewards[b, j] - mean) * inv
    return -1


@numba.njit(cache=True, nogil=True, fastmath=_REASSOC)
def _rloo_core(rewards, out):
    """out = r_i - mean_{j != i} r_j = G / (G - 1) * (r_i - mean), per row of rewards [B, G].
    Returns the first row holding a non-finite reward, or -1."""
    B, G = rewards.shape
    factor = G / (G - 1)
    for b in range(B):
        s = np.float64(0.0)  # float64 accumulation in plain Python too (see _group_core)
        bad = 0.0
        for j in range(G):
            x = rewards[b, j]
            s += x
            bad += x - x
        if bad != 0.0:
            return b
        mean = s / G
        for j in range(G):
            out[b, j] = factor * (rewards[b, j] - mean)
    return -1


@numba.njit(cache=True, inline="always")
def _kl(logp, ref, est, one):
    """Per-token KL(pi || ref) estimate from d = ref - logp: k1 = -d, k2 = d^2 / 2,
    k3 = exp(d) - d - 1 (Schulman 2020; unbiased, >= 0)."""
    d = ref - logp
    if est == 1:
        return -d
    if est == 2:
        return d * d / (one + one)
    return _exp(d) - d - one


@numba.njit(cache=True, nogil=True)
def _token_kl_core(logp, ref, mask, use_mask, est, one, out):
    """out[b, t] = KL estimate at token t of row b; 0 where mask is False (when use_mask).
    ``one`` is 1 in the array dtype (keeps the arithmetic in it)."""
    # One inner loop per estimator (a literal ``est`` each), so every loop is branch-free and
    # vectorizes; the k3 loops run the vectorized float32 exp.
    if est == 1:
        _token_kl_rows(logp, ref, mask, use_mask, 1, one, out)
    elif est == 2:
        _token_kl_rows(logp, ref, mask, use_mask, 2, one, out)
    else:
        _token_kl_rows(logp, ref, mask, use_mask, 3, one, out)


@numba.njit(cache=True, inline="always")
def _token_kl_rows(logp, ref, mask, use_mask, est, one, out):
    B, T = logp.shape
    for b in range(B):
        lp = logp[b]
        rf = ref[b]
        o = out[b]
        if use_mask:
            m = mask[b]
            for t in range(T):
                k = _kl(lp[t], rf[t], est, one)
                o[t] = k if m[t] else one - one
        else:
            for t in range(T):
                o[t] = _kl(lp[t], rf[t], est, one)


@numba.njit(cache=True, nogil=True)
def _sequence_kl_core(logp, ref, mask, use_mask, est, one, mean, out):
    """out[b] = sum over unmasked tokens of the KL estimate (divided by their count if mean; 0 for a
    row without tokens). Accumulates in float64."""
    B, T = logp.shape
    for b in range(B):
        s = np.float64(0.0)  # float64 accumulation in plain Python too (see _group_core)
        n = 0
        for t in range(T):
            if not use_mask or mask[b, t]:
                s += _kl(logp[b, t], ref[b, t], est, one)
                n += 1
        if mean:
            s = s / n if n > 0 else 0.0
        out[b] = s


# -------------------------------------------------------------------------------------- wrappers


def _grouped(rewards, group_size):
    """Validate rewards ([B * G] with group_size, or [B, G]); return the [B, G] view (no copy)."""
    if isinstance(rewards, np.ndarray) and rewards.ndim == 1:
        rewards = check_float_fast("rewards", rewards, ndim=1)
        if group_size is None:
            raise ValueError("group_size is required when rewards is 1-D [B * G]")
        g = check_int("group_size", group_size, low=2)
        if rewards.size % g:
            raise ValueError(f"rewards has {rewards.size} entries, not a multiple of group_size={g}")
        return rewards.reshape(-1, g)
    rewards = check_float_fast("rewards", rewards, ndim=2)
    g = rewards.shape[1]
    if group_size is not None and check_int("group_size", group_size) != g:
        raise ValueError(f"group_size={group_size} but rewards has shape {rewards.shape} (G = {g})")
    if g < 2:
        raise ValueError(f"groups need at least 2 completions, got rewards of shape {rewards.shape}")
    return rewards


def _raise_if_bad_row(bad_row, rewards2d):
    if bad_row >= 0:
        raise ValueError(f"rewards must be finite; group {bad_row} holds {rewards2d[bad_row].tolist()}")


def group_advantages(rewards, group_size=None, *, scale="std", eps=1e-6):
    """Group-relative advantages (GRPO; Dr. GRPO with ``scale="none"``).

    Args:
        rewards: [B, G], or [B * G] flat with ``group_size`` = G (consecutive runs form a group).
        group_size: G >= 2 (required for flat input; for [B, G] input it must equal G if given).
        scale: "std": (r - mean_g) / (std_g + eps), GRPO (Shao et al. 2024); "none": r - mean_g,
            Dr. GRPO (Liu et al. 2025).
        eps: > 0, added to the std (a group with equal rewards gets advantage 0).

    std_g is the *sample* standard deviation (ddof = 1, Bessel's correction), as in TRL's
    GRPOTrainer (``rewards.view(-1, G).std(dim=1)``, torch's default unbiased std); TRL adds 1e-4
    where we default to 1e-6. Mean and std are accumulated in float64 (in a fixed, vectorized order:
    results agree with a sequential sum to ~1e-15 relative and never depend on threads).

    Returns: advantages with the shape and dtype of ``rewards``.
    Raises ValueError for non-finite rewards, group size < 2, or an empty batch.
    """
    r2 = _grouped(rewards, group_size)
    if scale not in _SCALES:
        raise ValueError(f"scale must be one of {_SCALES}, got {scale!r}")
    if not (type(eps) is float and 0.0 < eps < math.inf):  # fast path; NaN goes to the check
        eps = check_scalar("eps", eps, low=0.0, low_open=True)
    out = np.empty_like(r2)
    _raise_if_bad_row(_group_core(r2, scale == "std", eps, out), r2)
    return out.reshape(rewards.shape)


def rloo_advantages(rewards, group_size=None):
    """REINFORCE leave-one-out advantages (Ahmadian et al. 2024): A_i = r_i - mean_{j != i} r_j.

    Args and shapes as ``group_advantages`` (G >= 2). Computed as G / (G - 1) * (r_i - mean_g).
    Returns: advantages with the shape and dtype of ``rewards``.
    """
    r2 = _grouped(rewards, group_size)
    out = np.empty_like(r2)
    _raise_if_bad_row(_rloo_core(r2, out), r2)
    return out.reshape(rewards.shape)


_NO_MASK = np.ones((1, 1), dtype=np.bool_)  # placeholder, never read when use_mask is False


def _check_kl_args(logp, ref_logp, mask, estimator):
    logp = check_float_fast("logp", logp, ndim=2)
    ref_logp = check_like("ref_logp", ref_logp, like="logp", dtype=logp.dtype, shape=logp.shape)
    if mask is None:
        mask_arr, use_mask = _NO_MASK, False
    else:
        mask_arr = check_like("mask", mask, like="logp", dtype=np.dtype(np.bool_), shape=logp.shape)
        use_mask = True
    est = _ESTIMATORS.get(estimator) if isinstance(estimator, str) else None
    if est is None:
        raise ValueError(f"estimator must be one of {tuple(_ESTIMATORS)}, got {estimator!r}")
    return logp, ref_logp, mask_arr, use_mask, est, logp.dtype.type(1)


def token_kl(logp, ref_logp, mask=None, *, estimator="k1"):
    """Per-token estimate of KL(pi || ref) from sampled tokens (Schulman 2020, "Approximating KL").

    Args:
        logp: [B, T] log pi(token) under the policy; ref_logp: [B, T] under the reference model.
        mask: [B, T] bool (uint8 0/1 accepted), True for real tokens; None means all tokens count.
        estimator: with d = ref_logp - logp,
            "k1": -d (unbiased, high variance, can be negative),
            "k2": d^2 / 2 (biased, low variance),
            "k3": exp(d) - d - 1 (unbiased, low variance, >= 0; GRPO's choice).

    Returns: [B, T] in the input dtype, 0 at masked positions (whatever the log-probs there, even
    -inf). float32 k3 uses a vectorized exp (``_expf``: ~1.2e-7 relative error; d below -86.5 is
    treated as -86.5, changing k3 by < 3e-38); float64 uses libm exp. Non-finite log-probs at
    unmasked positions propagate.
    """
    logp, ref, mask_arr, use_mask, est, one = _check_kl_args(logp, ref_logp, mask, estimator)
    out = np.empty_like(logp)
    _token_kl_core(logp, ref, mask_arr, use_mask, est, one, out)
    return out


def sequence_kl(logp, ref_logp, mask=None, *, estimator, reduction="mean"):
    """Per-sequence KL: the ``token_kl`` estimates reduced over each row's unmasked tokens.

    Args: as ``token_kl`` (``estimator`` required); reduction "mean" (divide by the row's number of
    unmasked tokens, so variable lengths are handled by the mask) or "sum".
    A row whose mask is all False gives 0 for both reductions (no tokens, no KL; never NaN).

    Returns: [B] in the input dtype (sums are accumulated in float64).
    """
    logp, ref, mask_arr, use_mask, est, one = _check_kl_args(logp, ref_logp, mask, estimator)
    if reduction not in _REDUCTIONS:
        raise ValueError(f"reduction must be one of {_REDUCTIONS}, got {reduction!r}")
    out = np.empty(logp.shape[0], dtype=logp.dtype)
    _sequence_kl_core(logp, ref, mask_arr, use_mask, est, one, reduction == "mean", out)
    return out
