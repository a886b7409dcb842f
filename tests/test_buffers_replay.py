"""ReplayBuffer: exact storage, wrap-around, n-step targets vs the kernel reference, persistence,
mmap storage, bad input, thread safety."""

from __future__ import annotations

import threading

import numpy as np
import pytest
import torch

from rapidrl._unsafe import replay_table
from rapidrl.buffers import ReplayBatch, ReplayBuffer
from rapidrl.buffers.batch import flat_outputs
from rapidrl.kernels import reference
from rapidrl.kernels import replay as replay_cores
from rapidrl.kernels.rng import derive_keys, uniform_reference


def _transition(k: int, num_envs: int, obs_dim: int = 3):
    """Step k of num_envs envs; every field encodes (k, env) so a sample can be traced back."""
    ids = k * 100 + np.arange(num_envs)  # [E]
    obs = np.repeat(ids[:, None], obs_dim, 1).astype(np.float32)  # [E, D]
    return (obs, ids.astype(np.int64), ids.astype(np.float32), obs + 0.5,
            (ids % 7) == 3, (ids % 5) == 2)


def _check_batch_matches(batch: ReplayBatch, expected: dict):
    """Every sampled row equals the transition stored at its index (1-step)."""
    for k, i in enumerate(batch.indices):
        obs, act, rew, nobs, term, trunc = expected[int(i)]
        np.testing.assert_array_equal(batch.obs[k], obs)
        assert batch.actions[k] == act
        assert batch.rewards[k] == rew
        np.testing.assert_array_equal(batch.next_obs[k], nobs)
        assert batch.terminated[k] == term and batch.truncated[k] == trunc
        assert batch.discounts[k] == np.float32(0.0 if term else 0.99)
        assert batch.weights[k] == 1.0


@pytest.mark.parametrize("num_envs,steps,capacity", [(3, 4, 20), (3, 9, 10), (1, 25, 7)])
def test_samples_are_exactly_what_was_added_including_wrap_around(num_envs, steps, capacity):
    rb = ReplayBuffer(capacity, (3,), (), action_dtype=np.int64, seed=0)
    expected = {}
    row = 0
    for k in range(steps):
        tr = _transition(k, num_envs)
        rb.add(*tr)
        for e in range(num_envs):
            expected[row % capacity] = tuple(x[e] for x in tr)
            row += 1
    assert len(rb) == min(row, capacity)
    assert rb.pos == row % capacity
    for _ in range(5):
        _check_batch_matches(rb.sample(len(rb)), expected)
    # The stored rows are exactly the newest `capacity` transitions.
    stored = sorted(int(v) for v in rb.arrays()["actions"][: len(rb)])
    newest = sorted(int(expected[i][1]) for i in range(len(rb)))
    assert stored == newest


def test_uint8_images_stay_uint8_and_exact():
    rb = ReplayBuffer(16, (84, 84, 4), (), obs_dtype=np.uint8, action_dtype=np.int64, seed=1)
    rng = np.random.default_rng(0)
    obs = rng.integers(0, 256, (8, 84, 84, 4), dtype=np.uint8)
    nobs = rng.integers(0, 256, (8, 84, 84, 4), dtype=np.uint8)
    rb.add(obs, np.arange(8), np.zeros(8, np.float32), nobs, np.zeros(8, bool), np.zeros(8, bool))
    b = rb.sample(8)
    assert b.obs.dtype == np.uint8 and rb.arrays()["obs"].dtype == np.uint8
    np.testing.assert_array_equal(b.obs, obs[b.indices])
    np.testing.assert_array_equal(b.next_obs, nobs[b.indices])


