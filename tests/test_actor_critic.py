"""What A2C and IMPALA share (``rapidrl.algos.actor_critic``): the loss on a hand-computed case, the optimizer both
build from the same fields, explained variance."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import rapidrl as rr
from rapidrl.algos.actor_critic import actor_critic_loss, explained_variance


def test_actor_critic_loss_hand_computed():
    log_probs = torch.tensor([-1.0, -2.0], requires_grad=True)
    values = torch.tensor([0.5, 1.0], requires_grad=True)
    entropy = torch.tensor([0.7, 0.3])
    advantages, targets = torch.tensor([2.0, -1.0]), torch.tensor([1.5, 0.0])
    loss, stats = actor_critic_loss(log_probs, entropy, values, advantages, targets, ent_coef=0.1, vf_coef=0.5)
    # policy: -(2 * -1 + -1 * -2) / 2 = 0; value: ((1.5 - 0.5)^2 + (0 - 1)^2) / 2 = 1; entropy 0.5
    assert stats["policy_loss"].item() == pytest.approx(0.0)
    assert stats["value_loss"].item() == pytest.approx(1.0)
    assert stats["entropy"].item() == pytest.approx(0.5)
    assert loss.item() == pytest.approx(0.0 + 0.5 * 1.0 - 0.1 * 0.5)
    loss.backward()
    torch.testing.assert_close(log_probs.grad, torch.tensor([-1.0, 0.5]))  # -A / B
    torch.testing.assert_close(values.grad, torch.tensor([-0.5, 0.5]))  # vf_coef * 2 (V - R) / B
    half, half_stats = actor_critic_loss(log_probs, entropy, values, advantages, targets, ent_coef=0.1, vf_coef=0.5,
                                         value_scale=0.5)  # IMPALA's 0.5 (vs - V)^2
    assert half_stats["value_loss"].item() == pytest.approx(0.5)
    assert half.item() == pytest.approx(0.25 - 0.05)


@pytest.mark.parametrize("algo", ["A2C", "IMPALA"])
def test_optimizer_fields_apply_to_both_optimizers(algo):
    extra = {"async_collect": False} if algo == "IMPALA" else {}
    adam = getattr(rr, algo)("CartPole-v1", num_envs=2, optimizer="adam", rms_eps=3e-4, learning_rate=1e-3,
                             seed=0, **extra).optimizer
    assert isinstance(adam, torch.optim.Adam) and adam.param_groups[0]["eps"] == 3e-4
    rms = getattr(rr, algo)("CartPole-v1", num_envs=2, optimizer="rmsprop", rms_alpha=0.9, rms_eps=2e-5, seed=0,
                            **extra).optimizer
    assert isinstance(rms, torch.optim.RMSprop)
    assert (rms.param_groups[0]["alpha"], rms.param_groups[0]["eps"]) == (0.9, 2e-5)
    with pytest.raises(ValueError, match="optimizer must be"):
        getattr(rr, algo)("CartPole-v1", num_envs=2, optimizer="sgd", **extra)


def test_explained_variance():
    t = np.array([1.0, 2.0, 3.0, 4.0])
    assert explained_variance(t, t) == 1.0
    assert explained_variance(t, np.zeros(4)) == pytest.approx(0.0)  # Var[t - 0] = Var[t]
    assert explained_variance(t, t + 1.0) == pytest.approx(1.0)  # a constant offset leaves no variance
    assert explained_variance(np.ones((2, 2)), np.zeros((2, 2))) == 0.0  # constant targets: 0, not NaN
    assert explained_variance(torch.from_numpy(t), torch.from_numpy(t[::-1].copy())) == pytest.approx(1 - 4.0)
