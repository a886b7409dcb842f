"""Overlapped collection (``rapidrl.train.collect.threaded``): weight hand-off, policy lag, determinism, thread
lifetime, and async PPO learning CartPole."""

from __future__ import annotations

import threading

import gymnasium as gym
import numpy as np
import pytest
import torch

import rapidrl as rr
from rapidrl.buffers import RolloutBuffer
from rapidrl.nn import ActorCritic
from rapidrl.train.callbacks import EvalCallback
from rapidrl.train.collect.fused import FusedCollector
from rapidrl.train.collect.threaded import AsyncCollector

PPO_CARTPOLE = dict(num_envs=8, num_steps=32, minibatch_size=256, update_epochs=20, gamma=0.98, gae_lambda=0.8,
                    ent_coef=0.0, learning_rate=1e-3, anneal_clip=True)


def small(**kw):
    base = dict(num_envs=4, num_steps=16, minibatch_size=32, update_epochs=2, seed=0, async_collect=True)
    base.update(kw)
    return base


def collector_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == "rapidrl-collector"]


def fill(module: torch.nn.Module, value: float) -> None:
    with torch.no_grad():
        for p in module.parameters():
            p.fill_(value)


class WeightProbe:
    """A stand-in collector: reads the behaviour weights many times during a "rollout" and records them."""

    def __init__(self, env, behaviour):
        self.behaviour = behaviour
        self.seen: list[tuple[int, set[float]]] = []  # (thread id, distinct parameter values seen)

    def collect(self, buffer, obs, raw_obs, obs_normalizer, seed):
        values: set[float] = set()
        for _ in range(300):
            for p in self.behaviour.parameters():
                values.update(torch.unique(p).tolist())
        self.seen.append((threading.get_ident(), values))
        buffer.mark_full()
        return np.zeros(0, np.float32), np.zeros(0, np.int32)


def make_async(make_collector, env=None, num_steps=4, num_envs=2, action_space=None):
    obs_space = gym.spaces.Box(-1.0, 1.0, (4,), np.float32)
    policy = ActorCritic(obs_space, action_space or gym.spaces.Discrete(2), (8,))
    obs = np.zeros((num_envs, 4), np.float32)
    ac = AsyncCollector(make_collector, env, policy, None, obs,
                        lambda: RolloutBuffer(num_steps, num_envs, (4,)))
    return ac, policy


def test_weights_never_tear_while_the_learner_publishes():
    """The learner publishes weights that are all equal to the version number, as fast as it can, while the
    thread collects: every rollout must see one single value, equal to the version it reports."""
    ac, policy = make_async(WeightProbe)
    try:
        fill(policy, 1.0)
        version = ac.publish()
        for rollout in range(6):
            ac.start(seed=rollout)
            while ac._in_flight and ac._done.empty():
                version += 1
                fill(policy, float(version))
                assert ac.publish() == version
            slot = ac.wait()
            assert ac.collector.seen[-1][1] == {float(slot.version)}
        assert version > 6  # publishes did overlap the rollouts
        assert all(len(values) == 1 for _, values in ac.collector.seen)
        assert {tid for tid, _ in ac.collector.seen} == {ac._thread.ident} != {threading.get_ident()}
    finally:
        ac.close()
    assert not collector_threads()


def test_fused_rollout_uses_a_single_published_version():
    """Real fused kernel (runs without the GIL): published weights alternate between 'always push left' and
    'always push right'; each rollout's actions must all come from the one version it took."""
    env = rr.make_vec("CartPole-v1", 16, seed=0)
    ac, policy = make_async(lambda e, b: FusedCollector(e, b, 512), env=env, num_steps=512, num_envs=16)
    ac.obs[:] = env.reset(seed=0)[0]
    last = policy.actor[-1]

    def publish_next() -> None:  # version v pushes left (action 0) when v is odd, right when v is even
        side = ac.mailbox.version % 2
        with torch.no_grad():
            last.weight.zero_()
            last.bias.copy_(torch.tensor([30.0, -30.0] if side == 0 else [-30.0, 30.0]))
        ac.publish()

    try:
        publish_next()
        for rollout in range(6):
            ac.start(seed=rollout)
            while ac._done.empty():
                publish_next()
            slot = ac.wait()
            actions = slot.buffer.actions
            side = (slot.version - 1) % 2
            assert np.all(actions == side), (slot.version, np.unique(actions))
            np.testing.assert_allclose(slot.buffer.log_probs, 0.0, atol=1e-6)
    finally:
        ac.close()


def test_async_ppo_stores_behaviour_log_probs_one_update_stale():
    model = rr.PPO("CartPole-v1", **small())
    model.learn(64 * 6, progress_bar=False)
    ac = model.async_collector
    assert ac.pending and model.num_updates == 6 and ac.mailbox.version == 7  # the initial weights + 6 updates
    rollout = ac.wait()  # started in the last iteration, before its update: the weights after update 5
    assert rollout.version == ac.mailbox.version - 1
    b = rollout.buffer.tensors
    obs, actions = b.obs.reshape(-1, 4), b.actions.reshape(-1)
    with torch.no_grad():
        behaviour_logp, _, _ = ac.behaviour.evaluate(obs, actions)
        learner_logp, _, _ = model.policy.evaluate(obs, actions)
    torch.testing.assert_close(b.log_probs.reshape(-1), behaviour_logp, atol=1e-5, rtol=1e-5)
    assert not torch.allclose(learner_logp, behaviour_logp, atol=1e-4)  # the learner has moved on