def test_continuous_actions_and_cast_rules():
    rb = ReplayBuffer(8, (2,), (3,), seed=0)
    obs = np.ones((2, 2), np.float32)
    # float64 rewards (gymnasium's vector envs) and uint8 0/1 flags are accepted (same_kind cast).
    rb.add(obs, np.full((2, 3), 0.25, np.float64), np.array([1.5, 2.5]), obs, np.array([1, 0], np.uint8),
           np.zeros(2, np.uint8))
    stored = rb.arrays()
    np.testing.assert_array_equal(stored["rewards"][:2], [1.5, 2.5])
    np.testing.assert_array_equal(stored["terminated"][:2], [True, False])
    b = rb.sample(2)
    assert b.actions.shape == (2, 3) and np.all(b.actions == 0.25) and set(b.rewards) <= {1.5, 2.5}
    np.testing.assert_array_equal(b.terminated, b.rewards == 1.5)


def test_sample_returns_reused_arrays_and_sample_into_matches():
    a, b = (ReplayBuffer(50, (3,), (), action_dtype=np.int64, seed=7) for _ in range(2))
    for k in range(10):
        a.add(*_transition(k, 3))
        b.add(*_transition(k, 3))
    first = a.sample(16)
    copy = ReplayBatch(*(x.copy() for x in first))
    second = a.sample(16)
    assert second.obs is first.obs  # reused storage (documented)
    out = ReplayBatch(*(np.empty_like(x) for x in copy))
    assert b.sample_into(16, out) is out
    for x, y in zip(out, copy):
        np.testing.assert_array_equal(x, y)
    with pytest.raises(ValueError, match=r"out\.obs"):
        b.sample_into(16, out._replace(obs=np.empty((16, 4), np.float32)))


def test_seed_gives_reproducible_sampling():
    bufs = [ReplayBuffer(100, (3,), (), action_dtype=np.int64, seed=s) for s in (3, 3, 4)]
    for buf in bufs:
        for k in range(20):
            buf.add(*_transition(k, 3))
    i0, i1, i2 = (buf.sample(32).indices.copy() for buf in bufs)
    np.testing.assert_array_equal(i0, i1)
    assert not np.array_equal(i0, i2)


def test_uniform_sampling_frequencies():
    """Chi-square goodness of fit to uniform over the 30 stored rows (fixed seed)."""
    rb = ReplayBuffer(30, (3,), (), action_dtype=np.int64, seed=11)
    for k in range(10):
        rb.add(*_transition(k, 3))
    counts = np.zeros(30)
    for _ in range(400):
        np.add.at(counts, rb.sample(30).indices, 1)
    expected = counts.sum() / 30
    chi2 = ((counts - expected) ** 2 / expected).sum()
    assert chi2 < 58.3  # 29 degrees of freedom, p = 0.001


def test_one_step_discounts_and_truncation_bootstrap():
    rb = ReplayBuffer(10, (1,), (), gamma=0.9, seed=0)
    obs = np.zeros((3, 1), np.float32)
    final = np.array([[7.0], [8.0], [9.0]], np.float32)  # true final obs at the episode ends
    rb.add(obs, np.zeros(3, np.float32), np.ones(3, np.float32), final, np.array([True, False, False]),
           np.array([False, True, False]))
    b = rb.sample(3)
    np.testing.assert_allclose(b.discounts, np.array([0.0, 0.9, 0.9])[b.indices], rtol=1e-6)
    np.testing.assert_array_equal(b.next_obs[:, 0], final[b.indices, 0])


def _nstep_episode_data(T, N, seed):
    rng = np.random.default_rng(seed)
    rewards = rng.normal(size=(T, N)).astype(np.float32)
    terminated = rng.random((T, N)) < 0.1
    truncated = rng.random((T, N)) < 0.1
    values = rng.normal(size=(T, N)).astype(np.float32)  # V(obs[t])
    final_values = rng.normal(size=(T, N)).astype(np.float32)  # V(true final obs) at episode ends
    last_values = rng.normal(size=N).astype(np.float32)
    # next_obs carries its own value in component 0: V(next_obs[t]) = next value of step t.
    next_v = np.concatenate([values[1:], last_values[None]])
    ended = terminated | truncated
    next_v = np.where(ended, final_values, next_v)
    obs = np.stack([values, np.zeros_like(values)], -1)  # [T, N, 2]
    next_obs = np.stack([next_v, np.ones_like(values)], -1)
    return rewards, values, last_values, terminated, truncated, final_values, obs, next_obs


