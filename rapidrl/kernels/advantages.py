"""Advantage and return estimators over time-major rollouts ``[T, N]`` (T steps, N envs).

Episode ends. ``terminated[t, i]`` and ``truncated[t, i]`` say that the episode of env ``i`` ended at
step ``t`` (after receiving ``rewards[t, i]``). Every estimator uses the same "next value" ``nv[t, i]``:

- not ended:   ``nv = values[t + 1, i]`` (``last_values[i]`` for ``t = T - 1``) and the trace continues;
- terminated:  ``nv = 0`` (no bootstrap) and the trace is cut;
- truncated:   ``nv = final_values[t, i]``, the value of the true final observation (the env has
  already reset, so ``values[t + 1]`` belongs to the next episode), and the trace is cut.

If both flags are set, terminated wins. ``final_values`` ([T, N], read only where truncated) may be
``None`` when no step is truncated; a truncated step without it raises ``ValueError``.

Dtypes: float32 or float64, all float arrays alike; outputs have the input dtype and the arithmetic
runs in it (``gamma``/``lam`` are rounded to it). Flags are bool (uint8 0/1 accepted).

NaN policy: values are not checked (a full scan would cost as much as the kernel). A NaN in
``rewards``/``values`` propagates to the outputs of its own episode at and before that step (never
across an episode boundary); check inputs upstream if they can be non-finite.

Each public function validates its arguments, then calls an ``@njit`` core (``_..._core``); the
cores are pure loops over time (outside) and envs (inside, contiguous) and release the GIL.
"""

from __future__ import annotations

import numba
import numpy as np

from rapidrl.kernels import parallel
from rapidrl.kernels.validation import (
    FLOAT_DTYPES,
    check_float_fast,
    check_int,
    check_like,
    check_scalar,
    check_unit_scalar,
)

__all__ = [
    "discounted_returns",
    "gae",
    "gae_into",
    "gae_trajectory",
    "lambda_returns",
    "n_step_returns",
    "vtrace",
]

ADVANTAGE_EPS = 1e-8
"""Added to the (population) standard deviation when advantages are normalised, so a constant or 1-sample
minibatch gives 0, not NaN (``rapidrl.buffers.normalize_advantages``, the compiled PPO epoch)."""

_NDARRAY = np.ndarray
_BOOL = np.dtype(np.bool_)

# Envs per parallel chunk at least (a multiple of a 64-byte cache line for float32/float64).
_MIN_CHUNK = 64


# ---------------------------------------------------------------------------------------------- cores


@numba.njit(cache=True, inline="always")
def _next_value(t, i, next_values, final_values, terminated, truncated, zero):
    """The episode-end rule of every estimator (module docstring) for env i at one step, from that step's rows [N]
    (``next_values``: values[t + 1], or the bootstrap at t = T - 1). Returns (nv, the episode ended, it was
    truncated and not terminated); ``zero`` is 0 in the arrays' dtype.

    Written as one conditional expression, not as ``if ...: return``: with several exits Numba cannot drop the
    reference counting of the rows it was passed, which then runs per element and keeps the calling loop scalar
    (83b1aea: GAE 64x128 18x slower). The expression also reads ``final_values`` only where truncated (a load of it
    at every element cost GAE 15-30%)."""
    term = terminated[t, i]
    trunc = truncated[t, i]
    nv = zero if term else (final_values[t, i] if trunc else next_values[i])
    return nv, term or trunc, trunc and not term


@numba.njit(cache=True, inline="always")
def _rows_after(t, values, acc, last_values):
    """The rows after step t of ``values`` [T, N] and of a backward recursion's output ``acc`` [T, N], both the
    bootstrap ``last_values`` [N] at t = T - 1, and whether step t + 1 lies in the rollout (the recursion carries)."""
    carry = t < values.shape[0] - 1  # one exit: Numba drops the rows' reference counting (see _next_value)
    return carry, values[t + 1] if carry else last_values, acc[t + 1] if carry else last_values


