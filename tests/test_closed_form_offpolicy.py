"""Closed-form off-policy updates equal their autograd references: DQN and SAC take the same optimizer steps
(parameters, optimizer moments, statistics) through ``_closed_form_step`` as through ``_autograd_step``;
the batched ensemble backward equals autograd through ``CriticEnsemble``; the squashed-Gaussian backward
equals autograd through ``squashed_gaussian``."""

from __future__ import annotations

import pytest
import torch

from rapidrl.algos.dqn import DQN
from rapidrl.algos.sac import SAC
from rapidrl.nn.mlp_grad import ensemble_backward, ensemble_forward
from rapidrl.nn.qnets import CriticEnsemble, squashed_gaussian, squashed_gaussian_backward

SMALL = dict(hidden=(16, 16), batch_size=32, learning_starts=10_000, buffer_size=1_000, seed=3)


def _filled(cls, env_id, **kw):
    model = cls(env_id, **{**SMALL, **kw})
    model.learn(200, progress_bar=False)  # random actions only: fills the buffer, no update
    return model


def _params_and_moments(model):
    out = [p.detach().clone() for g in model.optimizer.param_groups for p in g["params"]]
    for s in model.optimizer.state.values():
        out += [s["exp_avg"].clone(), s["exp_avg_sq"].clone()]
    return out


@pytest.mark.parametrize("cls, env_id, kw", [
    (DQN, "CartPole-v1", dict()),
    (DQN, "CartPole-v1", dict(double_q=False, max_grad_norm=0.0)),
    (DQN, "CartPole-v1", dict(prioritized=True, max_grad_norm=0.05)),  # the clip binds at 0.05
    (SAC, "Pendulum-v1", dict()),
    (SAC, "Pendulum-v1", dict(ent_coef=0.2, n_critics=3)),
    (SAC, "MountainCarContinuous-v0", dict(hidden=(8, 8, 8))),
])
def test_closed_form_update_equals_autograd(cls, env_id, kw):
    closed, ref = _filled(cls, env_id, **kw), _filled(cls, env_id, **kw)
    assert closed._update_fn == closed._update_step  # eager: the closed form is what training runs
    stats = []
    for step in range(4):
        batch = ref.buffer.sample(32, as_torch=True)
        for fn in (closed._closed_form_step, ref._autograd_step):
            torch.manual_seed(step)  # SAC: the same action noise
            stats.append(fn(batch).clone())
        torch.testing.assert_close(stats[-2], stats[-1], rtol=1e-5, atol=1e-6)
        for a, b in zip(_params_and_moments(closed), _params_and_moments(ref)):
            torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-7)
    moved = [not torch.equal(a, b) for a, b in zip(_params_and_moments(closed), _params_and_moments(_filled(
        cls, env_id, **kw)))]
    assert all(moved[: len(list(closed.optimizer.param_groups[0]["params"]))])  # every parameter was trained


def test_ensemble_backward_equals_autograd_with_param_rows():
    torch.manual_seed(0)
    critic = CriticEnsemble(3, 5, 2, (7, 6))
    x = torch.randn(10, 7, requires_grad=True)  # rows 0-3 train the weights, 4-9 only want input gradients
    out = critic(x[:, :5], x[:, 5:])  # [3, 10]
    w = torch.randn(3, 10)
    loss_params = (out[:, :4] * w[:, :4]).sum()
    params = list(critic.parameters())
    ref_param_grads = torch.autograd.grad(loss_params, params, retain_graph=True)
    ref_x_grad = torch.autograd.grad((out * w).sum(), x)[0]
    weights, biases = list(critic.weights), list(critic.biases)
    y, inputs = ensemble_forward(x.detach(), weights, biases)
    torch.testing.assert_close(y.squeeze(-1), out.detach())
    d_x = ensemble_backward(w.unsqueeze(-1), inputs, weights, biases, param_rows=4)
    for p, g in zip(params, ref_param_grads):
        torch.testing.assert_close(p.grad, g)
    torch.testing.assert_close(d_x.sum(0), ref_x_grad)


def test_squashed_gaussian_backward_equals_autograd():
    torch.manual_seed(1)
    head = torch.randn(6, 4, requires_grad=True)  # A = 2
    noise = torch.randn(6, 2)
    scale, center = torch.tensor([2.0, 0.5]), torch.tensor([0.0, 1.0])
    actions, log_prob, saved = squashed_gaussian(head, noise, scale, center, -5.0, 2.0)
    d_a, d_lp = torch.randn(6, 2), torch.randn(6)
    ref = torch.autograd.grad((actions * d_a).sum() + (log_prob * d_lp).sum(), head)[0]
    ours = squashed_gaussian_backward(d_a, d_lp, noise, scale, tuple(t.detach() for t in saved), -5.0, 2.0)
    torch.testing.assert_close(ours, ref)
