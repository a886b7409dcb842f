"""Test envs and comparison helpers for the vector-env tests, in a module spawned workers can import.

``FaultyEnv`` counts steps and, at step ``fail_at`` of its lifetime, raises, calls ``os._exit`` or
sleeps (``fault="raise" | "exit" | "hang"``); with ``fault=None`` it is a well-behaved counter env.
"""

from __future__ import annotations

import functools
import os
import time

import gymnasium as gym
import numpy as np
from gymnasium.vector import AutoresetMode

FAULTY_ID = "rapidrl_test/Faulty-v0"
# "module:id" form: gymnasium.make imports this module (registering the id) in any process.
FAULTY_MODULE_ID = f"{__name__}:{FAULTY_ID}"
EXIT_CODE = 7


class FaultyEnv(gym.Env):
    """Observation = step count (Box [1] float32); reward = action; episode ends after ``horizon`` steps.

    At step ``fail_at`` the fault fires: ``"raise"`` raises ``RuntimeError("boom at step k")``,
    ``"exit"`` calls ``os._exit(EXIT_CODE)``, ``"hang"`` sleeps ``hang_seconds``.
    """

    def __init__(self, fault: str | None = None, fail_at: int = 3, horizon: int = 5,
                 hang_seconds: float = 60.0, fail_on_make: bool = False):
        if fail_on_make:
            raise ValueError("this env refuses to be made")
        self.observation_space = gym.spaces.Box(0.0, np.inf, (1,), np.float32)
        self.action_space = gym.spaces.Discrete(3)
        self.fault, self.fail_at, self.horizon, self.hang_seconds = fault, fail_at, horizon, hang_seconds
        self.t = 0
        self.total_steps = 0

    def reset(self, *, seed=None, options=None):
        """Start a new episode at count 0."""
        super().reset(seed=seed)
        self.t = 0
        return np.zeros(1, np.float32), {}

    def step(self, action):
        """Count one step; fire the fault at step ``fail_at`` (counted over the env's lifetime)."""
        self.t += 1
        self.total_steps += 1
        if self.total_steps == self.fail_at:
            if self.fault == "raise":
                raise RuntimeError(f"boom at step {self.total_steps}")
            if self.fault == "exit":
                os._exit(EXIT_CODE)
            if self.fault == "hang":
                time.sleep(self.hang_seconds)
        obs = np.array([self.t], np.float32)
        return obs, float(action), False, self.t >= self.horizon, {}


def make_faulty(**kwargs) -> gym.Env:
    """Factory used with ``functools.partial`` (picklable by reference)."""
    return FaultyEnv(**kwargs)


if FAULTY_ID not in gym.registry:
    gym.register(FAULTY_ID, entry_point=FaultyEnv)


def random_actions(space: gym.Space, num_envs: int, steps: int, seed: int) -> np.ndarray:
    """[steps, num_envs, ...] actions of the space's dtype."""
    space = gym.vector.utils.batch_space(space, num_envs)
    space.seed(seed)
    return np.stack([space.sample() for _ in range(steps)])


def gym_reference(env_id: str, num_envs: int, kwargs: dict, mode: AutoresetMode) -> gym.vector.SyncVectorEnv:
    """Gymnasium's own SyncVectorEnv over ``gymnasium.make(env_id, **kwargs)``."""
    return gym.vector.SyncVectorEnv([functools.partial(gym.make, env_id, **kwargs)] * num_envs,
                                    autoreset_mode=mode)


def assert_same_trajectory(ours, ref, actions, *, seed: int) -> dict[str, int]:
    """Step both from ``reset(seed)`` with ``actions``; compare every output; count episode ends."""
    o1, _ = ours.reset(seed=seed)
    o2, _ = ref.reset(seed=seed)
    np.testing.assert_array_equal(o1, o2)
    counts = {"terminated": 0, "truncated": 0}
    same_step = ours.autoreset_mode == AutoresetMode.SAME_STEP
    for t, a in enumerate(actions):
        obs, rew, term, trunc, info = ours.step(a)
        obs2, rew2, term2, trunc2, info2 = ref.step(a)
        np.testing.assert_array_equal(obs, obs2, err_msg=f"obs at t={t}")
        np.testing.assert_array_equal(rew, rew2.astype(np.float32), err_msg=f"rewards at t={t}")
        np.testing.assert_array_equal(term, term2, err_msg=f"terminated at t={t}")
        np.testing.assert_array_equal(trunc, trunc2, err_msg=f"truncated at t={t}")
        assert rew.dtype == np.float32 and term.dtype == np.bool_ and trunc.dtype == np.bool_
        if same_step:
            ended = term2 | trunc2
            np.testing.assert_array_equal(info["_final_obs"], ended)
            for i in np.flatnonzero(ended):
                np.testing.assert_array_equal(info["final_obs"][i], info2["final_obs"][i])
        else:
            assert "final_obs" not in info
        counts["terminated"] += int(term.sum())
        counts["truncated"] += int(trunc.sum())
    return counts


def manual_episode_stats(envs, actions, seed: int) -> None:
    """Check info["episode"] against returns and lengths summed from the step outputs."""
    envs.reset(seed=seed)
    ret = np.zeros(envs.num_envs, np.float32)
    length = np.zeros(envs.num_envs, np.int64)
    prev_done = np.zeros(envs.num_envs, bool)
    ended = 0
    for a in actions:
        _, rew, term, trunc, info = envs.step(a)
        if envs.autoreset_mode == AutoresetMode.NEXT_STEP:
            stepped = ~prev_done  # the reset step of NEXT_STEP counts neither reward nor length
            ret = np.where(prev_done, 0, ret).astype(np.float32)
            length = np.where(prev_done, 0, length)
        else:
            stepped = np.ones(envs.num_envs, bool)
        ret[stepped] += rew[stepped]
        length[stepped] += 1
        done = term | trunc
        np.testing.assert_array_equal(info["_episode"], done)
        np.testing.assert_array_equal(info["episode"]["r"][done], ret[done])
        np.testing.assert_array_equal(info["episode"]["l"][done], length[done])
        ended += int(done.sum())
        if envs.autoreset_mode == AutoresetMode.SAME_STEP:
            ret[done] = 0
            length[done] = 0
        prev_done = done
    assert ended > 0