@numba.njit(cache=True, inline="always")
def _gae_row(t, r, v, next_v, fv, term, trunc, adv_next, carry, gamma, gl, adv, ret, i0, i1):
    """One time row of GAE for envs [i0, i1) (rows [N]; ``adv_next`` is A[t + 1], read only while ``carry``).
    Writes adv/ret, returns #truncated-not-terminated."""
    zero = gamma - gamma
    count = 0
    for i in range(i0, i1):
        nv, ended, cut = _next_value(t, i, next_v, fv, term, trunc, zero)
        count += cut
        delta = r[i] + gamma * nv - v[i]
        a = delta + gl * adv_next[i] if (carry and not ended) else delta
        adv[i] = a
        ret[i] = a + v[i]
    return count


@numba.njit(cache=True, nogil=True)
def _gae_core(rewards, values, last_values, terminated, truncated, final_values, gamma, lam, adv, ret):
    """GAE over all envs on one thread (see ``gae``). Returns #truncated-not-terminated steps. The env range starts
    at the constant 0 here, which LLVM vectorises better than a range passed in (measured 30% faster at 64x128)."""
    return _gae_block(rewards, values, last_values, terminated, truncated, final_values, gamma, lam, adv, ret,
                      0, rewards.shape[1])


@numba.njit(cache=True, nogil=True)
def _gae_block(rewards, values, last_values, terminated, truncated, final_values, gamma, lam, adv, ret, i0, i1):
    """GAE for envs [i0, i1) of [T, N] arrays (see ``gae``). Returns #truncated-not-terminated steps."""
    T = rewards.shape[0]
    gl = gamma * lam
    count = _gae_row(T - 1, rewards[T - 1], values[T - 1], last_values, final_values, terminated, truncated,
                     adv[T - 1], False, gamma, gl, adv[T - 1], ret[T - 1], i0, i1)
    for t in range(T - 2, -1, -1):
        count += _gae_row(t, rewards[t], values[t], values[t + 1], final_values, terminated, truncated,
                          adv[t + 1], True, gamma, gl, adv[t], ret[t], i0, i1)
    return count


@numba.njit(cache=True, nogil=True, parallel=True)
def _gae_core_parallel(rewards, values, last_values, terminated, truncated, final_values, gamma, lam,
                       adv, ret, chunk):
    """GAE with env chunks of ``chunk`` columns spread over threads; bit-identical to ``_gae_core``
    (every element goes through the same arithmetic, only the env range per call differs)."""
    N = rewards.shape[1]
    n_chunks = (N + chunk - 1) // chunk
    count = 0
    for c in numba.prange(n_chunks):
        i0 = c * chunk
        count += _gae_block(rewards, values, last_values, terminated, truncated, final_values, gamma, lam, adv, ret,
                            i0, min(N, i0 + chunk))
    return count


@numba.njit(cache=True, nogil=True)
def _discounted_returns_core(rewards, last_values, terminated, truncated, final_values, gamma, out):
    """G[t] = r[t] + gamma * (G[t+1] if not ended, final_values[t] if truncated, 0 if terminated);
    G[T] = last_values. Returns #truncated-not-terminated steps."""
    T, N = rewards.shape
    zero = gamma - gamma
    count = 0
    for t in range(T - 1, -1, -1):
        nxt = out[t + 1] if t < T - 1 else last_values
        for i in range(N):
            nv, _, cut = _next_value(t, i, nxt, final_values, terminated, truncated, zero)
            count += cut
            out[t, i] = rewards[t, i] + gamma * nv
    return count


@numba.njit(cache=True, nogil=True)
def _lambda_returns_core(rewards, values, last_values, terminated, truncated, final_values, gamma, lam,
                         out):
    """G[t] = r[t] + gamma * ((1 - lam) * nv[t] + lam * G[t+1]) while the episode continues,
    r[t] + gamma * nv[t] at an episode end or at t = T-1 (where G[T] = nv = last_values)."""
    T, N = rewards.shape
    zero = gamma - gamma
    one_m_lam = (lam - lam + 1) - lam
    count = 0
    for t in range(T - 1, -1, -1):
        carry, nxt_v, nxt_g = _rows_after(t, values, out, last_values)
        for i in range(N):
            nv, ended, cut = _next_value(t, i, nxt_v, final_values, terminated, truncated, zero)
            count += cut
            if carry and not ended:
                out[t, i] = rewards[t, i] + gamma * (one_m_lam * nv + lam * nxt_g[i])
            else:
                out[t, i] = rewards[t, i] + gamma * nv
    return count


