"""Where Numba keeps a cached function's machine code (``rapidrl.kernels.cache.invalidate_stale_cache``), and a
cache index retargeted to this machine (``rapidrl.kernels.cache.install_shipped_cache``).

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

The shipped cache (machine code a wheel carries, compiled for a portable x86-64 level: ``rapidrl.precompile``).
``source_cache_dir`` asks Numba's own cache locators (``numba.core.caching.CacheImpl._locator_classes``) where the
functions of a source file are cached. ``retarget_index`` rewrites a cache index (an ``.nbi`` file: the pickled Numba
version, then the pickled ``(source stamp, {(signature, codegen magic tuple, code hashes): data file})``) so that its
entries are found under this machine's magic tuple (LLVM triple, CPU name, CPU features). What it relies on: that
index format (Numba 0.68), and that code compiled for an x86-64 level runs on every CPU that has that level's features
(the caller checks them: ``level_supported``). The data files are not touched. When it breaks: a Numba that changes the
format makes ``retarget_index`` raise (the caller then installs nothing and kernels compile as without a shipped
cache: slower first run, never wrong code); ``tests/test_precompile.py`` exercises it.
"""

from __future__ import annotations

import io
import pickle
from pathlib import Path

__all__ = ["X86_64_LEVELS", "before_first_cache_load", "cache_dir", "cache_subdir_name", "host_magic_tuple",
           "is_cached", "level_supported", "retarget_index", "source_cache_dir"]

X86_64_LEVELS = {  # the x86-64 psABI micro-architecture levels (LLVM CPU names) -> the features each adds
    "x86-64": (),
    "x86-64-v2": ("cx16", "popcnt", "sahf", "sse3", "sse4.1", "sse4.2", "ssse3"),
    "x86-64-v3": ("avx", "avx2", "bmi", "bmi2", "f16c", "fma", "lzcnt", "movbe", "xsave"),
    "x86-64-v4": ("avx512bw", "avx512cd", "avx512dq", "avx512f", "avx512vl"),
}


def cache_dir(dispatcher) -> Path:
    """The directory of ``dispatcher``'s (an ``@njit(cache=True)`` function) on-disk cache."""
    try:
        dispatcher.enable_caching()
        return Path(dispatcher._cache._cache_path)
    except AttributeError as e:
        import numba

        raise RuntimeError(f"numba {numba.__version__} has no Dispatcher._cache._cache_path any more ({e}): "
                           "rapidrl._unsafe.numba_cache must learn where this version keeps its cache") from e


def is_cached(dispatcher) -> bool:
    """Whether ``dispatcher`` keeps an on-disk cache (``@njit(cache=True)``: Numba gives it a ``FunctionCache``; others
    have a ``NullCache``)."""
    from numba.core.caching import NullCache

    return not isinstance(getattr(dispatcher, "_cache", None), (NullCache, type(None)))


def before_first_cache_load(dispatchers, hook) -> None:
    """Run ``hook()`` once, just before Numba first reads the on-disk cache of any of ``dispatchers`` (``@njit(cache=
    True)`` functions): the first compilation of one of them in this process (called directly or typed from another
    kernel; ``Dispatcher.compile`` asks ``_cache.load_overload`` first). Relies on ``Dispatcher._cache.load_overload``
    (Numba 0.49 to the version pinned today); raises RuntimeError naming the Numba version when it is gone."""
    pending = [True]
    caches = []
    for dispatcher in dispatchers:
        try:
            dispatcher.enable_caching()
            caches.append((dispatcher._cache, dispatcher._cache.load_overload))
        except AttributeError as e:
            import numba

            raise RuntimeError(f"numba {numba.__version__} has no Dispatcher._cache.load_overload any more ({e}): "
                               "rapidrl._unsafe.numba_cache must learn when this version reads its cache") from e

    def hooked(original):
        def load_overload(*args, **kwargs):
            if pending[0]:
                pending[0] = False
                for cache, _ in caches:
                    cache.__dict__.pop("load_overload", None)  # the class's method again
                hook()
            return original(*args, **kwargs)

        return load_overload

    for cache, original in caches:
        cache.load_overload = hooked(original)


def source_cache_dir(py_file: Path) -> Path | None:
    """The directory where Numba caches the functions of source file ``py_file`` (made if need be), found by Numba's
    own locators in their order; None when no locator applies (no writable place, or locators chosen by
    ``NUMBA_CACHE_LOCATOR_CLASSES``, which rapidrl does not second-guess)."""
    from numba.core import caching, config

    if config.CACHE_LOCATOR_CLASSES:
        return None

    def probe():  # a locator reads only the first line number of the function it locates
        pass

    for cls in caching.CacheImpl._locator_classes:
        locator = cls.from_function(probe, str(py_file))
        if locator is not None:
            return Path(locator.get_cache_path())
    return None


def cache_subdir_name(py_file: Path) -> str:
    """The name of the subdirectory of ``NUMBA_CACHE_DIR`` that holds the cache of source file ``py_file``."""
    from numba.core import caching

    return caching._CacheLocator.get_suitable_cache_subpath(str(py_file))


def host_magic_tuple() -> tuple:
    """This process's Numba codegen key: (LLVM triple, CPU name, CPU features)."""
    from numba.core.registry import cpu_target

    return cpu_target.target_context.codegen().magic_tuple()


def level_supported(level: str, host_features: str) -> bool:
    """Whether a CPU with LLVM features ``host_features`` ("+avx,-avx512f,...") runs code compiled for ``level``."""
    have = {f[1:] for f in host_features.split(",") if f.startswith("+")}
    names = list(X86_64_LEVELS)
    return level in X86_64_LEVELS and all(
        f in have for lv in names[:names.index(level) + 1] for f in X86_64_LEVELS[lv])


def retarget_index(index: bytes, magic_tuple: tuple) -> bytes:
    """An ``.nbi`` index's bytes with every entry keyed by ``magic_tuple`` (see the module docstring)."""
    from numba.core.serialize import dumps

    stream = io.BytesIO(index)
    version = pickle.load(stream)
    stamp, overloads = pickle.loads(stream.read())
    entries = {(sig, tuple(magic_tuple), hashes): name for (sig, _magic, hashes), name in overloads.items()}
    out = io.BytesIO()
    pickle.dump(version, out, protocol=-1)
    out.write(dumps((stamp, entries)))
    return out.getvalue()
