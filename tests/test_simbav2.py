"""SimbaV2 (``rapidrl.nn.simbav2``, SAC's ``network="simbav2"``): the batched networks against the paper's equations
written out member by member in NumPy, the weights on the sphere after every update, the categorical soft target and
loss on hand-computed cases, the reward scale's closed form, save/resume/export, the refusals, and learning."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from checkpoint_checks import resumed_and_uninterrupted

from rapidrl.algos.crossq import CrossQ
from rapidrl.algos.ddpg import DDPG
from rapidrl.algos.offpolicy_losses import categorical_critic_loss, categorical_soft_target, categorical_values
from rapidrl.algos.sac import SAC
from rapidrl.algos.td3 import TD3
from rapidrl.algos.tqc import TQC
from rapidrl.nn.normalize import RewardScaler
from rapidrl.nn.simbav2 import C_SHIFT, NORM_EPS, SimbaV2Actor, SimbaV2CriticEnsemble, SimbaV2Network
from rapidrl.train.callbacks import EvalCallback
from rapidrl.train.config import ConfigError

SMALL = dict(network="simbav2", actor_width=16, actor_blocks=1, critic_width=16, critic_blocks=2, critic_bins=21,
             learning_starts=64, batch_size=32, buffer_size=2_000, log_every_steps=50)


def l2n(x: np.ndarray) -> np.ndarray:
    return x / np.maximum(np.linalg.norm(x, axis=-1, keepdims=True), NORM_EPS)


def numpy_member(net: SimbaV2Network, i: int, x: np.ndarray) -> np.ndarray:
    """Member i of ``net`` on x [B, D] in float64 NumPy, the paper's equations one layer at a time."""
    g = lambda t: t[i].detach().double().numpy()  # noqa: E731
    h = l2n(np.concatenate([x, np.full((x.shape[0], 1), C_SHIFT)], 1))
    h = l2n((h @ g(net.w_in)) * g(net.s_in))
    for j in range(net.blocks):
        u = np.maximum((h @ g(net.w_up[j])) * g(net.s_up[j]), 0.0) + NORM_EPS
        u = l2n(u @ g(net.w_down[j]))
        a = g(net.alpha[j]) * (1.0 / (net.blocks + 1)) * math.sqrt(net.width)  # the parameter times init / scale
        h = l2n(h + a * (u - h))
    return np.concatenate([((h @ g(net.w_h1[t])) * g(net.s_h[t])) @ g(net.w_h2[t]) + g(net.b_h[t])
                           for t in range(net.heads)], -1)


