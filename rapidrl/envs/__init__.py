"""Vector environments: built-in batched envs (Numba / PyTorch), Gymnasium adapters, ``make_vec``.

``SyncVecEnv`` and ``SubprocVecEnv`` (wrappers of arbitrary Gymnasium ids) are imported on first use.
"""

from __future__ import annotations

import importlib

from rapidrl.envs.base import VecEnvBase
from rapidrl.envs.builtin import BuiltinVecEnv, list_builtin_envs
from rapidrl.envs.make import make_vec

_LAZY = {
    "SyncVecEnv": "rapidrl.envs.gym_vec",
    "SubprocVecEnv": "rapidrl.envs.subproc",
    "TorchVecEnv": "rapidrl.envs.torch_envs",
}

__all__ = ["BuiltinVecEnv", "SubprocVecEnv", "SyncVecEnv", "TorchVecEnv", "VecEnvBase", "list_builtin_envs",
           "make_vec"]


def __getattr__(name: str):
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'rapidrl.envs' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__():
    return sorted(__all__)
