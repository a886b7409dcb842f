"""``rapidrl.nn.optim`` and ``rapidrl.kernels.adam``: ``optimizer_step`` equals ``clip_grad_norm_`` +
``torch.optim.Adam.step``: bitwise through ``torch._fused_adam_`` (float64 here; any non-CPU device), to
float32 rounding through the compiled CPU kernel (clipping and step counters)."""

from __future__ import annotations

import copy

import pytest
import torch

from rapidrl.nn.optim import adam, optimizer_step
from rapidrl.nn.policies import mlp


def _twin_nets(seed: int = 0, dtype=torch.float32):
    torch.manual_seed(seed)
    a = mlp(5, (16, 16), 3, "relu").to(dtype)
    b = mlp(5, (16, 16), 3, "relu").to(dtype)
    b.load_state_dict(a.state_dict())
    return a, b


def _set_grads(net, seed: int, scale: float = 1.0) -> None:
    g = torch.Generator().manual_seed(seed)
    for p in net.parameters():
        p.grad = scale * torch.randn(p.shape, generator=g, dtype=p.dtype)


def _assert_same(a, b, dtype, msg=None):
    if dtype == torch.float64:
        assert torch.equal(a, b), msg
    else:
        torch.testing.assert_close(a, b, rtol=2e-6, atol=1e-7, msg=msg)


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
@pytest.mark.parametrize("max_grad_norm", [0.0, 0.5, 1e6])
def test_optimizer_step_equals_clip_and_torch_adam(max_grad_norm, dtype):
    ours, ref = _twin_nets(dtype=dtype)
    opt_ours, opt_ref = adam(ours.parameters(), 1e-2), adam(ref.parameters(), 1e-2)
    assert opt_ours.param_groups[0]["fused"]  # the fast path is what this test is about
    for step in range(6):
        _set_grads(ours, step, scale=3.0)
        _set_grads(ref, step, scale=3.0)
        optimizer_step(opt_ours, max_grad_norm)
        if max_grad_norm > 0:
            torch.nn.utils.clip_grad_norm_(ref.parameters(), max_grad_norm)
        opt_ref.step()
        for p, q in zip(ours.parameters(), ref.parameters()):
            _assert_same(p, q, dtype, step)
            _assert_same(p.grad, q.grad, dtype, step)  # clipped in place, as clip_grad_norm_ does
    for p, q in zip(ours.parameters(), ref.parameters()):
        s, r = opt_ours.state[p], opt_ref.state[q]
        assert torch.equal(s["step"], r["step"])
        _assert_same(s["exp_avg"], r["exp_avg"], dtype)
        _assert_same(s["exp_avg_sq"], r["exp_avg_sq"], dtype)


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
def test_step_follows_learning_rate_changes_loaded_state_and_new_grad_tensors(dtype):
    ours, ref = _twin_nets(1, dtype)
    opt_ours, opt_ref = adam(ours.parameters(), 1e-2), adam(ref.parameters(), 1e-2)
    for step in range(3):
        _set_grads(ours, step)
        _set_grads(ref, step)
        optimizer_step(opt_ours)
        opt_ref.step()
    for opt in (opt_ours, opt_ref):
        opt.param_groups[0]["lr"] = 3e-3
    opt_ours.load_state_dict(copy.deepcopy(opt_ref.state_dict()))  # new state tensors: the step must use them
    _set_grads(ours, 9)
    _set_grads(ref, 9)
    optimizer_step(opt_ours)
    opt_ref.step()
    for p, q in zip(ours.parameters(), ref.parameters()):
        _assert_same(p, q, dtype)


def test_other_optimizers_and_missing_grads_use_torch_step():
    ours, ref = _twin_nets(2)
    opt_ours = torch.optim.SGD(ours.parameters(), lr=0.1)
    opt_ref = torch.optim.SGD(ref.parameters(), lr=0.1)
    _set_grads(ours, 0)
    _set_grads(ref, 0)
    optimizer_step(opt_ours)
    opt_ref.step()
    assert all(torch.equal(p, q) for p, q in zip(ours.parameters(), ref.parameters()))
    net = mlp(2, (4,), 1, "relu")
    opt = adam(net.parameters(), 1e-2)
    first = next(net.parameters())
    first.grad = torch.ones_like(first)  # the other parameters have no gradient: torch skips them
    before = [p.detach().clone() for p in net.parameters()]
    optimizer_step(opt)
    optimizer_step(opt)
    after = list(net.parameters())
    assert not torch.equal(before[0], after[0])
    assert all(torch.equal(b, a) for b, a in zip(before[1:], after[1:]))


def test_clip_and_count_kernel_and_its_checks():
    import numpy as np

    from rapidrl.kernels.adam import check_arrays, clip_and_count_unchecked

    g, step = np.full(4, 3.0, np.float32), np.zeros(1, np.float32)
    check_arrays((g,), (step,))
    assert clip_and_count_unchecked((g,), (step,), 1.0) == pytest.approx(6.0)
    assert step[0] == 1.0 and np.linalg.norm(g) == pytest.approx(1.0, rel=1e-5)
    with pytest.raises(TypeError, match="float32"):
        check_arrays((g.astype(np.float64),), (step,))
    with pytest.raises(TypeError, match="contiguous"):
        check_arrays((np.zeros((4, 2), np.float32)[:, 0],), (step,))
    with pytest.raises(ValueError, match="shape"):
        check_arrays((g,), (np.zeros(2, np.float32),))
    with pytest.raises(ValueError, match="tuple of 1"):
        check_arrays((g,), ())
