"""A multilayer perceptron's forward pass compiled with Numba, reading PyTorch's weights zero-copy (CPU float32).

``mlp_into`` is the compiled kernel (other compiled code calls it: the fused rollout collector,
``rapidrl.train.fused``); ``MLPForward`` wraps it for acting on a few observations from Python (DQN's and
SAC's acting on the CPU). Weights are NumPy views of the parameters (``mlp_arrays``), so optimizer steps are
seen without copying. Layer layout is PyTorch's: ``w [out, in]``, ``b [out]``.
"""

from __future__ import annotations

import numba
import numpy as np

from rapidrl.kernels.activations import tanh_f32

__all__ = ["ACTING_FORWARD_MAX_ROWS", "ACTIVATION_CODES", "BLAS_MIN_ROWS", "MLPForward", "mlp_arrays", "mlp_into"]

ACTIVATION_CODES = {"tanh": 1, "relu": 2}
_FAST = {"reassoc", "contract"}


@numba.njit(cache=True, fastmath=_FAST)
def _linear(x, w, b, out, act):
    """out[n, o] = act(b[o] + sum_i x[n, i] w[o, i]); x [N, I], w [O, I] (torch layout), out [N, O]."""
    n_rows, n_in = x.shape
    n_out = w.shape[0]
    for n in range(n_rows):
        for o in range(n_out):
            s = b[o]
            for i in range(n_in):
                s += x[n, i] * w[o, i]
            if act == 1:
                s = tanh_f32(s)
            elif act == 2:
                s = max(s, np.float32(0.0))
            out[n, o] = s


BLAS_MIN_ROWS = 64
"""From this many rows on, ``mlp_into`` multiplies through BLAS (one sgemm per layer) instead of scalar loops:
measured on PPO CartPole at 1024-4096 envs, collection went from 39% to 29% of the run (200k -> 235k SPS)."""


@numba.njit(cache=True, fastmath=_FAST)
def _linear_blas(x, w, b, out, act):
    """``_linear`` with the product through BLAS: out = act(x w^T + b)."""
    out[:, :] = np.dot(x, w.T)
    for n in range(out.shape[0]):
        for o in range(out.shape[1]):
            s = out[n, o] + b[o]
            if act == 1:
                s = tanh_f32(s)
            elif act == 2:
                s = max(s, np.float32(0.0))
            out[n, o] = s


@numba.njit(cache=True)
def mlp_into(x, ws, bs, hs, act, out):
    """MLP forward: x [N, I] -> out [N, O]; ws/bs/hs tuples of weights, biases, hidden scratch [N, H_l]."""
    cur = x
    n_hidden = len(hs)
    blas = x.shape[0] >= BLAS_MIN_ROWS
    linear_out = np.int64(0)  # no activation; a typed int, not a literal 0: one specialization of each layer
    for layer in range(n_hidden):
        if blas:
            _linear_blas(cur, ws[layer], bs[layer], hs[layer], act)
        else:
            _linear(cur, ws[layer], bs[layer], hs[layer], act)
        cur = hs[layer]
    if blas:
        _linear_blas(cur, ws[n_hidden], bs[n_hidden], out, linear_out)
    else:
        _linear(cur, ws[n_hidden], bs[n_hidden], out, linear_out)


def mlp_arrays(seq) -> tuple[tuple, tuple]:
    """Zero-copy NumPy views of the weights and biases of an ``nn.Sequential`` of Linear/activation."""
    from torch import nn

    linears = [m for m in seq if isinstance(m, nn.Linear)]
    return (tuple(m.weight.detach().numpy() for m in linears), tuple(m.bias.detach().numpy() for m in linears))


ACTING_FORWARD_MAX_ROWS = 16  # up to this many observations MLPForward is faster than PyTorch (256x256, here)


class MLPForward:
    """Inference of an ``nn.Sequential`` MLP (Linear layers, one activation between them) in one compiled call
    that reads the weights zero-copy, so it always uses the current parameters (CPU float32 only).

    For the small batches of acting it beats PyTorch, whose per-call overhead dominates there: 19 µs for a
    4-256-256-2 network on one observation against 130 µs for three ``addmm`` calls (measured here).
    ``__call__`` returns a reused output buffer: read it before the next call.
    """

    def __init__(self, seq, activation: str):
        """seq: the MLP's modules in order (an ``nn.Sequential`` or a list of Linear and activation modules)."""
        self.ws, self.bs = mlp_arrays(seq)
        if any(w.dtype != np.float32 for w in self.ws):
            raise TypeError("MLPForward needs float32 CPU parameters")
        self.act = ACTIVATION_CODES[activation]
        self.in_dim = self.ws[0].shape[1]
        self._buffers: dict[int, tuple[tuple, np.ndarray]] = {}  # rows -> (hidden scratch, output)

    def __call__(self, x: np.ndarray) -> np.ndarray:
        """x [N, I] -> [N, O] (float32; other dtypes are converted)."""
        x = np.ascontiguousarray(x, dtype=np.float32)
        if x.ndim != 2 or x.shape[1] != self.in_dim:
            raise ValueError(f"MLPForward expects observations of shape (N, {self.in_dim}), got {x.shape}")
        rows = x.shape[0]
        if rows not in self._buffers:
            self._buffers[rows] = (tuple(np.zeros((rows, w.shape[0]), np.float32) for w in self.ws[:-1]),
                                   np.zeros((rows, self.ws[-1].shape[0]), np.float32))
        hidden, out = self._buffers[rows]
        mlp_into(x, self.ws, self.bs, hidden, self.act, out)
        return out
