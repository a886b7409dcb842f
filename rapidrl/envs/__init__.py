"""Vector environments: one core, the families written on it, the adapters, and ``make_vec``.

Layout (dependencies point down the list; see docs/envs.md):

- ``core/``: the one vector-env core: ``VecEnvBase`` and the arena of outputs, autoreset and episode statistics
  (``bookkeeping``), action validation, and the public authoring API: ``NumbaEnv`` (an env as Numba functions on
  one env's state) batched by the compiled loop into a ``NumbaVecEnv``;
- ``classic/``, ``minatar/``, ``pomdp/``, ``masked/`` (action masks), ``multiagent/`` (the row layout and MPE): the
  families written on it (``classic`` with its PyTorch twin, ``TorchVecEnv``);
- ``engines/``: external simulators batched into the same contract (``atari.py``: ale-py's C++ vector env;
  ``mujoco.py``: N ``MjData``);
- ``adapters/``: any Gymnasium env in process (``gymnasium.py``), in worker processes (``subprocess.py``), in Ray
  actors (``ray.py``), and PettingZoo parallel envs (``pettingzoo.py``);
- ``registry.py``: which family serves an id (``list_envs``, ``register``); ``make.py``: ``make_vec``;
- ``check.py``: ``check(envs)``, the vector-env contract on any VectorEnv; ``align.py``: ``align(envs, reference)``,
  a batched env stepped beside reference Gymnasium envs (docs/custom-envs.md).

Adapters and device envs are imported on first use.
"""

from __future__ import annotations

from rapidrl._lazy import lazy_exports
from rapidrl.envs.align import AlignmentReport, align
from rapidrl.envs.check import CheckReport, EnvContractError, check
from rapidrl.envs.core.base import ClosedEnvError, ResetNeeded, VecEnvBase
from rapidrl.envs.core.numba_env import NumbaEnv, NumbaVecEnv
from rapidrl.envs.make import make_vec
from rapidrl.envs.registry import BuiltinVecEnv, list_builtin_envs, list_envs, register

_LAZY = {
    "SyncVecEnv": "rapidrl.envs.adapters.gymnasium",
    "SubprocVecEnv": "rapidrl.envs.adapters.subprocess",
    "RayVecEnv": "rapidrl.envs.adapters.ray",
    "TorchVecEnv": "rapidrl.envs.classic.torch_vec",
}

__all__ = ["AlignmentReport", "BuiltinVecEnv", "CheckReport", "ClosedEnvError", "EnvContractError", "NumbaEnv",
           "NumbaVecEnv", "RayVecEnv", "ResetNeeded", "SubprocVecEnv", "SyncVecEnv", "TorchVecEnv", "VecEnvBase",
           "align", "check", "list_builtin_envs", "list_envs", "make_vec", "register"]


__getattr__, __dir__ = lazy_exports(__name__, _LAZY, globals())
