"""The portable kernel cache a wheel ships (`rapidrl.precompile --portable`): installed once, it compiles nothing it
holds. (`python -m rapidrl.precompile` leaving nothing for the main job to compile: tests/test_package.py.)"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest

# The start of a child script: the module of every function Numba compiles from here on is appended to `compiled`.
_LISTEN_TO_COMPILES = textwrap.dedent("""
    from numba.core import event
    compiled = []
    class Listener(event.Listener):
        def on_start(self, ev):
            pass
        def on_end(self, ev):
            compiled.append(ev.data["dispatcher"].py_func.__module__)
    event.register("numba:compile", Listener())
""")

# ``python -m rapidrl.precompile`` leaving nothing for the main job to compile is proved in the clean venv of
# tests/test_package.py (the installed package's precompile, then the main job counting compiles with this listener).


# A small workload for the portable cache: one kernel module's functions (GAE), its result printed.
_GAE = textwrap.dedent("""
    import numpy as np
    from rapidrl import kernels
    rng = np.random.default_rng(0)
    r, v = rng.normal(size=(8, 4)).astype(np.float32), rng.normal(size=(8, 4)).astype(np.float32)
    term, trunc = rng.random((8, 4)) < 0.2, np.zeros((8, 4), bool)
    adv, _ = kernels.gae(r, v, np.zeros(4, np.float32), term, trunc, gamma=0.99, lam=0.95)
    print("ADV", adv.tobytes().hex())
""")

_INSTALL_THEN_RUN = _LISTEN_TO_COMPILES + textwrap.dedent("""
    import sys
    from pathlib import Path
    from rapidrl.kernels.cache import install_shipped_cache
    print("LEVEL", install_shipped_cache(Path(sys.argv[1])), install_shipped_cache(Path(sys.argv[1])))
""") + _GAE + 'print("COMPILED", sorted(m for m in compiled if m.startswith("rapidrl")))\n'


@pytest.mark.slow
def test_a_portable_cache_is_installed_once_and_compiles_nothing_it_holds(tmp_path):
    """``build_portable_cache`` compiles a workload for an x86-64 level in a process of its own; in a process with an
    empty Numba cache, ``install_shipped_cache`` installs it (keyed for this CPU) and the workload compiles nothing
    and computes the same bits as a natively compiled run."""
    from rapidrl._unsafe.numba_cache import host_magic_tuple, level_supported
    from rapidrl.precompile import build_portable_cache

    level = "x86-64-v2"
    if not level_supported(level, host_magic_tuple()[2]):
        pytest.skip(f"this CPU does not run {level} code")
    shipped = tmp_path / "shipped"
    manifest = build_portable_cache(shipped, levels=(level,), command=[sys.executable, "-c", _GAE])
    assert manifest["levels"] == [level] and any(name.endswith(".nbc") for entry in manifest["files"][level].values()
                                                 for name in entry["files"])
    env = {**os.environ, "NUMBA_CACHE_DIR": str(tmp_path / "cache")}
    env.pop("RAPIDRL_NO_SHIPPED_CACHE", None)
    run = subprocess.run([sys.executable, "-c", _INSTALL_THEN_RUN, str(shipped)], env=env, capture_output=True,
                         text=True, timeout=600)
    assert run.returncode == 0, run.stderr[-3000:]
    assert f"LEVEL {level} None" in run.stdout  # installed once; the second call finds it done
    assert run.stdout.split("COMPILED")[-1].strip() == "[]"
    native = subprocess.run([sys.executable, "-c", _INSTALL_THEN_RUN, str(tmp_path / "nothing shipped")],
                            env={**env, "NUMBA_CACHE_DIR": str(tmp_path / "native")}, capture_output=True, text=True,
                            timeout=600)
    assert native.returncode == 0, native.stderr[-3000:]
    assert "LEVEL None None" in native.stdout
    # the listener counts: GAE's serial core and the env block it calls (rapidrl.kernels.advantages, b5bfda0)
    assert native.stdout.split("COMPILED")[-1].strip() == "['rapidrl.kernels.advantages', 'rapidrl.kernels.advantages']"
    assert native.stdout.split("ADV")[1].split("COMPILED")[0] == run.stdout.split("ADV")[1].split("COMPILED")[0]
