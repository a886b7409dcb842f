"""Run an entry point of one rapidrl source tree in a fresh process, and prove which tree it ran (the before/after
tools' guard).

A before/after must compare two trees. ``cd repo && PYTHONPATH=/other/tree python -m rapidrl...`` imports the
*repo's* ``rapidrl``: ``python -m`` and ``python -c`` put the working directory ahead of PYTHONPATH on ``sys.path``.
Every A/B run of the old ``tools/ab_bench.py`` started from the repository root compared HEAD with HEAD. So each side

- runs from a neutral working directory (a fresh empty temporary directory), with only its own checkout on
  PYTHONPATH and ``PYTHONSAFEPATH=1`` (``rapidrl.benchmarks.isolated.tree_env``);
- starts through a bootstrap that prints the file ``rapidrl`` came from before anything else runs (``boot_code``:
  it needs nothing of the tree but its entry point, so old trees run too);
- is refused (``MixedTreeError``) when that file is not inside the checkout the side named.

``rapidrl.benchmarks.isolated.run_isolated(..., checkout=TREE)`` (``tools/ab_e2e.py``'s jobs) applies the same guard.

    proc = run_in_tree(python, Path("../wt-base"), "rapidrl.benchmarks.run:main", ["kernels", "--out", "/abs/out"])
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
from pathlib import Path

from rapidrl.benchmarks.isolated import MixedTreeError, boot_code, check_imported, imported_from, tree_env

__all__ = ["MixedTreeError", "imported_from", "run_in_tree"]

# Call ENTRY ("module:function", the first argument) with the remaining arguments; its int return is the exit code.
_CALL_ENTRY = ("module, func = sys.argv[1].split(':')\n"
               "rc = getattr(importlib.import_module(module), func)(sys.argv[2:])\n"
               "sys.exit(rc if isinstance(rc, int) else 0)")


def run_in_tree(python: str, checkout: Path, entry: str, argv: list[str], *, timeout: float | None = None,
                env: dict[str, str] | None = None, cwd: Path | None = None) -> subprocess.CompletedProcess:
    """Run ``entry`` (``"module:function"``, called with ``argv``) in a fresh ``python`` that imports rapidrl from
    ``checkout`` only, from a neutral working directory. Raises ``MixedTreeError`` if the child imported another
    tree, ``CalledProcessError`` (its stderr tail written to ours) if it failed. Returns the finished process, whose
    stdout holds the import line (``imported_from``).

    env / cwd: the child's environment and working directory (default: ``tree_env(checkout)`` and a fresh empty
    temporary directory; a test passes the old, mixed-up ones to see them refused). Paths in ``argv`` must be
    absolute: the child does not run where the caller does."""
    checkout = Path(checkout)
    if not (checkout / "rapidrl" / "__init__.py").is_file():
        raise FileNotFoundError(f"{checkout} is not a rapidrl source tree (no rapidrl/__init__.py)")
    with tempfile.TemporaryDirectory(prefix="rapidrl-side-") as neutral:
        proc = subprocess.run([python, "-c", boot_code(_CALL_ENTRY), entry, *argv],
                              env=tree_env(checkout) if env is None else env, cwd=neutral if cwd is None else cwd,
                              capture_output=True, text=True, timeout=timeout)
    check_imported(imported_from(proc.stdout), checkout, what=f"{entry} on {checkout}")
    if proc.returncode != 0:
        sys.stderr.write(proc.stderr[-4000:])
        raise subprocess.CalledProcessError(proc.returncode, [python, entry, *argv], proc.stdout, proc.stderr)
    return proc
