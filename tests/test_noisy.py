"""Noisy linear layers (factorised Gaussian, Fortunato et al. 2018) and the distributional / noisy ``QNetwork``."""

from __future__ import annotations

import math

import pytest
import torch

from rapidrl.nn.noisy import NoisyLinear, scaled_noise
from rapidrl.nn.policies import mlp
from rapidrl.nn.qnets import QNetwork


def test_scaled_noise_is_the_signed_square_root():
    x = torch.tensor([-4.0, -0.25, 0.0, 0.25, 9.0])
    assert torch.equal(scaled_noise(x), torch.tensor([-2.0, -0.5, 0.0, 0.5, 3.0]))


def test_noisy_linear_initialisation_and_mean_network():
    torch.manual_seed(0)
    layer = NoisyLinear(16, 3)
    bound = 1 / math.sqrt(16)
    assert layer.weight_mu.abs().max() <= bound and layer.bias_mu.abs().max() <= bound
    assert torch.all(layer.weight_sigma == 0.5 * bound) and torch.all(layer.bias_sigma == 0.5 * bound)
    x = torch.randn(5, 16)
    mean = x @ layer.weight_mu.T + layer.bias_mu
    torch.testing.assert_close(layer(x), mean)  # no noise drawn yet: the mean network
    layer.sample_noise(torch.Generator().manual_seed(1))
    assert not torch.allclose(layer(x), mean)
    layer.remove_noise()
    torch.testing.assert_close(layer(x), mean)


def test_noise_is_factorised_from_p_plus_q_draws():
    """eps_W = f(eps_out) f(eps_in)^T and eps_b = f(eps_out), with eps_in drawn first (p values), then eps_out (q)."""
    layer = NoisyLinear(4, 3)
    layer.sample_noise(torch.Generator().manual_seed(7))
    draws = torch.randn(7, generator=torch.Generator().manual_seed(7))
    f_in, f_out = scaled_noise(draws[:4]), scaled_noise(draws[4:])
    torch.testing.assert_close(layer.weight_epsilon, torch.outer(f_out, f_in))
    torch.testing.assert_close(layer.bias_epsilon, f_out)
    assert torch.linalg.matrix_rank(layer.weight_epsilon) == 1
    x = torch.randn(2, 4)
    w = layer.weight_mu + layer.weight_sigma * layer.weight_epsilon
    torch.testing.assert_close(layer(x), x @ w.T + layer.bias_mu + layer.bias_sigma * f_out)


def test_the_noise_scale_is_learned():
    layer = NoisyLinear(3, 2)
    layer.sample_noise(torch.Generator().manual_seed(0))
    layer(torch.ones(1, 3)).sum().backward()
    # d/d sigma_W[i, j] of sum_i y_i = eps_W[i, j] x_j (x = 1), d/d sigma_b = eps_b
    torch.testing.assert_close(layer.weight_sigma.grad, layer.weight_epsilon)
    torch.testing.assert_close(layer.bias_sigma.grad, layer.bias_epsilon)


def test_qnetwork_with_one_output_per_action_is_unchanged():
    """outputs_per_action=1, noisy=False builds the same parameters from the same seed as before the options
    existed (DQN's and PQN's golden runs depend on it): ``rapidrl.nn.policies.mlp``."""
    torch.manual_seed(3)
    net = QNetwork(4, 2, (8, 8))
    torch.manual_seed(3)
    ref = mlp(4, (8, 8), 2, "relu")
    for a, b in zip(net.net.parameters(), ref.parameters(), strict=True):
        assert torch.equal(a, b)


@pytest.mark.parametrize("noisy", [False, True])
def test_distributional_dueling_combines_per_output(noisy):
    """[B, A, N] outputs; dueling: the mean over actions of Q(s, ., j) is the value stream's output j."""
    torch.manual_seed(0)
    net = QNetwork(5, 3, (16, 16), dueling=True, outputs_per_action=7, noisy=noisy)
    if noisy:
        net.sample_noise(torch.Generator().manual_seed(0))
    x = torch.randn(4, 5)
    out = net(x)
    assert out.shape == (4, 3, 7)
    torch.testing.assert_close(out.mean(1), net.value(net.trunk(x)))
    plain = QNetwork(5, 3, (16,), outputs_per_action=7, noisy=noisy)
    assert plain(x).shape == (4, 3, 7)
    assert any(isinstance(m, NoisyLinear) for m in plain.modules()) is noisy


def test_noisy_qnetwork_samples_and_removes_noise():
    torch.manual_seed(0)
    net = QNetwork(5, 3, (16,), noisy=True)
    x = torch.randn(4, 5)
    mean = net(x)
    net.sample_noise(torch.Generator().manual_seed(1))
    noisy = net(x)
    assert not torch.allclose(noisy, mean)
    net.sample_noise(torch.Generator().manual_seed(1))
    torch.testing.assert_close(net(x), noisy)  # the same generator state draws the same noise
    net.remove_noise()
    torch.testing.assert_close(net(x), mean)


def test_invalid_outputs_per_action():
    with pytest.raises(ValueError, match="outputs_per_action"):
        QNetwork(4, 2, (8,), outputs_per_action=0)
