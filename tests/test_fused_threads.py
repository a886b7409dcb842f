"""The fused collector in several threads (``collect_threads``): each thread's range of envs is stepped exactly as the
env steps itself, acted on with the policy's own log-probs and values, sampled from the policy's distribution, and
the run is the same for a seed; bad settings are refused in one line."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import rapidrl as rr
from rapidrl.train.collect.fused import FusedCollector, env_ranges, range_seeds
from rapidrl.train.config import ConfigError


def _model(env_id, threads, **kw):
    settings = dict(num_envs=7, num_steps=64, minibatch_size=64, update_epochs=1, seed=0, collection="fused",
                    collect_threads=threads)
    settings.update(kw)
    return rr.PPO(env_id, **settings)


def test_ranges_cover_the_envs_in_near_equal_contiguous_parts():
    assert env_ranges(7, 1) == [(0, 7)]
    assert env_ranges(7, 3) == [(0, 3), (3, 5), (5, 7)]
    assert env_ranges(1024, 2) == [(0, 512), (512, 1024)]
    assert range_seeds(5, 1) == [5]  # one range: the single-threaded collector's own stream
    seeds = range_seeds(5, 3)
    assert len(set(seeds)) == 3 and seeds == range_seeds(5, 3) and seeds != range_seeds(6, 3)


@pytest.mark.parametrize("threads", [2, 3])
@pytest.mark.parametrize("env_id, num_steps", [("CartPole-v1", 64), ("Pendulum-v1", 230)])
def test_every_range_is_stepped_as_the_env_steps_itself(env_id, num_steps, threads):
    """Replaying the stored actions on a copy of the env (``NumbaVecEnv.step``, one thread) gives the stored
    observations, rewards, episode ends and bootstrap values, and the stored log-probs and values are the PyTorch
    policy's: nothing is lost or mixed up between the threads' ranges. Pendulum truncates at step 200, so its
    final observations are valued inside the rollout."""
    model = _model(env_id, threads, num_steps=num_steps)
    model.learn(7 * num_steps, progress_bar=False)  # weights off their init
    replay = rr.make_vec(env_id, 7, seed=123)
    replay.load_state_dict(model.env.state_dict())  # the same arena: state, random streams, counters
    start = model._obs.copy()
    model._collect()
    buf = model.buffer
    np.testing.assert_array_equal(buf.obs[0], start)
    discrete = model.policy.discrete
    space = model.env.single_action_space
    for t in range(num_steps):
        np.testing.assert_array_equal(model._raw_obs[t], buf.obs[t])
        np.testing.assert_array_equal(replay.arrays.obs, buf.obs[t])
        actions = buf.actions[t] if discrete else np.clip(buf.actions[t], space.low, space.high)
        _, rewards, terminated, truncated, _ = replay.step(actions)
        np.testing.assert_array_equal(rewards, buf.rewards[t])
        np.testing.assert_array_equal(terminated, buf.terminated[t])
        np.testing.assert_array_equal(truncated, buf.truncated[t])
        bootstrap = truncated & ~terminated
        with torch.no_grad():
            final_values = model.policy.value(torch.from_numpy(replay.arrays.final_obs.copy())).numpy()
        np.testing.assert_allclose(buf.final_values[t], np.where(bootstrap, final_values, 0.0), rtol=1e-5, atol=1e-5)
    assert buf.truncated.any() == (env_id == "Pendulum-v1")
    obs = torch.from_numpy(buf.obs.reshape(-1, buf.obs.shape[-1]))
    actions = torch.from_numpy(buf.actions.reshape(-1, *buf.actions.shape[2:]))
    with torch.no_grad():
        logp, _, values = model.policy.evaluate(obs, actions)
    np.testing.assert_allclose(buf.log_probs.reshape(-1), logp.numpy(), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(buf.values.reshape(-1), values.numpy(), rtol=1e-5, atol=1e-5)


def test_every_episode_of_every_range_is_counted():
    model = _model("CartPole-v1", 3, num_steps=128)
    model._collect()
    buf = model.buffer
    assert model.num_episodes == int((buf.terminated | buf.truncated).sum()) > 0
    assert list(model._returns) == [float(n) for n in model._lengths]  # CartPole pays 1 per step


def test_every_range_samples_the_policy_distribution_from_a_stream_of_its_own():
    """Chi-square: the actions follow the policy's categorical distribution; and the ranges' streams differ (a range
    repeating another's draws would act identically on a state-independent policy)."""
    model = _model("Acrobot-v1", 2, num_envs=64)
    with torch.no_grad():  # a non-uniform, state-independent policy
        last = model.policy.actor[-1]
        last.weight.zero_()
        last.bias.copy_(torch.tensor([0.5, -0.3, 0.1]))
    model._collect()
    actions = model.buffer.actions
    counts = np.bincount(actions.reshape(-1), minlength=3)
    expected = torch.softmax(torch.tensor([0.5, -0.3, 0.1]), 0).numpy() * counts.sum()
    assert float(((counts - expected) ** 2 / expected).sum()) < 13.8  # 99.9% quantile, 2 degrees of freedom
    assert not np.array_equal(actions[:, :32], actions[:, 32:])


def test_same_seed_same_run_and_another_thread_count_another_rollout():
    def run(threads):
        m = _model("CartPole-v1", threads)
        m.learn(4 * 7 * 64, progress_bar=False)
        return [h["losses/value_loss"] for h in m.history], [p.detach().clone() for p in m.policy.parameters()]

    (c1, p1), (c2, p2) = run(2), run(2)
    assert c1 == c2
    for a, b in zip(p1, p2, strict=True):
        torch.testing.assert_close(a, b, rtol=0, atol=0)
    assert run(1)[0] != c1


@pytest.mark.parametrize("settings, message", [
    ({"collect_threads": 0}, r"collect_threads must be an int in \[1, num_envs=4\], got 0"),
    ({"collect_threads": 5}, r"collect_threads must be an int in \[1, num_envs=4\], got 5"),
    ({"collect_threads": True}, r"collect_threads must be an int in \[1, num_envs=4\], got True"),
    ({"collect_threads": 2, "collection": "step"}, r"collect_threads=2 splits the fused collector .* "
                                                     r"collection='step' collects in one thread"),
    ({"collect_threads": 2, "shared": True},
     r"collect_threads=2 splits the fused collector, and this run collects with 'step' .*set collect_threads=1"),
])
def test_bad_thread_settings_are_refused_in_one_line(settings, message):
    with pytest.raises(ConfigError, match=message):
        rr.PPO("CartPole-v1", num_envs=4, num_steps=16, minibatch_size=32, seed=0, **settings)


def test_the_collector_refuses_a_thread_count_it_cannot_split_and_a_closed_one_refuses_to_collect():
    model = _model("CartPole-v1", 1)
    with pytest.raises(ValueError, match=r"threads must be an int in \[1, num_envs=7\], got 8"):
        FusedCollector(model.env, model.policy, 64, threads=8)
    collector = FusedCollector(model.env, model.policy, 64, threads=2)
    collector.close()
    with pytest.raises(RuntimeError, match="closed"):
        collector.collect(model.buffer, model._obs, model._raw_obs, None, 0)


def test_the_docs_example_runs(capsys):
    """docs/ppo.md's example of collect_threads=2 (the page's earlier blocks train for minutes: this one runs alone)."""
    from docs_examples import python_blocks

    block = next(b for b in python_blocks("ppo.md") if "collect_threads=2" in b)
    exec(compile(block, "docs/ppo.md", "exec"), {})
    assert capsys.readouterr().out.strip() == "fused [(0, 32), (32, 64)]"


def test_the_asynchronous_collectors_thread_splits_its_envs_too():
    model = _model("CartPole-v1", 2, async_collect=True)
    model.learn(3 * 7 * 64, progress_bar=False)
    assert model.async_collector.collector.ranges == [(0, 4), (4, 7)]
    assert model.num_timesteps == 3 * 7 * 64 and model.num_episodes > 0
