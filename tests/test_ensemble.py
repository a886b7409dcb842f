"""Off-policy networks: the batched critic ensemble equals separate critics; dueling and actor identities."""

import math

import pytest
import torch
from torch import nn

from rapidrl.nn.qnets import CriticEnsemble, DeterministicActor, QNetwork, SquashedGaussianActor

HIDDEN = (32, 16)


def separate_critics(ens: CriticEnsemble) -> list[nn.Sequential]:
    """Plain nn.Linear critics holding member i's weights (weights[l][i].T, biases[l][i, 0])."""
    critics = []
    for i in range(ens.n):
        layers: list[nn.Module] = []
        for w, b in zip(ens.weights, ens.biases):
            lin = nn.Linear(w.shape[1], w.shape[2])
            with torch.no_grad():
                lin.weight.copy_(w[i].T)
                lin.bias.copy_(b[i, 0])
            layers += [lin, nn.ReLU()]
        critics.append(nn.Sequential(*layers[:-1]))
    return critics


@pytest.mark.parametrize("n", [1, 2, 5])
def test_ensemble_equals_separate_critics_outputs_and_gradients(n):
    torch.manual_seed(0)
    obs_dim, act_dim, batch = 5, 3, 17
    ens = CriticEnsemble(n, obs_dim, act_dim, HIDDEN).double()
    critics = [c.double() for c in separate_critics(ens)]
    obs = torch.randn(batch, obs_dim, dtype=torch.float64)
    act = torch.randn(batch, act_dim, dtype=torch.float64, requires_grad=True)
    act_sep = act.detach().clone().requires_grad_(True)
    weights = torch.randn(n, batch, dtype=torch.float64)  # a different loss weight per critic and sample

    q = ens(obs, act)  # [n, B]
    q_sep = torch.stack([c(torch.cat([obs, act_sep], -1)).squeeze(-1) for c in critics])
    assert q.shape == (n, batch)
    torch.testing.assert_close(q, q_sep, rtol=1e-12, atol=1e-12)

    (weights * q).sum().backward()
    (weights * q_sep).sum().backward()
    torch.testing.assert_close(act.grad, act_sep.grad, rtol=1e-12, atol=1e-12)
    for layer, (w, b) in enumerate(zip(ens.weights, ens.biases)):
        for i, c in enumerate(critics):
            lin = c[2 * layer]
            torch.testing.assert_close(w.grad[i], lin.weight.grad.T, rtol=1e-12, atol=1e-12)
            torch.testing.assert_close(b.grad[i, 0], lin.bias.grad, rtol=1e-12, atol=1e-12)


def test_ensemble_members_and_detached_params():
    torch.manual_seed(1)
    ens = CriticEnsemble(3, 4, 2, HIDDEN)
    obs, act = torch.randn(8, 4), torch.randn(8, 2, requires_grad=True)
    full = ens(obs, act)
    first = ens(obs, act, members=1)
    torch.testing.assert_close(first, full[:1])
    # detach_params: same values and input gradients, no weight gradients
    ens(obs, act, members=1, detach_params=True).sum().backward()
    grad_detached = act.grad.clone()
    assert all(p.grad is None for p in ens.parameters())
    act.grad = None
    first.sum().backward()
    torch.testing.assert_close(act.grad, grad_detached)
    assert all(p.grad is not None for p in ens.parameters())


def test_ensemble_members_start_different():
    ens = CriticEnsemble(2, 3, 1, HIDDEN)
    assert not torch.equal(ens.weights[0][0], ens.weights[0][1])
    with pytest.raises(ValueError, match="n must be"):
        CriticEnsemble(0, 3, 1, HIDDEN)


@pytest.mark.parametrize("hidden", [(32,), (32, 16)])
def test_dueling_q_mean_over_actions_is_the_value(hidden):
    torch.manual_seed(2)
    net = QNetwork(6, 4, hidden, dueling=True)
    obs = torch.randn(9, 6)
    q = net(obs)
    value = net.value(net.trunk(obs)).squeeze(-1)
    assert q.shape == (9, 4)
    torch.testing.assert_close(q.mean(-1), value)  # Q = V + A - mean A  =>  mean_a Q = V


def test_squashed_gaussian_log_prob_matches_torch_distributions():
    torch.manual_seed(3)
    low, high = torch.tensor([-2.0, 0.0]), torch.tensor([2.0, 1.0])
    actor = SquashedGaussianActor(5, low, high, HIDDEN)
    nn.init.normal_(actor.head.weight, std=0.5)  # non-trivial means and stds
    obs = torch.randn(64, 5)
    torch.manual_seed(4)
    actions, log_prob = actor(obs)
    assert ((actions > low) & (actions < high)).all()
    mean, raw_log_std = actor.head(actor.trunk(obs)).chunk(2, -1)
    log_std = actor.log_std_min + 0.5 * (actor.log_std_max - actor.log_std_min) * (torch.tanh(raw_log_std) + 1)
    dist = torch.distributions.TransformedDistribution(
        torch.distributions.Normal(mean, log_std.exp()),
        [torch.distributions.TanhTransform(), torch.distributions.AffineTransform((high + low) / 2, (high - low) / 2)])
    torch.testing.assert_close(log_prob, dist.log_prob(actions).sum(-1), rtol=1e-4, atol=1e-4)
    det, _ = actor(obs, deterministic=True)
    torch.testing.assert_close(det, (high + low) / 2 + (high - low) / 2 * torch.tanh(mean))


def test_squashed_gaussian_reparameterised_gradient_reaches_the_actor():
    torch.manual_seed(5)
    actor = SquashedGaussianActor(3, -torch.ones(1), torch.ones(1), HIDDEN)
    actions, log_prob = actor(torch.randn(16, 3))
    (actions.sum() + log_prob.sum()).backward()
    assert all(p.grad is not None and p.grad.abs().sum() > 0 for p in actor.parameters())


def test_deterministic_actor_respects_bounds():
    torch.manual_seed(6)
    low, high = torch.tensor([-3.0]), torch.tensor([1.0])
    actor = DeterministicActor(4, low, high, HIDDEN)
    nn.init.normal_(actor.net[-1].weight, std=100.0)  # saturate tanh
    a = actor(torch.randn(200, 4))
    assert ((a >= low) & (a <= high)).all()
    assert math.isclose(a.max().item(), 1.0, abs_tol=1e-3) and math.isclose(a.min().item(), -3.0, abs_tol=1e-3)