def perturbed(module: torch.nn.Module, seed: int = 0) -> torch.nn.Module:
    """Every parameter moved off its initial value (constant scalers and zero biases would hide mistakes)."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in module.parameters():
            p.mul_(1 + 0.3 * torch.randn(p.shape, generator=g)).add_(0.05 * torch.randn(p.shape, generator=g))
    return module


# -- the networks ------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("heads, out_dim", [(1, 1), (1, 7), (2, 3)])
def test_every_member_equals_the_papers_equations(heads, out_dim):
    torch.manual_seed(0)
    net = perturbed(SimbaV2Network(3, 5, 8, 2, out_dim, heads=heads))
    x = np.random.default_rng(0).normal(size=(6, 5)).astype(np.float32)
    out = net(torch.from_numpy(x)).detach().numpy()
    assert out.shape == (3, 6, heads * out_dim)
    for i in range(3):
        np.testing.assert_allclose(out[i], numpy_member(net, i, x.astype(np.float64)), rtol=2e-5, atol=2e-6)
    np.testing.assert_array_equal(net(torch.from_numpy(x), members=2).detach().numpy(), out[:2])


def test_initial_weights_are_unit_vectors_per_output_unit_and_scalers_start_at_the_authors_values():
    torch.manual_seed(0)
    net = SimbaV2Network(2, 9, 32, 2, 11)
    for w in net.spherical_weights():
        np.testing.assert_allclose(torch.linalg.vector_norm(w, dim=1).detach().numpy(), 1.0, rtol=1e-6)
    assert not torch.equal(net.w_in[0], net.w_in[1])  # members start different
    np.testing.assert_allclose(net.s_in.detach().numpy(), math.sqrt(2 / 32), rtol=1e-6)
    np.testing.assert_allclose(net.s_up[0].detach().numpy(), math.sqrt(2 / 32) / 2, rtol=1e-6)
    # the interpolation's value is 1 / (blocks + 1) at the start: its parameter 1 / sqrt(w) times init / scale
    assert float(net.alpha[0][0, 0, 0].detach()) * net.alpha_factor == pytest.approx(1 / 3)
    with torch.no_grad():
        net.w_up[1].mul_(3.0).add_(0.1)
    net.project_weights()
    np.testing.assert_allclose(torch.linalg.vector_norm(net.w_up[1], dim=1).detach().numpy(), 1.0, rtol=1e-6)


def test_hidden_states_stay_on_the_sphere_for_inputs_of_any_scale():
    """The shifted input's normalisation: a 1e4-scaled input gives a finite output, and zero input the shift's."""
    net = SimbaV2Actor(4, 2, 16, 1)
    out = net(torch.tensor([[1e4, -1e4, 3e3, 0.0], [0.0, 0.0, 0.0, 0.0]]))
    assert out.shape == (2, 4) and torch.isfinite(out).all()


def test_critic_detach_params_passes_gradients_to_the_inputs_only():
    critic = SimbaV2CriticEnsemble(2, 3, 1, 8, 1, out_dim=5)
    obs, act = torch.randn(4, 3), torch.randn(4, 1, requires_grad=True)
    critic(obs, act, detach_params=True).sum().backward()
    assert act.grad is not None and act.grad.abs().sum() > 0
    assert all(p.grad is None for p in critic.parameters())


def test_network_refuses_empty_sizes():
    with pytest.raises(ValueError, match=">= 1"):
        SimbaV2Network(2, 3, 0, 1, 1)


# -- the losses --------------------------------------------------------------------------------------------------------
def test_categorical_soft_target_on_a_hand_computed_case():
    """Atoms [-1, 0, 1]. Sample 0: member 1 has the lower expected value (-0.5 against +0.5), so its distribution
    (0.5, 0.5, 0) is shifted: r - d alpha log pi = 0.2 - 0.5 * 0.4 * (-1) = 0.4, atoms 0.4 + 0.5 z = (-0.1, 0.4, 0.9):
    -0.1 gives 0.1 to -1 and 0.9 to 0; 0.4 gives 0.6 to 0 and 0.4 to 1 -> (0.05, 0.45 + 0.3, 0.2) = (0.05, 0.75,
    0.2). Sample 1 terminated (discount 0): all mass at r = -2, clipped to -1 -> (1, 0, 0)."""
    support = torch.tensor([-1.0, 0.0, 1.0])
    logits = torch.log(torch.tensor([[[0.0, 0.5, 0.5], [0.2, 0.3, 0.5]],
                                     [[0.5, 0.5, 0.0], [0.6, 0.2, 0.2]]]).clamp_min(1e-30))  # [n=2, B=2, N=3]
    target = categorical_soft_target(torch.tensor([0.2, -2.0]), torch.tensor([0.5, 0.0]), logits,
                                     torch.tensor([-1.0, 3.0]), torch.tensor([0.4]), support)
    np.testing.assert_allclose(target.numpy(), [[0.05, 0.75, 0.2], [1.0, 0.0, 0.0]], atol=1e-6)
    np.testing.assert_allclose(categorical_values(logits, support).numpy(), [[0.5, 0.3], [-0.5, -0.4]], atol=1e-6)


def test_categorical_critic_loss_sums_each_critics_mean_cross_entropy():
    logits = torch.log(torch.tensor([[[0.25, 0.75], [0.5, 0.5]], [[0.9, 0.1], [0.2, 0.8]]]))  # [2, 2, 2]
    target = torch.tensor([[1.0, 0.0], [0.5, 0.5]])
    ce = lambda p, m: -(m * np.log(p)).sum()  # noqa: E731
    want = (np.mean([ce([0.25, 0.75], [1, 0]), ce([0.5, 0.5], [0.5, 0.5])])
            + np.mean([ce([0.9, 0.1], [1, 0]), ce([0.2, 0.8], [0.5, 0.5])]))
    assert float(categorical_critic_loss(logits, target)) == pytest.approx(want, rel=1e-6)


def test_reward_divisor_is_the_larger_of_the_return_std_and_its_bound():
    """Two envs, gamma 0.5: returns (1, 4) then (1.5, 2) [env 1 ended at step 1, so it restarted: 0 * 0.5 + 2]. The
    variance of {1, 4, 1.5, 2} with the 1e-4 prior count; max |return| 4, so with g_max 1 the bound 4 wins."""
    scaler = RewardScaler(2, 0.5)
    scaler.update(np.array([1.0, 4.0]), np.array([False, True]))
    scaler.update(np.array([1.0, 2.0]), np.array([False, False]))
    np.testing.assert_allclose(scaler.returns, [1.5, 2.0])
    assert scaler.max_abs == 4.0
    var = np.var([1.0, 4.0, 1.5, 2.0]) * 4 / (4 + 1e-4) + 1e-4 / (4 + 1e-4) * (1 + 0)  # prior mean 0, var 1
    assert scaler.divisor(10.0) == pytest.approx(math.sqrt(var + 1e-8), rel=1e-3)
    assert scaler.divisor(1.0) == 4.0
    restored = RewardScaler(2, 0.5)
    restored.load_state_dict(scaler.state_dict())
    assert restored.divisor(1.0) == 4.0 and restored.divisor(10.0) == scaler.divisor(10.0)


# -- SAC with network="simbav2" ----------------------------------------------------------------------------------------
def test_sac_simbav2_trains_keeps_its_weights_on_the_sphere_and_scales_rewards(tmp_path):
    model = SAC("Pendulum-v1", seed=0, normalize_obs=True, **SMALL)
    assert type(model.critic).__name__ == "SimbaV2CriticEnsemble" and model.critic.out_dim == 21
    assert model.paths["gradient_backend"].value == "torch" and model.paths["precision"].value == "fp32"
    model.learn(200, progress_bar=False)
    assert model.num_gradient_steps > 0
    for net in (model.actor.trunk, model.critic):
        for w in net.spherical_weights():
            np.testing.assert_allclose(torch.linalg.vector_norm(w, dim=1).detach().numpy(), 1.0, rtol=1e-5)
    # the divisor of the last update: Pendulum's returns are large, so the rewards shrink
    assert model._reward_divisor == model.reward_scaler.divisor(model.config.value_range) > 1.0
    batch = model.buffer.sample(32, as_torch=True)  # the replay keeps raw rewards ...
    raw = batch.rewards.clone()
    assert raw.abs().max() > 1.0
    model._normalize_batch(batch)  # ... and every update's minibatch divides them by the divisor
    torch.testing.assert_close(batch.rewards, raw / model._reward_divisor)
    assert np.isfinite(model.metrics["losses/critic_loss"])


def test_sac_simbav2_saves_exports_and_resumes_exactly(tmp_path):
    model = SAC("Pendulum-v1", seed=1, normalize_obs=True, **SMALL)
    model.learn(150, progress_bar=False)
    obs = np.random.default_rng(0).normal(size=(5, 3)).astype(np.float32)
    actions = model.predict(obs, deterministic=True)
    np.testing.assert_allclose(model.deterministic_module()(torch.from_numpy(obs)).numpy(), actions, rtol=1e-5,
                               atol=1e-5)  # the observation statistics folded into the export
    np.testing.assert_array_equal(SAC.load(model.save(tmp_path / "m.pt")).predict(obs, deterministic=True), actions)
    # stopped, checkpointed and resumed equals straight through: the reward scaler's state travels with the run
    one, resumed = resumed_and_uninterrupted(lambda: SAC("Pendulum-v1", seed=2, normalize_obs=True, **SMALL), 300,
                                             180, tmp_path)
    assert resumed.reward_scaler.max_abs == one.reward_scaler.max_abs
    np.testing.assert_array_equal(resumed.reward_scaler.returns, one.reward_scaler.returns)
    for a, b in zip(one.critic.parameters(), resumed.critic.parameters()):
        assert torch.equal(a, b)
    for a, b in zip(one.actor.parameters(), resumed.actor.parameters()):
        assert torch.equal(a, b)


@pytest.mark.parametrize("cls", [TQC, TD3, DDPG])
def test_tqc_td3_and_ddpg_train_simbav2_networks_on_the_sphere_and_export_them(cls, tmp_path):
    """Their own losses (quantiles, scalar Q) on SimbaV2's networks, with its projection and reward scaling."""
    model = cls("Pendulum-v1", seed=0, normalize_obs=True, **SMALL)
    assert type(model.critic).__name__ == "SimbaV2CriticEnsemble" and model.reward_scaler is not None
    assert type(model.actor.trunk if cls is TQC else model.actor.net).__name__ == "SimbaV2Actor"
    assert [type(n).__name__ for n in model._spherical] == ["SimbaV2Actor", "SimbaV2CriticEnsemble"]  # no targets
    before = [p.detach().clone() for p in model.critic.parameters()]
    model.learn(200, progress_bar=False)
    assert any(not torch.equal(a, b) for a, b in zip(before, model.critic.parameters()))
    for net in model._spherical:
        for w in net.spherical_weights():
            np.testing.assert_allclose(torch.linalg.vector_norm(w, dim=1).detach().numpy(), 1.0, rtol=1e-5)
    obs = np.random.default_rng(0).normal(size=(5, 3)).astype(np.float32)
    actions = model.predict(obs, deterministic=True)
    np.testing.assert_allclose(model.deterministic_module()(torch.from_numpy(obs)).numpy(), actions, rtol=1e-5,
                               atol=1e-5)
    np.testing.assert_array_equal(cls.load(model.save(tmp_path / "m.pt")).predict(obs, deterministic=True), actions)


