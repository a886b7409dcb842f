"""One MLP forward and backward in compiled code (Numba, CPU float32), in PyTorch's parameter layout.

The layout every compiled caller uses: a network of L Linear layers is ``ws``, a tuple of L weights [out_l, in_l]
(``nn.Linear.weight``), and ``bs``, a tuple of L biases [out_l]; gradients have the same layout (``gws``, ``gbs``).
``act`` is the hidden activation (``TANH`` or ``RELU``), applied after every layer but the last. ``hs`` is
caller-owned scratch for the hidden activations, a tuple of L - 1 arrays [R_max, out_l]: ``forward`` writes the
first R rows (R = rows of x) and ``backward`` reads them (they are the inputs of layers 1..L-1).
``rapidrl.nn.numba_mlp`` gives zero-copy views of a PyTorch MLP's parameters and gradients in this layout.

``forward_norm`` is the forward of an MLP with a LayerNorm before every hidden activation (PQN's Q networks).

Callers: the fused rollout collectors (``rapidrl.train.collect.fused``; PQN's ``rapidrl.train.collect.fused_q``), the
compiled PPO epoch (``rapidrl.kernels.ppo_update``), DQN's and SAC's compiled updates and acting
(``rapidrl.nn.numba_mlp``).
``tests/test_kernels_mlp.py`` compares forward and backward with PyTorch's autograd.
"""

from __future__ import annotations

import numba
import numpy as np

from rapidrl.kernels import activations
from rapidrl.kernels.activations import tanh_f32, tanh_inplace
from rapidrl.kernels.cache import invalidate_stale_cache

__all__ = ["ACTIVATION_CODES", "BLAS_MIN_ROWS", "RELU", "TANH", "backward", "forward", "forward_norm"]

TANH, RELU = 1, 2
ACTIVATION_CODES = {"tanh": TANH, "relu": RELU}
_FAST = {"reassoc", "contract"}

BLAS_MIN_ROWS = 64
"""From this many rows on, ``forward`` multiplies through BLAS (one sgemm per layer) instead of scalar loops:
measured on PPO CartPole at 1024-4096 envs, collection went from 39% to 29% of the run (200k -> 235k SPS)."""


@numba.njit(cache=True, nogil=True, fastmath=_FAST)
def _linear(x, w, b, out, act):  # pragma: no cover
    """out[n, o] = act(b[o] + sum_i x[n, i] w[o, i]); x [N, I], w [O, I] (torch layout), out [N, O]."""
    n_rows, n_in = x.shape
    n_out = w.shape[0]
    for n in range(n_rows):
        for o in range(n_out):
            s = b[o]
            for i in range(n_in):
                s += x[n, i] * w[o, i]
            if act == TANH:
                s = tanh_f32(s)
            elif act == RELU:
                s = max(s, np.float32(0.0))
            out[n, o] = s


@numba.njit(cache=True, nogil=True, fastmath=_FAST)
def _linear_blas(x, w, b, out, act):  # pragma: no cover
    """``_linear`` with the product through BLAS: out = act(x w^T + b), the activation in a pass of its own (a
    branch-free loop that vectorises: tanh with it in the element loop took 1.6x as long per PPO epoch)."""
    np.dot(x, w.T, out)  # into out: no temporary, no copy
    for n in range(out.shape[0]):
        for o in range(out.shape[1]):
            out[n, o] += b[o]
    if act == TANH:
        tanh_inplace(out)
    elif act == RELU:
        for n in range(out.shape[0]):
            for o in range(out.shape[1]):
                if out[n, o] < 0.0:
                    out[n, o] = 0.0


@numba.njit(cache=True, nogil=True)
def _layer(x, w, b, out, act):  # pragma: no cover
    """out = act(x w^T + b), x [R, I] -> out [R, O]: scalar loops below ``BLAS_MIN_ROWS`` rows, BLAS from there."""
    if x.shape[0] >= BLAS_MIN_ROWS:
        _linear_blas(x, w, b, out, act)
    else:
        _linear(x, w, b, out, act)