@pytest.mark.parametrize("n_step", [1, 3, 5])
@pytest.mark.parametrize("capacity_steps", [40, 13])  # 13 < T: wrap-around, cut at the head
@pytest.mark.parametrize("draw", ["sample", "sampler"])  # ReplayBuffer.sample, and the fast sampler's path
def test_n_step_targets_equal_the_kernel_reference(n_step, capacity_steps, draw):
    T, N, gamma = 40, 4, 0.9
    rewards, values, last_values, term, trunc, fv, obs, next_obs = _nstep_episode_data(T, N, seed=n_step)
    rb = ReplayBuffer(capacity_steps * N, (2,), (), n_step=n_step, gamma=gamma, num_envs=N, seed=0)
    for t in range(T):
        rb.add(obs[t], np.full(N, t, np.float32), rewards[t], next_obs[t], term[t], trunc[t])
    # The buffer holds the last capacity_steps steps; the reference sees the same window, and the
    # window's end bootstraps from the value of the newest next_obs (= last_values).
    w = slice(T - capacity_steps, T)
    ref = reference.n_step_returns(rewards[w], values[w], last_values, term[w], trunc[w], gamma, n_step,
                                   final_values=fv[w])
    b = rb.sample(len(rb)) if draw == "sample" else rb.sampler(len(rb), seed=3)()
    target = b.rewards + b.discounts * b.next_obs[:, 0]
    t_idx = b.actions.astype(int) - (T - capacity_steps)
    env = b.indices % N
    np.testing.assert_allclose(target, ref[t_idx, env], rtol=1e-5, atol=1e-5)
    # The flags describe the last step looked at: a termination means discount 0.
    assert np.all(b.discounts[b.terminated] == 0)
    assert np.all(b.discounts[~b.terminated] > 0)


def test_n_step_needs_num_envs_rows_and_compatible_capacity():
    with pytest.raises(ValueError, match="multiple of num_envs"):
        ReplayBuffer(10, (3,), n_step=3, num_envs=4)
    rb = ReplayBuffer(12, (3,), (), action_dtype=np.int64, n_step=3, num_envs=3)
    with pytest.raises(ValueError, match="exactly num_envs=3"):
        rb.add(*(x[:2] for x in _transition(0, 3)))
    assert len(rb) == 0


def test_as_torch_on_cpu_is_zero_copy():
    rb = ReplayBuffer(20, (3,), (), action_dtype=np.int64, seed=0)
    for k in range(4):
        rb.add(*_transition(k, 3))
    t = rb.sample(8, as_torch=True)
    a = rb.sample(8)
    assert isinstance(t.obs, torch.Tensor) and t.obs.dtype == torch.float32 and t.terminated.dtype == torch.bool
    assert t.obs.data_ptr() == a.obs.ctypes.data  # same memory
    np.testing.assert_array_equal(t.indices.numpy(), a.indices)


def test_mmap_storage_equals_memory_storage(tmp_path):
    mem = ReplayBuffer(30, (3,), (), action_dtype=np.int64, seed=5)
    mm = ReplayBuffer(30, (3,), (), action_dtype=np.int64, seed=5, storage="mmap", path=tmp_path / "mm")
    for k in range(13):
        mem.add(*_transition(k, 3))
        mm.add(*_transition(k, 3))
    assert (tmp_path / "mm" / "obs.npy").exists()
    for x, y in zip(mem.sample(25), mm.sample(25)):
        np.testing.assert_array_equal(x, y)
    on_disk = np.load(tmp_path / "mm" / "actions.npy", mmap_mode="r")
    np.testing.assert_array_equal(on_disk, mem.arrays()["actions"])
    with pytest.raises(ValueError, match="needs path"):
        ReplayBuffer(30, (3,), storage="mmap")


