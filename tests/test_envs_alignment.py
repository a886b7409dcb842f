"""Built-in envs step exactly like Gymnasium's reference envs.

Each test drives N rapidrl envs and N ``gymnasium.make(id).unwrapped`` envs (TimeLimit counted by
hand) from the same states with the same random actions for thousands of steps and many episodes,
and compares observation, reward, terminated and truncated at every step. Episodes start from a
shared state: even episodes from a Gymnasium reset copied into rapidrl, odd ones from rapidrl's own
automatic reset copied into Gymnasium (so rapidrl's reset states are exercised too).
"""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest

from rapidrl.envs import BuiltinVecEnv
from rapidrl.envs.classic import CLASSIC_ENVS, get_spec

N = 6

CASES = [
    ("CartPole-v1", {}, 2000),
    ("CartPole-v1", {"max_episode_steps": 25}, 300),  # exercises truncation (random play rarely lasts 500)
    ("CartPole-v1", {"sutton_barto_reward": True}, 300),
    ("Acrobot-v1", {}, 1000),
    ("MountainCar-v0", {}, 1000),
    ("MountainCarContinuous-v0", {}, 2000),
    ("Pendulum-v1", {}, 1000),
    ("Pendulum-v1", {"g": 9.81}, 400),
]


def _gym_env(env_id, kwargs):
    kw = {k: v for k, v in kwargs.items() if k != "max_episode_steps"}
    return gym.make(env_id, **kw).unwrapped


def _random_actions(spec, rng, n):
    if spec.action_kind == "discrete":
        return rng.integers(0, spec.action_size, n)
    # 1.5x the bounds: exercises clipping (and MountainCarContinuous' unclipped action cost)
    return rng.uniform(1.5 * spec.action_low, 1.5 * spec.action_high, (n, spec.action_size)).astype(np.float32)


def _observation(ref):
    """Gymnasium's observation of ``ref.state`` (the state itself where the env has no getter)."""
    for getter in ("_get_obs", "_get_ob"):  # Pendulum, Acrobot
        if hasattr(ref, getter):
            return getattr(ref, getter)()
    return np.asarray(ref.state, dtype=np.float32)


def _reset_state(ref, seed):
    ref.reset(seed=seed)
    return np.asarray(ref.state, dtype=np.float64)


@pytest.mark.parametrize(("env_id", "kwargs", "steps"), CASES, ids=[f"{c[0]}-{c[1]}" for c in CASES])
def test_trajectories_match_gymnasium(env_id, kwargs, steps):
    spec = get_spec(env_id)
    env = BuiltinVecEnv(env_id, N, seed=123, **kwargs)
    env.reset()
    limit = kwargs.get("max_episode_steps", spec.max_episode_steps)
    refs = [_gym_env(env_id, kwargs) for _ in range(N)]
    rng = np.random.default_rng(0)
    episode = np.zeros(N, dtype=int)
    elapsed = np.zeros(N, dtype=int)
    for i, ref in enumerate(refs):
        ref.reset(seed=i)
        env.set_state(i, ref.state)
    ref_obs = np.zeros_like(env.single_observation_space.sample()[None].repeat(N, 0))
    ref_rew = np.zeros(N)
    ref_term = np.zeros(N, dtype=bool)
    counts = {"terminated": 0, "truncated": 0}
    for t in range(steps):
        actions = _random_actions(spec, rng, N)
        obs, rewards, terminated, truncated, info = env.step(actions)
        for i, ref in enumerate(refs):
            a = int(actions[i]) if spec.action_kind == "discrete" else actions[i]
            ref_obs[i], ref_rew[i], ref_term[i], _, _ = ref.step(a)
        elapsed += 1
        ref_trunc = elapsed >= limit
        done = ref_term | ref_trunc
        where = f"{env_id} step {t}"
        got = np.where(done[:, None], info["final_obs"], obs)
        np.testing.assert_allclose(got, ref_obs, rtol=1e-6, atol=1e-6, err_msg=where)
        np.testing.assert_allclose(rewards, ref_rew, rtol=1e-6, atol=1e-6, err_msg=where)
        np.testing.assert_array_equal(terminated, ref_term, err_msg=where)
        np.testing.assert_array_equal(truncated, ref_trunc, err_msg=where)
        np.testing.assert_array_equal(info["_final_obs"], done, err_msg=where)
        counts["terminated"] += int(ref_term.sum())
        counts["truncated"] += int(ref_trunc.sum())
        for i in np.flatnonzero(done).tolist():
            ref = refs[i]
            episode[i] += 1
            elapsed[i] = 0
            if episode[i] % 2:  # rapidrl's own reset state -> Gymnasium (reset first: clears its episode flags)
                ref.reset()
                ref.state = env.get_state()[:, i].copy()
                np.testing.assert_array_equal(obs[i], _observation(ref))
            else:  # Gymnasium's reset state -> rapidrl
                ref.reset(seed=1000 * i + int(episode[i]))
                env.set_state(i, ref.state)
    assert episode.sum() >= 10, f"only {episode.sum()} episodes ended: the test covers too little"
    if env_id == "CartPole-v1":
        assert counts["terminated"] > 0
    if env_id in ("Acrobot-v1", "Pendulum-v1", "MountainCar-v0") or "max_episode_steps" in kwargs:
        assert counts["truncated"] > 0


