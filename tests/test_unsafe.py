"""Every low-level trick of ``rapidrl._unsafe`` against its public equivalent: a dependency upgrade that breaks one
(a private torch operator, Adam's state layout, Numba's cache internals, SciPy's bundled BLAS, glibc's mallopt, the
replay table's addresses) fails here, loudly, instead of making a run silently slower or wrong."""

from __future__ import annotations

import ctypes.util
import platform

import numpy as np
import pytest
import torch

from rapidrl._unsafe import blas, malloc, numba_cache, replay_table, torch_private
from rapidrl.buffers import PrioritizedReplayBuffer, ReplayBuffer


def test_glibc_keeps_heap_memory():
    """On glibc the thresholds are set (a False here means mallopt changed, and SAC's update got slower)."""
    if platform.system() != "Linux" or "libc.so.6" not in (ctypes.util.find_library("c") or ""):
        pytest.skip("not glibc: keep_heap_memory is a documented no-op (tests/test_portability.py)")
    assert malloc.keep_heap_memory() is True
    assert malloc.release_heap_memory() is True  # glibc's defaults back (after learn: rapidrl.train.runtime)


def test_the_blas_numba_calls_is_found_and_set_to_one_thread():
    """The handwritten backends' matmuls run on SciPy's OpenBLAS: it must be found by its file path, else a SciPy
    upgrade that renamed it would leave it spinning one thread per core (3-10x slower updates); it stays at one
    thread at any torch thread count (2 threads fought torch's: 2-6x slower compiled updates)."""
    found = blas.numba_blas_controllers()
    assert found, "SciPy's bundled OpenBLAS was not found: update rapidrl._unsafe.blas._MARKERS"
    threads = torch.get_num_threads()
    try:
        torch.set_num_threads(2)
        for lib in found:
            lib.set_num_threads(2)
        assert blas.single_thread_numba_blas() == len(found)
        assert all(lib.num_threads == 1 for lib in blas.numba_blas_controllers())
    finally:
        torch.set_num_threads(threads)


def test_numba_cache_dir_is_where_numba_writes(tmp_path):
    """invalidate_stale_cache deletes a kernel's files in Numba's cache directory, so ``cache_dir`` must name the
    directory Numba writes them to: checked on a cached function compiled here (its index file is there); a Numba
    that moved it must fail, not skip."""
    import importlib.util

    from rapidrl.kernels import ppo_update

    (tmp_path / "cache_probe.py").write_text("import numba\n\n\n@numba.njit(cache=True)\ndef add_one(x):\n"
                                             "    return x + 1\n")
    spec = importlib.util.spec_from_file_location("cache_probe", tmp_path / "cache_probe.py")
    probe = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(probe)
    assert probe.add_one(1) == 2  # compiled and written to the cache
    written = [p.name for p in numba_cache.cache_dir(probe.add_one).glob("cache_probe.add_one-*.nbi")]
    assert len(written) == 1, written
    numba_cache.cache_dir(ppo_update._ppo_epoch)  # a shipped kernel's dispatcher too (RuntimeError if not)

    class NotADispatcher:
        def enable_caching(self):
            pass

    with pytest.raises(RuntimeError, match=r"numba .* has no Dispatcher\._cache\._cache_path"):
        numba_cache.cache_dir(NotADispatcher())


def test_adam_kernel_step_equals_adam_step():
    torch.manual_seed(0)
    a, b = [torch.nn.Linear(5, 3) for _ in range(2)]
    b.load_state_dict(a.state_dict())
    opt_a = torch.optim.Adam(a.parameters(), lr=1e-2, fused=True)
    opt_b = torch.optim.Adam(b.parameters(), lr=1e-2, fused=True)
    for step in range(3):
        x = torch.randn(7, 5)
        for m in (a, b):
            m.zero_grad()
            m(x).square().sum().backward()
        opt_a.step()
        if step == 0:
            opt_b.step()  # the first step creates the state
            continue
        params = list(b.parameters())
        states = [opt_b.state[p] for p in params]
        steps = [s["step"] for s in states]
        torch_private.increment_steps(steps)
        torch_private.adam_kernel_step(params, [p.grad for p in params], states, steps, opt_b.param_groups[0])
    for p, q in zip(a.parameters(), b.parameters()):
        torch.testing.assert_close(p, q, rtol=0, atol=0)
        for key in ("step", "exp_avg", "exp_avg_sq"):
            torch.testing.assert_close(opt_a.state[p][key], opt_b.state[q][key], rtol=0, atol=0)


def test_hand_made_adam_state_is_what_adam_makes():
    """The compiled PPO epoch creates Adam's state itself; it must have the layout Adam's own first step gives
    (keys, dtypes, shapes, devices), so the optimizer, its state_dict and checkpoints accept it."""
    torch.manual_seed(0)
    ref, ours = torch.nn.Linear(4, 2), torch.nn.Linear(4, 2)
    opt_ref = torch.optim.Adam(ref.parameters(), lr=1e-3, fused=True)
    opt_ours = torch.optim.Adam(ours.parameters(), lr=1e-3, fused=True)
    ref(torch.randn(3, 4)).sum().backward()
    opt_ref.step()
    torch_private.adam_state(opt_ours, list(ours.parameters()))
    for p, q in zip(ref.parameters(), ours.parameters()):
        a, b = opt_ref.state[p], opt_ours.state[q]
        assert a.keys() == b.keys()
        for key in a:
            assert (a[key].dtype, a[key].shape, a[key].device) == (b[key].dtype, b[key].shape, b[key].device), key
        assert q.grad is not None and not q.grad.any()
    opt_ours.load_state_dict(opt_ours.state_dict())  # round-trips
    ours(torch.randn(3, 4)).sum().backward()
    opt_ours.step()  # and Adam steps on it


