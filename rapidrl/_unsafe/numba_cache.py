"""Where Numba keeps a cached function's machine code (``rapidrl.kernels.cache.invalidate_stale_cache``).

Why: Numba keys a cached function by its own source file only, so a cached kernel that inlines jitted functions
of other modules keeps stale machine code when only those change (in a development checkout). rapidrl drops the
cache files of such a kernel when the hash of its dependencies changes, and for that needs the cache directory.

What it relies on: Numba's private ``Dispatcher.enable_caching()`` and ``Dispatcher._cache._cache_path`` (present
from Numba 0.49 to the version pinned today).

Ownership, lifetime, aliasing: reads an attribute; the directory belongs to Numba, which also writes the stamp's
neighbours (``<module>.*.nbi``/``.nbc``); rapidrl only deletes its own module's files there.

When it breaks: a Numba that renames these internals makes ``cache_dir`` raise ``RuntimeError`` naming the Numba
version, instead of silently skipping the invalidation (which would leave stale kernels after an edit).
``tests/test_unsafe.py`` calls it, so an upgrade that breaks it fails the test suite.
"""

from __future__ import annotations

from pathlib import Path

__all__ = ["cache_dir"]


def cache_dir(dispatcher) -> Path:
    """The directory of ``dispatcher``'s (an ``@njit(cache=True)`` function) on-disk cache."""
    try:
        dispatcher.enable_caching()
        return Path(dispatcher._cache._cache_path)
    except AttributeError as e:
        import numba

        raise RuntimeError(f"numba {numba.__version__} has no Dispatcher._cache._cache_path any more ({e}): "
                           "rapidrl._unsafe.numba_cache must learn where this version keeps its cache") from e
