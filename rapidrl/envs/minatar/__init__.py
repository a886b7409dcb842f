"""MinAtar (Young & Tian 2019) built in: the five games written on the env core, exact to ``minatar``.

``rr.make_vec("MinAtar/Breakout-v1", 512, seed=0)`` returns a ``MinAtarVecEnv``; see docs/minatar.md.
The games are imported on first use (``rapidrl.envs.registry`` reads only ``ids``).
"""

from __future__ import annotations

import importlib

__all__ = ["MINATAR_IDS", "MinAtarVecEnv", "list_minatar_envs"]


def __getattr__(name: str):
    if name not in __all__:
        raise AttributeError(f"module 'rapidrl.envs.minatar' has no attribute {name!r}")
    value = getattr(importlib.import_module("rapidrl.envs.minatar.vec"), name)
    globals()[name] = value
    return value


def __dir__():
    return sorted(__all__)