@numba.njit(cache=True, nogil=True)
def _n_step_returns_core(rewards, values, last_values, terminated, truncated, final_values, gamma, n,
                         out):
    """G[t] = sum_{k<m} gamma^k r[t+k] + gamma^m * boot, m = min(n, steps to the episode end or to T).

    boot = values[t+n] (last_values at t+n = T) after n steps, last_values when the rollout ends
    first, final_values[s] at a truncation at s, 0 at a termination."""
    T, N = rewards.shape
    count = 0
    for t in range(T - 1, -1, -1):
        for i in range(N):
            count += truncated[t, i] and not terminated[t, i]
            g = gamma - gamma  # 0 and 1 in the array dtype
            disc = g + 1
            for k in range(n):
                s = t + k
                if s == T:
                    g += disc * last_values[i]
                    break
                g += disc * rewards[s, i]
                disc *= gamma
                if terminated[s, i]:
                    break
                if truncated[s, i]:
                    g += disc * final_values[s, i]
                    break
                if k == n - 1:
                    g += disc * (values[s + 1, i] if s + 1 < T else last_values[i])
            out[t, i] = g
    return count


@numba.njit(cache=True, nogil=True)
def _vtrace_core(log_rhos, rewards, values, bootstrap_value, terminated, truncated, final_values, gamma,
                 rho_bar, c_bar, vs, pg):
    """V-trace (Espeholt et al. 2018, eq. 1 and section 4.2), backward recursion per env:

    rho = min(rho_bar, exp(log_rho)), c = min(c_bar, exp(log_rho)) (one exp per element),
    delta[t] = rho[t] (r[t] + gamma nv[t] - V[t]),
    vs[t] = V[t] + delta[t] + gamma c[t] (vs[t+1] - V[t+1])   while the episode continues,
    vs[t] = V[t] + delta[t]                                   at an episode end and at t = T-1,
    pg[t] = rho[t] (r[t] + gamma q[t] - V[t]), q[t] = vs[t+1] while it continues, else nv[t].
    """
    T, N = rewards.shape
    zero = gamma - gamma
    count = 0
    for t in range(T - 1, -1, -1):
        carry, nxt_v, nxt_vs = _rows_after(t, values, vs, bootstrap_value)
        for i in range(N):
            ratio = np.exp(log_rhos[t, i])
            rho = rho_bar if ratio > rho_bar else ratio  # NaN ratios propagate
            c = c_bar if ratio > c_bar else ratio
            nv, ended, cut = _next_value(t, i, nxt_v, final_values, terminated, truncated, zero)
            count += cut
            v = values[t, i]
            delta = rho * (rewards[t, i] + gamma * nv - v)
            if carry and not ended:
                vs[t, i] = v + delta + gamma * c * (nxt_vs[i] - nv)
                pg[t, i] = rho * (rewards[t, i] + gamma * nxt_vs[i] - v)
            else:
                vs[t, i] = v + delta
                pg[t, i] = delta
    return count


# ------------------------------------------------------------------------------------------- wrappers


def _check_rollout(rewards, values, last_values, terminated, truncated, final_values,
                   names=("rewards", "values", "last_values")):
    """Validate a [T, N] rollout; return (rewards, values, last_values, terminated, truncated,
    final_values_or_placeholder). ``values`` may be None (discounted returns)."""
    # One-expression fast path for the common valid call (a few attribute reads per array, no
    # function calls); anything else, including uint8 flags, takes the detailed checks below.
    if (type(rewards) is _NDARRAY and rewards.ndim == 2 and rewards.size
            and rewards.dtype in FLOAT_DTYPES and rewards.flags.c_contiguous):
        dt, shape = rewards.dtype, rewards.shape
        if ((values is None or (type(values) is _NDARRAY and values.dtype == dt and values.shape == shape
                                and values.flags.c_contiguous))
                and type(last_values) is _NDARRAY and last_values.dtype == dt
                and last_values.shape == shape[1:] and last_values.flags.c_contiguous
                and type(terminated) is _NDARRAY and terminated.dtype == _BOOL
                and terminated.shape == shape and terminated.flags.c_contiguous
                and type(truncated) is _NDARRAY and truncated.dtype == _BOOL
                and truncated.shape == shape and truncated.flags.c_contiguous
                and (final_values is None or (type(final_values) is _NDARRAY and final_values.dtype == dt
                                              and final_values.shape == shape
                                              and final_values.flags.c_contiguous))):
            return (rewards, values, last_values, terminated, truncated,
                    rewards if final_values is None else final_values)
    rewards = check_float_fast(names[0], rewards, ndim=2)
    dt, shape = rewards.dtype, rewards.shape
    if values is not None:
        values = check_like(names[1], values, like=names[0], dtype=dt, shape=shape)
    last_values = check_like(names[2], last_values, like=names[0], dtype=dt, shape=shape[1:])
    terminated = check_like("terminated", terminated, like=names[0], dtype=np.dtype(np.bool_), shape=shape)
    truncated = check_like("truncated", truncated, like=names[0], dtype=np.dtype(np.bool_), shape=shape)
    if final_values is None:
        # Never read unless a step is truncated, which the caller then reports as an error.
        final_values = rewards
    else:
        final_values = check_like("final_values", final_values, like=names[0], dtype=dt, shape=shape)
    return rewards, values, last_values, terminated, truncated, final_values


