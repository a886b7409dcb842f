"""SumMinTree: totals, minima and sampling vs brute force, sampling frequencies, edge cases, bad input."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from kernel_modes import MODES, kernel_mode

from rapidrl.kernels import reference as ref
from rapidrl.kernels import sumtree
from rapidrl.kernels.sumtree import SumMinTree


@pytest.mark.parametrize("mode", MODES)
@settings(max_examples=25, deadline=None)
@given(capacity=st.integers(1, 70), seed=st.integers(0, 2**31 - 1), batches=st.integers(1, 6),
       p_zero=st.sampled_from([0.0, 0.3]))
def test_matches_brute_force(mode, capacity, seed, batches, p_zero):
    rng = np.random.default_rng(seed)
    tree, brute = SumMinTree(capacity), ref.SumMinTree(capacity)
    assert tree.total() == 0.0 and tree.min() == np.inf and tree.capacity == capacity
    with kernel_mode(sumtree, mode):
        for _ in range(batches):
            k = int(rng.integers(1, 2 * capacity + 1))
            idx = rng.integers(0, capacity, size=k)
            vals = rng.exponential(size=k) * (rng.random(k) >= p_zero)
            tree.set(idx, vals)
            brute.set(idx, vals)
            assert tree.total() == pytest.approx(brute.total(), rel=1e-12, abs=1e-300)
            assert tree.min() == brute.min()
            np.testing.assert_array_equal(tree.get(np.arange(capacity)), brute.values)
            if brute.total() > 0:
                u = rng.random(50)
                got = tree.sample(u)
                np.testing.assert_array_equal(got, brute.sample(u))
                assert np.all(tree.get(got) > 0)


def test_sample_frequencies_chi_square():
    # 20 positive priorities among 32 slots (the rest never set, or set to 0); 200k draws, fixed seed.
    rng = np.random.default_rng(123)
    tree = SumMinTree(32)
    idx = rng.permutation(32)
    p = rng.uniform(0.1, 3.0, size=20)
    tree.set(idx[:20].astype(np.int64), p)
    tree.set(idx[20:25].astype(np.int64), np.zeros(5))
    draws = tree.sample(rng.random(200_000))
    counts = np.bincount(draws, minlength=32)
    assert counts[idx[20:]].sum() == 0
    expected = 200_000 * p / p.sum()
    chi2 = float(np.sum((counts[idx[:20]] - expected) ** 2 / expected))
    # chi-square with 19 degrees of freedom: 0.999 quantile = 43.82 (standard table)
    assert chi2 < 43.82


def test_never_returns_zero_leaf_at_the_right_edge():
    # u just below 1 scales to (almost) the total; round-off in the prefix subtraction must not walk
    # into the zero-valued leaves on the right (unset leaves of the power-of-two padding, or zeros).
    u_edge = np.array([np.nextafter(1.0, 0.0)] * 4 + [1 - 1e-12, 0.999999999, 0.0])
    rng = np.random.default_rng(7)
    for trial in range(300):
        capacity = int(rng.integers(1, 200))
        tree = SumMinTree(capacity)
        vals = rng.choice([0.1, 0.3, 1e-9, 7.0, 1 / 3], size=capacity) * (rng.random(capacity) < 0.6)
        if trial % 2:
            vals[-max(1, capacity // 3):] = 0.0  # a block of zeros at the right edge
        if vals.sum() == 0:
            vals[0] = 0.7
        tree.set(np.arange(capacity, dtype=np.int64), vals)
        got = tree.sample(np.concatenate([u_edge, rng.random(20)]))
        assert np.all((got >= 0) & (got < capacity))
        assert np.all(vals[got] > 0)


def test_duplicate_indices_last_wins_and_zero_counts_for_min():
    tree = SumMinTree(5)
    tree.set(np.array([1, 3, 1, 1], np.int64), np.array([5.0, 2.0, 7.0, 4.0]))
    np.testing.assert_array_equal(tree.get(np.arange(5)), [0, 4, 0, 2, 0])
    assert tree.total() == 6.0 and tree.min() == 2.0
    tree.set(np.array([4], np.int64), np.array([0.0]))
    assert tree.min() == 0.0 and tree.total() == 6.0


def test_overwrite_updates_total_and_min_exactly():
    # Parents are recomputed from children, so totals don't drift after many overwrites.
    rng = np.random.default_rng(8)
    tree = SumMinTree(1000)
    for _ in range(200):
        idx = rng.integers(0, 1000, size=64)
        tree.set(idx, rng.random(64) * 100)
    tree.set(np.arange(1000, dtype=np.int64), np.full(1000, 0.5))
    assert tree.total() == 500.0 and tree.min() == 0.5


def test_capacity_one_and_non_power_of_two():
    tree = SumMinTree(1)
    tree.set(np.array([0], np.int64), np.array([2.0]))
    np.testing.assert_array_equal(tree.sample(np.array([0.0, 0.5, 0.99])), [0, 0, 0])
    tree = SumMinTree(5)  # 8 leaves inside, 3 of them padding
    tree.set(np.arange(5, dtype=np.int64), np.ones(5))
    np.testing.assert_array_equal(tree.sample(np.array([0.0, 0.19, 0.2, 0.79, 0.8, 0.999])),
                                  [0, 0, 1, 3, 4, 4])


def test_sample_into_writes_out():
    tree = SumMinTree(4)
    tree.set(np.arange(4, dtype=np.int64), np.array([1.0, 0.0, 1.0, 2.0]))
    out = np.full(3, -1, np.int64)
    res = tree.sample_into(np.array([0.1, 0.3, 0.9]), out)
    assert res is out
    np.testing.assert_array_equal(out, [0, 2, 3])
    with pytest.raises(ValueError, match="out"):
        tree.sample_into(np.array([0.1, 0.3, 0.9]), np.empty(2, np.int64))
    with pytest.raises(TypeError, match="out"):
        tree.sample_into(np.array([0.1, 0.3, 0.9]), np.empty(3, np.int32))


def test_bad_set_changes_nothing():
    tree = SumMinTree(4)
    tree.set(np.arange(4, dtype=np.int64), np.ones(4))
    cases = [
        (np.array([0, 4], np.int64), np.ones(2), "indices\\[1\\] = 4"),
        (np.array([-1], np.int64), np.ones(1), "indices\\[0\\] = -1"),
        (np.array([0, 1], np.int64), np.array([1.0, -0.5]), "values\\[1\\]"),
        (np.array([0, 1], np.int64), np.array([np.nan, 1.0]), "values\\[0\\]"),
        (np.array([0], np.int64), np.array([np.inf]), "values\\[0\\]"),
    ]
    for idx, vals, msg in cases:
        with pytest.raises(ValueError, match=msg):
            tree.set(idx, vals)
        np.testing.assert_array_equal(tree.get(np.arange(4, dtype=np.int64)), np.ones(4))
        assert tree.total() == 4.0 and tree.min() == 1.0


def test_bad_arguments():
    tree = SumMinTree(4)
    with pytest.raises(ValueError, match="cannot sample"):
        tree.sample(np.array([0.5]))  # empty tree
    tree.set(np.array([0], np.int64), np.array([0.0]))
    with pytest.raises(ValueError, match="cannot sample"):
        tree.sample(np.array([0.5]))  # only zeros
    tree.set(np.array([0], np.int64), np.array([1.0]))
    for u in (1.0, -0.1, np.nan):
        with pytest.raises(ValueError, match="u\\[1\\]"):
            tree.sample(np.array([0.5, u]))
    with pytest.raises(TypeError, match="indices"):
        tree.set(np.array([0], np.int32), np.array([1.0]))
    with pytest.raises(TypeError, match="values"):
        tree.set(np.array([0], np.int64), np.array([1.0], np.float32))
    with pytest.raises(ValueError, match="values"):
        tree.set(np.array([0, 1], np.int64), np.array([1.0]))
    with pytest.raises(ValueError, match="indices"):
        tree.set(np.array([[0]], np.int64), np.array([[1.0]]))
    with pytest.raises(ValueError, match="C-contiguous"):
        tree.set(np.arange(4, dtype=np.int64)[::2], np.ones(2))
    with pytest.raises(ValueError, match="indices\\[0\\] = 9"):
        tree.get(np.array([9], np.int64))
    with pytest.raises(TypeError, match="u"):
        tree.sample([0.5])
    with pytest.raises(TypeError, match="u"):
        tree.sample(np.array([0.5], np.float32))
    with pytest.raises(ValueError, match="empty"):
        tree.sample(np.zeros(0))
    for cap, exc in ((0, ValueError), (2.5, TypeError), (True, TypeError)):
        with pytest.raises(exc, match="capacity"):
            SumMinTree(cap)
