"""The algorithm registry: the one list of algorithms that the CLI, ``rapidrl list``, ``export``, ``tune``, the
run configuration and ``rapidrl.<Name>`` read.

An algorithm registers itself in its own module with ``@register`` on its class (a subclass of
``rapidrl.train.algorithm.Algorithm`` with a unique lowercase ``name`` and a ``config_class``). The registry
finds the algorithms by importing every module of this package, and the modules that installed packages name
in the ``rapidrl.algorithms`` entry-point group (``[project.entry-points."rapidrl.algorithms"]`` in their
``pyproject.toml``, ``reinforce = "my_package.reinforce"``). Adding an algorithm is therefore one file, plus an
optional preset ``configs/<name>_<env>.toml`` and an optional tuning space ``configs/spaces/<name>.toml``
(``docs/extending.md``).
"""

from __future__ import annotations

import dataclasses
import importlib
import importlib.metadata
import pkgutil
import re
import threading

from rapidrl.train.algorithm import Algorithm
from rapidrl.train.config import ConfigError

__all__ = ["algorithms", "get_algorithm", "register"]

ENTRY_POINT_GROUP = "rapidrl.algorithms"
_NAME = re.compile(r"^[a-z][a-z0-9_]*$")
_REGISTRY: dict[str, type] = {}
_discovered = False
_lock = threading.RLock()


def register(cls: type) -> type:
    """Class decorator: add the algorithm ``cls`` under ``cls.name``; returns ``cls`` unchanged.

    Raises TypeError when ``cls`` is not an ``Algorithm`` with a ``config_class`` dataclass, ValueError when its
    name is not a lowercase identifier or is taken by another class (re-importing the same module is allowed).
    """
    if not (isinstance(cls, type) and issubclass(cls, Algorithm)):
        raise TypeError(f"register expects a subclass of rapidrl.train.algorithm.Algorithm, got {cls!r}")
    name = cls.__dict__.get("name")
    if not isinstance(name, str) or not _NAME.match(name):
        raise ValueError(f"{cls.__qualname__}.name must be a lowercase identifier set on the class itself "
                         f"(e.g. name = \"ppo\"), got {name!r}")
    config_class = getattr(cls, "config_class", None)
    if not (isinstance(config_class, type) and dataclasses.is_dataclass(config_class)):
        raise TypeError(f"{cls.__qualname__}.config_class must be a dataclass, got {config_class!r}")
    with _lock:
        existing = _REGISTRY.get(name)
        if existing is not None and _qualified(existing) != _qualified(cls):
            raise ValueError(f"algorithm name {name!r} is already registered by {_qualified(existing)}")
        _REGISTRY[name] = cls
    return cls


def algorithms() -> dict[str, type]:
    """Every registered algorithm, ``{name: class}``, by name."""
    _discover()
    return dict(sorted(_REGISTRY.items()))


def get_algorithm(name: str) -> type:
    """The algorithm class registered as ``name``; ConfigError naming the known ones otherwise."""
    found = algorithms().get(name)
    if found is None:
        raise ConfigError(f"unknown algorithm {name!r}; allowed: {', '.join(algorithms())}")
    return found


def by_class_name(name: str) -> type | None:
    """The registered algorithm or config class whose Python name is ``name`` (``rapidrl.PPO``,
    ``rapidrl.algos.PPOConfig``), or None."""
    for cls in algorithms().values():
        if cls.__name__ == name:
            return cls
        if cls.config_class.__name__ == name:
            return cls.config_class
    return None


def _qualified(cls: type) -> str:
    return f"{cls.__module__}.{cls.__qualname__}"


def _discover() -> None:
    """Import this package's modules and the entry-point modules once (their ``@register`` calls fill the
    registry). An entry point that fails to import is reported as an ImportError naming it."""
    global _discovered
    if _discovered:
        return
    with _lock:
        if _discovered:
            return
        import rapidrl.algos as package

        for info in sorted(pkgutil.iter_modules(package.__path__), key=lambda m: m.name):
            if not info.name.startswith("_") and info.name != "registry":
                importlib.import_module(f"{package.__name__}.{info.name}")
        for entry in importlib.metadata.entry_points(group=ENTRY_POINT_GROUP):
            try:
                importlib.import_module(entry.value.split(":")[0])
            except ImportError as e:
                raise ImportError(f"the {ENTRY_POINT_GROUP} entry point {entry.name!r} ({entry.value}) failed to "
                                  f"import: {e}") from e
        _discovered = True
