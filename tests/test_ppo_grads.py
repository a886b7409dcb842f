"""The compiled PPO backend's gradients equal autograd's through ``ppo_loss`` (the one definition of the loss), for
one minibatch: categorical and Gaussian heads, both activations, value clipping on and off, the entropy bonus,
and advantage normalisation in the kernel against ``normalize_advantages``."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
import torch

from rapidrl.algos.ppo import ppo_loss
from rapidrl.algos.ppo_compiled import CompiledPPOUpdate
from rapidrl.buffers import normalize_advantages
from rapidrl.kernels.ppo_update import NORM_MINIBATCH, NORM_NONE, STAT_NAMES
from rapidrl.nn import ActorCritic
from rapidrl.nn.optim import adam


def make_batch(policy, n=96, seed=0):
    g = torch.Generator().manual_seed(seed)
    obs = torch.randn(n, 5, generator=g)
    with torch.no_grad():
        actions, logp, values = policy.act(obs)
    # perturb the old quantities so ratios fall inside and outside the clip range on both sides
    old_logp = logp + 0.3 * torch.randn(n, generator=g)
    old_values = values + 0.5 * torch.randn(n, generator=g)
    adv = 2.0 + 3.0 * torch.randn(n, generator=g)  # not normalized: the normalisation matters
    ret = values + torch.randn(n, generator=g)
    return obs, actions, old_logp, old_values, adv, ret


@pytest.mark.parametrize("discrete", [True, False])
@pytest.mark.parametrize("activation", ["tanh", "relu"])
@pytest.mark.parametrize("clip_vloss", [True, False])
@pytest.mark.parametrize("ent_coef", [0.0, 0.01])
@pytest.mark.parametrize("norm", ["none", "minibatch"])
def test_compiled_gradients_equal_autograd(discrete, activation, clip_vloss, ent_coef, norm):
    torch.manual_seed(0)
    obs_space = gym.spaces.Box(-1, 1, (5,), np.float32)
    act_space = gym.spaces.Discrete(3) if discrete else gym.spaces.Box(-1, 1, (2,), np.float32)
    policy = ActorCritic(obs_space, act_space, (16, 8), activation=activation, log_std_init=-0.3)
    obs, actions, old_logp, old_values, adv, ret = make_batch(policy)
    kw = dict(clip_coef=0.2, clip_vloss=clip_vloss, ent_coef=ent_coef, vf_coef=0.5)

    new_logp, entropy, values = policy.evaluate(obs, actions)
    adv_ref = adv if norm == "none" else normalize_advantages(adv)
    loss, ref_stats = ppo_loss(new_logp, entropy, values, old_logp, old_values, adv_ref, ret, **kw)
    ref = dict(zip([n for n, _ in policy.named_parameters()], torch.autograd.grad(loss, list(policy.parameters()))))
    assert 0.05 < float(ref_stats["clipfrac"]) < 0.95, "the batch must exercise both clipped and unclipped ratios"

    # one minibatch of all rows, no clipping, learning rate 0: the kernel leaves in .grad the loss gradient
    before = [p.detach().clone() for p in policy.parameters()]
    kernel = CompiledPPOUpdate(policy, adam(policy.parameters(), 0.0)).kernel()
    n = obs.shape[0]
    stats = kernel(obs.numpy(), actions.numpy() if discrete else actions.numpy().reshape(n, -1), old_logp.numpy(),
                   old_values.numpy(), adv.numpy(), ret.numpy(), np.arange(n), batch_size=n,
                   norm_mode=NORM_NONE if norm == "none" else NORM_MINIBATCH, batch_mean=0.0, batch_std=1.0,
                   max_grad_norm=0.0, lr=0.0, beta1=0.9, beta2=0.999, eps=1e-5, **kw)
    for name, p in policy.named_parameters():
        torch.testing.assert_close(p.grad, ref[name], rtol=1e-4, atol=1e-6, msg=name)
    for a, b in zip(policy.parameters(), before):
        torch.testing.assert_close(a, b, rtol=0, atol=0)
    for k, v_ref in ref_stats.items():
        assert stats[0, STAT_NAMES.index(k)] == pytest.approx(float(v_ref), rel=1e-5, abs=1e-6), k


@pytest.mark.parametrize("squash", ["clip", "tanh"])
def test_compiled_update_equals_autograd_update_in_ppo(squash):
    """Through PPO itself: with the tanh squash the stored log-probs carry the Jacobian term of the squash, and
    the handwritten backend must account for it exactly as ``ActorCritic.evaluate`` does."""
    import rapidrl as rr

    def one_update(backend):
        model = rr.PPO("Pendulum-v1", num_envs=4, num_steps=32, minibatch_size=64, update_epochs=2, seed=5,
                       squash=squash, gradient_backend=backend, learning_rate=1e-3)
        model.learn(128, progress_bar=False)
        assert model.gradient_backend == backend
        return model

    a, b = one_update("handwritten"), one_update("torch")
    for (name, p), (_, q) in zip(a.policy.named_parameters(), b.policy.named_parameters()):
        torch.testing.assert_close(p, q, rtol=1e-4, atol=1e-5, msg=name)
    assert a.metrics["losses/approx_kl"] == pytest.approx(b.metrics["losses/approx_kl"], rel=1e-3, abs=1e-7)
