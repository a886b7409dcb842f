"""Where the peers' interpreters are, and which rapidrl source they import: environment variables, never a path this
package works out for itself.

A peer that needs packages rapidrl's environment lacks (stable-baselines3 and sb3-contrib; d3rlpy, which pins an
older gymnasium) runs its jobs in a virtual environment of its own:

- ``RAPIDRL_SB3_PYTHON``: the interpreter of stable-baselines3 and sb3-contrib (default: this one);
- ``RAPIDRL_D3RLPY_PYTHON``: d3rlpy's interpreter (no default: its suite says it skipped d3rlpy);
- ``RAPIDRL_SOURCE_TREE``: a directory holding the ``rapidrl`` package (a source checkout) that such an interpreter
  imports the benchmark jobs from (``rapidrl.benchmarks.isolated.run_isolated``'s ``checkout``). Needed only when
  the peer's interpreter is not this one.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

__all__ = ["d3rlpy_python", "sb3_python", "source_tree"]


def sb3_python() -> str:
    """stable-baselines3's interpreter: ``$RAPIDRL_SB3_PYTHON``, else this one."""
    return os.environ.get("RAPIDRL_SB3_PYTHON", sys.executable)


def d3rlpy_python() -> Path | None:
    """d3rlpy's interpreter: ``$RAPIDRL_D3RLPY_PYTHON``, or None when it is not set."""
    value = os.environ.get("RAPIDRL_D3RLPY_PYTHON")
    return Path(value) if value else None


def source_tree(python: str | os.PathLike | None) -> Path | None:
    """The rapidrl source tree the interpreter ``python`` imports the jobs from: None when it is this interpreter
    (it imports rapidrl as this process does), else ``$RAPIDRL_SOURCE_TREE`` (ValueError when that is not set)."""
    if python is None or Path(python).absolute() == Path(sys.executable).absolute():
        return None
    value = os.environ.get("RAPIDRL_SOURCE_TREE")
    if not value:
        raise ValueError(f"{python} is another interpreter than this one: set RAPIDRL_SOURCE_TREE to the directory "
                         "that holds the rapidrl package it should import (a source checkout)")
    return Path(value)
