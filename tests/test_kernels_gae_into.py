"""``gae_into``, the GAE call of the training loop (``RolloutBuffer.compute_advantages``): bitwise equal to ``gae``
(and close to the reference) on rollouts with terminations and truncations, writing only the outputs it is given,
inputs off the common fast path (uint8 flags, read-only arrays) still computed, and every bad argument rejected with
a clear error that names it."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from test_kernels_advantages import rollout, tol

from rapidrl.kernels import gae, gae_into
from rapidrl.kernels import reference as ref

DTYPES = [np.float32, np.float64]
ARGS = ("rewards", "values", "last_values", "terminated", "truncated")


def _args(d):
    return [d[k] for k in ARGS]


def _into(d, out, gamma=0.99, lam=0.95):
    return gae_into(*_args(d), gamma=gamma, lam=lam, out_advantages=out[0], out_returns=out[1],
                    final_values=d["final_values"])


@pytest.mark.parametrize("dtype", DTYPES)
@settings(max_examples=25, deadline=None)
@given(T=st.integers(1, 12), N=st.integers(1, 9), seed=st.integers(0, 2**31 - 1),
       p_term=st.sampled_from([0.0, 0.2]), p_trunc=st.sampled_from([0.0, 0.2]),
       gamma=st.sampled_from([0.0, 0.9, 0.99, 1.0]), lam=st.sampled_from([0.0, 0.95, 1.0]))
def test_gae_into_is_bitwise_gae_and_matches_reference(dtype, T, N, seed, p_term, p_trunc, gamma, lam):
    d = rollout(seed, T, N, dtype, p_term, p_trunc)
    out = (np.full((T, N), np.nan, dtype), np.full((T, N), np.nan, dtype))
    a, r = _into(d, out, gamma, lam)
    assert a is out[0] and r is out[1]
    ea, er = gae(*_args(d), gamma=gamma, lam=lam, final_values=d["final_values"])
    np.testing.assert_array_equal(a, ea)
    np.testing.assert_array_equal(r, er)
    ra, rr_ = ref.gae(**d, gamma=gamma, lam=lam)
    np.testing.assert_allclose(a, ra, **tol(dtype))
    np.testing.assert_allclose(r, rr_, **tol(dtype))
    # a second call on new data overwrites every element
    d2 = rollout(seed + 1, T, N, dtype, p_term, p_trunc)
    a2, r2 = _into(d2, out, gamma, lam)
    ea2, er2 = gae(*_args(d2), gamma=gamma, lam=lam, final_values=d2["final_values"])
    np.testing.assert_array_equal(a2, ea2)
    np.testing.assert_array_equal(r2, er2)


def test_without_final_values_when_nothing_is_truncated():
    d = rollout(3, 16, 5, np.float32, p_term=0.2, p_trunc=0.0)
    out = (np.empty((16, 5), np.float32), np.empty((16, 5), np.float32))
    a, r = gae_into(*_args(d), gamma=0.99, lam=0.95, out_advantages=out[0], out_returns=out[1])
    ea, er = gae(*_args(d), gamma=0.99, lam=0.95)
    np.testing.assert_array_equal(a, ea)
    np.testing.assert_array_equal(r, er)


def test_inputs_off_the_fast_path_are_still_computed():
    """uint8 flags and read-only inputs take the detailed checks, then compute the same result."""
    d = rollout(1, 9, 6, np.float32)
    ea, er = gae(*_args(d), gamma=0.99, lam=0.95, final_values=d["final_values"])
    ro = {k: v.copy() for k, v in d.items()}
    for v in ro.values():
        v.flags.writeable = False
    ro["terminated"] = ro["terminated"].view(np.uint8)
    a, r = _into(ro, (np.empty((9, 6), np.float32), np.empty((9, 6), np.float32)))
    np.testing.assert_array_equal(a, ea)
    np.testing.assert_array_equal(r, er)


def _bad_calls(d, out):
    """(description, overrides of the good call's arguments, exception, message fragment)."""
    T, N = d["rewards"].shape
    f = d["final_values"]
    read_only = np.empty_like(f)
    read_only.flags.writeable = False
    return [
        ("float64 rewards", {"rewards": d["rewards"].astype(np.float64)}, TypeError, "values has dtype"),
        ("values wrong dtype", {"values": d["values"].astype(np.float64)}, TypeError, "values has dtype"),
        ("rewards wrong shape", {"rewards": np.zeros((T + 1, N), np.float32)}, ValueError, "values must have shape"),
        ("values wrong shape", {"values": np.zeros((T, N + 1), np.float32)}, ValueError, "values must have shape"),
        ("last_values wrong shape", {"last_values": np.zeros(N + 1, np.float32)}, ValueError, "last_values"),
        ("strided rewards", {"rewards": np.zeros((T, 2 * N), np.float32)[:, ::2]}, ValueError, "C-contiguous"),
        ("int flags", {"terminated": d["terminated"].astype(np.int64)}, TypeError, "terminated must have dtype bool"),
        ("list", {"values": d["values"].tolist()}, TypeError, "values must be a numpy.ndarray"),
        ("final_values wrong shape", {"final_values": f[:, :1].copy()}, ValueError, "final_values must have shape"),
        ("no final_values", {"final_values": None}, ValueError, "final_values is None"),
        ("output aliasing an input", {"out": (d["values"], out[1])}, ValueError, "out_advantages must not overlap"),
        ("last_values inside an output", {"last_values": out[1][0]}, ValueError, "out_returns must not overlap"),
        ("same array twice as output", {"out": (out[0], out[0])}, ValueError, "out_returns must not overlap"),
        ("output wrong shape", {"out": (np.empty((T, N + 1), np.float32), out[1])}, ValueError,
         "out_advantages must have shape"),
        ("read-only output", {"out": (out[0], read_only)}, ValueError, "out_returns must be writable"),
    ]


def test_bad_calls_raise_and_name_the_argument():
    T, N = 8, 5
    d = rollout(4, T, N, np.float32, p_term=0.2, p_trunc=0.3)
    out = (np.empty((T, N), np.float32), np.empty((T, N), np.float32))
    for what, override, exc, match in _bad_calls(d, out):
        kwargs = dict(d, **override)
        oa, orr = kwargs.pop("out", out)
        with pytest.raises(exc, match=match):
            gae_into(*[kwargs[k] for k in ARGS], gamma=0.99, lam=0.95, out_advantages=oa, out_returns=orr,
                     final_values=kwargs["final_values"])
            pytest.fail(f"no error for {what}")
