"""Argument checks shared by every public entry point.

A compiled kernel never sees unchecked input: wrappers call these first and raise a clear
``TypeError``/``ValueError`` naming the argument. Only NumPy is imported here.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

FLOAT_DTYPES = (np.dtype(np.float32), np.dtype(np.float64))


def check_array(
    name: str,
    x,
    *,
    ndim: int | Sequence[int] | None = None,
    dtypes: Sequence[np.dtype] | None = None,
    shape: tuple | None = None,
    contiguous: bool = True,
    allow_empty: bool = False,
) -> np.ndarray:
    """Return ``x`` unchanged if it is a NumPy array meeting every requirement, else raise.

    ``shape`` may contain ``None`` for a free dimension. No conversion or copy is ever made.
    """
    if not isinstance(x, np.ndarray):
        raise TypeError(f"{name} must be a numpy.ndarray, got {type(x).__name__}")
    if ndim is not None:
        allowed = (ndim,) if isinstance(ndim, int) else tuple(ndim)
        if x.ndim not in allowed:
            want = " or ".join(str(a) for a in allowed)
            raise ValueError(f"{name} must have {want} dimension(s), got shape {x.shape}")
    if dtypes is not None and x.dtype not in [np.dtype(d) for d in dtypes]:
        want = ", ".join(np.dtype(d).name for d in dtypes)
        raise TypeError(f"{name} must have dtype {want}; got {x.dtype}")
    if shape is not None:
        if len(shape) != x.ndim or any(s is not None and s != d for s, d in zip(shape, x.shape)):
            want = "(" + ", ".join("*" if s is None else str(s) for s in shape) + ")"
            raise ValueError(f"{name} must have shape {want}, got {x.shape}")
    if contiguous and not x.flags.c_contiguous:
        raise ValueError(f"{name} must be C-contiguous (use np.ascontiguousarray)")
    if not allow_empty and x.size == 0:
        raise ValueError(f"{name} must not be empty, got shape {x.shape}")
    return x


def check_float_array(name: str, x, **kwargs) -> np.ndarray:
    """``check_array`` restricted to float32/float64."""
    return check_array(name, x, dtypes=FLOAT_DTYPES, **kwargs)


def check_same_dtype(names: Sequence[str], arrays: Sequence[np.ndarray]) -> np.dtype:
    """All arrays share one dtype; return it."""
    dtype = arrays[0].dtype
    for n, a in zip(names[1:], arrays[1:]):
        if a.dtype != dtype:
            raise TypeError(f"{n} has dtype {a.dtype} but {names[0]} has {dtype}; all must match")
    return dtype


def check_bool_array(name: str, x, *, shape: tuple) -> np.ndarray:
    """A boolean (or uint8 0/1) flag array of exactly ``shape``; returned as a bool view."""
    if not isinstance(x, np.ndarray):
        raise TypeError(f"{name} must be a numpy.ndarray, got {type(x).__name__}")
    if x.dtype == np.uint8:
        x = x.view(np.bool_)
    if x.dtype != np.bool_:
        raise TypeError(f"{name} must have dtype bool (or uint8), got {x.dtype}")
    return check_array(name, x, shape=shape)


def check_scalar(name: str, value, *, low: float | None = None, high: float | None = None,
                 low_open: bool = False, high_open: bool = False) -> float:
    """A finite real number within [low, high] (open ends when asked); returned as float."""
    if isinstance(value, bool) or not isinstance(value, (int, float, np.integer, np.floating)):
        raise TypeError(f"{name} must be a real number, got {type(value).__name__}")
    v = float(value)
    if not np.isfinite(v):
        raise ValueError(f"{name} must be finite, got {v}")
    if low is not None and (v < low or (low_open and v == low)):
        raise ValueError(f"{name} must be {'>' if low_open else '>='} {low}, got {v}")
    if high is not None and (v > high or (high_open and v == high)):
        raise ValueError(f"{name} must be {'<' if high_open else '<='} {high}, got {v}")
    return v


def check_int(name: str, value, *, low: int | None = None, high: int | None = None) -> int:
    """An integer (not bool) within [low, high]."""
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise TypeError(f"{name} must be an int, got {type(value).__name__}")
    v = int(value)
    if low is not None and v < low:
        raise ValueError(f"{name} must be >= {low}, got {v}")
    if high is not None and v > high:
        raise ValueError(f"{name} must be <= {high}, got {v}")
    return v


def check_float_fast(name: str, x, *, ndim: int) -> np.ndarray:
    """``check_float_array(name, x, ndim=ndim)`` with a sub-microsecond path for valid input.

    Hot wrappers call this for the argument that fixes dtype and shape; only input that fails the
    cheap test goes through the detailed checks (which raise the usual messages).
    """
    if (type(x) is np.ndarray and x.ndim == ndim and x.dtype in FLOAT_DTYPES and x.size
            and x.flags.c_contiguous):
        return x
    return check_float_array(name, x, ndim=ndim)


def check_like(name: str, x, *, like: str, dtype: np.dtype, shape: tuple) -> np.ndarray:
    """``x`` must be a C-contiguous ndarray with exactly ``dtype`` and ``shape``, those of argument ``like``.

    The cheap test costs a few hundred ns; on failure the detailed checks name what is wrong. For
    ``dtype`` bool, uint8 0/1 flags are accepted and returned as a bool view (as ``check_bool_array``).
    """
    if type(x) is np.ndarray and x.dtype == dtype and x.shape == shape and x.flags.c_contiguous:
        return x
    if dtype == np.bool_:
        return check_bool_array(name, x, shape=shape)
    check_array(name, x, shape=shape, allow_empty=True)
    if x.dtype != dtype:
        raise TypeError(f"{name} has dtype {x.dtype} but {like} has {dtype}; all must match")
    return x


def check_unit_scalar(name: str, value) -> float:
    """``check_scalar(name, value, low=0.0, high=1.0)`` with a ~100 ns path for a Python float.

    Discounts and lambdas go through this on every call of a hot wrapper; anything that is not a
    plain float in [0, 1] (NaN fails the comparison) takes the detailed path, which raises.
    """
    if type(value) is float and 0.0 <= value <= 1.0:
        return value
    return check_scalar(name, value, low=0.0, high=1.0)