def _raise_if_missing_final(final_values, n_truncated):
    if final_values is None and n_truncated:
        raise ValueError(
            f"final_values is None but {n_truncated} step(s) are truncated (and not terminated): "
            "pass final_values[T, N], the value of each truncated episode's final observation"
        )


def _check_gamma_lam(dt, gamma, lam=None):
    if lam is not None and type(gamma) is float and type(lam) is float and 0.0 <= gamma <= 1.0 and 0.0 <= lam <= 1.0:
        return dt.type(gamma), dt.type(lam)  # fast path; NaN and everything else go to the checks
    g = dt.type(check_unit_scalar("gamma", gamma))
    if lam is None:
        return g
    return g, dt.type(check_unit_scalar("lam", lam))


def _run_gae(rewards, values, last_values, terminated, truncated, fv, gamma, lam, adv, ret):
    """GAE of checked arrays on one thread, or in env chunks over threads above ``parallel.GAE_PARALLEL_MIN``."""
    T, N = rewards.shape
    if T * N > parallel.GAE_PARALLEL_MIN and N >= 2 * _MIN_CHUNK and parallel.num_threads() > 1:
        per_thread = -(-N // parallel.num_threads())
        chunk = max(_MIN_CHUNK, -(-per_thread // _MIN_CHUNK) * _MIN_CHUNK)
        return _gae_core_parallel(rewards, values, last_values, terminated, truncated, fv, gamma, lam,
                                  adv, ret, chunk)
    return _gae_core(rewards, values, last_values, terminated, truncated, fv, gamma, lam, adv, ret)


def gae(rewards, values, last_values, terminated, truncated, *, gamma, lam, final_values=None):
    """Generalized Advantage Estimation (Schulman et al. 2016) over a time-major rollout.

    Args:
        rewards: [T, N] reward received at step t.
        values: [T, N] V(s_t), the value of the observation the action at t was taken from.
        last_values: [N] V(s_T), value of the observation after the last step (bootstrap).
        terminated, truncated: [T, N] bool, episode ended at step t (see module docstring).
        gamma, lam: discount and GAE lambda, in [0, 1].
        final_values: [T, N] value of the true final observation where truncated, else None.

    Maths (nv = next value, cont = episode goes on, see module docstring):
        delta[t] = r[t] + gamma * nv[t] - V[t]
        A[t] = delta[t] + gamma * lam * cont[t] * A[t+1],  A[T] = 0
        returns[t] = A[t] + V[t]

    Returns:
        (advantages [T, N], returns [T, N]), new arrays of the input dtype.
    """
    r, v, lv, term, trunc, fv = _check_rollout(rewards, values, last_values, terminated, truncated,
                                               final_values)
    g, lm = _check_gamma_lam(r.dtype, gamma, lam)
    adv = np.empty_like(r)
    ret = np.empty_like(r)
    _raise_if_missing_final(final_values, _run_gae(r, v, lv, term, trunc, fv, g, lm, adv, ret))
    return adv, ret


def gae_into(rewards, values, last_values, terminated, truncated, *, gamma, lam, out_advantages,
             out_returns, final_values=None):
    """``gae`` writing into preallocated ``out_advantages``/``out_returns``: [T, N], the input dtype,
    C-contiguous, not overlapping each other or any float input. Returns them."""
    r, v, lv, term, trunc, fv = _check_rollout(rewards, values, last_values, terminated, truncated,
                                               final_values)
    g, lm = _check_gamma_lam(r.dtype, gamma, lam)
    adv = check_like("out_advantages", out_advantages, like="rewards", dtype=r.dtype, shape=r.shape)
    ret = check_like("out_returns", out_returns, like="rewards", dtype=r.dtype, shape=r.shape)
    for name, out in (("out_advantages", adv), ("out_returns", ret)):
        if not out.flags.writeable:
            raise ValueError(f"{name} must be writable")
    overlap = _outputs_overlap(adv, ret, r, v, lv, fv)  # one compiled call: nine np.may_share_memory cost ~5 us
    if overlap:
        name = "out_advantages" if overlap == 1 else "out_returns"
        raise ValueError(f"{name} must not overlap the inputs or the other output")
    _raise_if_missing_final(final_values, _run_gae(r, v, lv, term, trunc, fv, g, lm, adv, ret))
    return adv, ret


@numba.njit(cache=True, inline="always")
def _overlap(a, b):
    """Whether the memory of C-contiguous arrays ``a`` and ``b`` intersects (``np.may_share_memory``'s bounds test)."""
    a0 = a.ctypes.data
    b0 = b.ctypes.data
    return a0 < b0 + b.nbytes and b0 < a0 + a.nbytes


@numba.njit(cache=True, nogil=True)
def _outputs_overlap(adv, ret, rewards, values, last_values, final_values):
    """1 if ``adv`` overlaps an input, 2 if ``ret`` overlaps an input or ``adv``, else 0 (``gae_into``'s check)."""
    if _overlap(adv, rewards) or _overlap(adv, values) or _overlap(adv, last_values) or _overlap(adv, final_values):
        return 1
    if (_overlap(ret, rewards) or _overlap(ret, values) or _overlap(ret, last_values) or _overlap(ret, final_values)
            or _overlap(ret, adv)):
        return 2
    return 0


def gae_trajectory(rewards, values, last_value, terminated, truncated, *, gamma, lam, final_values=None):
    """``gae`` for one trajectory: rewards, values, terminated, truncated, final_values are [T];
    ``last_value`` is a float. Returns (advantages [T], returns [T])."""
    rewards = check_float_fast("rewards", rewards, ndim=1)
    dt = rewards.dtype
    last = np.full(1, check_scalar("last_value", last_value), dtype=dt)
    values = check_like("values", values, like="rewards", dtype=dt, shape=rewards.shape)
    terminated = check_like("terminated", terminated, like="rewards", dtype=np.dtype(np.bool_),
                            shape=rewards.shape)
    truncated = check_like("truncated", truncated, like="rewards", dtype=np.dtype(np.bool_),
                           shape=rewards.shape)
    if final_values is not None:
        final_values = check_like("final_values", final_values, like="rewards", dtype=dt,
                                  shape=rewards.shape)[:, None]
    adv, ret = gae(rewards[:, None], values[:, None], last, terminated[:, None], truncated[:, None],
                   gamma=gamma, lam=lam, final_values=final_values)
    return adv[:, 0], ret[:, 0]


def discounted_returns(rewards, last_values, terminated, truncated, *, gamma, final_values=None):
    """Discounted returns with bootstrapping.

    Args: rewards [T, N]; last_values [N] bootstrap value after the last step; terminated/truncated
    [T, N] bool; gamma in [0, 1]; final_values [T, N] or None (see module docstring).

    Maths: G[t] = r[t] + gamma * nv'[t], where nv'[t] = G[t+1] while the episode continues (G[T] =
    last_values), final_values[t] if truncated, 0 if terminated.

    Returns: G [T, N], input dtype.
    """
    r, _, lv, term, trunc, fv = _check_rollout(rewards, None, last_values, terminated, truncated,
                                               final_values)
    g = _check_gamma_lam(r.dtype, gamma)
    out = np.empty_like(r)
    _raise_if_missing_final(final_values, _discounted_returns_core(r, lv, term, trunc, fv, g, out))
    return out


def lambda_returns(rewards, values, last_values, terminated, truncated, *, gamma, lam, final_values=None):
    """TD(lambda) returns, G^lambda [T, N] (equal to ``gae(...)[1]`` up to rounding).

    Args as ``gae``. Maths: G[t] = r[t] + gamma * ((1 - lam) nv[t] + lam G[t+1]) while the episode
    continues (G[T] = last_values), G[t] = r[t] + gamma nv[t] at an episode end.
    """
    r, v, lv, term, trunc, fv = _check_rollout(rewards, values, last_values, terminated, truncated,
                                               final_values)
    g, lm = _check_gamma_lam(r.dtype, gamma, lam)
    out = np.empty_like(r)
    _raise_if_missing_final(final_values, _lambda_returns_core(r, v, lv, term, trunc, fv, g, lm, out))
    return out


def n_step_returns(rewards, values, last_values, terminated, truncated, *, gamma, n, final_values=None):
    """n-step returns (DQN targets with V = max_a Q or any value estimate), [T, N].

    Args as ``gae``; n >= 1 steps. Maths:
        G[t] = sum_{k<m} gamma^k r[t+k] + gamma^m B,
    m = min(n, steps until the episode ends (inclusive), steps until T). B = values[t+n]
    (last_values if t+n = T) after n steps; last_values if the rollout ends before n steps;
    final_values[s] if the episode is truncated at s; 0 if terminated. n = 1 is the TD(0) target;
    n >= T equals ``lambda_returns`` with lam = 1.
    """
    r, v, lv, term, trunc, fv = _check_rollout(rewards, values, last_values, terminated, truncated,
                                               final_values)
    g = _check_gamma_lam(r.dtype, gamma)
    n = check_int("n", n, low=1)
    out = np.empty_like(r)
    _raise_if_missing_final(final_values, _n_step_returns_core(r, v, lv, term, trunc, fv, g, n, out))
    return out


def vtrace(log_rhos, rewards, values, bootstrap_value, terminated, *, gamma, rho_bar=1.0, c_bar=1.0,
           truncated=None, final_values=None):
    """V-trace targets and policy-gradient advantages (IMPALA, Espeholt et al. 2018).

    Args:
        log_rhos: [T, N] log(pi(a_t|s_t) / mu(a_t|s_t)), target over behaviour policy.
        rewards, values: [T, N]; bootstrap_value: [N] V(s_T).
        terminated: [T, N] bool; truncated: [T, N] bool or None (no truncation).
        gamma in [0, 1]; rho_bar, c_bar > 0 (truncation levels of the importance weights).
        final_values: [T, N] or None, as in ``gae``.

    Episode ends: at a terminated step the next value is 0, at a truncated step it is
    ``final_values[t]``; either way the trace is cut (vs of the next episode is never used). This is
    the paper's recursion with discount gamma * (1 - done) plus the truncation bootstrap.

    Maths: see ``_vtrace_core``. With log_rhos = 0 and rho_bar, c_bar >= 1 (on-policy), vs equals
    ``lambda_returns(..., lam=1)`` and pg_advantages[t] = r[t] + gamma * vs[t+1] - V[t].

    Returns: (vs [T, N], pg_advantages [T, N]), input dtype.
    """
    r = check_float_fast("rewards", rewards, ndim=2)
    lr = check_like("log_rhos", log_rhos, like="rewards", dtype=r.dtype, shape=r.shape)
    if truncated is None:
        truncated = np.zeros(r.shape, dtype=np.bool_)
    r, v, bv, term, trunc, fv = _check_rollout(r, values, bootstrap_value, terminated, truncated,
                                               final_values,
                                               names=("rewards", "values", "bootstrap_value"))
    g = _check_gamma_lam(r.dtype, gamma)
    rb = r.dtype.type(check_scalar("rho_bar", rho_bar, low=0.0, low_open=True))
    cb = r.dtype.type(check_scalar("c_bar", c_bar, low=0.0, low_open=True))
    vs = np.empty_like(r)
    pg = np.empty_like(r)
    _raise_if_missing_final(final_values, _vtrace_core(lr, r, v, bv, term, trunc, fv, g, rb, cb, vs, pg))
    return vs, pg
