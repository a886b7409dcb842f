"""ReplaySampler (``buffer.sampler(B)``): the documented draws (counter-based stream -> rows, stratified
sum-tree search for prioritized replay), the fields ``sample`` returns (1-step and n-step targets, weights),
frequencies, determinism under the seed, the locked path, concurrency, errors."""

from __future__ import annotations

import threading

import numpy as np
import pytest
from docs_examples import run_examples
from test_buffers_replay import _check_batch_matches, _transition

from rapidrl.buffers import PrioritizedReplayBuffer, ReplayBuffer, ReplaySampler
from rapidrl.kernels.rng import derive_keys, uniform_reference


def _stream(seed: int, first: int, n: int) -> np.ndarray:
    """Draws first .. first + n - 1 of the sampler stream of ``seed`` (the plain-Python RNG reference)."""
    key = int(derive_keys(seed, 1)[0])
    return np.array([uniform_reference(key, first + k) for k in range(n)])


def _filled(capacity=30, steps=10, num_envs=3, **kw):
    rb = ReplayBuffer(capacity, (3,), (), action_dtype=np.int64, seed=kw.pop("seed", 0), **kw)
    expected, row = {}, 0
    for k in range(steps):
        tr = _transition(k, num_envs)
        rb.add(*tr)
        for e in range(num_envs):
            expected[row % capacity] = tuple(x[e] for x in tr)
            row += 1
    return rb, expected


def test_uniform_sampler_draws_the_documented_rows_and_fields():
    rb, expected = _filled(capacity=20, steps=9)  # 27 rows into 20: wrapped
    s = rb.sampler(16, seed=7)
    assert isinstance(s, ReplaySampler) and s.draws == 0
    for call in range(3):
        b = s()
        u = _stream(7, 16 * call, 16)
        np.testing.assert_array_equal(b.indices, np.minimum((u * 20).astype(np.int64), 19))
        _check_batch_matches(b, expected)
        assert s.draws == 16 * (call + 1)
    assert b._fields == rb.sample(16)._fields
    for x, y in zip(b, rb.sample(16)):
        assert x.shape == y.shape and x.dtype == y.dtype


def test_sampler_is_deterministic_under_its_seed_and_resumable():
    rb, _ = _filled()
    a, b, c = rb.sampler(8, seed=1), rb.sampler(8, seed=1), rb.sampler(8, seed=2)
    ia = [a().indices.copy() for _ in range(4)]
    ib = [b().indices.copy() for _ in range(4)]
    np.testing.assert_array_equal(ia, ib)
    assert not np.array_equal(ia[0], c().indices)
    resumed = rb.sampler(8, seed=1)
    resumed.draws = 16
    np.testing.assert_array_equal(resumed().indices, ia[2])
    # default seed: the buffer's; sample()'s generator is neither used nor advanced
    rb2, _ = _filled(seed=5)
    before = rb2.sample(8).indices.copy()
    rb3, _ = _filled(seed=5)
    rb3.sampler(8)()
    np.testing.assert_array_equal(rb3.sample(8).indices, before)
    np.testing.assert_array_equal(rb2.sampler(8)().indices, rb3.sampler(8, seed=5)().indices)


def test_uniform_sampler_frequencies():
    """Chi-square goodness of fit to uniform over the 30 stored rows (fixed seed)."""
    rb, _ = _filled(capacity=30, steps=10)
    s = rb.sampler(30, seed=11)
    counts = np.zeros(30)
    for _ in range(400):
        np.add.at(counts, s().indices, 1)
    expected = counts.sum() / 30
    chi2 = ((counts - expected) ** 2 / expected).sum()
    assert chi2 < 58.3  # 29 degrees of freedom, p = 0.001


def test_large_batches_take_the_locked_path_with_the_same_draws():
    """Image rows: B * row bytes above the fast limit, so the sampler takes the lock and releases the GIL."""
    rb = ReplayBuffer(64, (16, 16, 4), (), obs_dtype=np.uint8, action_dtype=np.int64, seed=0)
    for k in range(8):
        ids = k * 8 + np.arange(8)
        o = np.broadcast_to(ids[:, None, None, None], (8, 16, 16, 4)).astype(np.uint8)
        rb.add(o, ids, ids.astype(np.float32), o + 1, np.zeros(8, bool), np.zeros(8, bool))
    s = rb.sampler(64, seed=4)
    assert not s._fast
    b = s()
    np.testing.assert_array_equal(b.indices, np.minimum((_stream(4, 0, 64) * 64).astype(np.int64), 63))
    np.testing.assert_array_equal(b.obs, rb.arrays()["obs"][b.indices])
    np.testing.assert_array_equal(b.next_obs, b.obs + 1)
    np.testing.assert_array_equal(b.actions, b.indices)


def test_sampler_declines_while_the_lock_is_held():
    """The fast (GIL-holding) core must not read storage inside a locked section; it waits for the lock."""
    rb, expected = _filled()
    s = rb.sampler(8, seed=0)
    got = []
    with rb._lock:
        th = threading.Thread(target=lambda: got.append(s()))
        th.start()
        th.join(0.2)
        assert th.is_alive() and not got  # blocked on the lock, nothing drawn
    th.join()
    _check_batch_matches(got[0], expected)
    assert s.draws == 8


def test_as_torch_returns_views_of_the_sampler_arrays():
    rb, _ = _filled()
    s = rb.sampler(8, seed=0)
    t = s(as_torch=True)
    a = s._slot.arrays
    assert t.obs.data_ptr() == a.obs.ctypes.data
    np.testing.assert_array_equal(t.indices.numpy(), a.indices)