def test_numpy_views_write_into_the_optimizers_tensors_and_follow_replacements():
    p = torch.nn.Parameter(torch.zeros(3))
    p.grad = torch.ones(3)
    opt = torch.optim.Adam([p], fused=True)
    torch_private.adam_state(opt, [p])
    steps = [opt.state[p]["step"]]
    grads, step_views = torch_private.cached_numpy_views(opt, [p.grad], steps, lambda *a: None)
    grads[0][:] = 5.0
    step_views[0][0] = 7.0
    assert p.grad.tolist() == [5.0] * 3 and float(opt.state[p]["step"]) == 7.0
    assert torch_private.cached_numpy_views(opt, [p.grad], steps, lambda *a: None)[0][0] is grads[0]  # cached
    p.grad = torch.zeros(3)  # a new tensor object: new views
    again = torch_private.cached_numpy_views(opt, [p.grad], steps, lambda *a: None)
    again[0][0][:] = 2.0
    assert p.grad.tolist() == [2.0] * 3


def test_cpu_bf16_support_agrees_with_the_cpu_flags():
    """torch's private cpuinfo query (None where this torch lacks it) against the flags Linux lists."""
    from rapidrl._system import cpu_flags

    known = torch_private.cpu_bf16_support()
    assert known is None or isinstance(known, bool)
    flags = cpu_flags()
    if known is not None and flags:  # Linux: both sources answer
        assert known == bool({"avx512_bf16", "amx_bf16"} & flags)


def test_foreach_and_aten_helpers_equal_their_definitions():
    torch.manual_seed(0)
    target, online = [torch.randn(4, 3), torch.randn(5)], [torch.randn(4, 3), torch.randn(5)]
    expected = [t + 0.3 * (o - t) for t, o in zip(target, online)]
    torch_private.polyak(target, online, 0.3)
    for a, b in zip(target, expected):
        torch.testing.assert_close(a, b)
    xs = [torch.tensor([1.0, -4.0]), torch.tensor([[2.0], [float("nan")]]), torch.tensor([float("-inf")])]
    largest = torch_private.largest_abs(xs)
    assert largest[0] == 4.0 and torch.isnan(largest[1]) and torch.isinf(largest[2])
    z = torch.randn(6, 4, requires_grad=True)
    d = torch.randn(6, 4)
    ref = torch.autograd.grad((torch.relu(z) * d).sum(), z)[0]
    torch.testing.assert_close(torch_private.relu_backward(d, torch.relu(z).detach()), ref)
    parts = [torch.randn(2, 3), torch.randn(4)]
    flat = torch_private.flatten(parts)
    assert flat.shape == (10,)
    for a, b in zip(torch_private.unflatten(flat, parts), parts):
        torch.testing.assert_close(a, b, rtol=0, atol=0)


def _transitions(k: int, n: int = 4):
    obs = np.full((n, 3), k, np.float32)
    return obs, np.arange(n), np.full(n, k, np.float32), obs + 0.5, np.zeros(n, bool), np.zeros(n, bool)


@pytest.mark.parametrize("cls", [ReplayBuffer, PrioritizedReplayBuffer])
def test_the_replay_table_describes_the_storage_through_everything(tmp_path, cls):
    """The safety argument of the raw-address table: it always points at the buffer's own storage arrays, which
    are never replaced (add, sample, save, load into the buffer, end_episodes); the sampler keeps every array
    whose address it holds alive."""
    buf = cls(16, (3,), (), action_dtype=np.int64, seed=0)
    assert replay_table.table_matches(buf._table, buf._store)
    store_ids = [id(a) for a in buf._store]
    for k in range(6):
        buf.add(*_transitions(k))
    sampler = buf.sampler(8, seed=1)
    sampler()
    buf.sample(8)
    buf.save(tmp_path / "b")
    buf.load(tmp_path / "b")
    buf.end_episodes()
    assert [id(a) for a in buf._store] == store_ids and replay_table.table_matches(buf._table, buf._store)
    if cls is PrioritizedReplayBuffer:
        tree = buf._priority_tree()
        before = [a.ctypes.data for a in tree.arrays]
        buf.load(tmp_path / "b")  # clears and refills the tree in place
        assert [a.ctypes.data for a in tree.arrays] == before
        assert all(any(a is kept for kept in sampler._keep) for a in tree.arrays)
    assert any(buf._table is kept for kept in sampler._keep)
    b = sampler()
    np.testing.assert_array_equal(b.obs, buf.arrays()["obs"][b.indices])


def test_the_fast_add_equals_the_checked_add():
    fast, checked = (ReplayBuffer(10, (3,), (), action_dtype=np.int64, seed=0) for _ in range(2))
    for k in range(5):
        assert replay_table.add_fast_core(fast._table_addr, *_transitions(k, 3)) == 0
        checked._add_checked(*_transitions(k, 3))
    for a, b in zip(fast._store, checked._store):
        np.testing.assert_array_equal(a, b)
    assert (fast.pos, len(fast)) == (checked.pos, len(checked))
