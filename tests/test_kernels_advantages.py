"""Advantage/return kernels: vs the plain references, identities, analytic values, bad input.

Every comparison runs twice: compiled, and with every ``@njit`` core of the module replaced by its
``.py_func`` (pure Python, so coverage and debugging see the kernel code).
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from kernel_modes import MODES, kernel_mode

from rapidrl.kernels import advantages as adv_mod
from rapidrl.kernels import parallel
from rapidrl.kernels import reference as ref
from rapidrl.kernels.advantages import (
    discounted_returns,
    gae,
    gae_into,
    gae_trajectory,
    lambda_returns,
    n_step_returns,
    vtrace,
)

DTYPES = [np.float32, np.float64]
SETTINGS = settings(max_examples=25, deadline=None)


def tol(dtype):
    return {"rtol": 2e-4, "atol": 2e-4} if dtype == np.float32 else {"rtol": 1e-10, "atol": 1e-10}


def rollout(seed, T, N, dtype, p_term=0.1, p_trunc=0.1):
    rng = np.random.default_rng(seed)
    return {
        "rewards": rng.normal(size=(T, N)).astype(dtype),
        "values": rng.normal(size=(T, N)).astype(dtype),
        "last_values": rng.normal(size=N).astype(dtype),
        "terminated": rng.random((T, N)) < p_term,
        "truncated": rng.random((T, N)) < p_trunc,
        "final_values": rng.normal(size=(T, N)).astype(dtype),
    }


shapes = st.tuples(st.integers(1, 12), st.integers(1, 6), st.integers(0, 2**31 - 1),
                   st.sampled_from([0.0, 0.15, 0.5]), st.sampled_from([0.0, 0.15, 0.5]))


# ----------------------------------------------------------------------------------- vs reference


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("dtype", DTYPES)
@SETTINGS
@given(shape=shapes, gamma=st.sampled_from([0.0, 0.9, 0.99, 1.0]), lam=st.sampled_from([0.0, 0.95, 1.0]))
def test_gae_matches_reference(mode, dtype, shape, gamma, lam):
    T, N, seed, pt, pr = shape
    d = rollout(seed, T, N, dtype, pt, pr)
    with kernel_mode(adv_mod, mode):
        a, r = gae(**d, gamma=gamma, lam=lam)
    ea, er = ref.gae(**d, gamma=gamma, lam=lam)
    assert a.dtype == dtype and r.dtype == dtype and a.shape == (T, N)
    np.testing.assert_allclose(a, ea, **tol(dtype))
    np.testing.assert_allclose(r, er, **tol(dtype))


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("dtype", DTYPES)
@SETTINGS
@given(shape=shapes, gamma=st.sampled_from([0.0, 0.9, 1.0]), lam=st.sampled_from([0.0, 0.8, 1.0]),
       n=st.integers(1, 14))
def test_returns_match_reference(mode, dtype, shape, gamma, lam, n):
    T, N, seed, pt, pr = shape
    d = rollout(seed, T, N, dtype, pt, pr)
    no_values = {k: v for k, v in d.items() if k != "values"}
    with kernel_mode(adv_mod, mode):
        dr = discounted_returns(**no_values, gamma=gamma)
        lr = lambda_returns(**d, gamma=gamma, lam=lam)
        nr = n_step_returns(**d, gamma=gamma, n=n)
    np.testing.assert_allclose(dr, ref.discounted_returns(**no_values, gamma=gamma), **tol(dtype))
    np.testing.assert_allclose(lr, ref.lambda_returns(**d, gamma=gamma, lam=lam), **tol(dtype))
    np.testing.assert_allclose(nr, ref.n_step_returns(**d, gamma=gamma, n=n), **tol(dtype))
    assert dr.dtype == lr.dtype == nr.dtype == dtype


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("dtype", DTYPES)
@SETTINGS
@given(shape=shapes, gamma=st.sampled_from([0.0, 0.9, 1.0]), rho_bar=st.sampled_from([0.5, 1.0, 2.0]),
       c_bar=st.sampled_from([0.5, 1.0, 2.0]))
def test_vtrace_matches_reference(mode, dtype, shape, gamma, rho_bar, c_bar):
    T, N, seed, pt, pr = shape
    d = rollout(seed, T, N, dtype, pt, pr)
    log_rhos = np.random.default_rng(seed + 1).normal(scale=0.7, size=(T, N)).astype(dtype)
    args = (log_rhos, d["rewards"], d["values"], d["last_values"], d["terminated"])
    kw = {"truncated": d["truncated"], "final_values": d["final_values"]}
    with kernel_mode(adv_mod, mode):
        vs, pg = vtrace(*args, gamma=gamma, rho_bar=rho_bar, c_bar=c_bar, **kw)
    evs, epg = ref.vtrace(*args, gamma=gamma, rho_bar=rho_bar, c_bar=c_bar, **kw)
    np.testing.assert_allclose(vs, evs, **tol(dtype))
    np.testing.assert_allclose(pg, epg, **tol(dtype))
    assert vs.dtype == pg.dtype == dtype


# ------------------------------------------------------------------------------------- identities


@pytest.mark.parametrize("dtype", DTYPES)
def test_gae_lambda_one_is_discounted_return_minus_value(dtype):
    d = rollout(1, 40, 7, dtype)
    a, r = gae(**d, gamma=0.97, lam=1.0)
    no_values = {k: v for k, v in d.items() if k != "values"}
    g = discounted_returns(**no_values, gamma=0.97)
    np.testing.assert_allclose(a, g - d["values"], **tol(dtype))
    np.testing.assert_allclose(r, g, **tol(dtype))


@pytest.mark.parametrize("dtype", DTYPES)
def test_gae_returns_equal_lambda_returns(dtype):
    d = rollout(2, 30, 5, dtype)
    _, r = gae(**d, gamma=0.95, lam=0.7)
    np.testing.assert_allclose(r, lambda_returns(**d, gamma=0.95, lam=0.7), **tol(dtype))


@pytest.mark.parametrize("dtype", DTYPES)
def test_n_step_with_n_equal_T_is_lambda_return_with_lambda_one(dtype):
    d = rollout(3, 25, 4, dtype)
    for n in (25, 40):
        np.testing.assert_allclose(n_step_returns(**d, gamma=0.9, n=n),
                                   lambda_returns(**d, gamma=0.9, lam=1.0), **tol(dtype))


@pytest.mark.parametrize("dtype", DTYPES)
def test_n_step_with_n_one_is_td_target(dtype):
    d = rollout(4, 20, 3, dtype)
    np.testing.assert_allclose(n_step_returns(**d, gamma=0.9, n=1),
                               lambda_returns(**d, gamma=0.9, lam=0.0), **tol(dtype))


@pytest.mark.parametrize("dtype", DTYPES)
def test_vtrace_on_policy_is_lambda_one_return(dtype):
    d = rollout(5, 30, 6, dtype)
    zeros = np.zeros_like(d["rewards"])
    for c_bar in (1.0, 3.0):
        vs, pg = vtrace(zeros, d["rewards"], d["values"], d["last_values"], d["terminated"], gamma=0.9,
                        c_bar=c_bar, truncated=d["truncated"], final_values=d["final_values"])
        g = lambda_returns(**d, gamma=0.9, lam=1.0)
        np.testing.assert_allclose(vs, g, **tol(dtype))
        # pg advantage = r + gamma * (vs[t+1] inside the episode, else the next value) - V
        a0, _ = gae(**d, gamma=0.9, lam=0.0)  # r + gamma nv - V
        cont = ~(d["terminated"] | d["truncated"])
        cont[-1] = False
        nxt = np.zeros_like(g)
        nxt[:-1] = g[1:] - d["values"][1:]  # vs[t+1] - V[t+1]
        np.testing.assert_allclose(pg, a0 + 0.9 * np.where(cont, nxt, 0), **tol(dtype))


def test_vtrace_off_policy_analytic_one_step():
    # T = 1: vs = V + rho (r + gamma * bootstrap - V), rho = min(rho_bar, pi/mu). Hand computation.
    lr = np.log(np.array([[0.5, 4.0]]))
    r = np.array([[1.0, 2.0]])
    v = np.array([[0.5, -1.0]])
    bv = np.array([2.0, 3.0])
    term = np.zeros((1, 2), bool)
    vs, pg = vtrace(lr, r, v, bv, term, gamma=0.5, rho_bar=1.5)
    np.testing.assert_allclose(vs, [[0.5 + 0.5 * (1 + 1 - 0.5), -1.0 + 1.5 * (2 + 1.5 + 1)]])
    np.testing.assert_allclose(pg, vs - v)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("fn", ["gae", "lambda", "nstep", "vtrace", "discounted"])
def test_concatenated_episodes_equal_separate(dtype, fn):
    # Env 0 runs episode A (terminated after 6 steps) then episode B (truncated after 5 steps, final
    # value 2.5), then episode C (4 steps, cut by the rollout end, bootstrap 0.7). Each alone must match.
    rng = np.random.default_rng(6)
    lengths = [6, 5, 4]
    T = sum(lengths)
    r = rng.normal(size=(T, 1)).astype(dtype)
    v = rng.normal(size=(T, 1)).astype(dtype)
    term = np.zeros((T, 1), bool)
    trunc = np.zeros((T, 1), bool)
    fv = np.full((T, 1), np.nan, dtype)  # must not be read except at the truncation
    term[5] = True
    trunc[10] = True
    fv[10] = 2.5
    lv = np.array([0.7], dtype)

    def run(rr, vv, last, te, tr, f):
        if fn == "gae":
            return gae(rr, vv, last, te, tr, gamma=0.9, lam=0.8, final_values=f)[0]
        if fn == "lambda":
            return lambda_returns(rr, vv, last, te, tr, gamma=0.9, lam=0.8, final_values=f)
        if fn == "nstep":
            return n_step_returns(rr, vv, last, te, tr, gamma=0.9, n=3, final_values=f)
        if fn == "discounted":
            return discounted_returns(rr, last, te, tr, gamma=0.9, final_values=f)
        lr = np.full_like(rr, -0.3)
        return vtrace(lr, rr, vv, last, te, gamma=0.9, truncated=tr, final_values=f)[0]

    whole = run(r, v, lv, term, trunc, fv)
    start = 0
    for length in lengths:
        s = slice(start, start + length)
        # Separate episode: its own end flags; the bootstrap value after it is irrelevant unless the
        # rollout cut it (episode C), so pass NaN there to prove it is never read.
        last = lv if start + length == T else np.array([np.nan], dtype)
        part = run(np.ascontiguousarray(r[s]), np.ascontiguousarray(v[s]), last,
                   np.ascontiguousarray(term[s]), np.ascontiguousarray(trunc[s]), np.ascontiguousarray(fv[s]))
        np.testing.assert_allclose(whole[s], part, **tol(dtype))
        assert np.isfinite(part).all()
        start += length


@pytest.mark.parametrize("dtype", DTYPES)
def test_infinite_horizon_constant_reward(dtype):
    # Reward 1 forever: V = 1/(1-gamma). The rollout is truncated every 50 steps with final value
    # 1/(1-gamma), and values are exact, so every return is 1/(1-gamma) and every advantage 0.
    gamma = 0.99
    vstar = 1.0 / (1.0 - gamma)
    T, N = 200, 3
    r = np.ones((T, N), dtype)
    v = np.full((T, N), vstar, dtype)
    trunc = np.zeros((T, N), bool)
    trunc[49::50] = True
    term = np.zeros((T, N), bool)
    fv = np.full((T, N), vstar, dtype)
    lv = np.full(N, vstar, dtype)
    a, ret = gae(r, v, lv, term, trunc, gamma=gamma, lam=0.95, final_values=fv)
    rtol = 1e-5 if dtype == np.float32 else 1e-12
    np.testing.assert_allclose(ret, vstar, rtol=rtol)
    np.testing.assert_allclose(a, 0, atol=vstar * rtol)
    g = discounted_returns(r, lv, term, trunc, gamma=gamma, final_values=fv)
    np.testing.assert_allclose(g, vstar, rtol=rtol)
    # Without bootstrapping at the truncation, a step k before the cut would only see a finite sum:
    # the truncation handling is what makes the value ~ 1/(1-gamma).
    g_term = discounted_returns(r, lv, trunc, term, gamma=gamma)
    np.testing.assert_allclose(g_term[49], 1.0, rtol=rtol)


def test_gae_hand_computed():
    # T = 3, one env, gamma = 0.5, lam = 0.5; step 0 continues, step 1 truncated (final value 4),
    # step 2 continues into last_value 8. By hand:
    #   delta2 = 1 + 0.5*8 - 2 = 3,         A2 = 3
    #   delta1 = 2 + 0.5*4 - 1 = 3,         A1 = 3 (trace cut)
    #   delta0 = 0 + 0.5*1 - 1 = -0.5,      A0 = -0.5 + 0.25*3 = 0.25
    r = np.array([[0.0], [2.0], [1.0]])
    v = np.array([[1.0], [1.0], [2.0]])
    trunc = np.array([[False], [True], [False]])
    fv = np.array([[0.0], [4.0], [0.0]])
    a, ret = gae(r, v, np.array([8.0]), np.zeros((3, 1), bool), trunc, gamma=0.5, lam=0.5, final_values=fv)
    np.testing.assert_allclose(a[:, 0], [0.25, 3.0, 3.0])
    np.testing.assert_allclose(ret[:, 0], [1.25, 4.0, 5.0])
    # n-step, n = 2: G0 = 0 + 0.5*2 + 0.25*4 = 2; G1 = 2 + 0.5*4 = 4; G2 = 1 + 0.5*8 = 5
    g = n_step_returns(r, v, np.array([8.0]), np.zeros((3, 1), bool), trunc, gamma=0.5, n=2, final_values=fv)
    np.testing.assert_allclose(g[:, 0], [2.0, 4.0, 5.0])


def test_terminated_wins_over_truncated():
    d = rollout(7, 10, 4, np.float64, p_term=0.3, p_trunc=0.0)
    both = dict(d, truncated=d["terminated"].copy(), final_values=np.full((10, 4), np.nan))
    a1, r1 = gae(**both, gamma=0.9, lam=0.9)
    a2, r2 = gae(**dict(d, final_values=None), gamma=0.9, lam=0.9)
    np.testing.assert_array_equal(a1, a2)
    np.testing.assert_array_equal(r1, r2)


def test_final_values_only_needed_when_truncated():
    d = rollout(8, 10, 4, np.float64, p_trunc=0.0)
    d["final_values"] = None
    gae(**d, gamma=0.9, lam=0.9)  # fine: nothing truncated
    d["truncated"] = d["truncated"].copy()
    d["truncated"][3, 2] = True
    for call in (lambda: gae(**d, gamma=0.9, lam=0.9),
                 lambda: lambda_returns(**d, gamma=0.9, lam=0.9),
                 lambda: n_step_returns(**d, gamma=0.9, n=2),
                 lambda: discounted_returns(d["rewards"], d["last_values"], d["terminated"], d["truncated"],
                                            gamma=0.9),
                 lambda: vtrace(np.zeros((10, 4)), d["rewards"], d["values"], d["last_values"],
                                d["terminated"], gamma=0.9, truncated=d["truncated"])):
        with pytest.raises(ValueError, match="final_values"):
            call()


def test_nan_policy_propagates_within_episode_only():
    # A NaN reward at step 4 of env 0 (episode ends at step 6 terminated): steps 0..4 of that
    # episode become NaN, steps 5.. and every other env stay finite. Documented in the module.
    d = rollout(9, 12, 3, np.float64, p_term=0.0, p_trunc=0.0)
    d["terminated"] = np.zeros((12, 3), bool)
    d["terminated"][6, 0] = True
    d["rewards"][4, 0] = np.nan
    a, r = gae(**d, gamma=0.9, lam=0.9)
    assert np.isnan(a[:5, 0]).all() and np.isnan(r[:5, 0]).all()
    assert np.isfinite(a[5:, 0]).all() and np.isfinite(a[:, 1:]).all()


# ----------------------------------------------------------------------------- parallel / variants


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("N", [64, 200, 513])
def test_parallel_core_bit_identical_to_serial(mode, dtype, N):
    d = rollout(10, 33, N, dtype, 0.05, 0.05)
    g, lm = dtype(0.99), dtype(0.95)
    args = (d["rewards"], d["values"], d["last_values"], d["terminated"], d["truncated"], d["final_values"],
            g, lm)
    a1, r1 = np.empty((33, N), dtype), np.empty((33, N), dtype)
    a2, r2 = np.empty((33, N), dtype), np.empty((33, N), dtype)
    with kernel_mode(adv_mod, mode):
        n1 = adv_mod._gae_core(*args, a1, r1)
        n2 = adv_mod._gae_core_parallel(*args, a2, r2, 64)
    assert n1 == n2 == int((d["truncated"] & ~d["terminated"]).sum())
    np.testing.assert_array_equal(a1, a2)
    np.testing.assert_array_equal(r1, r2)


def test_wrapper_takes_parallel_path_above_threshold(monkeypatch):
    d = rollout(11, 20, 300, np.float32)
    a_serial, r_serial = gae(**d, gamma=0.99, lam=0.95)
    calls = []
    real = adv_mod._gae_core_parallel

    def spy(*args):
        calls.append(args[-1])
        return real(*args)

    monkeypatch.setattr(parallel, "GAE_PARALLEL_MIN", 0)
    monkeypatch.setattr(parallel, "num_threads", lambda: 2)
    monkeypatch.setattr(adv_mod, "_gae_core_parallel", spy)
    a_par, r_par = gae(**d, gamma=0.99, lam=0.95)
    assert calls == [192]  # 300 envs / 2 threads -> 150, rounded up to a multiple of 64
    np.testing.assert_array_equal(a_serial, a_par)
    np.testing.assert_array_equal(r_serial, r_par)


@pytest.mark.parametrize("dtype", DTYPES)
def test_gae_into_writes_outputs(dtype):
    d = rollout(12, 16, 5, dtype)
    oa, orr = np.full((16, 5), np.nan, dtype), np.full((16, 5), np.nan, dtype)
    a, r = gae_into(**d, gamma=0.9, lam=0.8, out_advantages=oa, out_returns=orr)
    assert a is oa and r is orr
    ea, er = gae(**d, gamma=0.9, lam=0.8)
    np.testing.assert_array_equal(oa, ea)
    np.testing.assert_array_equal(orr, er)


def test_gae_into_rejects_bad_outputs():
    d = rollout(13, 8, 4, np.float64)
    good = np.empty((8, 4))
    with pytest.raises(TypeError, match="out_advantages"):
        gae_into(**d, gamma=0.9, lam=0.8, out_advantages=np.empty((8, 4), np.float32), out_returns=good)
    with pytest.raises(ValueError, match="out_returns"):
        gae_into(**d, gamma=0.9, lam=0.8, out_advantages=good, out_returns=np.empty((4, 8)))
    with pytest.raises(ValueError, match="out_advantages"):
        gae_into(**d, gamma=0.9, lam=0.8, out_advantages=d["values"], out_returns=good)
    with pytest.raises(ValueError, match="out_returns"):
        gae_into(**d, gamma=0.9, lam=0.8, out_advantages=good, out_returns=good)
    with pytest.raises(ValueError, match="C-contiguous"):
        gae_into(**d, gamma=0.9, lam=0.8, out_advantages=np.empty((8, 8))[:, ::2], out_returns=good)


@pytest.mark.parametrize("dtype", DTYPES)
def test_gae_trajectory_equals_batched(dtype):
    d = rollout(14, 30, 1, dtype)
    a, r = gae(**d, gamma=0.9, lam=0.8)
    ta, tr = gae_trajectory(d["rewards"][:, 0].copy(), d["values"][:, 0].copy(), float(d["last_values"][0]),
                            d["terminated"][:, 0].copy(), d["truncated"][:, 0].copy(), gamma=0.9, lam=0.8,
                            final_values=d["final_values"][:, 0].copy())
    assert ta.shape == (30,) and ta.dtype == dtype
    np.testing.assert_array_equal(ta, a[:, 0])
    np.testing.assert_array_equal(tr, r[:, 0])
    with pytest.raises(ValueError, match="rewards"):
        gae_trajectory(d["rewards"], d["values"], 0.0, d["terminated"], d["truncated"], gamma=0.9, lam=0.8)


def test_uint8_flags_accepted():
    d = rollout(15, 10, 3, np.float64)
    a1, _ = gae(**d, gamma=0.9, lam=0.9)
    d8 = dict(d, terminated=d["terminated"].astype(np.uint8), truncated=d["truncated"].astype(np.uint8))
    a2, _ = gae(**d8, gamma=0.9, lam=0.9)
    np.testing.assert_array_equal(a1, a2)


# ------------------------------------------------------------------------------------- bad input


def _bad_cases():
    d = rollout(16, 6, 4, np.float32)
    yield "rank", dict(d, rewards=d["rewards"][None]), ValueError, "rewards"
    yield "shape", dict(d, values=d["values"][:5].copy()), ValueError, "values"
    yield "last shape", dict(d, last_values=np.zeros(5, np.float32)), ValueError, "last_values"
    yield "int dtype", dict(d, rewards=d["rewards"].astype(np.int64)), TypeError, "rewards"
    yield "mixed dtypes", dict(d, values=d["values"].astype(np.float64)), TypeError, "values"
    yield "mixed final", dict(d, final_values=d["final_values"].astype(np.float64)), TypeError, "final_values"
    yield "non-contiguous", dict(d, values=np.repeat(d["values"], 2, 1)[:, ::2]), ValueError, "values"
    yield "empty", dict(d, rewards=np.zeros((0, 4), np.float32)), ValueError, "rewards"
    yield "list", dict(d, rewards=d["rewards"].tolist()), TypeError, "rewards"
    yield "float flags", dict(d, terminated=d["terminated"].astype(np.float32)), TypeError, "terminated"
    yield "flag shape", dict(d, truncated=d["truncated"][:, :3].copy()), ValueError, "truncated"


@pytest.mark.parametrize("case", list(_bad_cases()), ids=lambda c: c[0])
def test_bad_arrays_rejected(case):
    _, kwargs, exc, name = case
    with pytest.raises(exc, match=name):
        gae(**kwargs, gamma=0.9, lam=0.9)
    with pytest.raises(exc, match=name):
        lambda_returns(**kwargs, gamma=0.9, lam=0.9)
    with pytest.raises(exc, match=name):
        n_step_returns(**kwargs, gamma=0.9, n=3)


@pytest.mark.parametrize(("kw", "exc", "name"), [
    ({"gamma": 1.5}, ValueError, "gamma"),
    ({"gamma": -0.1}, ValueError, "gamma"),
    ({"gamma": float("nan")}, ValueError, "gamma"),
    ({"gamma": "0.9"}, TypeError, "gamma"),
    ({"lam": 2.0}, ValueError, "lam"),
    ({"lam": True}, TypeError, "lam"),
])
def test_bad_scalars_rejected(kw, exc, name):
    d = rollout(17, 5, 2, np.float64)
    with pytest.raises(exc, match=name):
        gae(**d, **{"gamma": 0.9, "lam": 0.9, **kw})


def test_bad_vtrace_and_nstep_arguments():
    d = rollout(18, 5, 2, np.float64)
    lr = np.zeros((5, 2))
    base = (d["rewards"], d["values"], d["last_values"], d["terminated"])
    with pytest.raises(ValueError, match="rho_bar"):
        vtrace(lr, *base, gamma=0.9, rho_bar=0.0)
    with pytest.raises(ValueError, match="c_bar"):
        vtrace(lr, *base, gamma=0.9, c_bar=-1.0)
    with pytest.raises(ValueError, match="log_rhos"):
        vtrace(lr[:4].copy(), *base, gamma=0.9)
    with pytest.raises(ValueError, match="bootstrap_value"):
        vtrace(lr, d["rewards"], d["values"], np.zeros(3), d["terminated"], gamma=0.9)
    with pytest.raises(ValueError, match="n must be >= 1"):
        n_step_returns(**d, gamma=0.9, n=0)
    with pytest.raises(TypeError, match="n must be an int"):
        n_step_returns(**d, gamma=0.9, n=2.0)


@pytest.mark.parametrize("case", list(_bad_cases()), ids=lambda c: c[0])
def test_bad_arrays_rejected_by_discounted_returns_and_vtrace(case):
    label, kw, exc, name = case
    if name != "values":  # discounted_returns has no values argument
        with pytest.raises(exc, match=name):
            discounted_returns(kw["rewards"], kw["last_values"], kw["terminated"], kw["truncated"], gamma=0.9,
                               final_values=kw["final_values"])
    log_rhos = np.zeros((6, 4), np.float32)
    if label in ("rank", "int dtype", "empty", "list"):
        log_rhos = kw["rewards"]  # log_rhos is checked against rewards: keep them alike
    with pytest.raises(exc, match="bootstrap_value" if name == "last_values" else name):
        vtrace(log_rhos, kw["rewards"], kw["values"], kw["last_values"], kw["terminated"], gamma=0.9,
               truncated=kw["truncated"], final_values=kw["final_values"])


def test_bad_gae_trajectory_and_vtrace_inputs():
    d = rollout(19, 6, 1, np.float64)
    r, v = d["rewards"][:, 0].copy(), d["values"][:, 0].copy()
    te, tr = d["terminated"][:, 0].copy(), np.zeros(6, bool)
    with pytest.raises(ValueError, match="values"):
        gae_trajectory(r, v[:5].copy(), 0.0, te, tr, gamma=0.9, lam=0.9)
    with pytest.raises(TypeError, match="values"):
        gae_trajectory(r, v.astype(np.float32), 0.0, te, tr, gamma=0.9, lam=0.9)
    with pytest.raises(ValueError, match="last_value must be finite"):
        gae_trajectory(r, v, float("nan"), te, tr, gamma=0.9, lam=0.9)
    with pytest.raises(TypeError, match="last_value"):
        gae_trajectory(r, v, np.zeros(1), te, tr, gamma=0.9, lam=0.9)
    with pytest.raises(ValueError, match="empty"):
        gae_trajectory(np.zeros(0), np.zeros(0), 0.0, np.zeros(0, bool), np.zeros(0, bool), gamma=0.9, lam=0.9)
    tr[2] = True
    with pytest.raises(ValueError, match="final_values"):
        gae_trajectory(r, v, 0.0, te, tr, gamma=0.9, lam=0.9)
    # V-trace: log_rhos of another dtype, truncated of the wrong shape
    base = (d["rewards"], d["values"], d["last_values"], d["terminated"])
    with pytest.raises(TypeError, match="log_rhos"):
        vtrace(np.zeros((6, 1), np.float32), *base, gamma=0.9)
    with pytest.raises(ValueError, match="truncated"):
        vtrace(np.zeros((6, 1)), *base, gamma=0.9, truncated=np.zeros((6, 2), bool))


def test_vtrace_nan_log_ratio_propagates_within_episode_only():
    # Documented NaN policy: a NaN log-ratio at step 3 of env 0 poisons vs at steps <= 3 of its
    # episode (episode ends, terminated, at step 5), nothing after the boundary, no other env.
    d = rollout(20, 10, 2, np.float64, p_term=0.0, p_trunc=0.0)
    term = np.zeros((10, 2), bool)
    term[5, 0] = True
    lr = np.zeros((10, 2))
    lr[3, 0] = np.nan
    vs, pg = vtrace(lr, d["rewards"], d["values"], d["last_values"], term, gamma=0.9)
    assert np.isnan(vs[:4, 0]).all() and np.isfinite(vs[4:, 0]).all() and np.isfinite(vs[:, 1]).all()
    assert np.isnan(pg[3, 0]) and np.isfinite(pg[4:, 0]).all()
