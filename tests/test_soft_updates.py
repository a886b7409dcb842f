"""The plain functions SAC's and TQC's updates share (``rapidrl.algos.soft_actor_critic``), on hand-computed cases."""

from __future__ import annotations

import copy
from types import SimpleNamespace

import pytest
import torch

from rapidrl.algos.soft_actor_critic import joint_step, soft_passes, soft_stats
from rapidrl.nn.qnets import CriticEnsemble, SquashedGaussianActor


def test_joint_step_sums_the_losses_steps_once_and_moves_the_target_by_tau():
    w = torch.nn.Parameter(torch.tensor([1.0]))
    v = torch.nn.Parameter(torch.tensor([2.0]))
    target = [torch.tensor([0.0])]
    optimizer = torch.optim.SGD([w, v], lr=0.1)
    w.grad = torch.tensor([100.0])  # a stale gradient: zeroed, not accumulated into
    joint_step(optimizer, [w.square().sum(), 3 * v.sum(), None], target, [w], 0.5)
    assert w.item() == pytest.approx(1.0 - 0.1 * 2.0)  # d(w^2)/dw = 2
    assert v.item() == pytest.approx(2.0 - 0.1 * 3.0)
    assert target[0].item() == pytest.approx(0.5 * 0.8)  # 0 + 0.5 (0.8 - 0)


def test_soft_stats_in_stat_names_order_with_zero_for_a_fixed_temperature():
    q = torch.tensor([[1.0, 2.0], [3.0, 6.0]])
    log_prob = torch.tensor([-1.0, -2.0])
    out = soft_stats(torch.tensor(0.5), torch.tensor(-1.5), None, torch.tensor([0.2]), q, log_prob)
    torch.testing.assert_close(out, torch.tensor([0.5, -1.5, 0.0, 0.2, 3.0, 1.5]))
    out = soft_stats(torch.tensor(0.5), torch.tensor(-1.5), torch.tensor(0.7), torch.tensor([0.2]), q[..., None],
                     log_prob)
    assert out[2].item() == pytest.approx(0.7)


@pytest.mark.parametrize("out_dim", [1, 3])
def test_soft_passes_samples_once_on_s_and_next_s_and_detaches_what_it_should(out_dim):
    torch.manual_seed(0)
    b, obs_dim, act_dim = 4, 3, 2
    actor = SquashedGaussianActor(obs_dim, -torch.ones(act_dim), torch.ones(act_dim), (8,))
    critic = CriticEnsemble(2, obs_dim, act_dim, (8,), out_dim=out_dim)
    critic_target = copy.deepcopy(critic).requires_grad_(False)
    batch = SimpleNamespace(obs=torch.randn(b, obs_dim), next_obs=torch.randn(b, obs_dim),
                            actions=torch.rand(b, act_dim) * 2 - 1)
    q, q_pi, next_q, log_prob, next_log_prob = soft_passes(actor, critic, critic_target, batch,
                                                           torch.Generator().manual_seed(1))
    both = torch.cat([batch.obs, batch.next_obs])
    actions, expected_log_prob = actor(both, generator=torch.Generator().manual_seed(1))
    torch.testing.assert_close(log_prob, expected_log_prob[:b], rtol=0, atol=0)
    torch.testing.assert_close(next_log_prob, expected_log_prob[b:], rtol=0, atol=0)
    torch.testing.assert_close(q, critic(batch.obs, batch.actions), rtol=0, atol=0)
    torch.testing.assert_close(q_pi, critic(batch.obs, actions[:b]), rtol=0, atol=0)
    torch.testing.assert_close(next_q, critic_target(batch.next_obs, actions[b:]), rtol=0, atol=0)
    assert q.shape == next_q.shape == ((2, b) if out_dim == 1 else (2, b, out_dim))
    assert not next_q.requires_grad and q.requires_grad
    q_pi.sum().backward()  # through critics with their weights held constant: the actor's gradients only
    assert all(p.grad is None for p in critic.parameters())
    assert all(p.grad is not None for p in actor.parameters())
