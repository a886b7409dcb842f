"""The PyTorch side of the compiled MLP (``rapidrl.kernels.mlp``, CPU float32): zero-copy NumPy views of an
``nn.Sequential`` MLP's parameters and gradients in that kernel's layout (``w [out, in]``, ``b [out]``: PyTorch's),
acting on a few observations from Python (``MLPForward``: DQN's and SAC's acting on the CPU), and the forward and
backward of an update writing straight into each parameter's ``.grad`` (``MLPGrad``: DQN's and SAC's compiled
gradient backends). The views follow every optimizer step without copying. From 64 rows up the kernels multiply through
Numba's BLAS (SciPy's OpenBLAS), at the thread count the caller set: ``Algorithm.learn`` sets it to one for a compiled
backend and back afterwards (``rapidrl.train.runtime``; ``rapidrl._unsafe.blas`` says why one).
"""

from __future__ import annotations

import functools

import numpy as np
import torch
from torch import nn

from rapidrl.kernels.mlp import ACTIVATION_CODES, backward, forward

__all__ = ["ACTING_FORWARD_MAX_ROWS", "MLPForward", "MLPGrad", "linear_layers", "mlp_arrays", "norm_arrays",
           "threads_keep_products_exact"]


def linear_layers(seq) -> list[nn.Linear]:
    """The Linear layers of an MLP (an ``nn.Sequential`` or any sequence of modules), in order."""
    return [m for m in seq if isinstance(m, nn.Linear)]


def mlp_arrays(seq) -> tuple[tuple, tuple]:
    """Zero-copy NumPy views (ws, bs) of the weights [out, in] and biases [out] of an MLP's Linear layers.
    ValueError for an MLP with LayerNorms, which ``forward`` would skip (``norm_arrays`` and ``forward_norm``)."""
    if any(isinstance(m, nn.LayerNorm) for m in seq):
        raise ValueError("this MLP has LayerNorm layers, which rapidrl.kernels.mlp.forward does not compute: use "
                         "norm_arrays and rapidrl.kernels.mlp.forward_norm")
    linears = linear_layers(seq)
    return (tuple(m.weight.detach().numpy() for m in linears), tuple(m.bias.detach().numpy() for m in linears))


def norm_arrays(seq) -> tuple[tuple, tuple, tuple, tuple, float]:
    """(ws, bs, gammas, betas, eps): zero-copy views of an MLP built as ``Linear -> LayerNorm -> act`` per hidden layer
    and a last Linear (``rapidrl.nn.policies.mlp(layer_norm=True)``), in ``rapidrl.kernels.mlp.forward_norm``'s
    layout. ValueError for any other structure (a LayerNorm missing, without its affine weights, or elsewhere)."""
    layers = [m for m in seq if not isinstance(m, (nn.ReLU, nn.Tanh))]
    linears, norms = layers[0::2], layers[1::2]
    shaped = (len(layers) % 2 == 1 and all(isinstance(m, nn.Linear) for m in linears)
              and all(isinstance(m, nn.LayerNorm) for m in norms) and len(norms) == len(linears) - 1 >= 1)
    if not shaped or any(n.weight is None or n.normalized_shape != (lin.out_features,)
                         for n, lin in zip(norms, linears)) or len({n.eps for n in norms}) > 1:
        raise ValueError("norm_arrays needs Linear -> LayerNorm (affine, over the layer's features, one eps) -> "
                         "activation per hidden layer and a last Linear")
    ws, bs = (tuple(getattr(m, k).detach().numpy() for m in linears) for k in ("weight", "bias"))
    gammas, betas = (tuple(getattr(m, k).detach().numpy() for m in norms) for k in ("weight", "bias"))
    return ws, bs, gammas, betas, float(norms[0].eps)


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
            raise TypeError(f"{type(self).__name__} needs float32 CPU parameters")
        if len(self.ws) < 2:
            raise ValueError(f"{type(self).__name__} needs an MLP with at least one hidden layer")
        self.act = ACTIVATION_CODES[activation]
        self.in_dim = self.ws[0].shape[1]
        self._buffers: dict[int, tuple[tuple, np.ndarray]] = {}  # rows -> (hidden scratch, output)

    def __call__(self, x: np.ndarray) -> np.ndarray:
        """x [N, I] -> [N, O] (float32; other dtypes are converted)."""
        return self._forward(x)[2]

    def _forward(self, x: np.ndarray) -> tuple[np.ndarray, tuple, np.ndarray]:
        """(x as the kernel read it, hidden activations, output) of one forward."""
        x = np.ascontiguousarray(x, dtype=np.float32)
        if x.ndim != 2 or x.shape[1] != self.in_dim:
            raise ValueError(f"{type(self).__name__} expects inputs of shape (N, {self.in_dim}), got {x.shape}")
        rows = x.shape[0]
        if rows not in self._buffers:
            self._buffers[rows] = (tuple(np.zeros((rows, w.shape[0]), np.float32) for w in self.ws[:-1]),
                                   np.zeros((rows, self.ws[-1].shape[0]), np.float32))
        hidden, out = self._buffers[rows]
        forward(x, self.ws, self.bs, self.act, hidden, out)
        return x, hidden, out


