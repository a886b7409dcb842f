"""The bookkeeping around PyTorch's one-kernel Adam step in one compiled call (CPU, float32): global-norm gradient
clipping and the per-parameter step counters.

PyTorch's ``clip_grad_norm_`` plus the step-counter increment before ``torch._fused_adam_`` are ~20 small
operator calls (foreach norms, scalar conversions, one counter per parameter); on this CPU they cost
~0.35 ms per optimizer step for RL-sized networks, three times the Adam kernel itself. This kernel works
on zero-copy NumPy views of the gradients and of the ``torch.optim.Adam`` step tensors (so the optimizer's
state dict and checkpoints see every step); the Adam arithmetic stays PyTorch's vectorised kernel.
``rapidrl.nn.optim.optimizer_step`` uses it; tests compare it with ``torch.nn.utils.clip_grad_norm_``.

Clipping multiplies every gradient by max_norm / (norm + 1e-6) when that is below 1, the global L2 norm
accumulated in float64.
"""

from __future__ import annotations

import math

import numba
import numpy as np


@numba.njit(cache=True, nogil=True, fastmath={"reassoc"})
def _sum_squares(g) -> float:  # pragma: no cover
    total = 0.0
    for i in range(g.shape[0]):
        total += float(g[i]) * float(g[i])
    return total


@numba.njit(cache=True, nogil=True)
def clip_and_count_unchecked(grads, steps, max_norm) -> float:  # pragma: no cover
    """grads: tuple of 1-D float32 arrays (scaled in place when clipping binds); steps: tuple of 1-element
    float32 arrays (each incremented by 1). max_norm <= 0: no clipping. Returns the norm before clipping."""
    total = 0.0
    for k in range(len(grads)):
        total += _sum_squares(grads[k])
    norm = math.sqrt(total)
    if max_norm > 0.0:
        coef = np.float32(max_norm / (norm + 1e-6))
        if coef < 1.0:
            for k in range(len(grads)):
                g = grads[k]
                for i in range(g.shape[0]):
                    g[i] *= coef
    for k in range(len(steps)):
        steps[k][0] += np.float32(1.0)
    return norm


def check_arrays(grads: tuple, steps: tuple) -> None:
    """Raise unless ``grads`` is a non-empty tuple of writable contiguous 1-D float32 arrays and ``steps`` a
    tuple of as many writable 1-element float32 arrays: what ``clip_and_count_unchecked`` needs. Its callers pass
    the same arrays repeatedly and check them once (``rapidrl.nn.optim.optimizer_step``; the compiled PPO epoch's
    binding checks its own)."""
    if not isinstance(grads, tuple) or not grads:
        raise ValueError("grads must be a non-empty tuple of arrays")
    if not isinstance(steps, tuple) or len(steps) != len(grads):
        raise ValueError(f"steps must be a tuple of {len(grads)} arrays")
    for name, arrays in (("grads", grads), ("steps", steps)):
        for k, a in enumerate(arrays):
            if not (isinstance(a, np.ndarray) and a.dtype == np.float32 and a.ndim == 1 and a.flags.c_contiguous
                    and a.flags.writeable):
                raise TypeError(f"{name}[{k}] must be a writable contiguous 1-D float32 array")
            if name == "steps" and a.shape != (1,):
                raise ValueError(f"steps[{k}] must have shape (1,), got {a.shape}")
