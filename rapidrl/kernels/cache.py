"""Keep Numba's on-disk cache honest across modules.

Numba keys a cached function by its own source file only. A cached kernel that calls jitted functions of
other modules (the fused rollout collector calls every env's step kernel) would keep stale machine code
when only those modules change, in a development checkout. ``invalidate_stale_cache`` is called at import
by such a module: it hashes the sources the module's kernels depend on and drops the module's cache files
when the hash differs from the one recorded beside them. Installed packages replace every file at once,
so this matters for editable installs; it is cheap (one hash of a few source files) either way.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from pathlib import Path

from rapidrl._unsafe.numba_cache import cache_dir as numba_cache_dir


def invalidate_stale_cache(dispatcher, dependencies: Iterable[str]) -> bool:
    """Delete the cache files of ``dispatcher``'s module if ``dependencies`` (source paths) changed.

    dispatcher: any ``@njit(cache=True)`` function of the calling module (locates the cache directory).
    Returns True when stale files were removed. Never raises for an unwritable cache directory; raises
    RuntimeError when Numba no longer exposes where its cache is (``rapidrl._unsafe.numba_cache``).
    """
    digest = hashlib.sha256()
    for path in sorted(str(p) for p in dependencies):
        digest.update(Path(path).read_bytes())
    cache_dir = numba_cache_dir(dispatcher)  # Numba internals, rapidrl._unsafe.numba_cache (raises if they moved)
    stem = Path(dispatcher.py_func.__code__.co_filename).stem
    stamp = cache_dir / f"{stem}.deps.sha256"
    want = digest.hexdigest()
    try:
        if stamp.is_file() and stamp.read_text() == want:
            return False
        removed = False
        for f in list(cache_dir.glob(f"{stem}.*.nbi")) + list(cache_dir.glob(f"{stem}.*.nbc")):
            f.unlink(missing_ok=True)
            removed = True
        cache_dir.mkdir(parents=True, exist_ok=True)
        stamp.write_text(want)
        return removed
    except OSError:
        return False