@pytest.mark.parametrize("env_id", list(CLASSIC_ENVS))
def test_spaces_match_gymnasium(env_id):
    env = BuiltinVecEnv(env_id, 3, seed=0)
    ref = gym.make(env_id)
    assert env.single_observation_space == ref.observation_space
    assert env.single_action_space == ref.action_space
    assert env.observation_space == gym.vector.utils.batch_space(ref.observation_space, 3)
    assert env.action_space == gym.vector.utils.batch_space(ref.action_space, 3)
    assert env.max_episode_steps == ref.spec.max_episode_steps
    assert env.metadata["render_fps"] == ref.unwrapped.metadata["render_fps"]


# Gymnasium's initial-state distributions: independent uniforms per state variable (low, high), or a
# constant; Acrobot rounds its draw to float32.
INITIAL = {
    "CartPole-v1": [(-0.05, 0.05)] * 4,
    "Acrobot-v1": [(-0.1, 0.1)] * 4,
    "MountainCar-v0": [(-0.6, -0.4), 0.0],
    "MountainCarContinuous-v0": [(-0.6, -0.4), 0.0],
    "Pendulum-v1": [(-np.pi, np.pi), (-1.0, 1.0)],
}


@pytest.mark.parametrize("env_id", list(CLASSIC_ENVS))
def test_initial_state_distribution(env_id):
    n = 4000
    env = BuiltinVecEnv(env_id, n, seed=7)
    env.reset()
    state = env.get_state()
    ref = gym.make(env_id).unwrapped
    ref_states = np.array([_reset_state(ref, s) for s in range(300)]).T
    for row, dist in enumerate(INITIAL[env_id]):
        x, r = state[row], ref_states[row]
        if isinstance(dist, float):
            assert np.all(x == dist) and np.all(r == dist)
            continue
        low, high = dist
        assert low <= x.min() and x.max() <= high, (row, x.min(), x.max())
        assert low <= r.min() and r.max() <= high  # the reference agrees on the support
        width = high - low
        # uniform: mean at the centre (4000 draws: std of the mean = width / sqrt(12 * 4000) ~ 0.0046 w)
        assert abs(x.mean() - (low + high) / 2) < 0.03 * width
        # fills the interval: every tenth of it gets about 10% of the draws
        counts = np.histogram(x, bins=10, range=(low, high))[0]
        assert counts.min() > 0.07 * n and counts.max() < 0.13 * n, counts
    if env_id == "Acrobot-v1":
        np.testing.assert_array_equal(state, state.astype(np.float32).astype(np.float64))
    assert len(np.unique(state[0])) == n  # every env gets its own draw


def test_reset_options_change_bounds_like_gymnasium():
    env = BuiltinVecEnv("CartPole-v1", 500, seed=0)
    obs, _ = env.reset(options={"low": 0.1, "high": 0.2})
    assert obs.min() >= 0.1 and obs.max() <= 0.2
    ref = gym.make("CartPole-v1")
    ref_obs, _ = ref.reset(seed=0, options={"low": 0.1, "high": 0.2})
    assert ref_obs.min() >= 0.1 and ref_obs.max() <= 0.2
    with pytest.raises(ValueError, match="Lower bound"):
        env.reset(options={"low": 1.0, "high": 0.0})
    with pytest.raises(ValueError, match="reset options"):
        env.reset(options={"x_init": 1.0})
    pend = BuiltinVecEnv("Pendulum-v1", 500, seed=0)
    pend.reset(options={"x_init": 0.5, "y_init": 0.25})
    state = pend.get_state()
    assert np.abs(state[0]).max() <= 0.5 and np.abs(state[1]).max() <= 0.25
