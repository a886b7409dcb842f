"""SimBa networks (``rapidrl.nn.simba``) and the off-policy network options (``network``, ``normalize_obs``,
``weight_decay``: ``rapidrl.algos.offpolicy_networks``): the blocks against a NumPy reference, the batched critic
ensemble against its members as plain networks, the initialisation, the running observation statistics against the
observations acted on, AdamW's decay against its closed form, save/load/export, the refusals, and learning."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from rapidrl.algos.crossq import CrossQ
from rapidrl.algos.ddpg import DDPG
from rapidrl.algos.sac import SAC
from rapidrl.algos.td3 import TD3
from rapidrl.algos.tqc import TQC
from rapidrl.buffers.batch import ReplayBatch
from rapidrl.nn.simba import LAYER_NORM_EPS, SimbaCriticEnsemble, SimbaEncoder, he_normal_
from rapidrl.train.callbacks import EvalCallback
from rapidrl.train.config import ConfigError

SMALL = dict(network="simba", actor_width=16, actor_blocks=1, critic_width=16, critic_blocks=2, learning_starts=64,
             batch_size=32, buffer_size=2_000, log_every_steps=50)


def numpy_layer_norm(h: np.ndarray, scale: np.ndarray, shift: np.ndarray) -> np.ndarray:
    mean = h.mean(-1, keepdims=True)
    var = ((h - mean) ** 2).mean(-1, keepdims=True)
    return (h - mean) / np.sqrt(var + LAYER_NORM_EPS) * scale + shift


def numpy_encoder(enc: SimbaEncoder, x: np.ndarray) -> np.ndarray:
    """SimBa's encoder written out in float64 NumPy from the module's parameters."""
    p = {k: v.detach().double().numpy() for k, v in enc.named_parameters()}
    h = x @ p["0.weight"].T + p["0.bias"]
    blocks = len(enc) - 2
    for j in range(1, blocks + 1):
        inner = numpy_layer_norm(h, p[f"{j}.norm.weight"], p[f"{j}.norm.bias"]) @ p[f"{j}.up.weight"].T
        h = h + np.maximum(inner + p[f"{j}.up.bias"], 0.0) @ p[f"{j}.down.weight"].T + p[f"{j}.down.bias"]
    last = blocks + 1
    return numpy_layer_norm(h, p[f"{last}.weight"], p[f"{last}.bias"])


def perturbed(module: torch.nn.Module, seed: int = 0) -> torch.nn.Module:
    """``module`` with every parameter moved off its initial value (LayerNorm scales 1, biases 0 would hide
    mistakes in their use)."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in module.parameters():
            p.add_(0.3 * torch.randn(p.shape, generator=g))
    return module


# -- the networks ------------------------------------------------------------------------------------------------------
def test_encoder_equals_its_formula_in_numpy():
    torch.manual_seed(0)
    enc = perturbed(SimbaEncoder(5, 8, 2))
    x = np.random.default_rng(0).normal(size=(7, 5))
    out = enc(torch.from_numpy(x).float()).detach().double().numpy()
    np.testing.assert_allclose(out, numpy_encoder(enc, x), rtol=1e-4, atol=1e-5)
    assert enc.out_dim == 8 and len(enc) == 4  # input layer, 2 blocks, output LayerNorm


