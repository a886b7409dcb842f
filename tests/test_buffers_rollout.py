"""RolloutBuffer and gae_torch: storage, GAE equal to the kernel, minibatch coverage/normalization,
bad input."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from rapidrl import kernels
from rapidrl.buffers import RolloutBuffer, gae_torch


def _episodes(T, N, seed, dtype=np.float32):
    rng = np.random.default_rng(seed)
    rewards = rng.normal(size=(T, N)).astype(dtype)
    values = rng.normal(size=(T, N)).astype(dtype)
    last_values = rng.normal(size=N).astype(dtype)
    terminated = rng.random((T, N)) < 0.1
    truncated = rng.random((T, N)) < 0.1
    final_values = np.where(truncated, rng.normal(size=(T, N)), 0).astype(dtype)
    return rewards, values, last_values, terminated, truncated, final_values


def _filled(T=16, N=4, seed=0, obs_shape=(2,)):
    """A full buffer whose obs[..., 0] is the flat index t * N + n; returns (buffer, last_values)."""
    r, v, lv, term, trunc, fv = _episodes(T, N, seed)
    buf = RolloutBuffer(T, N, obs_shape)
    rng = np.random.default_rng(seed + 1)
    for t in range(T):
        obs = np.zeros((N, *obs_shape), np.float32)
        obs[:, 0] = t * N + np.arange(N)
        buf.add(obs, rng.integers(0, 3, N), rng.normal(size=N).astype(np.float32), v[t], r[t], term[t],
                trunc[t], fv[t])
    return buf, lv


def test_add_fills_time_major_storage_and_shares_memory_with_torch():
    buf, _ = _filled(T=5, N=3)
    assert buf.full and buf.pos == 5
    assert buf.obs.shape == (5, 3, 2) and buf.actions.dtype == np.int64 and buf.terminated.dtype == np.bool_
    np.testing.assert_array_equal(buf.obs[:, :, 0], np.arange(15).reshape(5, 3))
    buf.rewards[0, 0] = 123.0
    assert buf.tensors.rewards[0, 0].item() == 123.0  # zero-copy views
    with pytest.raises(ValueError, match="full"):
        buf.add(*(np.zeros((3, 2), np.float32),), np.zeros(3, np.int64), *(np.zeros(3, np.float32),) * 3,
                np.zeros(3, bool), np.zeros(3, bool))
    buf.reset()
    assert buf.pos == 0 and not buf.full
    buf.tensors.rewards.fill_(2.0)  # a collector writing the storage directly
    buf.mark_full()
    assert buf.full and np.all(buf.rewards == 2.0)


def test_add_accepts_torch_tensors():
    buf = RolloutBuffer(2, 3, (4,), (2,))
    assert buf.action_dtype == np.float32
    buf.add(torch.ones(3, 4), torch.full((3, 2), 0.5), torch.zeros(3), torch.ones(3), np.ones(3, np.float64),
            torch.zeros(3, dtype=torch.bool), np.zeros(3, bool))
    np.testing.assert_array_equal(buf.actions[0], 0.5)
    np.testing.assert_array_equal(buf.rewards[0], 1.0)


@pytest.mark.parametrize("gamma,lam", [(0.99, 0.95), (0.9, 1.0), (1.0, 0.0)])
def test_compute_advantages_equals_kernel_gae(gamma, lam):
    buf, lv = _filled(T=32, N=5, seed=3)
    buf.compute_advantages(lv, gamma=gamma, lam=lam)
    adv, ret = kernels.gae(buf.rewards.copy(), buf.values.copy(), lv, buf.terminated.copy(), buf.truncated.copy(),
                           gamma=gamma, lam=lam, final_values=buf.final_values.copy())
    np.testing.assert_array_equal(buf.advantages, adv)
    np.testing.assert_array_equal(buf.returns, ret)
    # last_values as a float64 tensor is accepted too.
    buf.compute_advantages(torch.from_numpy(lv.astype(np.float64)), gamma=gamma, lam=lam)
    np.testing.assert_array_equal(buf.advantages, adv)


def test_compute_advantages_needs_a_full_rollout():
    buf = RolloutBuffer(4, 2, (1,))
    with pytest.raises(ValueError, match="full rollout"):
        buf.compute_advantages(np.zeros(2, np.float32), gamma=0.99, lam=0.95)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_gae_torch_equals_kernel_gae(dtype):
    r, v, lv, term, trunc, fv = _episodes(40, 7, seed=5, dtype=dtype)
    adv, ret = kernels.gae(r, v, lv, term, trunc, gamma=0.97, lam=0.9, final_values=fv)
    t = [torch.from_numpy(x) for x in (r, v, lv, term, trunc, fv)]
    a, b = gae_torch(*t[:5], gamma=0.97, lam=0.9, final_values=t[5])
    tol = 1e-5 if dtype == np.float32 else 1e-12
    np.testing.assert_allclose(a.numpy(), adv, rtol=tol, atol=tol)
    np.testing.assert_allclose(b.numpy(), ret, rtol=tol, atol=tol)
    out_a, out_r = torch.empty_like(t[0]), torch.empty_like(t[0])
    res = gae_torch(*t[:5], gamma=0.97, lam=0.9, final_values=t[5], out_advantages=out_a, out_returns=out_r)
    assert res[0] is out_a and res[1] is out_r
    np.testing.assert_array_equal(out_a.numpy(), a.numpy())


def test_gae_torch_checks_its_input():
    r, v, lv, term, trunc, fv = (torch.from_numpy(x) for x in _episodes(6, 3, seed=1))
    with pytest.raises(ValueError, match="final_values is None"):
        gae_torch(r, v, lv, term, trunc | True, gamma=0.9, lam=0.9)
    with pytest.raises(ValueError, match="last_values"):
        gae_torch(r, v, lv[:2], term, trunc, gamma=0.9, lam=0.9, final_values=fv)
    with pytest.raises(TypeError, match="bool"):
        gae_torch(r, v, lv, term.float(), trunc, gamma=0.9, lam=0.9, final_values=fv)
    with pytest.raises(ValueError, match="gamma"):
        gae_torch(r, v, lv, term, trunc, gamma=1.1, lam=0.9, final_values=fv)
    # Without truncation final_values is not needed, and the result equals the kernel's.
    adv, _ = kernels.gae(r.numpy(), v.numpy(), lv.numpy(), term.numpy(), np.zeros((6, 3), bool), gamma=0.9, lam=0.8)
    a, _ = gae_torch(r, v, lv, term, torch.zeros(6, 3, dtype=torch.bool), gamma=0.9, lam=0.8)
    np.testing.assert_allclose(a.numpy(), adv, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("batch_size", [64, 16, 10, 1])
def test_minibatches_cover_every_sample_once_per_epoch(batch_size):
    buf, lv = _filled(T=16, N=4)
    buf.compute_advantages(lv, gamma=0.99, lam=0.95)
    g = torch.Generator().manual_seed(0)
    seen = []
    sizes = []
    for mb in buf.minibatches(batch_size, generator=g, normalize_advantage="none", epochs=2):
        flat = mb.obs[:, 0].long()
        sizes.append(len(flat))
        t, n = flat // 4, flat % 4
        # Every field of a row comes from the same (t, n).
        np.testing.assert_array_equal(mb.actions.numpy(), buf.actions[t, n])
        np.testing.assert_array_equal(mb.log_probs.numpy(), buf.log_probs[t, n])
        np.testing.assert_array_equal(mb.values.numpy(), buf.values[t, n])
        np.testing.assert_array_equal(mb.advantages.numpy(), buf.advantages[t, n])
        np.testing.assert_array_equal(mb.returns.numpy(), buf.returns[t, n])
        seen.extend(flat.tolist())
    per_epoch = -(-64 // batch_size)
    assert len(sizes) == 2 * per_epoch
    assert sizes[per_epoch - 1] == 64 - (per_epoch - 1) * batch_size  # the last one holds the remainder
    for e in range(2):
        assert sorted(seen[e * 64:(e + 1) * 64]) == list(range(64))
    assert seen[:64] != list(range(64))  # shuffled


def test_minibatch_order_is_reproducible_from_the_generator():
    buf, lv = _filled()
    buf.compute_advantages(lv, gamma=0.99, lam=0.95)

    def order(gen):
        return [mb.obs[:, 0].tolist() for mb in buf.minibatches(16, generator=gen, normalize_advantage="none")]

    assert order(torch.Generator().manual_seed(3)) == order(torch.Generator().manual_seed(3))
    assert order(np.random.default_rng(3)) == order(np.random.default_rng(3))
    assert order(torch.Generator().manual_seed(3)) != order(torch.Generator().manual_seed(4))


def test_advantage_normalization_modes():
    buf, lv = _filled(T=16, N=4, seed=2)
    buf.compute_advantages(lv, gamma=0.99, lam=0.95)
    raw = buf.advantages.copy()
    for mb in buf.minibatches(16, generator=torch.Generator().manual_seed(0), normalize_advantage="minibatch"):
        assert abs(mb.advantages.mean().item()) < 1e-5
        assert mb.advantages.std(correction=0).item() == pytest.approx(1.0, abs=1e-4)
    g = torch.Generator().manual_seed(0)
    mean, std = raw.mean(), raw.std()
    for mb in buf.minibatches(16, generator=g, normalize_advantage="batch"):
        flat = mb.obs[:, 0].long()
        expected = (raw[flat // 4, flat % 4] - mean) / (std + 1e-8)
        np.testing.assert_allclose(mb.advantages.numpy(), expected, rtol=1e-4, atol=1e-5)
    np.testing.assert_array_equal(buf.advantages, raw)  # storage untouched
    # A 1-sample minibatch normalizes to 0, never NaN.
    assert all(mb.advantages.item() == 0.0 for mb in buf.minibatches(1, normalize_advantage="minibatch"))


def test_minibatches_take_the_old_keyword_with_a_warning():
    buf, lv = _filled(T=16, N=4, seed=2)
    buf.compute_advantages(lv, gamma=0.99, lam=0.95)
    new = [mb.advantages.clone() for mb in buf.minibatches(16, generator=torch.Generator().manual_seed(0),
                                                           normalize_advantage="batch")]
    with pytest.warns(DeprecationWarning, match="now spelled normalize_advantage="):
        old = [mb.advantages.clone() for mb in buf.minibatches(16, generator=torch.Generator().manual_seed(0),
                                                               normalize_advantages="batch")]
    assert len(old) == len(new) == 4
    for a, b in zip(old, new):
        torch.testing.assert_close(a, b, rtol=0, atol=0)


def test_minibatch_argument_checks():
    buf, _ = _filled(T=4, N=2)
    for bad in (0, 9):
        with pytest.raises(ValueError, match="batch_size"):
            next(buf.minibatches(bad))
    with pytest.raises(ValueError, match="normalize_advantage must"):
        next(buf.minibatches(4, normalize_advantage="epoch"))
    with pytest.raises(TypeError, match="generator"):
        next(buf.minibatches(4, generator=3))
    buf.reset()
    with pytest.raises(ValueError, match="full rollout"):
        next(buf.minibatches(4))


def _good_step(N=3):
    return [np.zeros((N, 2), np.float32), np.zeros(N, np.int64), np.zeros(N, np.float32), np.zeros(N, np.float32),
            np.zeros(N, np.float32), np.zeros(N, bool), np.zeros(N, bool), np.zeros(N, np.float32)]


@pytest.mark.parametrize("k,bad,exc,match", [
    (0, np.zeros((3, 3), np.float32), ValueError, "obs must have shape"),
    (1, np.zeros(3, np.float32), TypeError, "actions has dtype float32"),
    (3, np.zeros((3, 1), np.float32), ValueError, "values must have shape"),
    (4, [0.0, 0.0, 0.0], TypeError, "rewards must be"),
    (5, np.zeros(3, np.float32), TypeError, "terminated has dtype"),
    (6, np.zeros(2, bool), ValueError, "truncated must have shape"),
])
def test_rejected_add_writes_nothing(k, bad, exc, match):
    buf = RolloutBuffer(3, 3, (2,))
    step = _good_step()
    buf.add(*step)
    step[k] = bad
    step[0] = np.ones((3, 2), np.float32) if k != 0 else step[0]
    with pytest.raises(exc, match=match):
        buf.add(*step)
    assert buf.pos == 1
    assert np.all(buf.obs[1] == 0)


def test_truncation_without_final_values_is_an_error():
    buf = RolloutBuffer(3, 3, (2,))
    step = _good_step()
    step[6] = np.array([False, True, False])
    step[7] = None
    with pytest.raises(ValueError, match="final_values is None"):
        buf.add(*step)
    step[5] = np.array([False, True, False])  # terminated wins: no bootstrap needed
    buf.add(*step)
    assert buf.pos == 1 and np.all(buf.final_values[0] == 0)


def test_torch_storage_path_runs_on_a_non_cpu_device():
    """The accelerator path (torch storage, gae_torch, device index) exercised on PyTorch's "meta"
    device: shapes, dtypes and devices only (meta tensors hold no values; a GPU checks values)."""
    buf = RolloutBuffer(4, 3, (2,), device="meta")
    assert buf.arrays is None and buf.obs.device.type == "meta" and buf.terminated.dtype == torch.bool
    for _ in range(4):
        buf.add(np.zeros((3, 2), np.float32), torch.zeros(3, dtype=torch.int64), torch.zeros(3),
                np.zeros(3, np.float32), np.ones(3, np.float32), np.zeros(3, bool), np.zeros(3, bool),
                np.zeros(3, np.float32))
    with pytest.raises(ValueError, match="obs must have shape"):
        buf.reset()
        buf.add(torch.zeros(3, 5), *_good_step()[1:])
    buf.mark_full()
    buf.compute_advantages(np.zeros(3, np.float32), gamma=0.9, lam=0.9)
    sizes = []
    for mb in buf.minibatches(5, generator=torch.Generator().manual_seed(0)):
        assert mb.obs.device.type == "meta" and mb.actions.dtype == torch.int64
        sizes.append(mb.obs.shape[0])
    assert sizes == [5, 5, 2]
