"""rapidrl: reinforcement learning that is fast end to end.

Everything below is imported lazily on first attribute access, so ``import rapidrl`` stays cheap
and compiles no Numba kernel (kernels compile on first call and are cached on disk). Any registered algorithm is
reachable by its class name (``rapidrl.PPO``; ``rapidrl.algos.registry``), listed here or not.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

__version__ = "0.1.0"

# public name -> module that defines it
_LAZY = {
    "kernels": "rapidrl.kernels",
    "envs": "rapidrl.envs",
    "buffers": "rapidrl.buffers",
    "llm": "rapidrl.llm",
    "make_vec": "rapidrl.envs",
    "RolloutBuffer": "rapidrl.buffers",
    "ReplayBuffer": "rapidrl.buffers",
    "PrioritizedReplayBuffer": "rapidrl.buffers",
    "PPO": "rapidrl.algos",
    "A2C": "rapidrl.algos",
    "IMPALA": "rapidrl.algos",
    "DQN": "rapidrl.algos",
    "PQN": "rapidrl.algos",
    "SAC": "rapidrl.algos",
    "TD3": "rapidrl.algos",
    "MAPPO": "rapidrl.algos",
    "IPPO": "rapidrl.algos",
}

__all__ = ["__version__", *_LAZY]


def __getattr__(name: str):
    module = _LAZY.get(name)
    if module is None:  # an algorithm (or its config) registered by a module of its own: rapidrl.algos.registry
        found = importlib.import_module("rapidrl.algos.registry").by_class_name(name) if name[:1].isupper() else None
        if found is None:
            raise AttributeError(f"module 'rapidrl' has no attribute {name!r}")
        globals()[name] = found
        return found
    mod = importlib.import_module(module)
    value = mod if module.endswith("." + name) else getattr(mod, name)
    globals()[name] = value
    return value


def __dir__():
    return sorted(__all__)


if TYPE_CHECKING:  # pragma: no cover
    from rapidrl import buffers, envs, kernels  # noqa: F401