class MLPGrad(MLPForward):
    """``MLPForward`` plus the backward of an update: ``backward(d_out)`` writes d loss / d (weight, bias) of every
    Linear layer into its ``.grad`` (created where missing; overwritten, not accumulated) through the last call's
    saved activations, so the optimizer steps as after autograd (``tests/test_kernels_mlp.py`` compares them)."""

    def __init__(self, seq, activation: str):
        super().__init__(seq, activation)
        self._params = [p for m in linear_layers(seq) for p in (m.weight, m.bias)]
        self._grads: tuple[list, tuple, tuple] | None = None  # (.grad tensors, their views gws, gbs)
        self._last: tuple[np.ndarray, tuple] | None = None  # (x, hidden activations) of the last call

    def __call__(self, x: np.ndarray) -> np.ndarray:
        """x [N, I] -> [N, O], keeping what ``backward`` needs (x and the hidden activations)."""
        x, hidden, out = self._forward(x)
        self._last = (x, hidden)
        return out

    def backward(self, d_out: np.ndarray) -> None:
        """d loss / d out [R, O] (float32) for the first R rows of the last call -> each layer's ``.grad``."""
        if self._last is None:
            raise RuntimeError("MLPGrad.backward needs a forward call first")
        x, hidden = self._last
        out_dim = self.ws[-1].shape[0]
        if not (isinstance(d_out, np.ndarray) and d_out.dtype == np.float32 and d_out.ndim == 2
                and d_out.shape[1] == out_dim and d_out.shape[0] <= x.shape[0] and d_out.flags.c_contiguous):
            raise ValueError(f"d_out must be a C-contiguous float32 array of shape (R <= {x.shape[0]}, {out_dim}), "
                             f"got {getattr(d_out, 'dtype', type(d_out).__name__)} {getattr(d_out, 'shape', '')}")
        gws, gbs = self._grad_views()
        backward(d_out, x, hidden, self.ws, self.act, gws, gbs)

    def _grad_views(self) -> tuple[tuple, tuple]:
        """Views of the parameters' ``.grad`` in the kernel's layout, rebuilt when a ``.grad`` object was replaced
        (``zero_grad(set_to_none=True)``, loading a checkpoint)."""
        grads = [p.grad for p in self._params]
        if self._grads is None or any(a is not b for a, b in zip(self._grads[0], grads)):
            for p in self._params:
                if p.grad is None or not p.grad.is_contiguous():
                    p.grad = torch.zeros_like(p, memory_format=torch.contiguous_format)
            grads = [p.grad for p in self._params]
            views = [g.numpy() for g in grads]
            self._grads = (grads, tuple(views[0::2]), tuple(views[1::2]))
        return self._grads[1], self._grads[2]


@functools.lru_cache(maxsize=64)
def threads_keep_products_exact(shapes: tuple, rows: tuple, threads: int, activation: str = "relu") -> bool:
    """Whether Numba's BLAS at ``threads`` threads computes the compiled forward and backward of an MLP (weights of
    ``shapes``, each ``(out, in)``, at each count of ``rows``) bit for bit as at one thread, on fixed random inputs.

    OpenBLAS threads a product by splitting its rows and columns, which leaves each sum's order alone on some CPUs
    (AMD Zen 4: DQN's 64 x 256 x 256 products were bitwise equal at 1 and 2 threads) and not on others (an AVX2
    EPYC, OpenBLAS's Haswell kernels, 2026-12-07: the same products up to 3e-5 apart). A caller that gives an update
    the threads only where this holds keeps a seed's run independent of its thread count. Cached per arguments;
    costs a few milliseconds."""
    from rapidrl._unsafe.blas import numba_blas_threads

    if threads <= 1:
        return True
    rng = np.random.default_rng(0)
    ws = tuple(rng.standard_normal(s, dtype=np.float32) / np.float32(np.sqrt(s[1])) for s in shapes)
    bs = tuple(rng.standard_normal(s[0], dtype=np.float32) for s in shapes)
    xs = [rng.standard_normal((n, shapes[0][1]), dtype=np.float32) for n in rows]
    act = ACTIVATION_CODES[activation]

    def outputs(count: int) -> list[np.ndarray]:
        """Every output, hidden activation and gradient of a forward and backward per row count, at ``count``."""
        arrays = []
        with numba_blas_threads(count):
            for x in xs:
                hidden = tuple(np.zeros((x.shape[0], s[0]), np.float32) for s in shapes[:-1])
                y = np.zeros((x.shape[0], shapes[-1][0]), np.float32)
                forward(x, ws, bs, act, hidden, y)
                gws, gbs = tuple(np.zeros(s, np.float32) for s in shapes), tuple(np.zeros(s[0], np.float32)
                                                                                 for s in shapes)
                backward(y, x, hidden, ws, act, gws, gbs)
                arrays += [y, *hidden, *gws, *gbs]
        return arrays

    return all(np.array_equal(a, b) for a, b in zip(outputs(1), outputs(threads)))
