"""DQN: loss, exploration, truncation, variants, save/load, determinism, and learning CartPole."""

import math

import gymnasium as gym
import numpy as np
import pytest
import torch

from rapidrl.algos.dqn import DQN, dqn_loss
from rapidrl.train.callbacks import EvalCallback
from rapidrl.train.config import ConfigError

TINY = dict(hidden=(32,), learning_starts=64, batch_size=32, buffer_size=2_000, train_freq=4, gradient_steps=2,
            log_every_steps=10)


def test_dqn_loss_targets_and_priority_weights():
    q = torch.tensor([1.0, 2.0, 0.0])
    next_q = torch.tensor([10.0, 10.0, 10.0])
    rewards = torch.tensor([1.0, 0.5, 0.0])
    discounts = torch.tensor([0.9, 0.0, 0.81])  # bootstrapped, terminated, 2-step bootstrapped
    loss, td = dqn_loss(q, next_q, rewards, discounts)
    torch.testing.assert_close(td, torch.tensor([1.0 - 10.0, 2.0 - 0.5, 0.0 - 8.1]))
    huber = torch.tensor([9.0 - 0.5, 1.5 - 0.5, 8.1 - 0.5])  # |td| > 1: |td| - 1/2
    torch.testing.assert_close(loss, huber.mean())
    weights = torch.tensor([0.0, 1.0, 2.0])
    loss_w, _ = dqn_loss(q, next_q, rewards, discounts, weights)
    torch.testing.assert_close(loss_w, (huber * weights).mean())


def test_epsilon_falls_linearly_then_stays():
    model = DQN("CartPole-v1", exploration_fraction=0.5, exploration_initial_eps=1.0, exploration_final_eps=0.1,
                **TINY)
    model._schedule = (0, 1000)
    for steps, eps in [(0, 1.0), (250, 0.55), (500, 0.1), (900, 0.1)]:
        model.num_timesteps = steps
        assert math.isclose(model.epsilon(), eps, abs_tol=1e-12)


def test_config_errors_name_the_field():
    with pytest.raises(ConfigError, match="exploration_fraction"):
        DQN("CartPole-v1", exploration_fraction=0.0)
    with pytest.raises(ConfigError, match="batch_size"):
        DQN("CartPole-v1", batch_size=10, buffer_size=5)
    with pytest.raises(ConfigError, match="lerning_rate"):
        DQN("CartPole-v1", lerning_rate=1e-3)
    with pytest.raises(TypeError, match="Discrete"):
        DQN("Pendulum-v1", **TINY)


@pytest.mark.parametrize("variant", [dict(), dict(dueling=True, double_q=False), dict(n_step=3, num_envs=4),
                                     dict(prioritized=True, tau=0.5)])
def test_smoke_variants_learn_and_log_their_losses(variant):
    model = DQN("CartPole-v1", **{**TINY, **variant})
    model.learn(600, progress_bar=False)
    assert model.num_timesteps >= 600
    assert len(model.buffer) == min(model.num_timesteps, 2_000)
    assert model.num_gradient_steps > 0
    assert {"losses/loss", "losses/q_values", "losses/td_abs"} <= set(model.metrics)
    if variant.get("prioritized"):
        rows = np.arange(len(model.buffer))
        assert np.unique(model.buffer.priorities(rows)).size > 1  # |TD| priorities were written back


def test_stored_next_obs_is_the_true_successor_at_every_step_including_truncation():
    """Every stored transition (obs, action) -> next_obs follows CartPole's physics, also where the episode
    was truncated or terminated (the reset observation would break it)."""
    model = DQN("CartPole-v1", env_kwargs=dict(max_episode_steps=15), learning_starts=10_000, **{
        k: v for k, v in TINY.items() if k != "learning_starts"})
    model.learn(300, progress_bar=False)
    data = model.buffer.arrays()
    n = len(model.buffer)
    truncated, terminated = data["truncated"][:n], data["terminated"][:n]
    assert truncated.sum() >= 5 and terminated.sum() >= 1
    ref = gym.make("CartPole-v1").unwrapped
    ref.reset(seed=0)
    for t in range(n):
        ref.state, ref.steps_beyond_terminated = data["obs"][t].astype(np.float64), None
        expected, *_ = ref.step(int(data["actions"][t]))
        np.testing.assert_allclose(data["next_obs"][t], expected, rtol=1e-5, atol=1e-5)
    # a bootstrapped target uses it: discount gamma at truncation, 0 at termination
    batch = model.buffer.sample(256, as_torch=True)
    trunc_only = batch.truncated & ~batch.terminated
    assert trunc_only.any()
    torch.testing.assert_close(batch.discounts[trunc_only], torch.full((int(trunc_only.sum()),), 0.99))
    assert (batch.discounts[batch.terminated] == 0).all()


def test_save_load_identical_predictions_and_buffer(tmp_path):
    model = DQN("CartPole-v1", **TINY)
    model.learn(400, progress_bar=False)
    obs = np.random.default_rng(0).normal(size=(64, 4)).astype(np.float32)
    path = model.save(tmp_path / "dqn.pt", include_buffer=True)
    loaded = DQN.load(path, include_buffer=True)
    np.testing.assert_array_equal(loaded.predict(obs, deterministic=True), model.predict(obs, deterministic=True))
    for key, arr in model.buffer.arrays().items():
        np.testing.assert_array_equal(loaded.buffer.arrays()[key][: len(model.buffer)], arr[: len(model.buffer)])
    assert loaded.num_timesteps == model.num_timesteps
    for a, b in zip(loaded.q_target.parameters(), model.q_target.parameters()):
        torch.testing.assert_close(a, b)


def test_same_seed_same_losses():
    def run():
        model = DQN("CartPole-v1", seed=3, **TINY)
        model.learn(500, progress_bar=False)
        return [{k: v for k, v in h.items() if k.startswith("losses/")} for h in model.history]

    first, second = run(), run()
    assert any(first) and first == second


@pytest.mark.slow
def test_dqn_solves_cartpole_within_50k_steps_for_2_of_3_seeds():
    solved, report = 0, []
    for seed in range(3):
        model = DQN("CartPole-v1", seed=seed, hidden=(64, 64))
        ev = EvalCallback(eval_freq=5_000, n_episodes=10, reward_threshold=475)
        model.learn(50_000, callback=ev, progress_bar=False)
        best = max(mean for _, mean, _, _ in ev.history)
        report.append((seed, model.num_timesteps, best))
        solved += best >= 475
    assert solved >= 2, report
