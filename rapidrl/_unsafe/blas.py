"""The thread count of the BLAS that Numba's ``np.dot`` calls (SciPy's OpenBLAS), found by its file path.

What it relies on: Numba's ``np.dot`` calls the BLAS that ``scipy.linalg.cython_blas`` loads, which in SciPy's
wheels is a bundled OpenBLAS whose file path contains ``scipy.libs`` (Linux wheels) or ``scipy_openblas32``
(newer wheels); threadpoolctl can set its thread count. By default that OpenBLAS spins one thread per core,
which at PPO's small matrix sizes only fights torch's and the envs' threads (measured: 3-10x slower compiled PPO
updates on a busy machine).

Ownership, lifetime, aliasing: no memory is touched; the setting is process-wide and lasts until changed. It
affects only that one library (not NumPy's or torch's BLAS).

When it breaks: if a SciPy release renames its bundled library, nothing is found and the compiled update only
gets slower. ``match_blas_threads_to_torch`` returns how many libraries it set, and ``tests/test_unsafe.py``
asserts that it finds one, so the rename shows up as a failing test, not as a slow run.
"""

from __future__ import annotations

__all__ = ["match_blas_threads_to_torch", "numba_blas_controllers"]

_MARKERS = ("scipy.libs", "scipy_openblas32")


def numba_blas_controllers() -> list:
    """threadpoolctl's controllers of the BLAS library (or libraries) Numba's ``np.dot`` calls."""
    import scipy.linalg.cython_blas  # noqa: F401  (loads the library Numba calls)
    from threadpoolctl import ThreadpoolController

    return [lib for lib in ThreadpoolController().lib_controllers if any(m in lib.filepath for m in _MARKERS)]


def match_blas_threads_to_torch() -> int:
    """Set that BLAS to torch's thread count (the ``torch_threads`` setting: 1 by default; 0 = all cores pays off
    for minibatches of thousands). Returns the number of libraries set (0: none found)."""
    import torch

    found = numba_blas_controllers()
    for lib in found:
        lib.set_num_threads(torch.get_num_threads())
    return len(found)
