"""The thread count of the BLAS that Numba's ``np.dot`` calls (SciPy's OpenBLAS), found by its file path.

What it relies on: Numba's ``np.dot`` calls the BLAS that ``scipy.linalg.cython_blas`` loads, which in SciPy's
wheels is a bundled OpenBLAS whose file path contains ``scipy.libs`` (Linux wheels) or ``scipy_openblas32``
(newer wheels); threadpoolctl can set its thread count. By default that OpenBLAS spins one thread per core,
which at PPO's small matrix sizes only fights torch's and the envs' threads (measured: 3-10x slower compiled PPO
updates on a busy machine). At more than one torch thread, an OpenBLAS of as many threads as torch fights torch's
OpenMP workers as well, whenever compiled matmuls and PyTorch calls alternate: measured at 2 torch threads on the
2-core development machine, alone (2026-11-28, one run each), one thread here against two: SAC HalfCheetah-v5 162.7
against 30.8 SPS, DDPG 203.2 against 32.7, DQN CartPole-v1 479.3 against 73.6, PPO CartPole-v1 149,101 against
71,852, PPO HalfCheetah-v5 3,595 against 3,623. So every handwritten backend keeps it at one thread
(``single_thread_numba_blas``).

Ownership, lifetime, aliasing: no memory is touched; the setting is process-wide and lasts until changed. rapidrl
changes it only for the duration of a handwritten backend's ``learn`` (and ``evaluate``) and sets the count it found
back afterwards (``rapidrl.train.runtime.process_settings``). It affects only that one library (not NumPy's or
torch's BLAS).

When it breaks: if a SciPy release renames its bundled library, nothing is found and the compiled update only
gets slower. ``single_thread_numba_blas`` returns how many libraries it set, and ``tests/test_unsafe.py``
asserts that it finds one, so the rename shows up as a failing test, not as a slow run.
"""

from __future__ import annotations

import contextlib

__all__ = ["numba_blas_controllers", "numba_blas_threads", "single_thread_numba_blas"]

_MARKERS = ("scipy.libs", "scipy_openblas32")


def numba_blas_controllers() -> list:
    """threadpoolctl's controllers of the BLAS library (or libraries) Numba's ``np.dot`` calls."""
    import scipy.linalg.cython_blas  # noqa: F401  (loads the library Numba calls)
    from threadpoolctl import ThreadpoolController

    return [lib for lib in ThreadpoolController().lib_controllers if any(m in lib.filepath for m in _MARKERS)]


def single_thread_numba_blas() -> int:
    """Set that BLAS to one thread, whatever torch's count (the module docstring says why). Returns the number of
    libraries set (0: none found)."""
    found = numba_blas_controllers()
    for lib in found:
        lib.set_num_threads(1)
    return len(found)


@contextlib.contextmanager
def numba_blas_threads(count: int):
    """Within: that BLAS at ``count`` threads; afterwards each library at the count it had."""
    found = numba_blas_controllers()
    before = [lib.num_threads for lib in found]
    try:
        for lib in found:
            lib.set_num_threads(count)
        yield
    finally:
        for lib, n in zip(found, before):
            lib.set_num_threads(n)
