"""The device path (``rapidrl.train.collect.device``), run on the CPU through the same code as on a GPU:
storage and advantages stay tensors, no NumPy conversion in the loop, truncation bootstrapping, bf16
autocast of the PPO update, and PPO learning CartPole with the PyTorch env backend."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import torch

import rapidrl as rr
from rapidrl.train.callbacks import EvalCallback
from rapidrl.train.config import ConfigError

PPO_CARTPOLE = dict(num_envs=8, num_steps=32, minibatch_size=256, update_epochs=20, gamma=0.98, gae_lambda=0.8,
                    ent_coef=0.0, learning_rate=1e-3, anneal_clip=True)
ROOT = Path(__file__).resolve().parents[1]


def torch_env(env_id="CartPole-v1", n=4, **kw):
    return rr.make_vec(env_id, n, seed=0, vectorization="torch", **kw)


def small(**kw):
    base = dict(num_envs=4, num_steps=16, minibatch_size=32, update_epochs=2, seed=0)
    base.update(kw)
    return base


@pytest.mark.parametrize("env_id", ["CartPole-v1", "Pendulum-v1"])
def test_device_path_is_used_and_runs(env_id):
    model = rr.PPO(torch_env(env_id), **small())
    assert model.paths["collection"].value == "device" and model.device_collector is not None
    model.learn(256, progress_bar=False)
    assert model.num_timesteps == 256 and "losses/value_loss" in model.metrics
    assert isinstance(model.buffer.tensors.advantages, torch.Tensor)


def test_no_numpy_conversion_in_the_loop(monkeypatch):
    """After the first (reported) update, iterations that do not report touch no NumPy: every Tensor.numpy,
    Tensor.cpu, Tensor.tolist and torch.from_numpy call is counted, after each update and at the learn call's end
    (whose last iteration reports)."""
    model = rr.PPO(torch_env(validate_actions=False), **small(log_every_steps=64_000))
    model.learn(64, progress_bar=False)  # the only iteration of the call: it reports
    calls = []
    for name in ("numpy", "cpu", "tolist"):
        original = getattr(torch.Tensor, name)
        monkeypatch.setattr(torch.Tensor, name, lambda self, *a, _o=original, _n=name, **k: (calls.append(_n),
                                                                                               _o(self, *a, **k))[1])
    original_from_numpy = torch.from_numpy
    monkeypatch.setattr(torch, "from_numpy", lambda x: (calls.append("from_numpy"), original_from_numpy(x))[1])
    seen = []
    model.learn(64 * 5, callback=lambda algo: seen.append((algo.reporting, len(calls))) or True, progress_bar=False)
    assert model.num_updates == 6
    assert seen[:-1] == [(False, 0)] * 4  # no report, no NumPy
    assert seen[-1][0] and "tolist" in calls  # the last iteration reports: it reads its scalars back


def test_episode_statistics_come_from_the_device_sums():
    model = rr.PPO(torch_env(), **small(log_every_steps=2 * 64))
    model.learn(64 * 4, progress_bar=False)
    assert model.num_episodes > 0
    assert 8.0 <= model.metrics["charts/episodic_return"] <= 200.0  # a random CartPole policy: ~20


def test_truncation_bootstraps_from_the_final_observation():
    """final_values[t] = V(final obs) exactly where truncated and not terminated, else 0."""
    env = torch_env(max_episode_steps=5)
    model = rr.PPO(env, **small())
    finals = []
    step = env.step

    def recording_step(actions):
        out = step(actions)
        finals.append(out[4]["final_obs"].clone())
        return out

    env.step = recording_step
    model.device_collector.reset(0)
    model.device_collector.collect(model.buffer)
    b = model.buffer.tensors
    mask = b.truncated & ~b.terminated
    assert mask.any()
    with torch.no_grad():
        expect = torch.stack([model.policy.value(f) for f in finals])  # [T, N]
    torch.testing.assert_close(b.final_values[mask], expect[mask])
    assert (b.final_values[~mask] == 0).all()


def test_device_path_same_seed_same_result():
    def run():
        model = rr.PPO(torch_env(), **small())
        model.learn(256, progress_bar=False)
        return [p.detach().clone() for p in model.policy.parameters()]

    for a, b in zip(run(), run()):
        torch.testing.assert_close(a, b, rtol=0, atol=0)


def test_bf16_autocast_update():
    """bf16 autocast changes the update's arithmetic (so results differ from float32) but keeps float32
    parameters and finite losses."""
    def run(bf16):
        model = rr.PPO(torch_env(), **small(precision="bf16" if bf16 else "fp32"))
        model.learn(256, progress_bar=False)
        return model

    fp32, bf16 = run(False), run(True)
    assert bf16.gradient_backend == "torch" and bf16.paths["precision"].value == "bf16"
    assert all(p.dtype == torch.float32 for p in bf16.policy.parameters())
    assert bf16.history[0]["losses/value_loss"] != fp32.history[0]["losses/value_loss"]


@pytest.mark.parametrize("kwargs, match", [({"normalize_obs": True}, "normalize_obs"),
                                           ({"async_collect": True}, "async_collect"),
                                           ({"cuda_graph": True}, "CUDA")])
def test_device_path_rejects_unsupported_settings(kwargs, match):
    with pytest.raises(ConfigError, match=match):
        rr.PPO(torch_env(), **small(**kwargs))


def test_a_device_named_without_its_index_is_the_current_cuda_device(monkeypatch):
    """torch.device("cuda") != torch.device("cuda:0"), the device parameters report: every device a model, env or
    buffer keeps goes through resolve_device, so "cuda" from a config and the policy's "cuda:0" compare equal (on a
    GPU the device path refused to start without it). CUDA is simulated here; test_cuda.py runs it for real."""
    from rapidrl._device import resolve_device

    assert resolve_device("cpu") == torch.device("cpu") and resolve_device("cuda:1") == torch.device("cuda", 1)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 1)
    assert resolve_device("cuda") == torch.device("cuda", 1)
    assert resolve_device(torch.device("cuda")) == torch.device("cuda", 1)
    with pytest.raises(ValueError, match="device must be a torch device"):
        resolve_device("gpu0")
    with pytest.raises(ValueError, match="device must be a torch device"):
        resolve_device(3.5)


def test_gpu_benchmark_exits_cleanly_without_a_gpu():
    if torch.cuda.is_available():
        pytest.skip("a GPU is present: the benchmark would run for real")
    out = subprocess.run([sys.executable, "-m", "rapidrl.benchmarks.gpu"], cwd=ROOT, capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0, out.stderr
    assert "no CUDA GPU" in out.stdout


@pytest.mark.slow
def test_ppo_learns_cartpole_with_the_torch_env_backend():
    model = rr.PPO(rr.make_vec("CartPole-v1", 8, seed=0, vectorization="torch"), seed=0, **PPO_CARTPOLE)
    cb = EvalCallback(eval_freq=5_000, n_episodes=10, reward_threshold=400.0)
    model.learn(100_000, callback=cb, progress_bar=False)
    assert any(mean >= 400.0 for _, mean, _, _ in cb.history), cb.history
