"""PPO and A2C: smoke runs on every action kind, save/load, determinism, the fused rollout against the
PyTorch policy, truncation bootstrapping, bad hyperparameters."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
import torch

import rapidrl as rr
from rapidrl.train.collect.step import StepCollector
from rapidrl.train.config import ConfigError


def small(**kw):
    base = dict(num_envs=4, num_steps=32, minibatch_size=64, update_epochs=2, seed=0)
    base.update(kw)
    return base


@pytest.mark.parametrize("env_id", ["CartPole-v1", "Acrobot-v1", "MountainCar-v0", "Pendulum-v1",
                                    "MountainCarContinuous-v0"])
@pytest.mark.parametrize("collection", ["fused", "step"])
def test_smoke_every_builtin_env_and_path(env_id, collection):
    model = rr.PPO(env_id, **small(collection=collection))
    model.learn(512, progress_bar=False)
    assert model.num_timesteps == 512
    assert {"losses/policy_loss", "losses/value_loss", "losses/approx_kl", "losses/clipfrac",
            "losses/explained_variance", "charts/SPS"} <= set(model.metrics)
    obs, _ = model.env.reset(seed=1)
    actions = model.predict(obs, deterministic=True)
    assert model.env.action_space.contains(actions.astype(model.env.action_space.dtype))


@pytest.mark.parametrize("collection", ["fused", "step"])
def test_rollout_records_rewards_and_episodes(collection):
    """CartPole pays 1 per step: every stored reward is 1, every finished episode's return equals its length,
    and the episodes counted are exactly the terminated-or-truncated steps of the rollout."""
    model = rr.PPO("CartPole-v1", **small(collection=collection, num_steps=128))
    model._collect()
    buf = model.buffer
    assert buf.rewards.sum() == buf.rewards.size
    assert model.num_episodes == int((buf.terminated | buf.truncated).sum()) > 0
    assert list(model._returns) == [float(n) for n in model._lengths]


@pytest.mark.parametrize("squash", ["clip", "tanh"])
def test_continuous_squash_modes(squash):
    model = rr.PPO("Pendulum-v1", **small(squash=squash, normalize_obs=True, normalize_reward=True))
    model.learn(256, progress_bar=False)
    a = model.predict(np.zeros(3, np.float32))
    assert a.shape == (1,) and -2.0 <= a[0] <= 2.0


def test_wrapped_gymnasium_env_uses_per_step_path():
    env = rr.make_vec("CartPole-v1", 4, seed=0, vectorization="sync")
    model = rr.PPO(env, **small())
    assert model.paths["collection"].value == "step" and isinstance(model.collector, StepCollector)
    model.learn(256, progress_bar=False)
    assert model.num_timesteps == 256


def test_a2c_smoke():
    model = rr.A2C("CartPole-v1", num_envs=4, seed=0)
    model.learn(400, progress_bar=False)
    assert model.num_timesteps == 400 and "losses/value_loss" in model.metrics


@pytest.mark.parametrize("algo", ["PPO", "A2C"])
@pytest.mark.parametrize("env_id", ["CartPole-v1", "Pendulum-v1"])
def test_save_load_identical_predictions(tmp_path, algo, env_id):
    cls = getattr(rr, algo)
    extra = {"minibatch_size": 32} if algo == "PPO" else {}
    model = cls(env_id, num_envs=4, num_steps=16, seed=3, normalize_obs=True, **extra)
    model.learn(256, progress_bar=False)
    path = model.save(tmp_path / "m.pt")
    loaded = cls.load(path)
    obs = np.random.default_rng(0).normal(size=(32, *model.observation_space.shape)).astype(np.float32)
    np.testing.assert_array_equal(model.predict(obs, deterministic=True), loaded.predict(obs, deterministic=True))
    for p, q in zip(model.policy.parameters(), loaded.policy.parameters()):
        torch.testing.assert_close(p, q, rtol=0, atol=0)
    assert loaded.num_timesteps == model.num_timesteps


def test_load_env_mismatch_is_a_clear_error(tmp_path):
    path = rr.PPO("CartPole-v1", **small()).save(tmp_path / "m.pt")
    with pytest.raises(ValueError, match="env mismatch"):
        rr.PPO.load(path, env=rr.make_vec("Acrobot-v1", 4, seed=0))
    with pytest.raises(ValueError, match="holds a PPO model, not A2C"):
        rr.A2C.load(path)


def test_load_rejects_corrupt_and_foreign_files(tmp_path):
    bad = tmp_path / "bad.pt"
    bad.write_bytes(b"not a checkpoint")
    with pytest.raises(ValueError, match="not a readable rapidrl model"):
        rr.PPO.load(bad)
    foreign = tmp_path / "foreign.pt"
    torch.save({"weights": torch.zeros(3)}, foreign)
    with pytest.raises(ValueError, match="not a rapidrl model"):
        rr.PPO.load(foreign)
    with pytest.raises(FileNotFoundError):
        rr.PPO.load(tmp_path / "missing.pt")


@pytest.mark.parametrize("collection", ["fused", "step"])
def test_same_seed_same_learning_curve(collection):
    def run():
        m = rr.PPO("CartPole-v1", **small(collection=collection))
        m.learn(1024, progress_bar=False)
        return [(h["losses/policy_loss"], h["losses/value_loss"]) for h in m.history], \
            [p.detach().clone() for p in m.policy.parameters()]
    (c1, p1), (c2, p2) = run(), run()
    assert c1 == c2
    for a, b in zip(p1, p2):
        torch.testing.assert_close(a, b, rtol=0, atol=0)


def test_different_seeds_differ():
    a = rr.PPO("CartPole-v1", **small(seed=1)).learn(256, progress_bar=False)
    b = rr.PPO("CartPole-v1", **small(seed=2)).learn(256, progress_bar=False)
    assert a.history[-1]["losses/value_loss"] != b.history[-1]["losses/value_loss"]


@pytest.mark.parametrize("env_id", ["CartPole-v1", "Pendulum-v1"])
@pytest.mark.parametrize("squash", ["clip", "tanh"])
def test_fused_rollout_matches_torch_policy(env_id, squash):
    """Log-probs and values written by the fused kernel equal the PyTorch policy's on the stored data."""
    model = rr.PPO(env_id, **small(collection="fused", normalize_obs=True, squash=squash))
    model.learn(256, progress_bar=False)  # moves weights and normalizer statistics off their init
    norm = model.obs_normalizer
    mean, std = norm.rms.mean.copy(), np.sqrt(norm.rms.var + norm.eps)
    model._collect()
    buf = model.buffer
    obs = torch.from_numpy(buf.obs.reshape(-1, *buf.obs.shape[2:]))
    actions = torch.from_numpy(buf.actions.reshape(-1, *buf.actions.shape[2:]))
    with torch.no_grad():
        logp, _, values = model.policy.evaluate(obs, actions)
    np.testing.assert_allclose(buf.log_probs.reshape(-1), logp.numpy(), atol=1e-5, rtol=1e-5)
    np.testing.assert_allclose(buf.values.reshape(-1), values.numpy(), atol=1e-5, rtol=1e-5)
    # stored observations are the raw ones normalized with the statistics frozen at the rollout start
    expect = np.clip((model._raw_obs.astype(np.float64) - mean) / std, -10, 10).astype(np.float32)
    np.testing.assert_array_equal(buf.obs, expect)


