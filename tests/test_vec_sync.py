"""SyncVecEnv: same trajectories as gymnasium.vector.SyncVectorEnv, episode statistics, seeding, errors."""

from __future__ import annotations

import functools

import gymnasium as gym
import numpy as np
import pytest
import vec_test_envs
from gymnasium.error import ResetNeeded
from gymnasium.vector import AutoresetMode
from vec_test_envs import assert_same_trajectory, gym_reference, manual_episode_stats, random_actions

from rapidrl.envs import ClosedEnvError
from rapidrl.envs.adapters.gymnasium import SyncVecEnv

# (id, gymnasium.make kwargs): slippery FrozenLake (random transitions, terminations), Taxi cut to 12
# steps (truncations), Pendulum cut to 9 steps (Box observations and actions, truncations).
CASES = [
    ("FrozenLake-v1", {}),
    ("Taxi-v4", {"max_episode_steps": 12}),
    ("Pendulum-v1", {"max_episode_steps": 9}),
]
NUM_ENVS = 3


@pytest.mark.parametrize("mode", [AutoresetMode.SAME_STEP, AutoresetMode.NEXT_STEP])
@pytest.mark.parametrize(("env_id", "kwargs"), CASES)
def test_same_trajectories_as_gymnasium(env_id, kwargs, mode):
    ours = SyncVecEnv(env_id, NUM_ENVS, autoreset_mode=mode, **kwargs)
    ref = gym_reference(env_id, NUM_ENVS, kwargs, mode)
    try:
        actions = random_actions(ours.single_action_space, NUM_ENVS, 60, seed=1)
        counts = assert_same_trajectory(ours, ref, actions, seed=123)
    finally:
        ours.close()
        ref.close()
    # The comparison covered episode ends of the kind each env produces.
    if env_id == "FrozenLake-v1":
        assert counts["terminated"] > 0
    else:
        assert counts["truncated"] > 0


@pytest.mark.parametrize("mode", [AutoresetMode.SAME_STEP, AutoresetMode.NEXT_STEP])
def test_episode_statistics_equal_a_manual_count(mode):
    envs = SyncVecEnv("Taxi-v4", 4, autoreset_mode=mode, max_episode_steps=7)
    try:
        manual_episode_stats(envs, random_actions(envs.single_action_space, 4, 40, seed=2), seed=5)
    finally:
        envs.close()


def test_seeding_int_list_and_constructor_seed_agree():
    envs = SyncVecEnv("Taxi-v4", 4)
    seeded = SyncVecEnv("Taxi-v4", 4, seed=10)
    try:
        by_int = envs.reset(seed=10)[0].copy()
        np.testing.assert_array_equal(envs.reset(seed=[10, 11, 12, 13])[0], by_int)
        np.testing.assert_array_equal(seeded.reset()[0], by_int)  # the constructor seed...
        assert not np.array_equal(seeded.reset()[0], by_int)  # ...is used once (P(equal) ~ 500**-4)
        per_env = [gym.make("Taxi-v4").reset(seed=10 + i)[0] for i in range(4)]
        np.testing.assert_array_equal(by_int, per_env)
        assert len(set(envs.reset(seed=[7, 7, 7, 7])[0].tolist())) == 1
    finally:
        envs.close()
        seeded.close()


def test_reset_options_reach_every_env():
    envs = SyncVecEnv("CartPole-v1", 3)
    try:
        obs, info = envs.reset(seed=0, options={"low": -0.001, "high": 0.001})
        assert info == {}
        assert np.abs(obs).max() <= 0.001
        ref = gym_reference("CartPole-v1", 3, {}, AutoresetMode.SAME_STEP)
        np.testing.assert_array_equal(obs, ref.reset(seed=0, options={"low": -0.001, "high": 0.001})[0])
        ref.close()
    finally:
        envs.close()


