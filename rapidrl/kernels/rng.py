"""Counter-based per-env random numbers (splitmix64), usable inside any Numba kernel.

Each env ``i`` owns a 64-bit ``key[i]`` and a draw counter ``counter[i]``. Draw number ``c`` of env
``i`` is a pure function of ``(key[i], c)``::

    u64(key, c) = mix64(key + (c + 1) * GOLDEN)       # splitmix64's output sequence, random access
    uniform(key, c) = (u64(key, c) >> 11) * 2**-53    # float64 in [0, 1)

so results never depend on which thread steps which env, or in what order. Keys come from
``derive_keys(seed, n)``: ``key[i] = mix64(mix64(seed) ^ mix64(i + GOLDEN))``; a different seed gives
unrelated keys. All arithmetic is modulo 2**64 on ``np.uint64`` (run through ``.py_func`` NumPy warns
about the intended wrap-around; the compiled kernels do not).
"""

from __future__ import annotations

import secrets

import numba
import numpy as np

GOLDEN = np.uint64(0x9E3779B97F4A7C15)
_M1 = np.uint64(0xBF58476D1CE4E5B9)
_M2 = np.uint64(0x94D049BB133111EB)
_S30 = np.uint64(30)
_S27 = np.uint64(27)
_S31 = np.uint64(31)
_S11 = np.uint64(11)
_ONE = np.uint64(1)
_INV_2_53 = 1.0 / 9007199254740992.0


@numba.njit(cache=True)
def mix64(z):
    """splitmix64 finalizer: a bijective avalanche hash of a uint64."""
    z = (z ^ (z >> _S30)) * _M1
    z = (z ^ (z >> _S27)) * _M2
    return z ^ (z >> _S31)


@numba.njit(cache=True)
def random_u64(key, counter):
    """Draw ``counter`` of the stream ``key``: a uint64."""
    return mix64(key + (counter + _ONE) * GOLDEN)


@numba.njit(cache=True)
def uniform(key, counter):
    """Draw ``counter`` of the stream ``key`` as a float64 in [0, 1) (key, counter: uint64)."""
    return float(random_u64(key, counter) >> _S11) * _INV_2_53


@numba.njit(cache=True)
def next_uniform(key, counter, i):
    """Next float64 in [0, 1) of env ``i``; advances ``counter[i]`` by one. key, counter: uint64[N]."""
    c = counter[i]
    counter[i] = c + _ONE
    return uniform(key[i], c)


@numba.njit(cache=True)
def _derive_keys(seed, out):
    s = mix64(seed)
    for i in range(out.shape[0]):
        out[i] = mix64(s ^ mix64(np.uint64(i) + GOLDEN))


def seed_to_u64(seed: int | None) -> int:
    """A Python int seed (any size or sign) as a uint64 value; ``None`` draws fresh OS entropy."""
    if seed is None:
        return secrets.randbits(64)
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)):
        raise TypeError(f"seed must be an int or None, got {type(seed).__name__}")
    return int(seed) % (1 << 64)


def derive_keys(seed: int | None, n: int, out: np.ndarray | None = None) -> np.ndarray:
    """Per-env keys ``uint64[n]`` for ``seed`` (see the module docstring); written into ``out`` if given."""
    if out is None:
        out = np.empty(n, dtype=np.uint64)
    if out.shape != (n,) or out.dtype != np.uint64:
        raise ValueError(f"out must be uint64 of shape ({n},), got {out.dtype} {out.shape}")
    _derive_keys(np.uint64(seed_to_u64(seed)), out)
    return out


def uniform_reference(key: int, counter: int) -> float:
    """Plain-Python reference of draw ``counter`` of stream ``key`` (tests compare the kernels to it)."""
    mask = (1 << 64) - 1

    def mix(z: int) -> int:
        z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & mask
        z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & mask
        return z ^ (z >> 31)

    return (mix((key + (counter + 1) * 0x9E3779B97F4A7C15) & mask) >> 11) * 2.0**-53
