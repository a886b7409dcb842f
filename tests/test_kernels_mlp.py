"""The compiled MLP (``rapidrl.kernels.mlp``) and its PyTorch adapter (``rapidrl.nn.numba_mlp``) against autograd:
forward on both row regimes (scalar loops below ``BLAS_MIN_ROWS``, BLAS from there), backward over all rows and
over the first rows only, tanh and ReLU; ``MLPGrad`` writes ``.grad`` as autograd does, rebinding when a ``.grad``
tensor is replaced."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from rapidrl.kernels import mlp as kmlp
from rapidrl.nn.numba_mlp import MLPForward, MLPGrad, mlp_arrays, norm_arrays
from rapidrl.nn.policies import mlp

ACTIVATIONS = ["tanh", "relu"]
ROWS = [3, kmlp.BLAS_MIN_ROWS, 2 * kmlp.BLAS_MIN_ROWS + 5]


def net(activation: str, seed: int = 0) -> torch.nn.Sequential:
    torch.manual_seed(seed)
    seq = mlp(5, (16, 8), 3, activation)
    with torch.no_grad():
        for p in seq.parameters():
            p.add_(0.1 * torch.randn_like(p))  # nonzero biases
    return seq


def autograd(seq, x: np.ndarray, d_out: np.ndarray) -> tuple[np.ndarray, list[np.ndarray]]:
    """(out of all rows, parameter gradients of sum(out[:R] * d_out)) by autograd, R = rows of d_out."""
    seq.zero_grad(set_to_none=True)
    out = seq(torch.from_numpy(x))
    (out[: d_out.shape[0]] * torch.from_numpy(d_out)).sum().backward()
    return out.detach().numpy(), [p.grad.numpy().copy() for p in seq.parameters()]


@pytest.mark.parametrize("activation", ACTIVATIONS)
@pytest.mark.parametrize("rows", ROWS)
def test_forward_and_backward_equal_autograd(activation, rows):
    seq = net(activation)
    rng = np.random.default_rng(rows)
    x = rng.normal(size=(rows, 5)).astype(np.float32)
    d_out = rng.normal(size=(rows, 3)).astype(np.float32)
    want_out, want_grads = autograd(seq, x, d_out)
    ws, bs = mlp_arrays(seq)
    act = kmlp.ACTIVATION_CODES[activation]
    hs = tuple(np.full((rows + 2, w.shape[0]), np.nan, np.float32) for w in ws[:-1])  # more rows than used
    out = np.full((rows + 2, 3), np.nan, np.float32)
    kmlp.forward(x, ws, bs, act, hs, out)
    np.testing.assert_allclose(out[:rows], want_out, rtol=1e-5, atol=1e-6)
    assert np.isnan(out[rows:]).all()  # only the first rows are written
    gws = tuple(np.full_like(w, np.nan) for w in ws)
    gbs = tuple(np.full_like(b, np.nan) for b in bs)
    kmlp.backward(d_out, x, hs, ws, act, gws, gbs)
    got = [g for pair in zip(gws, gbs) for g in pair]
    for g, w in zip(got, want_grads):
        np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("activation", ACTIVATIONS)
def test_mlp_grad_backpropagates_the_first_rows_into_grad(activation):
    """As DQN's and SAC's updates use it: a forward over 2B rows, the backward through the first B."""
    seq = net(activation, seed=1)
    rng = np.random.default_rng(7)
    x = rng.normal(size=(2 * 40, 5)).astype(np.float32)
    d_out = rng.normal(size=(40, 3)).astype(np.float32)
    want_out, want_grads = autograd(seq, x, d_out)
    grad = MLPGrad(seq, activation)
    for p in seq.parameters():
        p.grad = None  # created by the backward
    np.testing.assert_allclose(grad(x), want_out, rtol=1e-5, atol=1e-6)
    grad.backward(d_out)
    for p, w in zip(seq.parameters(), want_grads):
        np.testing.assert_allclose(p.grad.numpy(), w, rtol=1e-4, atol=1e-5)
    # a replaced .grad (zero_grad(set_to_none=True)) is rebound, not written behind the optimizer's back
    seq.zero_grad(set_to_none=True)
    grad(x)
    grad.backward(d_out)
    for p, w in zip(seq.parameters(), want_grads):
        np.testing.assert_allclose(p.grad.numpy(), w, rtol=1e-4, atol=1e-5)
    # the weights are views: an in-place update is seen by the next call
    with torch.no_grad():
        for p in seq.parameters():
            p.mul_(0.5)
    np.testing.assert_allclose(grad(x), seq(torch.from_numpy(x)).detach().numpy(), rtol=1e-5, atol=1e-6)


def test_bad_input_is_a_clear_error():
    seq = net("relu")
    grad = MLPGrad(seq, "relu")
    with pytest.raises(RuntimeError, match="forward call first"):
        grad.backward(np.zeros((2, 3), np.float32))
    with pytest.raises(ValueError, match=r"inputs of shape \(N, 5\)"):
        MLPForward(seq, "relu")(np.zeros((2, 4), np.float32))
    grad(np.zeros((4, 5), np.float32))
    with pytest.raises(ValueError, match="d_out"):
        grad.backward(np.zeros((5, 3), np.float32))  # more rows than the forward ran
    with pytest.raises(ValueError, match="d_out"):
        grad.backward(np.zeros((4, 3), np.float64))
    with pytest.raises(ValueError, match="hidden layer"):
        MLPForward(torch.nn.Sequential(torch.nn.Linear(5, 3)), "relu")


@pytest.mark.parametrize("activation", ACTIVATIONS)
@pytest.mark.parametrize("rows", ROWS)
def test_forward_norm_equals_pytorch_layer_norm_mlp(activation, rows):
    """``forward_norm`` on ``norm_arrays`` views of ``mlp(layer_norm=True)`` (PQN's networks) computes the PyTorch
    forward, LayerNorm scale and shift included, on both row regimes; the views follow in-place updates."""
    torch.manual_seed(rows)
    seq = mlp(5, (16, 8), 3, activation, layer_norm=True)
    with torch.no_grad():
        for p in seq.parameters():
            p.add_(0.3 * torch.randn_like(p))  # LayerNorm weights away from 1, biases away from 0
    x = (np.random.default_rng(rows).normal(size=(rows, 5)) * 4).astype(np.float32)
    ws, bs, gammas, betas, eps = norm_arrays(seq)
    assert eps == 1e-5 and [g.shape for g in gammas] == [(16,), (8,)]
    hs = tuple(np.zeros((rows, w.shape[0]), np.float32) for w in ws[:-1])
    out = np.full((rows, 3), np.nan, np.float32)
    for _ in range(2):
        kmlp.forward_norm(x, ws, bs, gammas, betas, eps, kmlp.ACTIVATION_CODES[activation], hs, out)
        np.testing.assert_allclose(out, seq(torch.from_numpy(x)).detach().numpy(), rtol=1e-5, atol=1e-5)
        with torch.no_grad():
            seq[1].weight.mul_(2.0)  # a LayerNorm's scale, changed in place: seen by the next call


def test_layer_norm_mlps_are_refused_where_the_norms_would_be_skipped():
    normed = mlp(5, (16, 8), 3, "relu", layer_norm=True)
    with pytest.raises(ValueError, match="LayerNorm"):
        mlp_arrays(normed)
    with pytest.raises(ValueError, match="LayerNorm"):
        MLPForward(normed, "relu")
    with pytest.raises(ValueError, match="norm_arrays needs"):
        norm_arrays(net("relu"))  # no LayerNorm at all
    with pytest.raises(ValueError, match="norm_arrays needs"):
        norm_arrays(torch.nn.Sequential(torch.nn.Linear(5, 8), torch.nn.LayerNorm(8, elementwise_affine=False),
                                        torch.nn.ReLU(), torch.nn.Linear(8, 3)))
