"""Messages at the model's boundaries (issue 46): a file that is not a model never gets PyTorch's advice to load it
with ``weights_only=False`` (which would run its code); non-finite observations are a ValueError naming the
observation, in ``predict`` and in ``evaluate``, instead of PyTorch's error from deep inside the sampler."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import rapidrl as rr


def small_ppo(**kwargs):
    return rr.PPO("CartPole-v1", num_envs=2, num_steps=8, minibatch_size=16, seed=0, **kwargs)


def test_a_file_holding_other_objects_is_refused_without_pytorchs_advice(tmp_path):
    path = tmp_path / "numpy.pt"
    torch.save({"format": "rapidrl", "weights": np.zeros(3)}, path)  # a NumPy array: unpickling it runs code
    with pytest.raises(ValueError) as e:
        rr.PPO.load(path)
    assert str(e.value) == (f"{path} is not a rapidrl model file: it holds objects other than tensors and plain "
                            "Python values, which are not loaded (loading them would run the file's code)")
    garbage = tmp_path / "garbage.pt"
    garbage.write_bytes(b"\x80\x02not a checkpoint")
    with pytest.raises(ValueError, match=r"is not a readable rapidrl model file") as e:
        rr.PPO.load(garbage)
    assert "weights_only" not in str(e.value)


def test_predict_names_a_non_finite_observation():
    model = small_ppo()
    obs = np.zeros((3, 4), np.float32)
    obs[1, 2] = np.nan
    with pytest.raises(ValueError, match=r"^predict: observation 1 is not finite \(obs\[1, 2\] = nan\)"):
        model.predict(obs)
    with pytest.raises(ValueError, match=r"^predict: observation 0 is not finite \(obs\[0, 3\] = inf\)"):
        model.predict(np.array([0.0, 0.0, 0.0, np.inf], np.float32))  # a single observation
    assert model.predict(np.zeros(4, np.float32)).shape == ()


def test_evaluate_names_a_non_finite_observation_from_the_env():
    envs = rr.make_vec("CartPole-v1", 2, seed=0, vectorization="sync")
    step = envs.step

    def step_with_nan(actions):
        obs, *rest = step(actions)
        obs = obs.copy()
        obs[1, 0] = np.nan
        return (obs, *rest)

    envs.step = step_with_nan
    model = small_ppo(eval_env=envs)
    with pytest.raises(ValueError, match=r"^evaluate \(step 1 of CartPole-v1\): observation 1 is not finite "
                                         r"\(obs\[1, 0\] = nan\)"):
        model.evaluate(n_episodes=2)
