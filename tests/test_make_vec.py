"""make_vec: backend choice, forwarding of options, clear errors."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import rapidrl
from rapidrl.envs import BuiltinVecEnv, VecEnvBase, list_builtin_envs, make_vec


def test_builtin_ids_default_to_numba_and_forward_options():
    env = make_vec("Pendulum-v1", 3, seed=4, autoreset_mode="next_step", copy=True, g=9.81, max_episode_steps=7)
    assert type(env) is BuiltinVecEnv and isinstance(env, VecEnvBase)
    assert env.autoreset_mode.name == "NEXT_STEP" and env.copy and env.max_episode_steps == 7
    assert env._params[1] == 9.81
    obs, _ = env.reset()
    np.testing.assert_array_equal(obs, BuiltinVecEnv("Pendulum-v1", 3, seed=4).reset()[0])  # seed forwarded
    assert rapidrl.make_vec is make_vec
    assert list_builtin_envs()[:5] == ["CartPole-v1", "Acrobot-v1", "MountainCar-v0", "MountainCarContinuous-v0",
                                       "Pendulum-v1"]
    assert "MinAtar/Breakout-v1" in list_builtin_envs()  # MinAtar ids follow (tests/test_envs_minatar.py)


def test_torch_backend_on_cpu():
    env = make_vec("CartPole-v1", 5, seed=1, vectorization="torch", device="cpu", max_episode_steps=9)
    from rapidrl.envs import TorchVecEnv

    assert isinstance(env, TorchVecEnv) and env.max_episode_steps == 9
    obs, _ = env.reset()
    assert isinstance(obs, torch.Tensor) and obs.shape == (5, 4)
    obs, *_ = env.step(torch.ones(5, dtype=torch.int64))
    assert obs.device.type == "cpu"


def test_other_gymnasium_ids_use_the_wrappers():
    from rapidrl.envs import SyncVecEnv

    env = make_vec("CartPole-v1", 2, seed=0, vectorization="sync", max_episode_steps=5)
    assert isinstance(env, SyncVecEnv)
    env.reset()
    for _ in range(5):
        *_, trunc, _ = env.step(np.zeros(2, dtype=np.int64))
    assert trunc.all()  # max_episode_steps reached gymnasium.make
    env.close()
    env = make_vec("FrozenLake-v1", 2, seed=0)
    assert isinstance(env, SyncVecEnv)
    env.close()


def test_subprocess_is_forwarded():
    from rapidrl.envs import SubprocVecEnv

    env = make_vec("CartPole-v1", 2, seed=0, vectorization="subprocess")
    try:
        assert isinstance(env, SubprocVecEnv)
        obs, _ = env.reset()
        assert obs.shape == (2, 4)
    finally:
        env.close()


def test_errors():
    with pytest.raises(ValueError, match=r"Did you mean 'CartPole-v1'.*Built-in envs: CartPole-v1, Acrobot-v1"):
        make_vec("CartPol-v1", 2)
    with pytest.raises(ValueError, match="Did you mean 'LunarLander-v3'"):
        make_vec("LunarLandr-v3", 2)
    with pytest.raises(ValueError, match="not a built-in env"):
        make_vec("FrozenLake-v1", 2, vectorization="numba")
    with pytest.raises(ValueError, match="num_envs"):
        make_vec("CartPole-v1", 0)
    with pytest.raises(ValueError, match="num_envs"):
        make_vec("CartPole-v1", 2.0)
    with pytest.raises(ValueError, match="vectorization"):
        make_vec("CartPole-v1", 2, vectorization="jax")
    with pytest.raises(ValueError, match="device"):
        make_vec("CartPole-v1", 2, device="gpu0")
    with pytest.raises(ValueError, match="runs on the CPU"):
        make_vec("CartPole-v1", 2, device="meta", vectorization="numba")
    with pytest.raises(TypeError, match="env_id"):
        make_vec(3, 2)
    with pytest.raises(TypeError, match="unexpected keyword"):
        make_vec("CartPole-v1", 2, gravity=1.0)
