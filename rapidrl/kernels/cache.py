"""Numba's on-disk cache: kept honest across modules, and filled from the wheel on a first run.

Numba keys a cached function by its own source file only. A cached kernel that calls jitted functions of
other modules (the fused rollout collector calls every env's step kernel) would keep stale machine code
when only those modules change, in a development checkout. ``invalidate_stale_cache`` is called at import
by such a module; just before the first time Numba reads that kernel's cache (its first compilation in the process,
not at import: importing writes nothing) it hashes the sources the module's kernels depend on and drops the module's
cache files when the hash differs from the one recorded beside them. Installed packages replace every file at once,
so this matters for editable installs; it is cheap (one hash of a few source files) either way.

A wheel built with ``make wheel`` carries the main job's kernels compiled for portable x86-64 levels
(``rapidrl/_kernel_cache``, made by ``python -m rapidrl.precompile --portable``). ``install_shipped_cache`` runs
once per cache location (``Algorithm`` calls it when a model is built, before its envs and kernels, so importing
``rapidrl.kernels`` writes nothing): when Numba, Python and the CPU family match the build's, it copies the best
level this CPU runs into Numba's cache, keyed for this machine
(``rapidrl._unsafe.numba_cache.retarget_index``), so the first run after ``pip install`` compiles nothing the main
job needs. It never replaces a function's cache that exists already; otherwise (another Numba, Python or CPU, no
writable cache, ``RAPIDRL_NO_SHIPPED_CACHE=1``) nothing is installed and kernels compile on first use as before.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import sys
from collections.abc import Iterable
from pathlib import Path

from numba.core.dispatcher import Dispatcher

from rapidrl._unsafe import numba_cache
from rapidrl._unsafe.numba_cache import cache_dir as numba_cache_dir

PACKAGE = Path(__file__).resolve().parents[1]
SHIPPED = PACKAGE / "_kernel_cache"
"""Where a wheel keeps its shipped kernels: ``<level>/<package directory>/<Numba cache files>`` and
``manifest.json`` (``rapidrl.precompile.build_portable_cache`` writes it)."""


def invalidate_stale_cache(dispatcher, dependencies: Iterable[str]) -> None:
    """Delete the cache files of ``dispatcher``'s module if ``dependencies`` (source paths) changed: checked once, just
    before Numba first reads ``dispatcher``'s cache in this process (``before_first_cache_load``), so that importing
    the module writes nothing.

    dispatcher: an ``@njit(cache=True)`` function of the calling module (every cached kernel of the module defined so
    far gets the check, whichever compiles first). Raises RuntimeError when Numba no longer exposes its cache
    (``rapidrl._unsafe.numba_cache``).
    """
    paths = [str(p) for p in dependencies]
    module = sys.modules.get(dispatcher.py_func.__module__)
    same_file = dispatcher.py_func.__code__.co_filename
    kernels = {id(f): f for f in (vars(module).values() if module is not None else ())
               if isinstance(f, Dispatcher) and numba_cache.is_cached(f)
               and f.py_func.__code__.co_filename == same_file}
    kernels[id(dispatcher)] = dispatcher
    _PENDING[same_file] = lambda: drop_stale_cache(dispatcher, paths)
    numba_cache.before_first_cache_load(list(kernels.values()), lambda: check_stale_cache(dispatcher))


_PENDING: dict[str, object] = {}
"""Source file -> its stale-cache check not yet run (``invalidate_stale_cache``)."""


def check_stale_cache(dispatcher) -> None:
    """Run now, if it has not run yet, the stale-cache check that ``invalidate_stale_cache`` registered for
    ``dispatcher``'s source file: for kernels made later than the module's import (closures per env key, whose own
    cache files the check drops too), before they are first compiled."""
    check = _PENDING.pop(dispatcher.py_func.__code__.co_filename, None)
    if check is not None:
        check()


def drop_stale_cache(dispatcher, dependencies: Iterable[str]) -> bool:
    """Delete the cache files of ``dispatcher``'s module now if ``dependencies`` changed since the hash recorded beside
    them (and record the new one). Returns True when stale files were removed. Never raises for an unwritable cache
    directory; raises RuntimeError when Numba no longer exposes where its cache is (``rapidrl._unsafe.numba_cache``).
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


def python_tag() -> str:
    """The Python part of Numba's cache file names (``py311``)."""
    return f"py{sys.version_info[0]}{sys.version_info[1]}{getattr(sys, 'abiflags', '')}"


def install_shipped_cache(shipped: Path = SHIPPED) -> str | None:
    """Install the wheel's shipped kernels (``shipped``) into Numba's cache, once (see the module docstring); the
    x86-64 level installed, or None (nothing to install, done before, or not for this machine)."""
    manifest_path = Path(shipped) / "manifest.json"
    if os.environ.get("RAPIDRL_NO_SHIPPED_CACHE") or not manifest_path.is_file():
        return None
    here = numba_cache.source_cache_dir(Path(__file__))
    if here is None:
        return None
    manifest = json.loads(manifest_path.read_text())
    done = here / f"rapidrl-shipped-{manifest['build']}.done"
    if done.is_file():
        return None
    try:
        level = _install(manifest, Path(shipped))
    except Exception:  # a cache that cannot be installed (say, a Numba whose format moved): compile as usual
        level = None
    try:
        done.write_text(level or "none")
    except OSError:
        pass
    return level


def _install(manifest: dict, shipped: Path) -> str | None:
    import numba

    if (manifest.get("format"), manifest["numba"], manifest["python"]) != (1, numba.__version__, python_tag()):
        return None
    magic = numba_cache.host_magic_tuple()
    if magic[0] != manifest["triple"]:
        return None
    level = next((lv for lv in manifest["levels"] if numba_cache.level_supported(lv, magic[2])), None)
    if level is None:
        return None
    for directory, entry in manifest["files"][level].items():
        dest = numba_cache.source_cache_dir(PACKAGE / directory / entry["source"])
        if dest is None:
            continue
        src = shipped / level / directory
        for name in entry["files"]:
            if name.endswith(".deps.sha256") and not (dest / name).exists():
                shutil.copyfile(src / name, dest / name)
        for index in (n for n in entry["files"] if n.endswith(".nbi")):
            if (dest / index).exists():  # Numba has (or had) its own entries for these functions: keep them
                continue
            base = index[:-len(".nbi")]
            for name in entry["files"]:
                if name.startswith(base + ".") and name.endswith(".nbc"):
                    shutil.copyfile(src / name, dest / name)
            tmp = dest / f"{index}.rapidrl-{os.getpid()}.tmp"
            tmp.write_bytes(numba_cache.retarget_index((src / index).read_bytes(), magic))
            os.replace(tmp, dest / index)  # last: the index makes the data files visible
    return level