@pytest.mark.parametrize("n_step", [1, 2])
def test_save_load_round_trip_resumes_identically(tmp_path, n_step):
    rb = ReplayBuffer(12, (3,), (), action_dtype=np.int64, seed=9, n_step=n_step, num_envs=3)
    for k in range(7):  # wrapped
        rb.add(*_transition(k, 3))
    rb.sample(5)
    rb.save(tmp_path / "buf")
    loaded = ReplayBuffer.load(tmp_path / "buf")
    into = ReplayBuffer(12, (3,), (), action_dtype=np.int64, seed=0, n_step=n_step, num_envs=3)
    assert into.load(tmp_path / "buf") is into
    for other in (loaded, into):
        assert (len(other), other.pos) == (len(rb), rb.pos)
    for buf in (rb, loaded, into):  # the next add and sample continue identically
        buf.add(*_transition(100, 3))
    a, b, c = (buf.sample(6) for buf in (rb, loaded, into))
    for x, y, z in zip(a, b, c):
        np.testing.assert_array_equal(x, y)
        np.testing.assert_array_equal(x, z)
    with pytest.raises(ValueError, match="not this buffer"):
        ReplayBuffer(12, (4,), (), action_dtype=np.int64, n_step=n_step, num_envs=3).load(tmp_path / "buf")
    assert not list(tmp_path.glob("*.tmp"))
    rb.save(tmp_path / "buf")  # overwrite an existing save
    assert len(ReplayBuffer.load(tmp_path / "buf")) == len(rb)
    mm = ReplayBuffer.load(tmp_path / "buf", storage="mmap", path=tmp_path / "mm")
    assert (tmp_path / "mm" / "obs.npy").exists()
    for x, y in zip(rb.sample(6), mm.sample(6)):
        np.testing.assert_array_equal(x, y)
    with pytest.raises(ValueError, match="own mmap directory"):
        mm.save(tmp_path / "mm")


def test_bad_construction():
    for cap in (0, -3):
        with pytest.raises(ValueError, match="capacity"):
            ReplayBuffer(cap, (3,))
    with pytest.raises(TypeError, match="capacity"):
        ReplayBuffer(2.5, (3,))
    with pytest.raises(ValueError, match="obs_shape"):
        ReplayBuffer(10, (0,))
    with pytest.raises(ValueError, match="gamma"):
        ReplayBuffer(10, (3,), gamma=1.5)
    with pytest.raises(ValueError, match="storage"):
        ReplayBuffer(10, (3,), storage="disk")


def test_bad_sampling():
    rb = ReplayBuffer(10, (3,), (), action_dtype=np.int64)
    with pytest.raises(ValueError, match="empty"):
        rb.sample(1)
    rb.add(*_transition(0, 3))
    with pytest.raises(ValueError, match="larger than the 3 stored"):
        rb.sample(4)
    for bad in (0, -1):
        with pytest.raises(ValueError, match="batch_size"):
            rb.sample(bad)


def _bad_adds():
    good = _transition(0, 3)
    obs, act, rew, nobs, term, trunc = good
    yield "obs", (obs[:, :2], act, rew, nobs, term, trunc), ValueError
    yield "obs", (obs[0], act, rew, nobs, term, trunc), ValueError
    yield "actions", (obs, act[:2], rew, nobs, term, trunc), ValueError
    yield "actions", (obs, act[:, None], rew, nobs, term, trunc), ValueError
    yield "rewards", (obs, act, rew[:, None], nobs, term, trunc), ValueError
    yield "rewards", (obs, act, np.ones((), np.float32), nobs, term, trunc), ValueError
    yield "next_obs", (obs, act, rew, nobs[:2], term, trunc), ValueError
    yield "terminated", (obs, act, rew, nobs, term[:1], trunc), ValueError
    yield "truncated", (obs, act, rew, nobs, term, trunc.astype(np.float32)), TypeError
    yield "obs", (obs.astype(np.float64).tolist(), act, rew, nobs, term, trunc), TypeError
    yield "actions", (obs, act.astype(np.float32), rew, nobs, term, trunc), TypeError
    yield "rows", (*(np.concatenate([x] * 4) for x in good),), ValueError