def test_sampler_errors():
    rb = ReplayBuffer(10, (3,), (), seed=0)
    with pytest.raises(ValueError, match="batch_size"):
        rb.sampler(0)
    with pytest.raises(ValueError, match="capacity"):
        rb.sampler(11)
    with pytest.raises(TypeError, match="buffer"):
        ReplaySampler(object(), 4)
    s = rb.sampler(4)
    with pytest.raises(ValueError, match="empty"):
        s()
    rb.add(*_transition(0, 3))
    with pytest.raises(ValueError, match="larger than"):
        s()
    assert s.draws == 0  # nothing drawn by a refused call
    with pytest.raises(ValueError, match="draws"):
        s.draws = -1


# ------------------------------------------------------------------------------------------ prioritized


def _per(capacity=20, **kw):
    buf = PrioritizedReplayBuffer(capacity, (3,), (), action_dtype=np.int64, seed=kw.pop("seed", 0), **kw)
    for k in range(capacity // 4):
        ids = k * 100 + np.arange(4)
        obs = np.repeat(ids[:, None], 3, 1).astype(np.float32)
        buf.add(obs, ids.astype(np.int64), ids.astype(np.float32), obs + 0.5, np.zeros(4, bool), np.zeros(4, bool))
    return buf


def test_prioritized_sampler_draws_the_documented_rows_weights_and_fields():
    buf = _per(20, alpha=0.6, beta=0.5)
    p = np.random.default_rng(0).uniform(0.1, 5.0, 20)
    buf.update_priorities(np.arange(20), p)
    s = buf.sampler(16, seed=9)
    for call in range(2):
        b = s()
        u = (np.arange(16) + _stream(9, 16 * call, 16)) / 16  # stratified
        np.testing.assert_array_equal(b.indices, buf._tree.sample(u))
        q = (p + buf.eps) ** 0.6
        w = (20 * q / q.sum()) ** -0.5
        np.testing.assert_allclose(b.weights, w[b.indices] / w.max(), rtol=1e-5)
        stored = buf.arrays()
        np.testing.assert_array_equal(b.obs, stored["obs"][b.indices])
        np.testing.assert_array_equal(b.next_obs, stored["obs"][b.indices] + 0.5)
        np.testing.assert_array_equal(b.rewards, stored["rewards"][b.indices])
        np.testing.assert_array_equal(b.actions, stored["actions"][b.indices])


def test_prioritized_sampler_frequencies_match_priorities():
    """Chi-square goodness of fit of the sampled rows to p_i^alpha / sum (fixed seed)."""
    buf = _per(20, alpha=0.7)
    p = np.linspace(0.1, 3.0, 20)
    buf.update_priorities(np.arange(20), p)
    q = (p + buf.eps) ** 0.7
    s = buf.sampler(16, seed=0)
    counts = np.zeros(20)
    for _ in range(1000):
        np.add.at(counts, s().indices, 1)
    expected = counts.sum() * q / q.sum()
    chi2 = ((counts - expected) ** 2 / expected).sum()
    assert chi2 < 43.8  # 19 degrees of freedom, p = 0.001
    assert counts[-1] > 5 * counts[0]


def test_prioritized_sampler_anneals_beta_like_sample():
    buf = _per(16, beta=0.2, beta_final=1.0, beta_anneal_steps=4)
    buf.update_priorities(np.arange(16), np.arange(1.0, 17.0))
    s = buf.sampler(4, seed=0)
    for k in range(6):
        beta = buf.beta
        b = s()
        q = buf.priorities(b.indices)
        np.testing.assert_allclose(b.weights, (q / buf._tree.min()) ** -beta, rtol=1e-6)
        assert buf.beta == min(1.0, 0.2 + 0.8 * (k + 1) / 4)


def test_prioritized_sampler_survives_load_and_sees_new_priorities(tmp_path):
    buf = _per(16)
    buf.update_priorities(np.arange(16), np.arange(1.0, 17.0))
    s = buf.sampler(8, seed=0)
    s()
    buf.save(tmp_path / "per")
    buf.update_priorities(np.arange(16), np.full(16, 3.0))
    buf.load(tmp_path / "per")  # the tree is reset in place: the sampler keeps working on the loaded one
    buf2 = PrioritizedReplayBuffer.load(tmp_path / "per")
    u = buf2.sampler(8, seed=0)
    u.draws = s.draws
    np.testing.assert_array_equal(s().indices, u().indices)
    buf.update_priorities(np.arange(16), np.r_[np.zeros(15), 1.0])  # all the mass (but eps) on row 15
    assert np.mean(s().indices == 15) >= 7 / 8


def test_prioritized_sampler_refuses_when_the_tree_has_no_mass():
    buf = PrioritizedReplayBuffer(8, (3,), (), seed=0)
    s = buf.sampler(2)
    with pytest.raises(ValueError, match="empty"):
        s()
    buf = _per(8)
    s = buf.sampler(2)
    buf._tree.clear()  # stored rows without priority mass (only reachable by clearing the tree by hand)
    with pytest.raises(ValueError, match="total priority"):
        s()
    assert s.draws == 0


def test_buffers_doc_examples_run():
    """Every python block of docs/buffers.md runs, in order, in one namespace (they build on each other)."""
    ns = run_examples("buffers.md", 5)
    assert ns["sampler"].draws == 64
