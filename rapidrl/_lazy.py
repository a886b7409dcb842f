"""Packages whose public names are imported on first use: one ``__getattr__``/``__dir__`` pair (PEP 562).

``rapidrl``, ``rapidrl.envs`` and ``rapidrl.dist`` list ``{public name: module}``; the first access imports the module
and caches the value in the package's namespace, so ``import rapidrl`` loads neither torch nor Numba kernels.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable

__all__ = ["lazy_exports"]


def lazy_exports(package: str, table: dict[str, str], namespace: dict, fallback: Callable[[str], object] | None = None
                 ) -> tuple[Callable[[str], object], Callable[[], list[str]]]:
    """(``__getattr__``, ``__dir__``) of ``package`` whose globals are ``namespace``: ``table`` maps a public name to
    the module that defines it (a name that is the module's last part is the module itself); ``fallback(name)``
    finds names outside the table (None: not found, AttributeError). ``__dir__`` lists ``namespace["__all__"]``."""

    def __getattr__(name: str):
        module = table.get(name)
        if module is not None:
            mod = importlib.import_module(module)
            value = mod if module.endswith("." + name) else getattr(mod, name)
        else:
            value = None if fallback is None else fallback(name)
            if value is None:
                raise AttributeError(f"module {package!r} has no attribute {name!r}")
        namespace[name] = value
        return value

    def __dir__() -> list[str]:
        return sorted(namespace["__all__"])

    return __getattr__, __dir__
