"""The distribution formulas: the PyTorch definitions (``rapidrl.nn.distributions``) against closed forms, and their
Numba twins (``rapidrl.kernels.distributions``, compiled and as ``.py_func``) against the PyTorch definitions over
ordinary and extreme inputs (u < -354, where log1p(exp(-2u)) overflows; |u| up to 1e4; std from e^-30 to e^20),
in float32 and float64."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from scipy import stats

from rapidrl.kernels import distributions as nk
from rapidrl.nn import distributions as td

DTYPES = [np.float32, np.float64]
MODES = ["compiled", "python"]
# u where the squash's Jacobian is evaluated: ordinary values, the softplus threshold (|2u| = 20), and extremes
# (u < -354.5: exp(-2u) overflows float64, so log1p(exp(-2u)) is inf there)
U = np.array([-1e4, -1000.0, -400.0, -355.0, -354.0, -100.0, -10.5, -10.0, -9.5, -3.0, -0.7, -1e-6, 0.0, 1e-6, 0.7,
              3.0, 9.5, 10.0, 10.5, 100.0, 400.0, 1000.0, 1e4])
LOG_STD = np.array([-30.0, -5.0, -1.0, 0.0, 0.5, 2.0, 20.0])


def tol(dtype):
    return {"rtol": 2e-6, "atol": 1e-5} if dtype == np.float32 else {"rtol": 1e-12, "atol": 1e-12}


def numba_fn(name, mode):
    f = getattr(nk, name)
    return f if mode == "compiled" else f.py_func


def per_element(f, dtype, *arrays):
    """f applied to every element of same-shape arrays (the twins work on one element), as float64."""
    flat = [np.asarray(a, dtype).ravel() for a in arrays]
    return np.array([f(*(a[i] for a in flat)) for i in range(flat[0].size)], np.float64).reshape(arrays[0].shape)


def gaussian_inputs(dtype):
    """(x, mean, log_std) [R, A]: random rows, then every LOG_STD with z of 0, +-1 and +-1e3 standard deviations."""
    rng = np.random.default_rng(0)
    x, mean = rng.normal(size=(64, 3)) * 3, rng.normal(size=(64, 3))
    log_std = rng.uniform(-3, 2, size=(64, 3))
    ls, z = np.meshgrid(LOG_STD, [0.0, 1.0, -1.0, 1e3, -1e3])
    ls, z = ls.reshape(-1, 1), z.reshape(-1, 1)
    m = np.full_like(ls, 0.25)
    return tuple(np.concatenate([a, b.repeat(3, 1)]).astype(dtype) for a, b in
                 ((x, m + z * np.exp(ls)), (mean, m), (log_std, ls)))


# -------------------------------------------------------------------------- PyTorch against closed forms


def test_torch_definitions_match_closed_forms():
    x, mean, log_std = (torch.from_numpy(a) for a in gaussian_inputs(np.float64))
    want = stats.norm.logpdf(x.numpy(), mean.numpy(), np.exp(log_std.numpy())).sum(-1)
    np.testing.assert_allclose(td.gaussian_log_prob(x, mean, log_std).numpy(), want, rtol=1e-12)
    np.testing.assert_allclose(td.gaussian_entropy(log_std).numpy(),
                               stats.norm.entropy(0.0, np.exp(log_std.numpy())).sum(-1), rtol=1e-12, atol=1e-12)
    u = torch.linspace(-8, 8, 101, dtype=torch.float64)[:, None]
    scale = torch.tensor([0.5, 2.0, 3.0], dtype=torch.float64)
    want = torch.log(scale * (1 - torch.tanh(u) ** 2)).sum(-1)  # exact where 1 - tanh^2 does not underflow
    torch.testing.assert_close(td.tanh_log_jacobian(u, scale), want, rtol=1e-9, atol=1e-9)
    logits = torch.tensor([[1.0, 2.0, 3.0], [0.0, 0.0, 0.0], [-1e3, 0.0, 1e3]], dtype=torch.float64)
    p = torch.softmax(logits, -1)
    torch.testing.assert_close(td.categorical_log_probs(logits).exp(), p)
    torch.testing.assert_close(td.categorical_entropy(td.categorical_log_probs(logits)),
                               torch.tensor([-(p[0] * p[0].log()).sum().item(), math.log(3.0), 0.0],
                                            dtype=torch.float64))


def test_tanh_log_jacobian_is_finite_where_the_naive_forms_are_not():
    u = torch.from_numpy(U[:, None])
    j = td.tanh_log_jacobian(u, torch.ones(1, dtype=torch.float64))
    assert torch.isfinite(j).all()
    # log(1 - tanh^2) is -inf from |u| ~ 19 on; log1p(exp(-2u)) overflows below u = -354.5
    with np.errstate(over="ignore", divide="ignore"):
        assert not np.isfinite(np.log1p(np.exp(-2.0 * U))).all()
    # far out, log(1 - tanh(u)^2) = log 4 - 2 |u| (up to exp(-2|u|))
    far = np.abs(U) >= 100
    np.testing.assert_allclose(j.numpy()[far], math.log(4.0) - 2.0 * np.abs(U[far]), rtol=1e-15)


# -------------------------------------------------------------------------- Numba twins against PyTorch


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("dtype", DTYPES)
def test_softplus_twin(mode, dtype):
    x = np.concatenate([-2.0 * U, [19.999, 20.0, 20.001, -800.0]]).astype(dtype)
    got = per_element(numba_fn("softplus", mode), dtype, x)
    want = torch.nn.functional.softplus(torch.from_numpy(x)).double().numpy()
    np.testing.assert_allclose(got, want, **tol(dtype))


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("dtype", DTYPES)
def test_gaussian_twins(mode, dtype):
    x, mean, log_std = gaussian_inputs(dtype)
    tx, tm, tl = (torch.from_numpy(a) for a in (x, mean, log_std))
    got = per_element(numba_fn("gaussian_log_prob", mode), dtype, x, mean, log_std).sum(-1)
    np.testing.assert_allclose(got, td.gaussian_log_prob(tx, tm, tl).double().numpy(), **tol(dtype))
    z = (x - mean) * np.exp(-log_std)
    got = per_element(numba_fn("gaussian_log_density", mode), dtype, z, log_std).sum(-1)
    np.testing.assert_allclose(got, td.gaussian_log_density(torch.from_numpy(z), tl).double().numpy(), **tol(dtype))
    got = per_element(numba_fn("gaussian_entropy", mode), dtype, log_std).sum(-1)
    np.testing.assert_allclose(got, td.gaussian_entropy(tl).double().numpy(), **tol(dtype))


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("dtype", DTYPES)
def test_squash_twins(mode, dtype):
    u, log_std = np.meshgrid(U, LOG_STD)
    z = np.linspace(-3, 3, u.size).reshape(u.shape)
    scale = np.full_like(u, 2.5)
    u, z, log_std, scale = (a.astype(dtype) for a in (u, z, log_std, scale))
    tu, tz, tl, ts = (torch.from_numpy(a) for a in (u, z, log_std, scale))
    got = per_element(numba_fn("tanh_log_jacobian", mode), dtype, u, scale)
    assert np.isfinite(got).all()
    want = td.tanh_log_jacobian(tu[..., None], ts[..., None]).double().numpy()  # [..., 1]: per element
    np.testing.assert_allclose(got, want, **tol(dtype))
    got = per_element(numba_fn("squashed_gaussian_log_prob", mode), dtype, z, log_std, u, scale).sum(-1)
    want = td.squashed_gaussian_log_prob(tz, tl, tu, ts).double().numpy()
    np.testing.assert_allclose(got, want, **tol(dtype))


def categorical_rows(dtype):
    rng = np.random.default_rng(1)
    rows = [rng.normal(size=5) * 3, np.zeros(5), [0.0, 0.0, 0.0, 0.0, 80.0], [-1e4, 0.0, 1e4, 3.0, -3.0],
            [1e30, -1e30, 0.0, 1.0, 2.0], [-50.0, -50.0, -50.0, -50.0, -50.0]]
    return np.array(rows, dtype)


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("dtype", DTYPES)
def test_categorical_twins(mode, dtype):
    logits = categorical_rows(dtype)
    lse_fn, ent_fn = numba_fn("log_sum_exp", mode), numba_fn("categorical_entropy", mode)
    log_probs = td.categorical_log_probs(torch.from_numpy(logits))
    entropy = td.categorical_entropy(log_probs).double().numpy()
    for row, want_lp, want_ent in zip(logits, log_probs.double().numpy(), entropy):
        lse = lse_fn(row)
        np.testing.assert_allclose(row.astype(np.float64) - lse, want_lp, **tol(dtype))
        np.testing.assert_allclose(ent_fn(row, lse), want_ent, **tol(dtype))


@pytest.mark.parametrize("mode", MODES)
def test_categorical_sample_is_the_inverse_cdf(mode):
    sample = numba_fn("categorical_sample", mode)
    row = np.array([0.5, -1.0, 2.0, 0.0], np.float32)
    lse = nk.log_sum_exp(row)
    cdf = np.cumsum(torch.softmax(torch.from_numpy(row).double(), -1).numpy())
    for k, edge in enumerate(cdf[:-1]):
        assert sample(row, lse, edge - 1e-9) == k
        assert sample(row, lse, edge + 1e-9) == k + 1
    assert sample(row, lse, 0.0) == 0
    assert sample(row, lse, np.nextafter(1.0, 0.0)) == 3
    assert sample(np.array([0.0, -np.inf, 0.0]), 0.0 + math.log(2.0), 0.5) == 2  # a zero-probability category
