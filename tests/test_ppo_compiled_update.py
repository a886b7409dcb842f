"""The compiled PPO epoch (``rapidrl.kernels.ppo_update``, gradient_backend="handwritten") against the PyTorch
backend it replaces (gradient_backend="torch": autograd on ``ppo_loss``, ``optimizer_step``).

Two models with the same seed collect the same first rollout; one updates through the compiled epoch, the other
through PyTorch. After the update every parameter, both Adam moments, the step counters and the logged
statistics must agree to float32 rounding (the two paths sum in different orders, so not bitwise)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from docs_examples import python_blocks

import rapidrl as rr
from rapidrl.kernels.ppo_update import PPOEpochKernel
from rapidrl.train.config import ConfigError

CASES = {
    "cartpole-tanh-minibatch-norm": dict(env="CartPole-v1"),
    "cartpole-relu-batch-norm-entropy": dict(env="CartPole-v1", activation="relu", normalize_advantage="batch",
                                             ent_coef=0.01),
    "cartpole-no-norm-no-vclip-uneven-minibatch": dict(env="CartPole-v1", normalize_advantage="none",
                                                       clip_vloss=False, minibatch_size=100),
    "cartpole-binding-clip-3-layers": dict(env="CartPole-v1", max_grad_norm=0.05, hidden=(32, 16, 8)),
    "cartpole-no-clip": dict(env="CartPole-v1", max_grad_norm=0.0),
    "pendulum-gaussian": dict(env="Pendulum-v1", ent_coef=0.02),
    "pendulum-gaussian-relu-target-kl": dict(env="Pendulum-v1", activation="relu", target_kl=1e-4, learning_rate=3e-3),
    "pendulum-tanh-squash": dict(env="Pendulum-v1", squash="tanh", ent_coef=0.01),
    "mappo-column-slices": dict(env="MPE/simple_spread-v3", algo="MAPPO", num_envs=6, num_steps=32, minibatch_size=48),
    "ippo-column-slices-batch-norm": dict(env="MPE/simple_spread-v3", algo="IPPO", num_envs=6, num_steps=32,
                                          minibatch_size=40, normalize_advantage="batch"),
    "ppo-masked-rollout": dict(env="leaving", num_envs=12, num_steps=16, minibatch_size=32),
    "action-masks-entropy": dict(env="InvalidActionDiscrete-v0", env_kwargs=dict(dim=12, n_invalid_actions=8),
                                 ent_coef=0.05),  # the categorical over each sample's stored valid actions
}


def _one_update(compiled: bool, env: str, algo: str = "PPO", **over):
    kw = dict(num_envs=4, num_steps=64, minibatch_size=64, update_epochs=3, seed=3, learning_rate=1e-3)
    kw.update(over)
    if env == "leaving":  # a multi-agent env whose agents leave: a masked rollout (test_marl.Leaving)
        from test_marl import Leaving

        from rapidrl.envs.adapters.pettingzoo import PettingZooVecEnv

        env = PettingZooVecEnv(Leaving, kw["num_envs"] // 3)
    model = getattr(rr, algo)(env, gradient_backend="handwritten" if compiled else "torch", **kw)
    model.learn(kw["num_envs"] * kw["num_steps"] * 2, progress_bar=False)  # two updates: Adam state carries over
    if env == "leaving" or not isinstance(env, str):
        assert model.buffer.masked
    return model


@pytest.mark.parametrize("case", list(CASES))
def test_compiled_epoch_matches_the_pytorch_update(case):
    over = dict(CASES[case])
    env = over.pop("env")
    compiled, ref = _one_update(True, env, **over), _one_update(False, env, **over)
    assert compiled._compiled is not None and ref._compiled is None  # each took the path under test
    for (name, a), (_, b) in zip(compiled.policy.named_parameters(), ref.policy.named_parameters()):
        torch.testing.assert_close(a, b, rtol=2e-4, atol=2e-5, msg=name)
        sa, sb = compiled.optimizer.state[a], ref.optimizer.state[b]
        assert float(sa["step"]) == float(sb["step"])
        torch.testing.assert_close(sa["exp_avg"], sb["exp_avg"], rtol=2e-3, atol=2e-6, msg=name)
        torch.testing.assert_close(sa["exp_avg_sq"], sb["exp_avg_sq"], rtol=2e-3, atol=1e-9, msg=name)
    for k in ("losses/policy_loss", "losses/value_loss", "losses/entropy", "losses/approx_kl"):
        assert compiled.metrics[k] == pytest.approx(ref.metrics[k], rel=2e-3, abs=1e-6), k
    assert compiled.metrics["losses/clipfrac"] == pytest.approx(ref.metrics["losses/clipfrac"], abs=0.01)


@pytest.mark.parametrize("case", ["cartpole-relu-batch-norm-entropy", "cartpole-no-norm-no-vclip-uneven-minibatch",
                                  "cartpole-binding-clip-3-layers", "pendulum-gaussian-relu-target-kl",
                                  "pendulum-tanh-squash", "mappo-column-slices", "ppo-masked-rollout",
                                  "action-masks-entropy"])
def test_two_threaded_epoch_is_bitwise_the_one_threaded_epoch(case):
    """update_threads=2 (each minibatch's actor and critic halves in two threads, then clipping and Adam) must give
    exactly what one thread gives: parameters, Adam moments and step counters, and every logged statistic."""
    over = dict(CASES[case])
    env = over.pop("env")
    one, two = _one_update(True, env, **over), _one_update(True, env, update_threads=2, **over)
    assert two._compiled.kernel()._worker is not None  # the critic's thread ran
    for (name, a), (_, b) in zip(one.policy.named_parameters(), two.policy.named_parameters()):
        assert torch.equal(a, b), name
        sa, sb = one.optimizer.state[a], two.optimizer.state[b]
        for k in ("step", "exp_avg", "exp_avg_sq"):
            assert torch.equal(sa[k], sb[k]), (name, k)
    for k, v in one.metrics.items():
        if k.startswith("losses/"):
            assert two.metrics[k] == v, k


def test_two_threaded_epoch_needs_the_handwritten_backend():
    with pytest.raises(ConfigError, match=r"update_threads=2 splits the handwritten epoch.*torch backend"):
        rr.PPO("CartPole-v1", gradient_backend="torch", update_threads=2)
    with pytest.raises(ConfigError, match=r"update_threads=2 splits the handwritten epoch.*recurrent"):
        rr.PPO("CartPoleNoVel-v1", recurrent="lstm", update_threads=2)
    for bad in (0, 3, True, "2"):
        with pytest.raises(ConfigError, match="update_threads must be 1 or 2"):
            rr.PPO("CartPole-v1", update_threads=bad)


def test_two_threaded_kernel_rejects_bad_thread_counts_and_restarts_after_close():
    kernel, ref = _kernel(), _kernel()
    for bad in (4, True):
        with pytest.raises(ValueError, match="threads must be 1 or 2"):
            kernel(*_epoch_args(), **HYPER, threads=bad)
    for _ in range(2):
        stats = kernel(*_epoch_args(), **HYPER, threads=2)
        kernel.close()
        assert kernel._worker is None
        np.testing.assert_array_equal(stats, ref(*_epoch_args(), **HYPER))
    for a, b in zip(kernel.args[0], ref.args[0]):
        np.testing.assert_array_equal(a, b)


def test_docs_two_threads_example_runs():
    """docs/ppo.md's example of update_threads=2 (the page's earlier blocks train for minutes: this one runs alone,
    with the ``rr`` they import)."""
    block = next(b for b in python_blocks("ppo.md") if "update_threads=2" in b)
    exec(compile(block, "docs/ppo.md", "exec"), {"rr": rr})


def test_compiled_epoch_saves_loads_and_keeps_training():
    model = _one_update(True, "CartPole-v1")
    state = {k: v.clone() for k, v in model.policy.state_dict().items()}
    model.learn(256, progress_bar=False)
    assert any(not torch.equal(state[k], v) for k, v in model.policy.state_dict().items())


def _kernel(n_obs=4, hidden=8, n_act=2):
    rng = np.random.default_rng(0)
    shapes = np.array([(hidden, n_obs), (hidden, 1), (n_act, hidden), (n_act, 1),
                       (hidden, n_obs), (hidden, 1), (1, hidden), (1, 1)], np.int64)
    params, grads = (tuple(rng.standard_normal(int(r * c)).astype(np.float32) for r, c in shapes) for _ in range(2))
    moments = [tuple(np.zeros(int(r * c), np.float32) for r, c in shapes) for _ in range(2)]
    steps = tuple(np.zeros(1, np.float32) for _ in shapes)
    return PPOEpochKernel(params, grads, *moments, steps, shapes, n_actor=2, n_critic=2, discrete=True, relu=False)


def _epoch_args(m=32, n_obs=4):
    rng = np.random.default_rng(1)
    f = lambda: rng.standard_normal(m).astype(np.float32)  # noqa: E731
    return [rng.standard_normal((m, n_obs)).astype(np.float32), rng.integers(0, 2, m), f(), f(), f(), f(),
            rng.permutation(m)]


HYPER = dict(batch_size=8, norm_mode=1, batch_mean=0.0, batch_std=1.0, clip_coef=0.2, clip_vloss=True,
             ent_coef=0.0, vf_coef=0.5, max_grad_norm=0.5, lr=1e-3, beta1=0.9, beta2=0.999, eps=1e-5)


def test_compiled_epoch_runs_and_rejects_bad_input():
    kernel = _kernel()
    stats = kernel(*_epoch_args(), **HYPER)
    assert stats.shape == (4, 5) and np.isfinite(stats).all()
    assert all(s[0] == 4.0 for s in kernel.args[4])  # every step counter advanced once per minibatch
    bad = {
        "obs": (0, lambda a: a.astype(np.float64), TypeError),
        "obs columns": (0, lambda a: a[:, :3].copy(), ValueError),
        "actions dtype": (1, lambda a: a.astype(np.int32), TypeError),
        "actions range": (1, lambda a: a + 5, ValueError),
        "rows": (2, lambda a: a[:-1].copy(), ValueError),
        "perm range": (6, lambda a: a + 1, ValueError),
        "perm not contiguous": (6, lambda a: np.repeat(a, 2)[::2], TypeError),
    }
    for what, (i, change, err) in bad.items():
        args = _epoch_args()
        args[i] = change(args[i])
        with pytest.raises(err):
            kernel(*args, **HYPER)
        assert what
    with pytest.raises(ValueError, match="batch_size"):
        kernel(*_epoch_args(), **{**HYPER, "batch_size": 0})
    with pytest.raises(ValueError, match="norm_mode"):
        kernel(*_epoch_args(), **{**HYPER, "norm_mode": 7})


def test_binding_rejects_mismatched_arrays():
    rng = np.random.default_rng(0)
    shapes = np.array([(8, 4), (8, 1), (2, 8), (2, 1), (8, 4), (8, 1), (1, 8), (1, 1)], np.int64)
    arrays = [tuple(rng.standard_normal(int(r * c)).astype(np.float32) for r, c in shapes) for _ in range(4)]
    steps = tuple(np.zeros(1, np.float32) for _ in shapes)
    with pytest.raises(ValueError, match="tuple of 8"):
        PPOEpochKernel(arrays[0][:-1], *arrays[1:], steps, shapes, n_actor=2, n_critic=2, discrete=True, relu=False)
    wrong = (arrays[1][0][:5].copy(), *arrays[1][1:])
    with pytest.raises(ValueError, match="32 elements"):
        PPOEpochKernel(arrays[0], wrong, *arrays[2:], steps, shapes, n_actor=2, n_critic=2, discrete=True, relu=False)
    f64 = tuple(a.astype(np.float64) for a in arrays[2])
    with pytest.raises(TypeError, match="float32"):
        PPOEpochKernel(arrays[0], arrays[1], f64, arrays[3], steps, shapes, n_actor=2, n_critic=2, discrete=True,
                       relu=False)
    bad_shapes = shapes.copy()
    bad_shapes[2] = (2, 7)
    bad = [tuple(rng.standard_normal(int(r * c)).astype(np.float32) for r, c in bad_shapes) for _ in range(4)]
    with pytest.raises(ValueError, match="outputs but the next takes"):
        PPOEpochKernel(*bad, steps, bad_shapes, n_actor=2, n_critic=2, discrete=True, relu=False)


def test_rational_tanh_is_within_three_ulp_everywhere():
    from rapidrl.kernels.activations import tanh_f32, tanh_inplace

    x = np.concatenate([np.linspace(-30, 30, 400_001), [0.0, -0.0, 1e-30, -1e-30, 7.9053111, 1e4, -1e4]]
                       ).astype(np.float32)
    y = x.copy()
    tanh_inplace(y)
    exact = np.tanh(x.astype(np.float64))
    assert np.abs(y - exact).max() < 3e-7 and np.all(np.abs(y) <= 1.0)
    np.testing.assert_array_equal(np.sign(y), np.sign(exact))
    assert tanh_f32.py_func(np.float32(0.5)) == pytest.approx(np.tanh(0.5), abs=3e-7)  # the uncompiled source too
