"""TQC's quantile Huber loss and its gradient in one compiled pass (CPU).

With quantiles z [n, B, Q] at fractions tau_j = (j + 0.5) / Q and targets t [B, M] (constants),
delta_ibjk = t_bk - z_ibj, w = |tau_j - 1{delta < 0}| and huber(x) = x^2 / 2 for |x| <= 1, else |x| - 1/2:

    loss = 1 / (n B Q M) * sum_{i, b, j, k} w huber(delta)
    d loss / d z_ibj = -1 / (n B Q M) * sum_k w clip(delta, -1, 1)

In PyTorch the pairwise [n, B, Q, M] tensor (3.7M elements for TQC's 5 critics x 25 quantiles at batch 256) is
written and read by ~15 elementwise operators, forward and backward: ~40 ms of a ~60 ms update on this CPU. Here
it is never stored. The PyTorch definition (``rapidrl.algos.offpolicy_losses.quantile_huber_loss``) stays the
reference and the "torch" gradient backend; tests compare both, loss and gradient. Arguments are float32 and
C-contiguous, checked by the wrapper.
"""

from __future__ import annotations

import numba
import numpy as np

from rapidrl.kernels.validation import check_array, check_like

F32 = np.dtype(np.float32)
_HALF = np.float32(0.5)
_ONE = np.float32(1.0)


@numba.njit(cache=True, nogil=True, fastmath={"reassoc", "nsz"})
def _quantile_huber(quantiles, target, grad):  # pragma: no cover
    n, rows, q = quantiles.shape
    m = target.shape[1]
    scale = 1.0 / (n * rows * q * m)
    total = 0.0
    for j in range(q):
        tau = np.float32((j + 0.5) / q)
        below = _ONE - tau  # the weight where delta < 0
        for i in range(n):
            for r in range(rows):
                z = quantiles[i, r, j]
                loss_row = np.float32(0.0)
                grad_row = np.float32(0.0)
                for k in range(m):
                    d = target[r, k] - z
                    w = below if d < 0 else tau
                    a = abs(d)
                    loss_row += w * (a - _HALF if a > _ONE else _HALF * d * d)
                    grad_row += w * max(-_ONE, min(_ONE, d))
                total += loss_row
                grad[i, r, j] = -grad_row * scale
    return total * scale


def quantile_huber(quantiles: np.ndarray, target: np.ndarray, grad: np.ndarray) -> float:
    """The mean quantile Huber loss (module docstring) of quantiles [n, B, Q] towards target [B, M]; writes its
    gradient with respect to ``quantiles`` into ``grad`` [n, B, Q]. float32, C-contiguous."""
    n, rows, q = check_array("quantiles", quantiles, ndim=3, dtypes=[F32]).shape
    check_array("target", target, shape=(rows, None), dtypes=[F32])
    check_like("grad", grad, like="quantiles", dtype=F32, shape=(n, rows, q))
    return float(_quantile_huber(quantiles, target, grad))
