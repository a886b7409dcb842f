"""Reward scaling (``RewardScaler``): the whole-rollout form is bitwise the per-step form, statistics included, and
the per-step form is the discounted return's running std worked out in plain Python."""

from __future__ import annotations

import numpy as np
import pytest

from rapidrl.nn.normalize import RewardScaler


def _rollouts(seed, count=3, steps=16, envs=64):
    rng = np.random.default_rng(seed)
    for _ in range(count):
        yield (rng.standard_normal((steps, envs)) * 3).astype(np.float32), rng.random((steps, envs)) < 0.1


@pytest.mark.parametrize("seed", [0, 1])
def test_a_whole_rollout_is_scaled_bitwise_as_step_by_step(seed):
    per_step, whole = RewardScaler(64, 0.99), RewardScaler(64, 0.99)
    for rewards, dones in _rollouts(seed):
        expect = np.stack([per_step(rewards[t], dones[t]) for t in range(rewards.shape[0])])
        got = whole.scale_rollout(rewards, dones)
        assert got.dtype == np.float32
        np.testing.assert_array_equal(got, expect)
        np.testing.assert_array_equal(whole.returns, per_step.returns)
        assert (whole.rms.mean, whole.rms.var, whole.rms.count, whole.max_abs) == \
            (per_step.rms.mean, per_step.rms.var, per_step.rms.count, per_step.max_abs)


def test_the_scale_is_the_running_std_of_the_discounted_return():
    """Two envs, three steps, worked in plain Python: returns g_t = 0.5 g_{t-1} + r_t, restarted after a done."""
    scaler = RewardScaler(2, 0.5, eps=0.0)
    rewards = np.array([[1.0, 2.0], [1.0, 0.0], [4.0, 2.0]], np.float32)
    dones = np.array([[False, True], [False, False], [False, False]])
    got = scaler.scale_rollout(rewards, dones)
    g, values = [0.0, 0.0], []  # the statistics start as a count of 1e-4 of mean 0 and variance 1
    for t in range(3):
        g = [0.5 * g[i] + float(rewards[t, i]) for i in range(2)]
        values += g
        mean = sum(values) / (1e-4 + len(values))
        var = (1e-4 * (1.0 + mean ** 2) + sum((v - mean) ** 2 for v in values)) / (1e-4 + len(values))
        g = [0.0 if dones[t, i] else g[i] for i in range(2)]
        np.testing.assert_allclose(got[t], rewards[t] / np.sqrt(var), rtol=1e-6)
