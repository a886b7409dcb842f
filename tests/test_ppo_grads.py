"""The closed-form PPO gradients (ppo_output_grads + mlp_grad) equal autograd's through ppo_loss."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
import torch

from rapidrl.algos.ppo import ppo_loss, ppo_output_grads
from rapidrl.nn import ActorCritic
from rapidrl.nn.mlp_grad import linear_layers, mlp_backward, mlp_forward


def make_batch(policy, discrete, n=96, seed=0):
    g = torch.Generator().manual_seed(seed)
    obs = torch.randn(n, 5, generator=g)
    with torch.no_grad():
        actions, logp, values = policy.act(obs)
    # perturb the old quantities so ratios fall inside and outside the clip range on both sides
    old_logp = logp + 0.3 * torch.randn(n, generator=g)
    old_values = values + 0.5 * torch.randn(n, generator=g)
    adv = torch.randn(n, generator=g)
    ret = values + torch.randn(n, generator=g)
    return obs, actions, old_logp, old_values, adv, ret


@pytest.mark.parametrize("discrete", [True, False])
@pytest.mark.parametrize("activation", ["tanh", "relu"])
@pytest.mark.parametrize("clip_vloss", [True, False])
@pytest.mark.parametrize("ent_coef", [0.0, 0.01])
def test_closed_form_gradients_equal_autograd(discrete, activation, clip_vloss, ent_coef):
    torch.manual_seed(0)
    obs_space = gym.spaces.Box(-1, 1, (5,), np.float32)
    act_space = gym.spaces.Discrete(3) if discrete else gym.spaces.Box(-1, 1, (2,), np.float32)
    policy = ActorCritic(obs_space, act_space, (16, 8), activation=activation, log_std_init=-0.3)
    obs, actions, old_logp, old_values, adv, ret = make_batch(policy, discrete)
    kw = dict(clip_coef=0.2, clip_vloss=clip_vloss, ent_coef=ent_coef, vf_coef=0.5)

    new_logp, entropy, values = policy.evaluate(obs, actions)
    loss, ref_stats = ppo_loss(new_logp, entropy, values, old_logp, old_values, adv, ret, **kw)
    loss.backward()
    ref = {name: p.grad.clone() for name, p in policy.named_parameters()}
    clipfrac = float(ref_stats["clipfrac"])
    assert 0.05 < clipfrac < 0.95, "the batch must exercise both clipped and unclipped ratios"

    for p in policy.parameters():
        p.grad = None
    actor, critic = linear_layers(policy.actor), linear_layers(policy.critic)
    head, a_in = mlp_forward(obs, actor, activation)
    v, c_in = mlp_forward(obs, critic, activation)
    log_std = None if discrete else policy.log_std.detach()
    d_head, d_v, d_log_std, stats = ppo_output_grads(head, v.squeeze(-1), actions, log_std, old_logp, old_values,
                                                     adv, ret, **kw)
    mlp_backward(d_head, a_in, actor, activation)
    mlp_backward(d_v.unsqueeze(-1), c_in, critic, activation)
    if not discrete:
        policy.log_std.grad = d_log_std
    for name, p in policy.named_parameters():
        torch.testing.assert_close(p.grad, ref[name], rtol=1e-4, atol=1e-6, msg=name)
    for k, v_ref in ref_stats.items():
        torch.testing.assert_close(stats[k], v_ref, rtol=1e-5, atol=1e-6, msg=k)


@pytest.mark.parametrize("squash", ["clip", "tanh"])
def test_closed_form_update_equals_autograd_update_in_ppo(squash):
    """Through PPO itself: with the tanh squash the stored log-probs carry the Jacobian term of the squash, and
    the closed-form path must account for it exactly as ``ActorCritic.evaluate`` does."""
    import rapidrl as rr

    def one_update(closed_form):
        model = rr.PPO("Pendulum-v1", num_envs=4, num_steps=32, minibatch_size=64, update_epochs=2, seed=5,
                       squash=squash, closed_form_grads=closed_form, fused_update=False, learning_rate=1e-3)
        model.learn(128, progress_bar=False)
        return model

    a, b = one_update(True), one_update(False)
    for (name, p), (_, q) in zip(a.policy.named_parameters(), b.policy.named_parameters()):
        torch.testing.assert_close(p, q, rtol=1e-4, atol=1e-5, msg=name)
    assert a.metrics["losses/approx_kl"] == pytest.approx(b.metrics["losses/approx_kl"], rel=1e-3, abs=1e-7)
