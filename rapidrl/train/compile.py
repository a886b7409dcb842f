"""``maybe_compile``: the off-policy driver's ``torch_compile`` setting, with an eager fallback."""

from __future__ import annotations

import warnings
from collections.abc import Callable

import torch

__all__ = ["maybe_compile"]


def maybe_compile(fn: Callable, enabled: bool) -> Callable:
    """``torch.compile(fn)`` when enabled, falling back to ``fn`` (with a warning) if compiling fails.

    Failures show up on the first call, while tracing. Where the function has graph breaks (``backward``,
    optimizer steps) an earlier graph may already have run in that call; the eager retry then repeats it,
    so at worst the first update is partly applied twice.
    """
    if not enabled:
        return fn
    compiled = torch.compile(fn)
    current = [compiled]

    def run(*args):
        if current[0] is fn:
            return fn(*args)
        try:
            return current[0](*args)
        except Exception as e:  # inductor needs a C++ toolchain; any backend failure means eager
            warnings.warn(f"torch.compile failed ({type(e).__name__}: {str(e)[:200]}); running the update eagerly",
                          RuntimeWarning, stacklevel=2)
            current[0] = fn
            return fn(*args)

    return run
