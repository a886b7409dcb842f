"""ReLU followed by Batch Renormalization in training mode, forward and backward, each in one compiled pass (CPU).

For pre-activations z [n, B, F] (n independent layers, statistics over the B rows per layer and feature), with
h = relu(z), per-feature gamma, beta and running statistics mu, var (``rapidrl.nn.batch_renorm`` has the equations):

    mu_B = mean(h), var_B = mean((h - mu_B)^2), inv_B = 1 / sqrt(var_B + eps)
    r = clip(sqrt(var_B + eps) / sqrt(var + eps), 1 / r_max, r_max), d = clip((mu_B - mu) / sqrt(var + eps), +-d_max)
        (r = 1, d = 0 when ``renorm`` is false: the warm-up)
    y = gamma * ((h - mu_B) inv_B r + d) + beta = h * s + t,   s = gamma inv_B r, t = gamma (d - mu_B inv_B r) + beta
    mu <- mu + momentum (mu_B - mu), var <- var + momentum (var_B - var)

and, with r and d constants of the gradient and x_hat = (h - mu_B) inv_B, the backward of an upstream gradient g:

    dz = 1{z > 0} gamma r inv_B (g - mean(g) - x_hat mean(g x_hat)),  dgamma = r sum(g x_hat) + d sum(g),
    dbeta = sum(g)

In PyTorch (CrossQ's critics: [2, 512, 1024] at batch 256) this is ~15 elementwise operators forward and backward,
plus bfloat16 <-> float32 casts under autocast. Here z is read twice and y written once forward; z and g read twice
and dz written once backward. Values are float32 or bfloat16, given as their bits (uint16: the upper half of a
float32, rounded to nearest even on the way back, as PyTorch's conversion); arithmetic is float32 with float64 sums
over the rows. Statistics and parameters are float32 [n, F]. The wrappers check every argument.
"""

from __future__ import annotations

import numba
import numpy as np

from rapidrl.kernels.validation import check_array, check_like, check_scalar

F32 = np.dtype(np.float32)
BF16_BITS = np.dtype(np.uint16)
VALUE_DTYPES = (F32, BF16_BITS)
_FAST = {"reassoc", "nsz", "contract"}


@numba.njit(inline="always", nogil=True)
def _load(src, row, bits):  # pragma: no cover
    """row [F] float32 <- src [F] (float32, or bfloat16 bits as uint16; bits is row's uint32 view)."""
    if src.itemsize == 2:
        for j in range(row.shape[0]):
            bits[j] = np.uint32(src[j]) << np.uint32(16)
    else:
        for j in range(row.shape[0]):
            row[j] = src[j]


@numba.njit(inline="always", nogil=True)
def _store(row, bits, dst):  # pragma: no cover
    """dst [F] <- row [F] float32 (bfloat16 bits rounded to nearest even where dst is uint16; NaN -> 0x7FC0)."""
    if dst.itemsize == 2:
        for j in range(row.shape[0]):
            u = bits[j]
            if (u & np.uint32(0x7FFFFFFF)) > np.uint32(0x7F800000):
                dst[j] = 0x7FC0
            else:
                dst[j] = (u + np.uint32(0x7FFF) + ((u >> np.uint32(16)) & np.uint32(1))) >> np.uint32(16)
    else:
        for j in range(row.shape[0]):
            dst[j] = row[j]


@numba.njit(cache=True, nogil=True, fastmath=_FAST)
def _relu_renorm_forward(z, y, weight, bias, running_mean, running_var, renorm, momentum, eps, r_max, d_max,
                         mean, inv_std, r, d):  # pragma: no cover
    n, rows, f = z.shape
    row = np.empty(f, np.float32)
    bits = row.view(np.uint32)
    acc = np.empty(f, np.float64)
    scale = np.empty(f, np.float32)
    shift = np.empty(f, np.float32)
    zero = np.float32(0.0)
    for k in range(n):
        acc[:] = 0.0
        for i in range(rows):
            _load(z[k, i], row, bits)
            for j in range(f):
                acc[j] += max(row[j], zero)
        for j in range(f):
            mean[k, j] = np.float32(acc[j] / rows)
        acc[:] = 0.0
        for i in range(rows):
            _load(z[k, i], row, bits)
            for j in range(f):
                dev = max(row[j], zero) - mean[k, j]
                acc[j] += dev * dev
        for j in range(f):
            mu = mean[k, j]
            var_b = np.float32(acc[j] / rows)
            sigma_b = np.sqrt(var_b + eps)
            inv_b = np.float32(1.0) / sigma_b
            if renorm:
                inv = np.float32(1.0) / np.sqrt(running_var[k, j] + eps)
                r_j = min(max(sigma_b * inv, np.float32(1.0) / r_max), r_max)
                d_j = min(max((mu - running_mean[k, j]) * inv, -d_max), d_max)
            else:
                r_j, d_j = np.float32(1.0), np.float32(0.0)
            inv_std[k, j], r[k, j], d[k, j] = inv_b, r_j, d_j
            running_mean[k, j] += momentum * (mu - running_mean[k, j])
            running_var[k, j] += momentum * (var_b - running_var[k, j])
            a = inv_b * r_j
            scale[j] = weight[k, j] * a
            shift[j] = weight[k, j] * (d_j - mu * a) + bias[k, j]
        for i in range(rows):
            _load(z[k, i], row, bits)
            for j in range(f):
                row[j] = max(row[j], zero) * scale[j] + shift[j]
            _store(row, bits, y[k, i])


