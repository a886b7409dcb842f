"""Activations for compiled MLP code: a tanh that vectorises.

tanh(x) = x P(x^2) / Q(x^2) on [-7.905, 7.905], clamped outside (where float32 tanh rounds to +-1): the rational
minimax approximation that Eigen uses for float tanh. It is pure arithmetic, so loops over it vectorise, while
libm's ``tanhf`` (what ``np.tanh`` compiles to in Numba) is a call per element and ~10x slower here. Max error
2.6e-7 against float64 tanh, about 2 ulp (tests/test_ppo_compiled_update.py).
"""

from __future__ import annotations

import numba
import numpy as np

# numerator (odd powers 1..13) and denominator (even powers 0..6) coefficients; module-level floats are
# compile-time constants in Numba (no per-call allocation)
_P1, _P3, _P5, _P7 = 4.89352455891786e-03, 6.37261928875436e-04, 1.48572235717979e-05, 5.12229709037114e-08
_P9, _P11, _P13 = -8.60467152213735e-11, 2.00018790482477e-13, -2.76076847742355e-16
_Q0, _Q2, _Q4, _Q6 = 4.89352518554385e-03, 2.26843463243900e-03, 1.18534705686654e-04, 1.19825839466702e-06
_CLAMP = 7.90531110763549805


@numba.njit(cache=True, nogil=True, fastmath=True, error_model="numpy", inline="always")
def tanh_f32(x):  # pragma: no cover
    """tanh of one float32 (rational approximation, see the module docstring)."""
    f32 = np.float32
    x = min(max(f32(x), f32(-_CLAMP)), f32(_CLAMP))
    x2 = x * x
    num = x * (f32(_P1) + x2 * (f32(_P3) + x2 * (f32(_P5) + x2 * (f32(_P7) + x2 * (f32(_P9) + x2 * (
        f32(_P11) + x2 * f32(_P13)))))))
    return num / (f32(_Q0) + x2 * (f32(_Q2) + x2 * (f32(_Q4) + x2 * f32(_Q6))))


@numba.njit(cache=True, nogil=True, fastmath=True, error_model="numpy")
def tanh_inplace(z):  # pragma: no cover
    """z <- tanh(z) for a contiguous float32 array of any shape."""
    f = z.reshape(-1)
    for i in range(f.shape[0]):
        f[i] = tanh_f32(f[i])