def test_fused_action_frequencies_match_policy_probabilities():
    """Chi-square: actions sampled by the fused kernel follow the policy's categorical distribution."""
    model = rr.PPO("Acrobot-v1", num_envs=64, num_steps=64, minibatch_size=256, seed=0, collection="fused")
    with torch.no_grad():  # make the policy non-uniform and state-independent
        last = model.policy.actor[-1]
        last.weight.zero_()
        last.bias.copy_(torch.tensor([0.5, -0.3, 0.1]))
    model._collect()
    counts = np.bincount(model.buffer.actions.reshape(-1), minlength=3)
    p = torch.softmax(torch.tensor([0.5, -0.3, 0.1]), 0).numpy()
    expected = p * counts.sum()
    chi2 = float(((counts - expected) ** 2 / expected).sum())
    assert chi2 < 13.8  # 99.9% quantile of chi-square with 2 degrees of freedom


def test_fused_gaussian_sampling_moments():
    model = rr.PPO("Pendulum-v1", num_envs=64, num_steps=64, minibatch_size=256, seed=0, collection="fused",
                   log_std_init=-0.5)
    with torch.no_grad():
        last = model.policy.actor[-1]
        last.weight.zero_()
        last.bias.fill_(0.3)
    model._collect()
    a = model.buffer.actions.reshape(-1)
    assert abs(a.mean() - 0.3) < 4 * np.exp(-0.5) / np.sqrt(a.size)
    assert abs(a.std() - np.exp(-0.5)) < 0.02


