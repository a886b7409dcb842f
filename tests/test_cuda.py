"""The CUDA paths on a real GPU: the device collector (env, policy and storage on the GPU), CUDA-graph rollouts,
bf16 autocast on "cuda", every algorithm's networks on the GPU with CPU envs, a model trained on the GPU loaded
on the CPU, and PPO learning CartPole entirely on the GPU.

The same code runs on ``device="cpu"`` in the rest of the suite (test_device.py, test_precision.py); these
tests need a CUDA GPU and are skipped without one (CI has none: run them on a GPU machine with
``pytest tests/test_cuda.py``; what they showed is in the notes of issue 28).
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

import rapidrl as rr
from rapidrl.train.callbacks import EvalCallback

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU (torch.cuda.is_available())")

SMALL_ON = dict(num_envs=4, num_steps=16, minibatch_size=32, update_epochs=2, seed=0)
SMALL_OFF = dict(learning_starts=64, batch_size=32, buffer_size=1_000, log_every_steps=4, seed=0)


def gpu_env(env_id="CartPole-v1", n=64, **kw):
    return rr.make_vec(env_id, n, seed=0, device="cuda", vectorization="torch", **kw)


def on_cuda(module: torch.nn.Module) -> bool:
    return all(p.device.type == "cuda" for p in module.parameters())


@pytest.mark.parametrize("env_id", ["CartPole-v1", "Pendulum-v1"])
def test_device_collector_runs_on_the_gpu(env_id):
    model = rr.PPO(gpu_env(env_id), device="cuda", **{**SMALL_ON, "num_envs": 64, "minibatch_size": 256})
    assert model.device_collector is not None and on_cuda(model.policy)
    model.learn(64 * 16 * 3, progress_bar=False)
    assert model.buffer.tensors.advantages.device.type == "cuda"


def test_cuda_graph_rollout_replays_and_trains():
    """The rollout captured once as a CUDA graph is replayed; episodes still finish and are counted."""
    kw = {**SMALL_ON, "num_envs": 256, "num_steps": 32, "minibatch_size": 2048}
    model = rr.PPO(gpu_env(n=256, validate_actions=False), device="cuda", cuda_graph=True, **kw)
    model.learn(256 * 32 * 6, progress_bar=False)
    assert model.device_collector._graph is not None
    assert model.metrics["charts/episodic_length"] > 0


def test_cuda_graph_and_eager_rollouts_agree():
    """Replaying the captured rollout computes what running it eagerly computes: the same seed gives the same
    episode statistics after the same number of updates, graph or not."""
    kw = {**SMALL_ON, "num_envs": 128, "num_steps": 16, "minibatch_size": 1024, "update_epochs": 1}

    def run(graph):
        model = rr.PPO(gpu_env(n=128, validate_actions=False), device="cuda", cuda_graph=graph, **kw)
        model.learn(128 * 16 * 4, progress_bar=False)
        return torch.cat([p.detach().flatten() for p in model.policy.parameters()]).cpu()

    eager, graph = run(False), run(True)
    torch.testing.assert_close(graph, eager, rtol=1e-4, atol=1e-5)


def test_bf16_autocast_on_cuda_keeps_float32_parameters():
    model = rr.PPO("MinAtar/Breakout-v1", device="cuda", precision="bf16",
                   **{**SMALL_ON, "num_envs": 8, "minibatch_size": 64})
    assert model.paths["precision"].value == "bf16" and on_cuda(model.policy)
    model.learn(8 * 16 * 2, progress_bar=False)
    assert all(p.dtype == torch.float32 for p in model.policy.parameters())


def test_auto_precision_keeps_fp32_on_the_gpu_and_says_why():
    model = rr.PPO("MinAtar/Breakout-v1", device="cuda", precision="auto", **{**SMALL_ON, "minibatch_size": 64})
    assert model.precision == "fp32" and "measured slower" in model.paths["precision"].reason


@pytest.mark.parametrize("precision", ["fp32", "bf16"])
@pytest.mark.parametrize("make", [
    lambda **kw: rr.DQN("CartPole-v1", hidden=(64, 64), **SMALL_OFF, **kw),
    lambda **kw: rr.SAC("Pendulum-v1", hidden=(64, 64), **SMALL_OFF, **kw),
    lambda **kw: rr.TD3("Pendulum-v1", hidden=(64, 64), **SMALL_OFF, **kw),
    lambda **kw: rr.A2C("CartPole-v1", num_envs=4, num_steps=8, seed=0, **kw),
], ids=["dqn", "sac", "td3", "a2c"])
def test_every_algorithm_trains_with_its_networks_on_the_gpu(make, precision):
    model = make(device="cuda", precision=precision)
    model.learn(400, progress_bar=False)
    assert model.precision == precision and model.gradient_backend == "torch"
    modules = [m for m in vars(model).values() if isinstance(m, torch.nn.Module)]
    assert modules and all(on_cuda(m) for m in modules)
    assert any(k.startswith("losses/") for k in model.metrics)  # it trained (log_every_steps=4: losses are logged)


def test_recurrent_ppo_on_the_gpu():
    model = rr.PPO("CartPole-v1", device="cuda", recurrent="lstm", **SMALL_ON)
    model.learn(4 * 16 * 2, progress_bar=False)
    assert on_cuda(model.policy) and "losses/value_loss" in model.metrics


def test_model_trained_on_the_gpu_loads_and_acts_alike_on_the_cpu(tmp_path):
    model = rr.PPO("CartPole-v1", device="cuda", **SMALL_ON)
    model.learn(4 * 16 * 2, progress_bar=False)
    model.save(tmp_path / "m.pt")
    cpu = rr.PPO.load(tmp_path / "m.pt", device="cpu")
    assert all(p.device.type == "cpu" for p in cpu.policy.parameters())
    obs = np.random.default_rng(0).normal(size=(32, 4)).astype(np.float32)
    np.testing.assert_array_equal(cpu.predict(obs, deterministic=True), model.predict(obs, deterministic=True))


def test_same_seed_same_result_on_the_gpu():
    def run():
        model = rr.PPO(gpu_env(n=32), device="cuda", **{**SMALL_ON, "num_envs": 32, "minibatch_size": 128})
        model.learn(32 * 16 * 3, progress_bar=False)
        return torch.cat([p.detach().flatten() for p in model.policy.parameters()]).cpu()

    torch.testing.assert_close(run(), run(), rtol=0, atol=0)


def test_ppo_learns_cartpole_entirely_on_the_gpu():
    """The torch env backend on the GPU, the device collector, GAE and the update on the GPU: the same
    threshold as the CPU run of test_device.py."""
    model = rr.PPO(gpu_env(n=8), device="cuda", seed=0, num_envs=8, num_steps=32, minibatch_size=256,
                   update_epochs=20, gamma=0.98, gae_lambda=0.8, ent_coef=0.0, learning_rate=1e-3, anneal_clip=True)
    cb = EvalCallback(eval_freq=5_000, n_episodes=10, reward_threshold=400.0)
    model.learn(100_000, callback=cb, progress_bar=False)
    assert cb.best_mean >= 400.0, cb.history
