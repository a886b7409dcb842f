"""Run a kernel module's Numba functions compiled or as plain Python, for tests parametrised over both.

In "python" mode every njit dispatcher of the module is swapped for its ``.py_func`` for the duration of the block, so
the same assertions check the compiled kernels and the Python source that coverage and debuggers see.
"""

from __future__ import annotations

import contextlib
from types import ModuleType

import numba

MODES = ["compiled", "python"]


@contextlib.contextmanager
def kernel_mode(module: ModuleType, mode: str):
    """In "python" mode, replace each Numba dispatcher in ``module`` by its Python function; restore on exit."""
    if mode not in MODES:
        raise ValueError(f"kernel mode must be one of {MODES}, got {mode!r}")
    saved = {}
    if mode == "python":
        saved = {n: o for n, o in vars(module).items() if isinstance(o, numba.core.dispatcher.Dispatcher)}
        for name, obj in saved.items():
            setattr(module, name, obj.py_func)
    try:
        yield
    finally:
        for name, obj in saved.items():
            setattr(module, name, obj)
