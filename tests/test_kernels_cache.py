"""invalidate_stale_cache: a cached kernel that calls a jitted function of another module sees that module's
changes (Numba's own cache is keyed by the caller's source file alone and would keep the old machine code)."""

from __future__ import annotations

import subprocess
import sys
import textwrap

CALLER = textwrap.dedent("""
    import numba
    import dep
    from rapidrl.kernels.cache import invalidate_stale_cache

    @numba.njit(cache=True)
    def outer():
        return dep.value() + 1

    invalidate_stale_cache(outer, [dep.__file__])
""")


def outer_value(directory) -> int:
    out = subprocess.run([sys.executable, "-c", "import caller; print(caller.outer())"], cwd=directory,
                         capture_output=True, text=True, timeout=120, check=True)
    return int(out.stdout.strip())


def write_dep(directory, value: int) -> None:
    (directory / "dep.py").write_text(f"import numba\n\n@numba.njit(cache=True)\ndef value():\n    return {value}\n")


def test_cached_caller_sees_a_changed_dependency(tmp_path):
    (tmp_path / "caller.py").write_text(CALLER)  # written once: its own cache stamp never changes
    write_dep(tmp_path, 1)
    assert outer_value(tmp_path) == 2
    assert outer_value(tmp_path) == 2  # served from the cache
    write_dep(tmp_path, 41)
    assert outer_value(tmp_path) == 42