class ConstantRewardEnv(gym.Env):
    """Observation always 0, reward always 1, never terminates: only truncation ends an episode."""

    observation_space = gym.spaces.Box(-1.0, 1.0, (1,), np.float32)
    action_space = gym.spaces.Discrete(2)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        return np.zeros(1, np.float32), {}

    def step(self, action):
        return np.zeros(1, np.float32), 1.0, False, False, {}


def test_truncation_bootstraps_to_infinite_horizon_value():
    """With truncation every 5 steps, only bootstrapping from the final observation gives V = 1/(1-gamma)."""
    gym.register("RapidrlConstantReward-v0", entry_point=ConstantRewardEnv, max_episode_steps=5)
    env = rr.make_vec("RapidrlConstantReward-v0", 4, seed=0)
    model = rr.PPO(env, num_envs=4, num_steps=16, minibatch_size=64, update_epochs=4, gamma=0.9, gae_lambda=0.95,
                   learning_rate=3e-3, anneal_lr=False, clip_vloss=False, seed=0)
    model.learn(20_000, progress_bar=False)
    with torch.no_grad():
        v = float(model.policy.value(torch.zeros(1, 1)))
    assert abs(v - 10.0) < 0.5, v  # without bootstrapping V would average the 5-step sums (< 4.1)


@pytest.mark.parametrize("kwargs, match", [
    ({"learning_rate": -1e-3}, "learning_rate"),
    ({"minibatch_size": 4096}, "minibatch_size"),
    ({"gamma": 1.5}, "gamma"),
    ({"num_envs": 0}, "num_envs"),
    ({"hidden": ()}, "hidden"),
    ({"normalize_advantage": "sometimes"}, "normalize_advantage"),
    ({"learning_rte": 1e-3}, "learning_rate"),
])
def test_bad_hyperparameters_fail_at_construction(kwargs, match):
    with pytest.raises(ConfigError, match=match):
        rr.PPO("CartPole-v1", **kwargs)


def test_bad_learn_arguments():
    model = rr.PPO("CartPole-v1", **small())
    with pytest.raises(ValueError, match="total_timesteps"):
        model.learn(-5)
    with pytest.raises(ValueError, match="resume"):
        model.learn(100, resume=True)
    with pytest.raises(ValueError, match="obs must have shape"):
        model.predict(np.zeros((2, 7), np.float32))


def test_the_loop_shown_in_the_ppo_docs_is_the_code():
    """docs/ppo.md's "Reading the code" shows PPO._torch_update's loop: it must stay the code, line for line."""
    import inspect
    import textwrap
    from pathlib import Path

    doc = (Path(__file__).resolve().parents[1] / "docs" / "ppo.md").read_text()
    marker = "<!-- PPO._torch_update: tests/test_ppo.py checks that this block is the code -->\n```python\n"
    assert marker in doc
    shown = doc.split(marker, 1)[1].split("```", 1)[0]
    code = textwrap.dedent(inspect.getsource(rr.PPO._torch_update))
    assert shown.strip() and textwrap.indent(shown, "    ") in code