@pytest.mark.parametrize("name,args,exc", list(_bad_adds()))
def test_rejected_add_changes_nothing(name, args, exc):
    rb = ReplayBuffer(10, (3,), (), action_dtype=np.int64, seed=0)
    rb.add(*_transition(1, 3))
    before = {k: v.copy() for k, v in rb.arrays().items()}
    with pytest.raises(exc, match=name if name != "rows" else "capacity"):
        rb.add(*args)
    assert (len(rb), rb.pos) == (3, 3)
    for k, v in rb.arrays().items():
        np.testing.assert_array_equal(v, before[k])


def test_uint8_storage_rejects_float_obs():
    rb = ReplayBuffer(10, (2,), obs_dtype=np.uint8)
    with pytest.raises(TypeError, match="obs has dtype float32"):
        rb.add(np.zeros((1, 2), np.float32), np.zeros(1, np.float32), np.zeros(1, np.float32),
               np.zeros((1, 2), np.uint8), np.zeros(1, bool), np.zeros(1, bool))


def test_write_core_through_py_func():
    """The compiled cores' Python versions agree with the compiled ones (coverage/debugging)."""
    a = ReplayBuffer(10, (3,), (), action_dtype=np.int64, seed=2)
    b = ReplayBuffer(10, (3,), (), action_dtype=np.int64, seed=2)
    for k in range(5):
        a.add(*_transition(k, 3))
        code = replay_cores.write_rows.py_func(b.pos, 0, *b._store, *_transition(k, 3))
        assert code == 0
        b._pos, b._size = (b.pos + 3) % 10, min(len(b) + 3, 10)
    for x, y in zip(a._store, b._store):
        np.testing.assert_array_equal(x, y)
    out = a.sample(6)
    mine = ReplayBatch(*(np.empty_like(x) for x in out))
    key = int(derive_keys(2, 1)[0])  # sample's draws: the first 6 of the stream of the buffer's seed
    u = np.array([uniform_reference(key, k) for k in range(6)])
    replay_cores.gather.py_func(u, True, len(b), mine.indices, *b._flat_store, *flat_outputs(mine), 1, 0.99, 1,
                                b.pos)
    for name in ("obs", "actions", "rewards", "next_obs", "discounts", "indices"):
        np.testing.assert_array_equal(getattr(mine, name), getattr(out, name))


def test_concurrent_add_and_sample_are_consistent():
    """A writer thread adds recognisable transitions while the reader samples: every sampled row
    must come from one add (obs, next_obs, reward, action all encode the same id)."""
    rb = ReplayBuffer(64, (16,), (), action_dtype=np.int64, seed=0)
    E = 8
    for k in range(8):
        rb.add(*_transition(k, E, obs_dim=16))
    stop = threading.Event()

    def writer():
        k = 8
        while not stop.is_set():
            rb.add(*_transition(k, E, obs_dim=16))
            k += 1

    th = threading.Thread(target=writer)
    th.start()
    try:
        for _ in range(3000):
            b = rb.sample(32)
            ids = b.actions.astype(np.float32)
            assert np.all(b.obs == ids[:, None])
            assert np.all(b.next_obs == ids[:, None] + 0.5)
            assert np.all(b.rewards == ids)
    finally:
        stop.set()
        th.join()


def test_image_obs_bad_shapes_are_rejected_before_writing():
    rb = ReplayBuffer(8, (4, 4, 2), (), obs_dtype=np.uint8, action_dtype=np.int64)
    obs = np.ones((2, 4, 4, 2), np.uint8)
    args = [obs, np.zeros(2, np.int64), np.zeros(2, np.float32), obs, np.zeros(2, bool), np.zeros(2, bool)]
    rb.add(*args)
    before = {k: v.copy() for k, v in rb.arrays().items()}
    for k, bad, name in ((0, np.ones((2, 4, 2, 4), np.uint8), "obs"), (3, np.ones((1, 4, 4, 2), np.uint8), "next_obs"),
                         (2, np.ones((), np.float32), "rewards"), (1, np.zeros((2, 1), np.int64), "actions")):
        with pytest.raises(ValueError, match=f"^{name} must have shape"):
            rb.add(*args[:k], bad, *args[k + 1:])
    assert (len(rb), rb.pos) == (2, 2)
    for k, v in rb.arrays().items():
        np.testing.assert_array_equal(v, before[k])