@numba.njit(cache=True, nogil=True)
def forward(x, ws, bs, act, hs, out):  # pragma: no cover
    """MLP forward: x [R, I] -> out[:R] [R, O], the hidden activations into hs[l][:R]."""
    rows, n_hidden = x.shape[0], len(hs)
    cur = x
    for layer in range(n_hidden):
        _layer(cur, ws[layer], bs[layer], hs[layer][:rows], act)
        cur = hs[layer][:rows]
    _layer(cur, ws[n_hidden], bs[n_hidden], out[:rows], np.int64(0))  # typed 0 (no activation): one specialization


@numba.njit(cache=True, nogil=True, error_model="numpy")
def backward(d_out, x, hs, ws, act, gws, gbs):  # pragma: no cover
    """Write d loss / d (weight, bias) of every layer into gws, gbs (overwriting them) from d loss / d out [R, O],
    for the first R rows of the last ``forward`` (x and hs as it left them: R may be fewer rows than it ran)."""
    rows = d_out.shape[0]
    d = d_out
    for layer in range(len(ws) - 1, -1, -1):
        inp = x[:rows] if layer == 0 else hs[layer - 1][:rows]
        np.dot(d.T, inp, gws[layer])
        gb = gbs[layer]
        gb[:] = 0.0
        for r in range(rows):
            for j in range(d.shape[1]):
                gb[j] += d[r, j]
        if layer > 0:
            d = np.dot(d, ws[layer])  # [R, in] = d loss / d (output of layer - 1's activation)
            for r in range(rows):
                for j in range(d.shape[1]):
                    if act == RELU:
                        if inp[r, j] <= 0.0:
                            d[r, j] = 0.0
                    else:
                        d[r, j] *= 1.0 - inp[r, j] * inp[r, j]


@numba.njit(cache=True, nogil=True, fastmath=_FAST)
def _layer_norm_act(h, gamma, beta, eps, act):  # pragma: no cover
    """h[r] <- act((h[r] - mean_r) / sqrt(var_r + eps) * gamma + beta) in place, row by row (PyTorch's LayerNorm over
    the last axis: the biased variance; mean and variance accumulated in float64); h [R, H], gamma, beta [H]."""
    rows, n = h.shape
    for r in range(rows):
        m = 0.0
        for j in range(n):
            m += h[r, j]
        m /= n
        v = 0.0
        for j in range(n):
            d = h[r, j] - m
            v += d * d
        inv = 1.0 / np.sqrt(v / n + eps)
        for j in range(n):
            s = np.float32((h[r, j] - m) * inv) * gamma[j] + beta[j]
            if act == TANH:
                s = tanh_f32(s)
            elif act == RELU:
                s = max(s, np.float32(0.0))
            h[r, j] = s


@numba.njit(cache=True, nogil=True)
def forward_norm(x, ws, bs, gammas, betas, eps, act, hs, out):  # pragma: no cover
    """``forward`` of an MLP with a LayerNorm between every hidden layer and its activation (``Linear -> LayerNorm ->
    act``: ``rapidrl.nn.policies.mlp(layer_norm=True)``, PQN's networks). gammas, betas: tuples of the L - 1
    LayerNorms' weights and biases [out_l]; eps: their epsilon. Forward only (no ``backward`` through the norms)."""
    rows, n_hidden, no_act = x.shape[0], len(hs), np.int64(0)
    cur = x
    for layer in range(n_hidden):
        h = hs[layer][:rows]
        _layer(cur, ws[layer], bs[layer], h, no_act)
        _layer_norm_act(h, gammas[layer], betas[layer], eps, act)
        cur = h
    _layer(cur, ws[n_hidden], bs[n_hidden], out[:rows], no_act)


# The kernels inline the activations of another module: recompile them when it changes.
invalidate_stale_cache(forward, [activations.__file__, __file__])