def test_crossq_refuses_simbav2():
    with pytest.raises(ConfigError, match="Batch Renormalization"):
        CrossQ("Pendulum-v1", network="simbav2")


def test_simbav2_refuses_the_handwritten_backend_and_bad_bins():
    with pytest.raises(ConfigError, match="network='simbav2' trains through autograd"):
        SAC("Pendulum-v1", gradient_backend="handwritten", **SMALL)
    with pytest.raises(ConfigError, match="critic_bins"):
        SAC("Pendulum-v1", **{**SMALL, "critic_bins": 1})
    with pytest.raises(ConfigError, match="value_range"):
        SAC("Pendulum-v1", **{**SMALL, "value_range": 0.0})


@pytest.mark.slow
def test_sac_with_simbav2_reaches_minus_200_on_pendulum_within_6k_steps():
    """SimbaV2 at a size CI affords (width 32, one critic block, batch 64) with its observation statistics, reward
    scaling, categorical critics, the authors' initial temperature 0.01 and target entropy -0.5 |A|."""
    model = SAC("Pendulum-v1", seed=0, network="simbav2", normalize_obs=True, actor_width=32, critic_width=32,
                critic_blocks=1, batch_size=64, learning_rate=3e-4, ent_coef_init=0.01, target_entropy=-0.5)
    ev = EvalCallback(eval_freq=1_000, n_episodes=10, reward_threshold=-200)
    model.learn(6_000, callback=ev, progress_bar=False)
    best = max(mean for _, mean, _, _ in ev.history)
    assert best >= -200, ev.history
