"""IMPALA: V-trace targets, smoke, determinism, save/load, bad settings, and learning CartPole."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import rapidrl as rr
from rapidrl.algos.impala import impala_loss
from rapidrl.buffers import vtrace_targets
from rapidrl.kernels import lambda_returns
from rapidrl.train.callbacks import EvalCallback
from rapidrl.train.config import ConfigError


def small(**kw):
    base = dict(num_envs=4, num_steps=16, seed=0)
    base.update(kw)
    return base


def random_rollout(T=12, N=5, seed=0):
    rng = np.random.default_rng(seed)
    f = lambda *s: torch.from_numpy(rng.normal(size=s).astype(np.float32))  # noqa: E731
    terminated = torch.from_numpy(rng.random((T, N)) < 0.1)
    truncated = torch.from_numpy(rng.random((T, N)) < 0.1) & ~terminated
    return f(T, N), f(T, N), f(N), terminated, truncated, f(T, N)


def test_vtrace_targets_on_policy_are_lambda_one_returns():
    """With learner == behaviour (log rho = 0): vs = lambda-returns with lambda = 1 and the policy-gradient
    advantage is the one-step TD error on vs: r + gamma * vs[t+1] - V (the identity in ``vtrace``'s docstring)."""
    rewards, values, bootstrap, terminated, truncated, final_values = random_rollout()
    logp = torch.randn(12, 5)
    vs, pg = vtrace_targets(logp, logp.clone(), rewards, values, bootstrap, terminated, truncated, final_values,
                            gamma=0.9, rho_bar=1.0, c_bar=1.0)
    expect = lambda_returns(rewards.numpy(), values.numpy(), bootstrap.numpy(), terminated.numpy(),
                            truncated.numpy(), gamma=0.9, lam=1.0, final_values=final_values.numpy())
    np.testing.assert_allclose(vs.numpy(), expect, rtol=1e-5, atol=1e-5)
    ended = (terminated | truncated).numpy()
    nxt = np.concatenate([vs.numpy()[1:], bootstrap.numpy()[None]])
    td = rewards.numpy() + 0.9 * nxt - values.numpy()
    np.testing.assert_allclose(pg.numpy()[:-1][~ended[:-1]], td[:-1][~ended[:-1]], rtol=1e-5, atol=1e-5)


def test_vtrace_targets_weigh_by_truncated_ratios():
    """Off-policy: with every ratio pi/mu = 2 and rho_bar = 1 the targets equal the on-policy ones; with
    ratio 1/2 the one-step policy-gradient advantage of the last step is halved."""
    rewards, values, bootstrap, terminated, truncated, final_values = random_rollout(seed=1)
    mu = torch.zeros(12, 5)
    on = vtrace_targets(mu, mu, rewards, values, bootstrap, terminated, truncated, final_values, gamma=0.9,
                        rho_bar=1.0, c_bar=1.0)
    up = vtrace_targets(mu + np.log(2.0), mu, rewards, values, bootstrap, terminated, truncated, final_values,
                        gamma=0.9, rho_bar=1.0, c_bar=1.0)
    down = vtrace_targets(mu - np.log(2.0), mu, rewards, values, bootstrap, terminated, truncated, final_values,
                          gamma=0.9, rho_bar=1.0, c_bar=1.0)
    for a, b in zip(on, up):
        torch.testing.assert_close(a, b)
    torch.testing.assert_close(down[1][-1], 0.5 * on[1][-1])


def test_impala_loss_gradients():
    """d L / d log pi = -A / B, d L / d V = vf_coef (V - vs) / B, d L / d H = -ent_coef / B."""
    logp, ent, v = (torch.randn(6, requires_grad=True) for _ in range(3))
    vs, adv = torch.randn(6), torch.randn(6)
    loss, stats = impala_loss(logp, ent, v, vs, adv, ent_coef=0.01, vf_coef=0.5)
    loss.backward()
    torch.testing.assert_close(logp.grad, -adv / 6)
    torch.testing.assert_close(v.grad, 0.5 * (v.detach() - vs) / 6)
    torch.testing.assert_close(ent.grad, torch.full((6,), -0.01 / 6))
    assert set(stats) == {"policy_loss", "value_loss", "entropy"}


@pytest.mark.parametrize("async_collect", [True, False])
def test_smoke(async_collect):
    model = rr.IMPALA("CartPole-v1", **small(async_collect=async_collect))
    model.learn(640, progress_bar=False)
    assert model.num_timesteps == 640
    assert {"losses/policy_loss", "losses/value_loss", "losses/entropy", "losses/explained_variance",
            "losses/mean_rho", "charts/SPS"} <= set(model.metrics)
    if not async_collect:  # lag 0 and one gradient step: the ratios are exactly 1
        assert model.metrics["losses/mean_rho"] == pytest.approx(1.0, abs=1e-5)


def test_policy_lag_shows_in_the_importance_ratios():
    model = rr.IMPALA("CartPole-v1", **small(learning_rate=1e-2))
    model.learn(640, progress_bar=False)
    assert model.metrics["losses/mean_rho"] != pytest.approx(1.0, abs=1e-4)


def test_same_seed_same_result_and_save_load(tmp_path):
    def run():
        model = rr.IMPALA("CartPole-v1", **small(normalize_obs=True))
        model.learn(640, progress_bar=False)
        return model

    a, b = run(), run()
    assert [h["losses/value_loss"] for h in a.history] == [h["losses/value_loss"] for h in b.history]
    for p, q in zip(a.policy.parameters(), b.policy.parameters()):
        torch.testing.assert_close(p, q, rtol=0, atol=0)
    loaded = rr.IMPALA.load(a.save(tmp_path / "impala.pt"))
    obs = np.random.default_rng(0).normal(size=(16, 4)).astype(np.float32)
    np.testing.assert_array_equal(loaded.predict(obs, deterministic=True), a.predict(obs, deterministic=True))


@pytest.mark.parametrize("kwargs, match", [({"rho_bar": 0.0}, "rho_bar"), ({"optimizer": "sgd"}, "optimizer"),
                                           ({"device": "cuda"}, "CPU")])
def test_bad_settings(kwargs, match):
    with pytest.raises(ConfigError, match=match):
        rr.IMPALA("CartPole-v1", **kwargs)


@pytest.mark.slow
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_impala_solves_cartpole_within_200k_steps(seed):
    model = rr.IMPALA("CartPole-v1", seed=seed, num_envs=8)
    cb = EvalCallback(eval_freq=10_000, n_episodes=10, reward_threshold=475.0)
    model.learn(200_000, callback=cb, progress_bar=False)
    assert any(mean >= 475.0 for _, mean, _, _ in cb.history), cb.history