@pytest.mark.parametrize("vectorization", ["numba", "sync"])
def test_async_same_seed_same_result(vectorization):
    def run():
        env = rr.make_vec("CartPole-v1", 4, seed=0, vectorization=vectorization)
        model = rr.PPO(env, **small())
        model.learn(64 * 8, progress_bar=False)
        return [h["losses/value_loss"] for h in model.history], [p.detach().clone() for p in model.policy.parameters()]

    (c1, p1), (c2, p2) = run(), run()
    assert c1 == c2
    for a, b in zip(p1, p2):
        torch.testing.assert_close(a, b, rtol=0, atol=0)


def test_learn_twice_continues_with_the_pending_rollout():
    model = rr.PPO("CartPole-v1", **small())
    model.learn(64 * 3, progress_bar=False)
    assert not collector_threads() and model.async_collector.pending
    model.learn(64 * 3, progress_bar=False)
    assert model.num_timesteps == 64 * 6 and model.async_collector.mailbox.version == 1 + 6
    assert not collector_threads()


def test_thread_joined_when_the_learner_raises():
    model = rr.PPO("CartPole-v1", **small())

    def boom(algo):
        if algo.num_updates == 2:
            raise KeyError("learner failure")
        return True

    with pytest.raises(KeyError, match="learner failure"):
        model.learn(64 * 10, callback=boom, progress_bar=False)
    assert not collector_threads()


class FailingEnv(gym.Env):
    observation_space = gym.spaces.Box(-1.0, 1.0, (4,), np.float32)
    action_space = gym.spaces.Discrete(2)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.t = 0
        return np.zeros(4, np.float32), {}

    def step(self, action):
        self.t += 1
        if self.t > 40:
            raise OSError("env failure")
        return np.zeros(4, np.float32), 1.0, False, False, {}


def test_collector_error_reaches_the_learner_and_the_thread_is_joined():
    gym.register("RapidrlFailingEnv-v0", entry_point=FailingEnv)
    env = rr.make_vec("RapidrlFailingEnv-v0", 4, seed=0)
    model = rr.PPO(env, **small())
    with pytest.raises(RuntimeError, match="collector thread failed") as info:
        model.learn(64 * 10, progress_bar=False)
    assert isinstance(info.value.__cause__, OSError)
    assert not collector_threads()


def test_exact_resume_checkpoint_holds_the_rollout_in_flight(tmp_path):
    """A training checkpoint lets the pending rollout finish and stores it; the loaded model trains on it next."""
    model = rr.PPO(rr.make_vec("CartPole-v1", 4, seed=0, vectorization="sync"), **small())
    model.learn(64, progress_bar=False)
    assert model.async_collector.pending
    model.save(tmp_path / "m.pt", training_state=True)
    loaded = rr.PPO.load(tmp_path / "m.pt", env=rr.make_vec("CartPole-v1", 4, seed=0, vectorization="sync"))
    assert loaded.async_collector.pending and loaded._needs_reset  # a Python env cannot be captured: reset
    mine, theirs = model.async_collector.drain(), loaded.async_collector.drain()
    for a, b in zip(mine.buffer.tensors, theirs.buffer.tensors):
        assert torch.equal(a, b)
    np.testing.assert_array_equal(mine.last_obs, theirs.last_obs)
    assert mine.version == theirs.version
    obs = np.zeros((3, 4), np.float32)
    np.testing.assert_array_equal(loaded.predict(obs, deterministic=True), model.predict(obs, deterministic=True))
    loaded.learn(64, progress_bar=False)
    model.async_collector.close()
    loaded.async_collector.close()


def test_vtrace_advantages_on_policy_returns_are_lambda_one_returns():
    """Lag 0, before any update (learner == behaviour): V-trace targets are GAE(lambda=1) returns."""
    model = rr.PPO("CartPole-v1", **small(async_collect=False, vtrace_advantages=True, num_steps=64))
    model._collect()
    b = model.buffer
    with torch.no_grad():
        last = model.policy.value(torch.from_numpy(model._last_obs)).numpy()
    _, expect = rr.kernels.gae(b.rewards, b.values, last, b.terminated, b.truncated, gamma=model.config.gamma,
                               lam=1.0, final_values=b.final_values)
    model._vtrace_advantages()
    np.testing.assert_allclose(b.returns, expect, rtol=1e-4, atol=1e-4)


@pytest.mark.slow
@pytest.mark.parametrize("vtrace", [False, True])
def test_async_ppo_learns_cartpole(vtrace):
    model = rr.PPO("CartPole-v1", seed=0, async_collect=True, vtrace_advantages=vtrace, **PPO_CARTPOLE)
    cb = EvalCallback(eval_freq=5_000, n_episodes=10, reward_threshold=400.0)
    model.learn(100_000, callback=cb, progress_bar=False)
    assert any(mean >= 400.0 for _, mean, _, _ in cb.history), cb.history


def test_loaded_weights_are_published_before_the_first_rollout(tmp_path):
    trained = rr.PPO("CartPole-v1", **small(async_collect=False))
    trained.learn(64 * 4, progress_bar=False)
    model = rr.PPO.load(trained.save(tmp_path / "m.pt"), async_collect=True)
    try:
        model._collect()  # the first rollout: no update in between, so learner == behaviour
        b = model.buffer.tensors
        with torch.no_grad():
            logp, _, _ = model.policy.evaluate(b.obs.reshape(-1, 4), b.actions.reshape(-1))
        torch.testing.assert_close(b.log_probs.reshape(-1), logp, atol=1e-5, rtol=1e-5)
    finally:
        model.async_collector.close()
    assert not collector_threads()