def test_as_torch_on_another_device_copies_into_device_tensors():
    """Non-CPU path exercised on PyTorch's "meta" device (shapes/dtypes only; a GPU checks values)."""
    rb = ReplayBuffer(20, (3,), (), action_dtype=np.int64, seed=0, device="meta")
    rb.add(*_transition(0, 3))
    t = rb.sample(2, as_torch=True)
    assert all(x.device.type == "meta" for x in t)
    assert t.obs.shape == (2, 3) and t.indices.dtype == torch.int64 and t.terminated.dtype == torch.bool
    assert isinstance(rb.sample(2).obs, np.ndarray)


def _same_state(a: ReplayBuffer, b: ReplayBuffer):
    assert (len(a), a.pos) == (len(b), b.pos)
    for x, y in zip(a.arrays().values(), b.arrays().values()):
        np.testing.assert_array_equal(x, y)


@pytest.mark.parametrize("obs_shape", [(3,), (2, 3, 2)])
def test_fast_add_equals_checked_add_with_wrap_and_any_input_form(obs_shape):
    """``add``'s compiled fast path (exact dtypes, C-contiguous) and the checked path store the same rows;
    inputs the fast path declines (casts, uint8 flags, strided views, action rows) still go through."""
    D = int(np.prod(obs_shape))
    fast = ReplayBuffer(10, obs_shape, (2,), action_dtype=np.int64, seed=0)
    checked = ReplayBuffer(10, obs_shape, (2,), action_dtype=np.int64, seed=0)
    rng = np.random.default_rng(0)
    for k in range(9):
        n = 1 + k % 4
        obs = rng.standard_normal((n, *obs_shape)).astype(np.float32)
        args = [obs, rng.integers(0, 9, (n, 2)), rng.standard_normal(n).astype(np.float32), obs + 1,
                rng.random(n) < 0.5, rng.random(n) < 0.5]
        if k == 3:
            args[2] = args[2].astype(np.float64)  # same_kind cast
        if k == 4:
            args[4] = args[4].view(np.uint8)
        if k == 5:
            big = rng.standard_normal((n, 2 * D)).astype(np.float32)
            args[0] = big[:, ::2].reshape(n, *obs_shape) if len(obs_shape) == 1 else args[0][:, ::-1]
        fast.add(*args)
        checked._add_checked(*args)
        _same_state(fast, checked)
    for x, y in zip(fast.sample(6), checked.sample(6)):
        np.testing.assert_array_equal(x, y)


def test_fast_add_declines_while_the_lock_is_held_and_for_large_batches():
    rb = ReplayBuffer(10, (3,), (), action_dtype=np.int64, seed=0)
    args = _transition(1, 3)
    with rb._lock:  # a section that touches storage: the fast core must not write
        assert replay_table.add_fast_core(rb._table_addr, *args) == -1
        assert (len(rb), rb.pos) == (0, 0)
    assert replay_table.add_fast_core(rb._table_addr, *args) == 0
    assert (len(rb), rb.pos) == (3, 3)
    n = replay_table.FAST_MAX_BYTES // 8  # rows of >= 8 bytes: too large for the GIL-holding fast core
    big = ReplayBuffer(n, (3,), (), action_dtype=np.int64, seed=0)
    obs = np.ones((n, 3), np.float32)
    bargs = (obs, np.arange(n), np.ones(n, np.float32), obs, np.zeros(n, bool), np.zeros(n, bool))
    assert replay_table.add_fast_core(big._table_addr, *bargs) == -1
    big.add(*bargs)
    assert len(big) == n and big.arrays()["actions"][-1] == n - 1


def test_n_step_add_rows_are_checked_on_the_fast_path():
    rb = ReplayBuffer(12, (3,), (), action_dtype=np.int64, n_step=2, num_envs=3)
    rb.add(*_transition(0, 3))
    with pytest.raises(ValueError, match="num_envs=3"):
        rb.add(*_transition(1, 2))
    assert (len(rb), rb.pos) == (3, 3)
