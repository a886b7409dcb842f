"""PyTorch below its public API: private operators, and ``torch.optim.Adam``'s state written from outside.

Each function wraps one such use; the callers (``rapidrl.nn.optim``, the compiled PPO binding, the off-policy
target update, the finiteness check, the hand-written MLP backward, the distributed learner) call these and never
the private API directly. ``tests/test_unsafe.py`` checks every one against its public equivalent, so a torch
upgrade that changes a signature or a semantic fails there loudly rather than as a slower or wrong run.

- ``adam_kernel_step``: ``torch._fused_adam_``, the kernel ``Adam(fused=True).step()`` runs, without the ~0.2 ms of
  Python bookkeeping around it (as long as the kernel itself for RL-sized networks). Relies on its keyword
  signature (lr, beta1, beta2, weight_decay, eps, amsgrad, maximize) and on the step counters being incremented
  by the caller first (``increment_steps``: ``torch._foreach_add_``), as ``Adam.step`` does. Owner of every
  tensor: the optimizer; nothing else aliases its state.
- ``cached_numpy_views``: zero-copy NumPy views of the gradients and step counters, cached on the optimizer as
  ``optimizer._rapidrl_views`` (an attribute torch does not use). Lifetime: the cache holds the tensors it viewed
  and is rebuilt whenever one of them is not the same object, so a freed tensor can never be replaced unnoticed
  by another at the same address. Aliasing: the views write into ``.grad`` and ``state["step"]`` in place, which
  torch's optimizer reads next (``state_dict`` and checkpoints see every step).
- ``adam_state``: creates ``Adam``'s per-parameter state (``step`` a float32 0-d tensor, ``exp_avg`` and
  ``exp_avg_sq`` like the parameter) as ``Adam.step`` would on its first call, for the compiled PPO epoch that
  then writes it through NumPy views. Relies on that layout (checked against a real first step by the test).
- ``polyak``: ``torch._foreach_lerp_`` (target <- target + tau (online - target)) in one call.
- ``largest_abs``: ``torch._foreach_norm(..., inf)``, the largest |value| of each tensor in one call.
- ``relu_backward``: ``torch.ops.aten.threshold_backward``, the gradient through a ReLU from its output.
- ``cpu_bf16_support``: ``torch.cpu._is_avx512_bf16_supported``/``_is_amx_tile_supported`` (cpuinfo's answer on
  every OS), None where this torch lacks them (the caller then asks ``rapidrl._system.cpu_flags``).
- ``flatten``/``unflatten``: ``torch._utils._flatten_dense_tensors``/``_unflatten_dense_tensors``, one buffer for a
  list of tensors (the distributed learner's broadcast).
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch

__all__ = ["adam_kernel_step", "adam_state", "cached_numpy_views", "flatten", "increment_steps", "largest_abs",
           "polyak", "relu_backward", "unflatten"]


def adam_kernel_step(params: list, grads: list, states: list, steps: list, group: dict) -> None:
    """One step of PyTorch's one-kernel Adam (``Adam(fused=True)``'s ``torch._fused_adam_``) on ``params`` with their
    ``grads`` and Adam ``states`` (``steps`` already incremented), with the hyperparameters of the parameter ``group``
    (no weight decay, AMSGrad or maximize: the caller checks)."""
    beta1, beta2 = group["betas"]
    torch._fused_adam_(params, grads, [s["exp_avg"] for s in states], [s["exp_avg_sq"] for s in states], [], steps,
                       lr=group["lr"], beta1=beta1, beta2=beta2, weight_decay=0.0, eps=group["eps"], amsgrad=False,
                       maximize=False)


def increment_steps(steps: list) -> None:
    """Add 1 to every step counter tensor, in one call."""
    torch._foreach_add_(steps, 1)


def cached_numpy_views(optimizer: torch.optim.Optimizer, grads: list, steps: list,
                       check: Callable[[tuple, tuple], None]) -> tuple[tuple, tuple]:
    """Flat NumPy views of ``grads`` and ``steps``, checked once by ``check(grad_views, step_views)`` and cached on
    the optimizer while the same tensor objects are in place (see the module docstring)."""
    tensors = grads + steps
    cached = getattr(optimizer, "_rapidrl_views", None)
    if cached is not None and len(cached[0]) == len(tensors) and all(a is b for a, b in zip(cached[0], tensors)):
        return cached[1]
    if not all(t.is_contiguous() for t in tensors):
        raise ValueError("optimizer_step needs contiguous gradients")
    views = (tuple(t.detach().view(-1).numpy() for t in grads), tuple(t.detach().view(-1).numpy() for t in steps))
    check(*views)
    optimizer._rapidrl_views = (tensors, views)
    return views


def adam_state(optimizer: torch.optim.Adam, params: list) -> None:
    """Give every parameter of ``params`` without state the state ``Adam.step`` creates on its first call, and a
    zero ``.grad`` where it has none."""
    state = optimizer.state
    for t in params:
        if t.grad is None:
            t.grad = torch.zeros_like(t)
        if not state.get(t):
            state[t] = {"step": torch.tensor(0.0, dtype=torch.float32),
                        "exp_avg": torch.zeros_like(t, memory_format=torch.preserve_format),
                        "exp_avg_sq": torch.zeros_like(t, memory_format=torch.preserve_format)}


@torch.no_grad()
def polyak(target: list[torch.Tensor], online: list[torch.Tensor], tau: float) -> None:
    """target <- target + tau (online - target) for every pair, in one call (tau = 1 copies)."""
    torch._foreach_lerp_(target, online, tau)


def largest_abs(tensors: list[torch.Tensor]) -> torch.Tensor:
    """[K]: the largest |value| of each tensor (NaN or inf exactly when the tensor has one), in one call."""
    return torch.stack(torch._foreach_norm(tensors, math.inf))


def relu_backward(d: torch.Tensor, out: torch.Tensor) -> torch.Tensor:
    """d loss / d z from d loss / d relu(z) and ``out`` = relu(z): zero where out is 0 (one kernel)."""
    return torch.ops.aten.threshold_backward(d, out, 0.0)


def flatten(tensors: list[torch.Tensor]) -> torch.Tensor:
    """One contiguous 1-D tensor holding ``tensors`` (same dtype and device) one after the other."""
    return torch._utils._flatten_dense_tensors(tensors)


def unflatten(flat: torch.Tensor, like: list[torch.Tensor]) -> tuple[torch.Tensor, ...]:
    """Views of ``flat`` shaped like ``like`` (the inverse of ``flatten``)."""
    return torch._utils._unflatten_dense_tensors(flat, like)


def cpu_bf16_support() -> bool | None:
    """True when the CPU has native bfloat16 arithmetic (AVX512-BF16 or AMX tiles), False when it has not, None
    when this torch cannot tell (no such private functions)."""
    checks = [getattr(torch.cpu, name, None) for name in ("_is_avx512_bf16_supported", "_is_amx_tile_supported")]
    if any(check is None for check in checks):
        return None
    return any(bool(check()) for check in checks)
