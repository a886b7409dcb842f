"""GAEPlan: bitwise equal to ``gae`` (and close to the reference) on rollouts with terminations and
truncations, every bad argument of a call rejected with a clear error, slow-path inputs still computed."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from test_kernels_advantages import kernel_mode, rollout, tol

from rapidrl.kernels import GAEPlan, gae, parallel
from rapidrl.kernels import advantages as adv_mod
from rapidrl.kernels import reference as ref

DTYPES = [np.float32, np.float64]
ARGS = ("rewards", "values", "last_values", "terminated", "truncated")


def _args(d):
    return [d[k] for k in ARGS]


@pytest.mark.parametrize("dtype", DTYPES)
@settings(max_examples=25, deadline=None)
@given(T=st.integers(1, 12), N=st.integers(1, 9), seed=st.integers(0, 2**31 - 1),
       p_term=st.sampled_from([0.0, 0.2]), p_trunc=st.sampled_from([0.0, 0.2]),
       gamma=st.sampled_from([0.0, 0.9, 0.99, 1.0]), lam=st.sampled_from([0.0, 0.95, 1.0]))
def test_plan_is_bitwise_gae_and_matches_reference(dtype, T, N, seed, p_term, p_trunc, gamma, lam):
    d = rollout(seed, T, N, dtype, p_term, p_trunc)
    plan = GAEPlan(T, N, gamma=gamma, lam=lam, dtype=dtype)
    a, r = plan(*_args(d), final_values=d["final_values"])
    ea, er = gae(*_args(d), gamma=gamma, lam=lam, final_values=d["final_values"])
    assert a is plan.advantages and r is plan.returns and a.dtype == dtype
    np.testing.assert_array_equal(a, ea)
    np.testing.assert_array_equal(r, er)
    ra, rr_ = ref.gae(**d, gamma=gamma, lam=lam)
    np.testing.assert_allclose(a, ra, **tol(dtype))
    np.testing.assert_allclose(r, rr_, **tol(dtype))
    # caller-owned outputs, and a second call on new data overwrites the plan's outputs
    out = (np.empty((T, N), dtype), np.empty((T, N), dtype))
    oa, orr = plan(*_args(d), final_values=d["final_values"], out=out)
    assert oa is out[0] and orr is out[1]
    np.testing.assert_array_equal(oa, ea)
    d2 = rollout(seed + 1, T, N, dtype, p_term, p_trunc)
    a2, _ = plan(*_args(d2), final_values=d2["final_values"])
    np.testing.assert_array_equal(a2, gae(*_args(d2), gamma=gamma, lam=lam, final_values=d2["final_values"])[0])


def test_plan_without_final_values_when_nothing_is_truncated():
    d = rollout(3, 16, 5, np.float32, p_term=0.2, p_trunc=0.0)
    plan = GAEPlan(16, 5, gamma=0.99, lam=0.95)
    a, r = plan(*_args(d))
    ea, er = gae(*_args(d), gamma=0.99, lam=0.95)
    np.testing.assert_array_equal(a, ea)
    np.testing.assert_array_equal(r, er)


def test_plan_core_runs_as_python():
    """The checked core through its pure-Python function (and _gae_block's) equals the compiled plan."""
    d = rollout(5, 7, 4, np.float64)
    plan = GAEPlan(7, 4, gamma=0.9, lam=0.8, dtype=np.float64)
    a, r = plan(*_args(d), final_values=d["final_values"])
    pa, pr = np.empty_like(a), np.empty_like(r)
    with kernel_mode("python"):
        count = adv_mod._gae_plan_core(*_args(d), d["final_values"], pa, pr, plan.gamma, plan.lam, True)
        assert adv_mod._gae_plan_core(d["rewards"][:3], *_args(d)[1:], d["final_values"], pa, pr, plan.gamma,
                                      plan.lam, True) == -1
        assert adv_mod._gae_plan_core(*_args(d), d["final_values"], pa, pa, plan.gamma, plan.lam, True) == -1
    assert count == int((d["truncated"] & ~d["terminated"]).sum())
    np.testing.assert_array_equal(pa, a)
    np.testing.assert_array_equal(pr, r)


def test_inputs_off_the_fast_path_are_still_computed():
    """uint8 flags, read-only inputs: the compiled signatures refuse them; the checked path computes."""
    d = rollout(1, 9, 6, np.float32)
    plan = GAEPlan(9, 6, gamma=0.99, lam=0.9)
    ea, er = gae(*_args(d), gamma=0.99, lam=0.9, final_values=d["final_values"])
    ro = {k: v.copy() for k, v in d.items()}
    for v in ro.values():
        v.flags.writeable = False
    ro["terminated"] = ro["terminated"].view(np.uint8)
    a, r = plan(*_args(ro), final_values=ro["final_values"])
    np.testing.assert_array_equal(a, ea)
    np.testing.assert_array_equal(r, er)


def test_parallel_sized_plan_equals_gae(monkeypatch):
    monkeypatch.setattr(parallel, "GAE_PARALLEL_MIN", 16)
    d = rollout(2, 6, 256, np.float32)
    plan = GAEPlan(6, 256, gamma=0.99, lam=0.95)
    assert not plan._serial
    a, r = plan(*_args(d), final_values=d["final_values"])
    ea, er = gae(*_args(d), gamma=0.99, lam=0.95, final_values=d["final_values"])
    np.testing.assert_array_equal(a, ea)
    np.testing.assert_array_equal(r, er)


def _bad_calls(d, plan):
    """(description, kwargs overriding the good call, exception, message fragment)."""
    T, N = plan.num_steps, plan.num_envs
    f = d["final_values"]
    return [
        ("float64 rewards", {"rewards": d["rewards"].astype(np.float64)}, TypeError, "rewards has dtype"),
        ("values wrong dtype", {"values": d["values"].astype(np.float64)}, TypeError, "values has dtype"),
        ("rewards wrong shape", {"rewards": np.zeros((T + 1, N), np.float32)}, ValueError, "rewards must have shape"),
        ("values wrong shape", {"values": np.zeros((T, N + 1), np.float32)}, ValueError, "values must have shape"),
        ("last_values wrong shape", {"last_values": np.zeros(N + 1, np.float32)}, ValueError, "last_values"),
        ("strided rewards", {"rewards": np.zeros((T, 2 * N), np.float32)[:, ::2]}, ValueError, "C-contiguous"),
        ("int flags", {"terminated": d["terminated"].astype(np.int64)}, TypeError, "terminated must have dtype bool"),
        ("list", {"values": d["values"].tolist()}, TypeError, "values must be a numpy.ndarray"),
        ("final_values wrong shape", {"final_values": f[:, :1].copy()}, ValueError, "final_values must have shape"),
        ("no final_values", {"final_values": None}, ValueError, "final_values is None"),
        ("out aliasing an input", {"out": (d["values"], np.empty_like(f))}, ValueError, "must not overlap"),
        ("last_values inside an output", {"last_values": plan.returns[0]}, ValueError, "must not overlap"),
        ("same array twice as output", {"out": (f.copy(),) * 2}, ValueError, "must not overlap"),
        ("out wrong shape", {"out": (np.empty((T, N + 1), np.float32), np.empty_like(f))}, ValueError,
         "out advantages must have shape"),
        ("out not a pair", {"out": np.empty_like(f)}, TypeError, "out must be a tuple"),
    ]


def test_bad_calls_raise_and_name_the_argument():
    T, N = 8, 5
    d = rollout(4, T, N, np.float32, p_term=0.2, p_trunc=0.3)
    plan = GAEPlan(T, N, gamma=0.99, lam=0.95)
    for what, override, exc, match in _bad_calls(d, plan):
        kwargs = dict(d, **override)
        out = kwargs.pop("out", None)
        fv = kwargs.pop("final_values")
        with pytest.raises(exc, match=match):
            plan(*[kwargs[k] for k in ARGS], final_values=fv, out=out)
            pytest.fail(f"no error for {what}")


def test_bad_plan_construction():
    with pytest.raises(ValueError, match="num_steps"):
        GAEPlan(0, 4, gamma=0.9, lam=0.9)
    with pytest.raises(TypeError, match="num_envs"):
        GAEPlan(4, 2.0, gamma=0.9, lam=0.9)
    with pytest.raises(ValueError, match="gamma"):
        GAEPlan(4, 4, gamma=1.5, lam=0.9)
    with pytest.raises(ValueError, match="lam"):
        GAEPlan(4, 4, gamma=0.9, lam=float("nan"))
    with pytest.raises(TypeError, match="dtype"):
        GAEPlan(4, 4, gamma=0.9, lam=0.9, dtype=np.int32)
    assert "num_steps=4" in repr(GAEPlan(4, 4, gamma=0.9, lam=0.9))
