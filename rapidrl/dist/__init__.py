"""Scale out: several learners (``torchrun``, ``DistributedContext``) and Ray rollout workers (``RayVecEnv``).

Imported lazily: ``import rapidrl.dist`` loads neither torch.distributed nor Ray.
"""

from __future__ import annotations

import importlib

_LAZY = {
    "DistributedContext": "rapidrl.train.ddp",
    "RayVecEnv": "rapidrl.envs.adapters.ray",
}

__all__ = list(_LAZY)


def __getattr__(name: str):
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'rapidrl.dist' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__():
    return sorted(__all__)
