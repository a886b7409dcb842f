"""PrioritizedReplayBuffer: frequencies follow priorities, importance weights, stratification,
max-priority insertion, beta annealing, validation of updates, persistence."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from rapidrl.buffers import PrioritizedReplayBuffer
from rapidrl.buffers import prioritized as per_mod
from rapidrl.kernels import replay as replay_cores


def _fill(buf, steps, num_envs=4):
    for k in range(steps):
        ids = k * 100 + np.arange(num_envs)
        obs = np.repeat(ids[:, None], 3, 1).astype(np.float32)
        buf.add(obs, ids.astype(np.int64), ids.astype(np.float32), obs + 0.5, np.zeros(num_envs, bool),
                np.zeros(num_envs, bool))


def _per(capacity=20, **kw):
    return PrioritizedReplayBuffer(capacity, (3,), (), action_dtype=np.int64, seed=kw.pop("seed", 0), **kw)


def test_sampling_frequencies_match_priorities():
    """Chi-square goodness of fit of the sampled rows to p_i^alpha / sum (fixed seed)."""
    buf = _per(20, alpha=0.7)
    _fill(buf, 5)
    p = np.linspace(0.1, 3.0, 20)
    buf.update_priorities(np.arange(20), p)
    q = (p + buf.eps) ** 0.7
    counts = np.zeros(20)
    for _ in range(1000):
        np.add.at(counts, buf.sample(16).indices, 1)
    expected = counts.sum() * q / q.sum()
    chi2 = ((counts - expected) ** 2 / expected).sum()
    assert chi2 < 43.8  # 19 degrees of freedom, p = 0.001
    # And clearly not uniform: the top-priority row is drawn far more often than the lowest.
    assert counts[-1] > 5 * counts[0]


def test_importance_weights_follow_the_definition():
    buf = _per(20, alpha=0.6, beta=0.5)
    _fill(buf, 5)
    p = np.random.default_rng(0).uniform(0.1, 5.0, 20)
    buf.update_priorities(np.arange(20), p)
    b = buf.sample(16)
    q = (p + buf.eps) ** 0.6
    P = q / q.sum()
    w = (20 * P) ** -0.5
    np.testing.assert_allclose(b.weights, w[b.indices] / w.max(), rtol=1e-5)
    assert b.weights.dtype == np.float32 and b.weights.max() <= 1.0


def test_stratified_sampling_with_equal_priorities_hits_every_row_once():
    buf = _per(16)
    _fill(buf, 4)
    b = buf.sample(16)
    np.testing.assert_array_equal(np.sort(b.indices), np.arange(16))
    np.testing.assert_array_equal(b.weights, np.ones(16, np.float32))


def test_sampled_transitions_are_the_stored_ones():
    buf = _per(12)
    _fill(buf, 5)  # wraps: 20 rows into 12
    b = buf.sample(12)
    stored = buf.arrays()
    np.testing.assert_array_equal(b.obs, stored["obs"][b.indices])
    np.testing.assert_array_equal(b.actions, stored["actions"][b.indices])
    np.testing.assert_array_equal(b.next_obs, stored["obs"][b.indices] + 0.5)
    np.testing.assert_array_equal(b.rewards, stored["rewards"][b.indices])


def test_new_rows_get_the_max_priority_seen():
    buf = _per(20, alpha=1.0)
    _fill(buf, 2)
    assert np.all(buf.priorities(np.arange(8)) == 1.0)
    buf.update_priorities(np.array([0, 1]), np.array([5.0, 0.5]))
    _fill(buf, 1)
    np.testing.assert_allclose(buf.priorities(np.arange(8, 12)), 5.0 + buf.eps)
    np.testing.assert_allclose(buf.priorities(np.array([1])), 0.5 + buf.eps)
    assert buf.max_priority == pytest.approx(5.0 + buf.eps)


def test_overwritten_rows_get_max_priority():
    buf = _per(8, alpha=1.0)
    _fill(buf, 2)
    buf.update_priorities(np.arange(8), np.full(8, 0.1))
    buf.update_priorities(np.array([3]), np.array([2.0]))
    _fill(buf, 1)  # overwrites rows 0..3
    np.testing.assert_allclose(buf.priorities(np.arange(8)),
                               [2 + buf.eps] * 4 + [0.1 + buf.eps] * 4)


def test_beta_annealing():
    buf = _per(20, beta=0.4, beta_final=1.0, beta_anneal_steps=4)
    _fill(buf, 3)
    seen = []
    for _ in range(6):
        seen.append(buf.beta)
        buf.sample(4)
    np.testing.assert_allclose(seen, [0.4, 0.55, 0.7, 0.85, 1.0, 1.0])
    assert _per(beta=0.3).beta == 0.3


def test_alpha_zero_is_uniform_with_unit_weights():
    buf = _per(20, alpha=0.0)
    _fill(buf, 5)
    buf.update_priorities(np.arange(20), np.arange(20, dtype=np.float64))
    b = buf.sample(20)
    np.testing.assert_array_equal(np.sort(b.indices), np.arange(20))
    np.testing.assert_allclose(b.weights, 1.0)


@pytest.mark.parametrize("prios,exc,match", [
    (np.array([1.0, -0.1]), ValueError, "finite and >= 0"),
    (np.array([1.0, np.nan]), ValueError, "finite and >= 0"),
    (np.array([np.inf, 1.0]), ValueError, "finite and >= 0"),
    (np.array([1.0]), ValueError, "priorities must have shape"),
    (np.array(["a", "b"]), TypeError, "real dtype"),
])
def test_bad_priorities_change_nothing(prios, exc, match):
    buf = _per(20)
    _fill(buf, 3)
    buf.update_priorities(np.arange(12), np.arange(12, dtype=np.float64))
    before = buf.priorities(np.arange(12)).copy()
    with pytest.raises(exc, match=match):
        buf.update_priorities(np.array([0, 1]), prios)
    np.testing.assert_array_equal(buf.priorities(np.arange(12)), before)
    assert buf.max_priority == pytest.approx(11 + buf.eps)


def test_bad_indices_change_nothing():
    buf = _per(20)
    _fill(buf, 2)
    before = buf.priorities(np.arange(8)).copy()
    for idx, exc in ((np.array([0, 8]), ValueError), (np.array([-1, 0]), ValueError),
                     (np.array([0.0, 1.0]), TypeError)):
        with pytest.raises(exc, match="indices"):
            buf.update_priorities(idx, np.ones(2))
    np.testing.assert_array_equal(buf.priorities(np.arange(8)), before)


def test_torch_tensors_accepted_for_updates():
    buf = _per(20, alpha=1.0)
    _fill(buf, 2)
    b = buf.sample(4, as_torch=True)
    buf.update_priorities(b.indices, torch.full((4,), 3.0))
    np.testing.assert_allclose(buf.priorities(b.indices.numpy()), 3.0 + buf.eps)


def test_bad_construction_and_sampling():
    with pytest.raises(ValueError, match="alpha"):
        _per(alpha=-1.0)
    with pytest.raises(ValueError, match="beta"):
        _per(beta=1.5)
    with pytest.raises(ValueError, match="eps"):
        _per(eps=0.0)
    with pytest.raises(ValueError, match="capacity"):
        _per(0)
    buf = _per(20)
    with pytest.raises(ValueError, match="empty"):
        buf.sample(1)
    _fill(buf, 1)
    with pytest.raises(ValueError, match="larger than"):
        buf.sample(5)


def test_save_load_round_trip(tmp_path):
    buf = _per(16, alpha=0.8, beta=0.3, beta_anneal_steps=10, n_step=2, num_envs=4)
    _fill(buf, 6)
    buf.update_priorities(np.arange(16), np.linspace(0.5, 4.0, 16))
    buf.sample(8)
    buf.save(tmp_path / "per")
    loaded = PrioritizedReplayBuffer.load(tmp_path / "per")
    assert (loaded.alpha, loaded.beta, loaded.max_priority) == (buf.alpha, buf.beta, buf.max_priority)
    np.testing.assert_array_equal(loaded.priorities(np.arange(16)), buf.priorities(np.arange(16)))
    for x, y in zip(buf.sample(8), loaded.sample(8)):
        np.testing.assert_array_equal(x, y)


def test_cores_match_their_python_versions():
    u = np.random.default_rng(0).random(8)
    a, b = u.copy(), u.copy()
    replay_cores.stratify(a)
    replay_cores.stratify.py_func(b)
    np.testing.assert_array_equal(a, b)
    assert np.all((a >= np.arange(8) / 8) & (a < (np.arange(8) + 1) / 8))
    rows = np.empty(5, np.int64)
    per_mod._ring_rows.py_func(8, 10, rows)
    np.testing.assert_array_equal(rows, [8, 9, 0, 1, 2])
    buf = _per(16, alpha=1.0, beta=0.5)
    _fill(buf, 4)
    buf.update_priorities(np.arange(16), np.arange(1, 17, dtype=np.float64) - buf.eps)
    out = buf.sample(8)
    mine = [np.empty_like(x) for x in out]
    idx = out.indices.copy()
    flat = (mine[0].reshape(8, -1), mine[1].reshape(8, -1), *mine[2:7])
    replay_cores.gather.py_func(None, False, len(buf), idx, *buf._flat_store, *flat, 1, buf.gamma, 1, 0)
    q = buf.priorities(idx)  # the weights come from the tree's leaves: (q_i / q_min)^-beta, q_min = 1
    np.testing.assert_allclose(out.weights, (idx + 1.0) ** -0.5, rtol=1e-6)
    np.testing.assert_allclose(out.weights, (q / 1.0) ** -0.5, rtol=1e-6)
    np.testing.assert_array_equal(mine[0], out.obs)
