"""The built-in goal-conditioned tasks: the env contract, step by step equal to their Gymnasium twins (Dict
observations), their vectorised rewards, and ``goal_spec`` finding what HER needs (or refusing in one line)."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest

import rapidrl as rr
from rapidrl.envs.goal import GOAL_ENVS, goal_spec, register_envs
from rapidrl.envs.goal.bit_flipping import N_BITS
from rapidrl.envs.goal.point_reach import THRESHOLD
from rapidrl.envs.goal.point_reach import compute_reward as reach_reward
from rapidrl.envs.spaces import encode_observation

register_envs()


@pytest.mark.parametrize("env_id", GOAL_ENVS)
def test_goal_envs_keep_the_env_contract(env_id):
    assert rr.envs.check(rr.make_vec(env_id, 8, seed=0), steps=300).episodes > 0


@pytest.mark.parametrize("env_id", GOAL_ENVS)
def test_goal_envs_equal_their_gymnasium_twins_step_by_step(env_id):
    """The built-in env and the Dict-observation Gymnasium env, from the same states with the same actions: the flat
    observation is the twin's Dict encoded by rapidrl.envs.spaces (the adapters' flattening)."""
    space = gym.make(env_id).observation_space
    report = rr.envs.align(rr.make_vec(env_id, 4, seed=0), lambda: gym.make(env_id), steps=400,
                           state_of=lambda ref: np.asarray(ref.unwrapped.state).copy(),
                           load_state=lambda ref, s: setattr(ref.unwrapped, "state", np.array(s)),
                           obs_of=lambda o: encode_observation(space, o, np.float32), rtol=0, atol=0)
    assert report.ok, report


def test_point_reach_reward_is_sparse_and_vectorised():
    a = np.array([[0.0, 0.0], [0.0, 0.0], [1.0, 1.0]], np.float32)
    d = np.array([[THRESHOLD - 0.01, 0.0], [THRESHOLD + 0.01, 0.0], [1.0, 1.0]], np.float32)
    np.testing.assert_array_equal(reach_reward(a, d), [0.0, -1.0, 0.0])


def test_goal_spec_of_the_builtin_and_the_adapter_path_agree():
    for env_id in GOAL_ENVS:
        builtin = goal_spec(rr.make_vec(env_id, 2, seed=0))
        adapted = goal_spec(rr.make_vec(env_id, 2, seed=0, vectorization="sync", flatten_observations=True))
        for key in ("observation", "achieved_goal", "desired_goal"):
            assert getattr(builtin, key) == getattr(adapted, key)
        assert (builtin.compute_terminated is None) == (adapted.compute_terminated is None)
    bits = goal_spec(rr.make_vec("BitFlipping-v0", 2, seed=0))
    assert bits.goal_dim == N_BITS and bits.compute_terminated(np.ones((2, N_BITS)), np.ones((2, N_BITS))).all()


class NotVectorised(gym.Env):
    """Goal keys, but a compute_reward written for one goal at a time."""

    def __init__(self):
        box = gym.spaces.Box(-1.0, 1.0, (2,), np.float32)
        self.observation_space = gym.spaces.Dict({"observation": box, "achieved_goal": box, "desired_goal": box})
        self.action_space = box

    def reset(self, *, seed=None, options=None):
        return self.observation_space.sample(), {}

    def step(self, action):
        return self.observation_space.sample(), 0.0, False, False, {}

    def compute_reward(self, achieved_goal, desired_goal, info):
        return -float(np.linalg.norm(achieved_goal - desired_goal) > 0.1)


def test_goal_spec_refuses_envs_without_goals_or_vectorised_rewards():
    for vectorization in ("numba", "sync"):  # the built-in env (one Gymnasium env made locally) and the adapter's
        with pytest.raises(ValueError, match=r"^HER needs Dict observations with keys 'observation', 'achieved_goal', "
                                             r"'desired_goal'; CartPole-v1's observations are Box\(.*\)$"):
            goal_spec(rr.make_vec("CartPole-v1", 2, seed=0, vectorization=vectorization))
    from rapidrl.envs.adapters.gymnasium import SyncVecEnv
    from rapidrl.envs.spaces import flattened

    env = SyncVecEnv([flattened(NotVectorised)] * 2, seed=0)
    with pytest.raises(TypeError, match=r"^HER needs a vectorised compute_reward: .* returned shape \(\) for "
                                        r"achieved_goal and desired_goal of shape \[3, 2\]"):
        goal_spec(env)
