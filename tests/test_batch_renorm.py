"""Batch Renormalization (rapidrl.nn.batch_renorm) against a plain reference of the paper's equations (Ioffe 2017,
Algorithm 1, with CrossQ's running variance), in training after and during the warm-up and in evaluation, for one
layer and for an ensemble's per-member statistics."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch import nn

from rapidrl.nn.batch_renorm import BatchRenorm, batch_renorm_mode, interleave_batch_renorm

EPS, MOMENTUM, R_MAX, D_MAX = 1e-3, 0.01, 3.0, 5.0


def reference(x, mean, var, gamma, beta, renorm: bool):
    """The paper's training forward, written out: y and the updated running (mean, var). x [.., B, F], statistics
    over dim -2 (one layer: x [B, F], the rest [F]; an ensemble: x [n, B, F], the rest [n, 1, F])."""
    mu_b = x.mean(-2, keepdim=True).reshape(mean.shape)
    var_b = ((x - mu_b) ** 2).mean(-2, keepdim=True).reshape(mean.shape)
    sigma_b, sigma = torch.sqrt(var_b + EPS), torch.sqrt(var + EPS)
    if renorm:
        r = torch.clamp(sigma_b.detach() / sigma, 1 / R_MAX, R_MAX)
        d = torch.clamp((mu_b.detach() - mean) / sigma, -D_MAX, D_MAX)
    else:
        r, d = torch.ones_like(mean), torch.zeros_like(mean)
    y = gamma * ((x - mu_b) / sigma_b * r + d) + beta
    return y, mean + MOMENTUM * (mu_b.detach() - mean), var + MOMENTUM * (var_b.detach() - var)


@pytest.mark.parametrize("renorm", [True, False])
def test_training_forward_and_gradients_equal_the_papers_equations(renorm):
    g = torch.Generator().manual_seed(0)
    x = (torch.randn(64, 5, generator=g) * 3 + 2).requires_grad_(True)
    layer = BatchRenorm(5, momentum=MOMENTUM, eps=EPS, warmup_steps=0 if renorm else 10)
    with torch.no_grad():  # running statistics far from the batch's, so r and d are clipped for some features
        layer.running_mean.copy_(torch.tensor([0.0, 2.0, 40.0, -3.0, 2.0]))
        layer.running_var.copy_(torch.tensor([1.0, 9.0, 1.0, 400.0, 0.01]))
        layer.weight.copy_(torch.tensor([1.0, 0.5, 2.0, -1.0, 1.5]))
        layer.bias.copy_(torch.tensor([0.0, 1.0, -1.0, 0.5, 0.0]))
    mean, var = layer.running_mean.clone(), layer.running_var.clone()
    gamma = layer.weight.detach().clone().requires_grad_(True)
    beta = layer.bias.detach().clone().requires_grad_(True)
    x_ref = x.detach().clone().requires_grad_(True)
    y = layer(x)
    y_ref, mean_ref, var_ref = reference(x_ref, mean, var, gamma, beta, renorm)
    torch.testing.assert_close(y, y_ref, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(layer.running_mean, mean_ref)
    torch.testing.assert_close(layer.running_var, var_ref)
    assert int(layer.steps) == 1
    w = torch.randn(64, 5, generator=g)
    (y * w).sum().backward()
    (y_ref * w).sum().backward()
    torch.testing.assert_close(x.grad, x_ref.grad, rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(layer.weight.grad, gamma.grad, rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(layer.bias.grad, beta.grad, rtol=1e-4, atol=1e-5)
    if renorm:  # the clipped r and d change the output: not plain batch normalisation
        plain, _, _ = reference(x_ref.detach(), mean, var, gamma.detach(), beta.detach(), renorm=False)
        assert not torch.allclose(y, plain, atol=1e-3)


def test_warm_up_is_batch_normalisation_then_renormalisation_starts():
    layer = BatchRenorm(3, warmup_steps=2)
    x = torch.randn(32, 3) * 4 + 1
    bn = nn.functional.batch_norm(x, None, None, training=True, eps=EPS)  # batch statistics, biased variance
    for _ in range(2):
        torch.testing.assert_close(layer(x), bn, rtol=1e-5, atol=1e-5)
    with torch.no_grad():  # the batch's variance (r = 1) and a mean far above it: d clips at -d_max = -5
        layer.running_var.copy_(x.var(0, correction=0))
        layer.running_mean.copy_(x.mean(0) + 100.0)
    assert torch.allclose(layer(x) - bn, torch.full_like(bn, -5.0), atol=1e-4)


def test_evaluation_uses_the_running_statistics_and_changes_nothing():
    layer = BatchRenorm(2).eval()
    with torch.no_grad():
        layer.running_mean.copy_(torch.tensor([1.0, -2.0]))
        layer.running_var.copy_(torch.tensor([4.0, 0.25]))
    x = torch.tensor([[3.0, -2.0], [1.0, 0.0]])
    want = (x - layer.running_mean) / torch.sqrt(layer.running_var + EPS)
    torch.testing.assert_close(layer(x), want)
    assert int(layer.steps) == 0 and layer.running_mean.tolist() == [1.0, -2.0]


def test_ensemble_statistics_are_per_member():
    """shape (n, F) on x [n, B, F] equals n separate layers on x[i]."""
    ens = BatchRenorm((3, 4), warmup_steps=1)
    singles = [BatchRenorm(4, warmup_steps=1) for _ in range(3)]
    x = torch.randn(3, 16, 4) * torch.tensor([1.0, 5.0, 0.1]).reshape(3, 1, 1)
    for _ in range(3):  # through the warm-up into renormalisation
        out = ens(x)
        for i, s in enumerate(singles):
            torch.testing.assert_close(out[i], s(x[i]), rtol=1e-5, atol=1e-5)
    assert ens.running_mean.shape == (3, 1, 4)


def test_interleave_and_mode_switch():
    mlp = nn.Sequential(nn.Linear(3, 8), nn.ReLU(), nn.Linear(8, 8), nn.ReLU())
    net = interleave_batch_renorm(mlp, after_last=True, warmup_steps=5)
    kinds = [type(m).__name__ for m in net]
    assert kinds == ["BatchRenorm", "Linear", "ReLU", "BatchRenorm", "Linear", "ReLU", "BatchRenorm"]
    assert net[0].warmup_steps == 5 and net[1] is mlp[0]
    net.eval()
    with batch_renorm_mode(net, True):
        assert all(m.training for m in net if isinstance(m, BatchRenorm))
        net(torch.randn(4, 3))
    assert not any(m.training for m in net) and int(net[0].steps) == 1


@pytest.mark.parametrize("shape", [(7, 3), (2, 7, 3)])
def test_batch_moments_and_their_hand_written_gradient_equal_var_mean(shape):
    from rapidrl.nn.batch_renorm import batch_moments

    x = (torch.randn(*shape, dtype=torch.float64) * 3 + 1).requires_grad_(True)
    var, mu = batch_moments(x)
    var_ref, mu_ref = torch.var_mean(x, dim=-2, keepdim=True, correction=0)
    torch.testing.assert_close(var, var_ref)
    torch.testing.assert_close(mu, mu_ref)
    assert torch.autograd.gradcheck(lambda t: batch_moments(t), (x,))


# -- the compiled ReLU + Batch Renormalization training pass (rapidrl.kernels.batch_renorm) ------------------------
def _layer_pair(shape, warmup_steps: int, seed: int = 0):
    """Two equal layers (the second compiled) with running statistics, gamma and beta away from their defaults."""
    g = torch.Generator().manual_seed(seed)
    plain = BatchRenorm(shape, warmup_steps=warmup_steps)
    with torch.no_grad():
        plain.running_mean.uniform_(-0.5, 1.5, generator=g)
        plain.running_var.uniform_(0.01, 4.0, generator=g)
        plain.weight.uniform_(-1.5, 1.5, generator=g)
        plain.bias.uniform_(-1.0, 1.0, generator=g)
    compiled = BatchRenorm(shape, warmup_steps=warmup_steps)
    compiled.load_state_dict(plain.state_dict())
    compiled.compiled = True
    return plain, compiled


@pytest.mark.parametrize("warmup_steps", [0, 5])  # renormalising (r, d clipped for some features) / the warm-up
@pytest.mark.parametrize("x_shape, stat_shape", [((3, 7, 5), (3, 5)), ((1, 1, 3), (1, 3)), ((33, 6), 6)])
def test_compiled_relu_renorm_equals_autograd_through_the_reference_in_float64(x_shape, stat_shape, warmup_steps):
    """y, the running statistics, the step count and the gradients of z, gamma and beta of the compiled float32 pass
    against the PyTorch path computed in float64 (the truth to float32 precision), odd shapes and one row included."""
    plain, compiled = _layer_pair(stat_shape, warmup_steps)
    g = torch.Generator().manual_seed(1)
    z = torch.randn(*x_shape, generator=g) * 2 + 0.5  # ReLU zeroes about 40%
    upstream = torch.randn(*x_shape, generator=g)
    z_ref = z.double().requires_grad_(True)
    gamma, beta = (p.detach().double().requires_grad_(True) for p in (plain.weight, plain.bias))
    y_ref, mean_ref, var_ref = reference(torch.relu(z_ref), plain.running_mean.double(),
                                                   plain.running_var.double(), gamma, beta, warmup_steps == 0)
    (y_ref * upstream.double()).sum().backward()
    zc = z.clone().requires_grad_(True)
    y = compiled(zc, relu=True)
    (y * upstream).sum().backward()
    assert y.dtype == torch.float32 and y.shape == z.shape
    torch.testing.assert_close(y.double(), y_ref.detach(), rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(compiled.running_mean.double(), mean_ref, rtol=1e-6, atol=1e-7)
    torch.testing.assert_close(compiled.running_var.double(), var_ref, rtol=1e-6, atol=1e-7)
    assert int(compiled.steps) == 1
    torch.testing.assert_close(zc.grad.double(), z_ref.grad, rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(compiled.weight.grad.double(), gamma.grad, rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(compiled.bias.grad.double(), beta.grad, rtol=1e-4, atol=1e-5)
    plain(z, relu=True).backward(upstream)  # the PyTorch path (float32) agrees too
    torch.testing.assert_close(compiled.weight.grad, plain.weight.grad, rtol=1e-4, atol=1e-5)
    if warmup_steps == 0 and x_shape[-2] > 1:  # renormalisation changed the output: not plain batch normalisation
        warm, _ = _layer_pair(stat_shape, warmup_steps=5)
        assert not torch.allclose(warm(z, relu=True), y.detach(), atol=1e-3)


def test_compiled_relu_renorm_in_bfloat16_is_the_float32_pass_rounded():
    """bfloat16 activations (CrossQ's under autocast): the output and the input gradient are bfloat16 and equal the
    float32 reference on the same values to bfloat16's rounding; gamma's and beta's gradients stay float32."""
    plain, compiled = _layer_pair((2, 64), warmup_steps=0)
    g = torch.Generator().manual_seed(2)
    z = (torch.randn(2, 48, 64, generator=g) * 2 + 0.5).bfloat16()
    upstream = torch.randn(2, 48, 64, generator=g).bfloat16()
    z_ref = z.float().requires_grad_(True)
    y_ref = plain(z_ref, relu=True)
    y_ref.backward(upstream.float())
    zc = z.clone().requires_grad_(True)
    y = compiled(zc, relu=True)
    y.backward(upstream)
    assert y.dtype == zc.grad.dtype == torch.bfloat16 and compiled.weight.grad.dtype == torch.float32
    torch.testing.assert_close(y.float(), y_ref.detach(), rtol=8e-3, atol=1e-2)  # bf16: 8 bits of mantissa
    torch.testing.assert_close(zc.grad.float(), z_ref.grad, rtol=8e-3, atol=2e-2)
    torch.testing.assert_close(compiled.weight.grad, plain.weight.grad, rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(compiled.bias.grad, plain.bias.grad, rtol=1e-4, atol=1e-4)
    assert (zc.grad[z <= 0] == 0).all()  # the ReLU's mask
    # most values are the float32 result rounded to nearest even: the kernel's rounding is PyTorch's
    assert (y == y_ref.detach().bfloat16()).float().mean() > 0.95


def test_compiled_flag_leaves_evaluation_and_unfusable_input_to_pytorch():
    plain, compiled = _layer_pair((2, 5), warmup_steps=0)
    z = torch.randn(2, 8, 5)
    plain.eval(), compiled.eval()
    torch.testing.assert_close(compiled(z, relu=True), plain(z, relu=True), rtol=0, atol=0)  # running statistics
    assert int(compiled.steps) == 0
    plain.train(), compiled.train()
    strided = torch.randn(2, 5, 8).transpose(1, 2)  # not contiguous: the PyTorch operators
    torch.testing.assert_close(compiled(strided, relu=True), plain(strided, relu=True), rtol=0, atol=0)


def test_compiled_relu_renorm_refuses_bad_input_with_one_line():
    from rapidrl.kernels.batch_renorm import relu_renorm_backward, relu_renorm_forward

    z = np.zeros((2, 4, 3), np.float32)
    stats = [np.zeros((2, 3), np.float32) for _ in range(8)]
    kw = dict(renorm=True, momentum=0.01, eps=1e-3, r_max=3.0, d_max=5.0)
    named = dict(zip(("mean", "inv_std", "r", "d"), stats[4:]))
    with pytest.raises(TypeError, match="y has dtype uint16 but z has float32"):
        relu_renorm_forward(z, np.zeros((2, 4, 3), np.uint16), *stats[:4], **kw, **named)
    with pytest.raises(ValueError, match="weight"):
        relu_renorm_forward(z, np.zeros_like(z), np.zeros((2, 4), np.float32), *stats[1:4], **kw, **named)
    with pytest.raises(TypeError, match="z"):
        relu_renorm_forward(z.astype(np.float64), np.zeros_like(z), *stats[:4], **kw, **named)
    with pytest.raises(ValueError, match="momentum"):
        relu_renorm_forward(z, np.zeros_like(z), *stats[:4], **{**kw, "momentum": 2.0}, **named)
    with pytest.raises(ValueError, match="grad_y"):
        relu_renorm_backward(z, np.zeros((2, 5, 3), np.float32), np.zeros_like(z), *stats[:6])