@numba.njit(cache=True, nogil=True, fastmath=_FAST)
def _relu_renorm_backward(z, grad_y, grad_z, mean, inv_std, r, weight, sum_g, sum_g_xhat):  # pragma: no cover
    n, rows, f = z.shape
    row = np.empty(f, np.float32)
    bits = row.view(np.uint32)
    grow = np.empty(f, np.float32)
    gbits = grow.view(np.uint32)
    acc_g = np.empty(f, np.float64)
    acc_gx = np.empty(f, np.float64)
    coef = np.empty(f, np.float32)
    mean_g = np.empty(f, np.float32)
    mean_gx = np.empty(f, np.float32)
    zero = np.float32(0.0)
    for k in range(n):
        acc_g[:] = 0.0
        acc_gx[:] = 0.0
        for i in range(rows):
            _load(z[k, i], row, bits)
            _load(grad_y[k, i], grow, gbits)
            for j in range(f):
                xhat = (max(row[j], zero) - mean[k, j]) * inv_std[k, j]
                acc_g[j] += grow[j]
                acc_gx[j] += grow[j] * xhat
        for j in range(f):
            sum_g[k, j] = np.float32(acc_g[j])
            sum_g_xhat[k, j] = np.float32(acc_gx[j])
            mean_g[j] = np.float32(acc_g[j] / rows)
            mean_gx[j] = np.float32(acc_gx[j] / rows)
            coef[j] = weight[k, j] * r[k, j] * inv_std[k, j]
        for i in range(rows):
            _load(z[k, i], row, bits)
            _load(grad_y[k, i], grow, gbits)
            for j in range(f):
                xhat = (max(row[j], zero) - mean[k, j]) * inv_std[k, j]
                grow[j] = coef[j] * (grow[j] - mean_g[j] - xhat * mean_gx[j]) if row[j] > zero else zero
            _store(grow, gbits, grad_z[k, i])


def _check_values(name: str, x, like: np.ndarray | None = None) -> np.ndarray:
    if like is None:
        return check_array(name, x, ndim=3, dtypes=VALUE_DTYPES)
    return check_like(name, x, like="z", dtype=like.dtype, shape=like.shape)


def _check_stats(names: tuple[str, ...], arrays: tuple, n: int, f: int) -> None:
    for name, a in zip(names, arrays):
        check_array(name, a, shape=(n, f), dtypes=[F32])


def relu_renorm_forward(z: np.ndarray, y: np.ndarray, weight: np.ndarray, bias: np.ndarray,
                        running_mean: np.ndarray, running_var: np.ndarray, *, renorm: bool, momentum: float,
                        eps: float, r_max: float, d_max: float, mean: np.ndarray, inv_std: np.ndarray,
                        r: np.ndarray, d: np.ndarray) -> None:
    """y [n, B, F] <- the training forward of the module docstring for z [n, B, F] (float32, or bfloat16 bits as
    uint16; y the same); updates running_mean and running_var [n, F] in place and writes mean (mu_B), inv_std
    (inv_B), r and d [n, F] for the backward. weight, bias and the statistics float32 [n, F]; C-contiguous."""
    n, rows, f = _check_values("z", z).shape
    if rows < 1:
        raise ValueError("z needs at least one row per layer")
    _check_values("y", y, like=z)
    _check_stats(("weight", "bias", "running_mean", "running_var", "mean", "inv_std", "r", "d"),
                 (weight, bias, running_mean, running_var, mean, inv_std, r, d), n, f)
    check_scalar("momentum", momentum, low=0.0, high=1.0)
    check_scalar("eps", eps, low=0.0)
    check_scalar("r_max", r_max, low=1.0)
    check_scalar("d_max", d_max, low=0.0)
    _relu_renorm_forward(z, y, weight, bias, running_mean, running_var, bool(renorm), np.float32(momentum),
                         np.float32(eps), np.float32(r_max), np.float32(d_max), mean, inv_std, r, d)


def relu_renorm_backward(z: np.ndarray, grad_y: np.ndarray, grad_z: np.ndarray, mean: np.ndarray,
                         inv_std: np.ndarray, r: np.ndarray, weight: np.ndarray, sum_g: np.ndarray,
                         sum_g_xhat: np.ndarray) -> None:
    """grad_z [n, B, F] <- the backward of the module docstring for upstream grad_y [n, B, F] (z's dtype and shape),
    with mean, inv_std and r [n, F] of the forward; writes sum(g) and sum(g x_hat) over the rows [n, F] (from which
    dgamma and dbeta follow)."""
    n, _, f = _check_values("z", z).shape
    _check_values("grad_y", grad_y, like=z)
    _check_values("grad_z", grad_z, like=z)
    _check_stats(("mean", "inv_std", "r", "weight", "sum_g", "sum_g_xhat"),
                 (mean, inv_std, r, weight, sum_g, sum_g_xhat), n, f)
    _relu_renorm_backward(z, grad_y, grad_z, mean, inv_std, r, weight, sum_g, sum_g_xhat)