def test_factories_and_views_and_copies():
    fns = [functools.partial(vec_test_envs.make_faulty, horizon=2)] * 2
    envs = SyncVecEnv(fns)
    copied = SyncVecEnv([functools.partial(gym.make, vec_test_envs.FAULTY_MODULE_ID, horizon=2)] * 2, 2, copy=True)
    try:
        assert envs.env_id == "make_faulty"  # no spec: named after the factory
        assert copied.env_id == vec_test_envs.FAULTY_ID
        obs0, _ = envs.reset(seed=0)
        obs1, rew1, *_ = envs.step(np.array([1, 2]))
        assert obs1 is obs0  # one preallocated array, overwritten in place
        np.testing.assert_array_equal(rew1, [1.0, 2.0])
        copied.reset(seed=0)
        first = copied.step(np.array([1, 2]))
        second = copied.step(np.array([0, 0]))
        assert first[0] is not second[0]
        np.testing.assert_array_equal(first[0], [[1.0], [1.0]])
        np.testing.assert_array_equal(second[4]["final_obs"], [[2.0], [2.0]])
        np.testing.assert_array_equal(second[0], [[0.0], [0.0]])  # reset in the same step
        np.testing.assert_array_equal(second[4]["episode"]["r"], [1.0, 2.0])
    finally:
        envs.close()
        copied.close()


@pytest.fixture
def taxi():
    envs = SyncVecEnv("Taxi-v4", 2)
    try:
        yield envs
    finally:
        envs.close()


@pytest.mark.parametrize(("actions", "error", "match"), [
    (np.array([0, 1, 2]), ValueError, "shape"),
    (np.array([0.0, 1.0]), TypeError, "integer dtype"),
    (np.array([0, 6]), ValueError, r"\[0, 6\)"),
    ([0, 1], TypeError, "numpy.ndarray"),
])
def test_bad_actions_raise_clear_errors(taxi, actions, error, match):
    taxi.reset(seed=0)
    with pytest.raises(error, match=match):
        taxi.step(actions)


def test_bad_box_actions_raise():
    envs = SyncVecEnv("Pendulum-v1", 2)
    try:
        envs.reset(seed=0)
        with pytest.raises(ValueError, match="NaN"):
            envs.step(np.array([[0.0], [np.nan]], np.float32))
        with pytest.raises(ValueError, match="shape"):
            envs.step(np.zeros(2, np.float32))
    finally:
        envs.close()


def test_step_before_reset_and_after_close(taxi):
    with pytest.raises(ResetNeeded):
        taxi.step(np.zeros(2, np.int64))
    taxi.reset(seed=0)
    taxi.close()
    taxi.close()  # idempotent
    with pytest.raises(ClosedEnvError):
        taxi.step(np.zeros(2, np.int64))
    with pytest.raises(ClosedEnvError):
        taxi.reset()


def test_bad_construction_arguments():
    with pytest.raises(TypeError, match="flatten_observations=True"):
        SyncVecEnv("Blackjack-v1", 2)
    with pytest.raises(ValueError, match="num_envs"):
        SyncVecEnv("Taxi-v4", 0)
    with pytest.raises(ValueError, match="3 env factories"):
        SyncVecEnv([functools.partial(gym.make, "Taxi-v4")] * 3, 2)
    with pytest.raises(TypeError, match="only apply to a Gymnasium id"):
        SyncVecEnv([functools.partial(gym.make, "Taxi-v4")], max_episode_steps=3)
    with pytest.raises(ValueError, match="share their spaces"):
        SyncVecEnv([functools.partial(gym.make, "Taxi-v4"), functools.partial(gym.make, "FrozenLake-v1")])
    with pytest.raises(ValueError, match="autoreset_mode"):
        SyncVecEnv("Taxi-v4", 2, autoreset_mode="sometimes")


def test_bad_seeds(taxi):
    with pytest.raises(ValueError, match="one entry per env"):
        taxi.reset(seed=[1, 2, 3])
    with pytest.raises(ValueError, match="seed"):
        taxi.reset(seed=-1)
    with pytest.raises(TypeError, match="seed"):
        taxi.reset(seed=1.5)
