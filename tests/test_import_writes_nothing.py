"""Importing rapidrl writes nothing: no Numba cache file, no stamp (issue 56), whichever of its modules are imported.
A wheel's shipped kernels are installed when the first model is built (``Algorithm``); a module's stale-cache check
(``rapidrl.kernels.cache.invalidate_stale_cache``) runs just before its kernels are first compiled; the built-in envs'
function contracts are checked by tests/test_envs_contract.py, not at import (typing compiles their helpers)."""

from __future__ import annotations

import ast
import os
import subprocess
import sys
from pathlib import Path

import rapidrl

PACKAGE = Path(rapidrl.__file__).resolve().parent


def test_importing_rapidrl_and_its_kernels_creates_no_file(tmp_path):
    cache = tmp_path / "numba_cache"
    cache.mkdir()
    code = ("import rapidrl, rapidrl.kernels, rapidrl.kernels.cache\nprint(rapidrl.kernels.gae.__name__)\n"
            # every module with kernels that inline other modules' (a stale-cache check each), the built-in envs,
            # every algorithm
            "import rapidrl.kernels.sac, rapidrl.kernels.mlp, rapidrl.kernels.ppo_update, rapidrl.envs.core.kernels\n"
            "import rapidrl.train.collect.fused, rapidrl.train.collect.fused_q, rapidrl.buffers.sampler\n"
            "from rapidrl.algos.registry import algorithms\nalgorithms()\nrapidrl.envs.list_builtin_envs()\n")
    env = {**os.environ, "NUMBA_CACHE_DIR": str(cache), "PYTHONDONTWRITEBYTECODE": "1"}
    run = subprocess.run([sys.executable, "-c", code], env=env, cwd=tmp_path, capture_output=True, text=True,
                         timeout=300)
    assert run.returncode == 0, run.stderr[-2000:]
    # Numba itself makes a cached function's (empty) directory when the function is defined; no file may appear
    assert sorted(p.relative_to(cache) for p in cache.rglob("*") if not p.is_dir()) == []


def test_the_shipped_cache_is_installed_by_a_model_not_by_an_import():
    """No call of ``install_shipped_cache`` in the package but ``Algorithm.__init__``'s."""
    callers = []
    for path in PACKAGE.rglob("*.py"):
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            if isinstance(node, ast.Call) and getattr(node.func, "id", getattr(node.func, "attr", None)) \
                    == "install_shipped_cache":
                callers.append(path.relative_to(PACKAGE).as_posix())
    assert callers == ["train/algorithm.py"]
    from rapidrl.train.algorithm import Algorithm

    assert "install_shipped_cache()" in Path(sys.modules[Algorithm.__module__].__file__).read_text()