@pytest.mark.parametrize("out_dim", [1, 5])
def test_critic_ensemble_equals_its_members_as_plain_networks(out_dim):
    torch.manual_seed(1)
    ens = perturbed(SimbaCriticEnsemble(3, 4, 2, 8, 2, out_dim=out_dim))
    obs, act = torch.randn(6, 4), torch.randn(6, 2)
    q = ens(obs, act)
    assert q.shape == ((3, 6) if out_dim == 1 else (3, 6, out_dim))
    for i in range(3):
        member = ens.member(i)
        ref = member(torch.cat([obs, act], 1))
        torch.testing.assert_close(q[i], ref.squeeze(-1) if out_dim == 1 else ref, rtol=1e-5, atol=1e-5)
        enc, head = member
        x = torch.cat([obs, act], 1).double().numpy()
        by_hand = numpy_encoder(enc, x) @ head.weight.detach().double().numpy().T + head.bias.detach().double().numpy()
        np.testing.assert_allclose(q[i].detach().double().numpy().reshape(6, -1), by_hand, rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(ens(obs, act, members=2), q[:2])


def test_critic_ensemble_detach_params_passes_gradients_to_the_inputs_only():
    torch.manual_seed(2)
    ens = SimbaCriticEnsemble(2, 3, 2, 8, 1)
    act = torch.randn(4, 2, requires_grad=True)
    ens(torch.randn(4, 3), act, detach_params=True).sum().backward()
    assert act.grad is not None and act.grad.abs().sum() > 0
    assert all(p.grad is None for p in ens.parameters())
    ens(torch.randn(4, 3), act).sum().backward()
    assert all(p.grad is not None for p in ens.parameters())


def test_he_normal_has_the_std_of_flax_and_is_truncated_at_two_std():
    w = he_normal_(torch.empty(400, 500), fan_in=500)
    std = math.sqrt(2.0 / 500)
    assert abs(w.std().item() / std - 1) < 0.01
    assert w.abs().max().item() <= 2 * std / 0.87962566103423978 + 1e-6
    assert abs(w.mean().item()) < 0.01 * std


def test_critic_members_start_different_and_layer_norms_start_at_identity():
    torch.manual_seed(3)
    ens = SimbaCriticEnsemble(2, 3, 1, 8, 2)
    assert not torch.equal(ens.w_in[0], ens.w_in[1]) and not torch.equal(ens.w_up[1][0], ens.w_up[1][1])
    for scale, shift in [*zip(ens.norm_scale, ens.norm_shift), (ens.out_scale, ens.out_shift)]:
        assert torch.equal(scale, torch.ones_like(scale)) and torch.equal(shift, torch.zeros_like(shift))


def test_encoder_refuses_empty_sizes():
    with pytest.raises(ValueError, match="width and blocks >= 1"):
        SimbaEncoder(3, 8, 0)


# -- the algorithms' options ------------------------------------------------------------------------------------------
@pytest.mark.parametrize("cls", [SAC, TQC, TD3, DDPG])
def test_simba_networks_train_save_load_and_export_with_the_statistics_folded_in(cls, tmp_path):
    model = cls("Pendulum-v1", seed=0, normalize_obs=True, weight_decay=0.01, **SMALL)
    assert type(model.critic).__name__ == "SimbaCriticEnsemble"
    assert model.paths["gradient_backend"].value == "torch"
    before = [p.detach().clone() for p in model.critic.parameters()]
    model.learn(200, progress_bar=False)
    assert model.num_gradient_steps > 0
    assert any(not torch.equal(a, b) for a, b in zip(before, model.critic.parameters()))
    obs = np.random.default_rng(0).normal(size=(5, 3)).astype(np.float32)
    actions = model.predict(obs, deterministic=True)
    exported = model.deterministic_module()(torch.from_numpy(obs)).numpy()
    np.testing.assert_allclose(exported, actions, rtol=1e-5, atol=1e-5)  # the statistics are in the export
    model.save(tmp_path / "m.pt")
    loaded = cls.load(tmp_path / "m.pt")
    np.testing.assert_array_equal(loaded.obs_normalizer.rms.mean, model.obs_normalizer.rms.mean)
    np.testing.assert_array_equal(loaded.predict(obs, deterministic=True), actions)


def test_normalize_obs_statistics_are_those_of_the_observations_acted_on():
    """Every observation the policy acts on while training, warm-up included, enters the running statistics (as
    SimBa's wrapper does): with one env they are the replay's observations."""
    model = SAC("Pendulum-v1", seed=0, normalize_obs=True, hidden=(16, 16), learning_starts=64, batch_size=32,
                buffer_size=2_000)
    model.learn(150, progress_bar=False)
    stored = np.asarray(model.buffer.arrays()["obs"][:150], np.float64).reshape(150, -1)
    rms = model.obs_normalizer.rms
    prior = 1e-4  # the statistics start as mean 0, variance 1 of a count of 1e-4 (SB3's and SimBa's RunningMeanStd)
    n, mean, var = len(stored), stored.mean(0), stored.var(0)
    np.testing.assert_allclose(rms.mean, n * mean / (n + prior), rtol=1e-9)
    np.testing.assert_allclose(rms.var, (prior + n * var + mean ** 2 * prior * n / (n + prior)) / (n + prior),
                               rtol=1e-9)
    assert rms.count == pytest.approx(n + prior)


def test_the_update_and_acting_see_normalized_observations():
    model = SAC("Pendulum-v1", seed=0, normalize_obs=True, hidden=(16, 16), learning_starts=64, batch_size=4,
                buffer_size=2_000, gradient_backend="torch")
    model.learn(100, progress_bar=False)
    rms = model.obs_normalizer.rms
    raw = np.random.default_rng(1).normal(size=(4, 3)).astype(np.float32)
    expect = ((raw - rms.mean) / np.sqrt(rms.var + 1e-8)).astype(np.float32)
    batch = ReplayBatch(torch.from_numpy(raw.copy()), torch.zeros(4, 1), torch.zeros(4),
                        torch.from_numpy(raw.copy() * 2), torch.zeros(4, dtype=torch.bool),
                        torch.zeros(4, dtype=torch.bool), torch.ones(4), torch.ones(4), torch.arange(4))
    model.buffer.sample = lambda *a, **k: batch
    model._refresh_normalization()
    out = model._sample_batch()
    np.testing.assert_allclose(out.obs.numpy(), expect, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(out.next_obs.numpy(), (2 * raw - rms.mean) / np.sqrt(rms.var + 1e-8), rtol=1e-5,
                               atol=1e-5)
    with torch.no_grad():
        by_hand = model.actor(torch.from_numpy(expect), deterministic=True)[0].numpy()
    np.testing.assert_allclose(model.predict(raw, deterministic=True), by_hand, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("cls", [SAC, TD3])
def test_normalize_obs_on_the_handwritten_backend_acts_on_normalized_observations(cls):
    model = cls("Pendulum-v1", seed=0, normalize_obs=True, hidden=(16, 16), learning_starts=64, batch_size=32,
                buffer_size=2_000)
    assert model.gradient_backend == "handwritten" and model._acting_forward is not None
    model.learn(100, progress_bar=False)
    raw = np.random.default_rng(2).normal(size=(3, 3)).astype(np.float32)
    with torch.no_grad():
        through_torch = model._act(model._obs_tensor(raw), deterministic=True)
    np.testing.assert_allclose(model.predict(raw, deterministic=True), through_torch, rtol=1e-5, atol=1e-5)


def test_adamw_decays_actor_and_critics_by_lr_times_decay_and_leaves_the_temperature():
    model = SAC("Pendulum-v1", seed=0, weight_decay=0.01, learning_rate=1e-3, **SMALL)
    opt = model.optimizer
    assert isinstance(opt, torch.optim.AdamW)
    assert [g["weight_decay"] for g in opt.param_groups] == [0.01, 0.0]
    assert opt.param_groups[1]["params"] == [model.log_alpha]
    params = [p for g in opt.param_groups for p in g["params"]]
    before = [p.detach().clone() for p in params]
    for p in params:
        p.grad = torch.zeros_like(p)  # Adam's step of a zero gradient is 0: only the decay moves them
    opt.step()
    for p, b in zip(params, before):
        factor = 1.0 if p is model.log_alpha else 1 - 1e-3 * 0.01
        torch.testing.assert_close(p.detach(), b * factor, rtol=1e-6, atol=1e-7)


def test_without_weight_decay_the_optimizer_is_adam_as_before():
    model = SAC("Pendulum-v1", seed=0, **SMALL)
    assert type(model.optimizer) is torch.optim.Adam and len(model.optimizer.param_groups) == 1


def test_simba_refuses_the_handwritten_backend_with_the_reason():
    with pytest.raises(ConfigError, match="network='simba' trains through autograd"):
        SAC("Pendulum-v1", gradient_backend="handwritten", **SMALL)


def test_crossq_refuses_simba_and_says_where_it_trains():
    with pytest.raises(ConfigError, match=r"Batch Renormalization.*SAC, TQC, TD3 or DDPG"):
        CrossQ("Pendulum-v1", network="simba")
    assert CrossQ("Pendulum-v1", normalize_obs=True, critic_hidden=(32, 32), hidden=(16, 16)).obs_normalizer


@pytest.mark.parametrize("bad, match", [
    (dict(network="resnet"), "network must be one of"),
    (dict(actor_width=0), "actor_width"),
    (dict(critic_blocks=0), "critic_blocks"),
    (dict(weight_decay=-0.1), "weight_decay"),
])
def test_bad_network_settings_are_clear_errors(bad, match):
    with pytest.raises(ConfigError, match=match):
        SAC("Pendulum-v1", **{**SMALL, **bad})


@pytest.mark.slow
def test_sac_with_simba_networks_reaches_minus_200_on_pendulum_within_10k_steps():
    """SimBa at a size CI affords (width 64, one block each, batch 128) with its observation statistics and AdamW."""
    model = SAC("Pendulum-v1", seed=0, network="simba", normalize_obs=True, weight_decay=0.01, actor_width=64,
                actor_blocks=1, critic_width=64, critic_blocks=1, batch_size=128)
    ev = EvalCallback(eval_freq=2_000, n_episodes=10, reward_threshold=-200)
    model.learn(10_000, callback=ev, progress_bar=False)
    best = max(mean for _, mean, _, _ in ev.history)
    assert best >= -200, ev.history


def test_docs_examples_run(tmp_path, monkeypatch):
    """Every python example of docs/simba.md runs, in order, in one namespace (in a scratch directory)."""
    from docs_examples import run_examples

    monkeypatch.chdir(tmp_path)
    ns = run_examples("simba.md", 3)
    assert (tmp_path / "sac_simba.pt").is_file() and ns["model"].num_gradient_steps > 0
    assert ns["td3"].num_gradient_steps > 0 and ns["v2"].num_gradient_steps > 0
