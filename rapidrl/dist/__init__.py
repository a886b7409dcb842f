"""Scale out: several learners (``torchrun``, ``DistributedContext``) and Ray rollout workers (``RayVecEnv``).

Imported lazily: ``import rapidrl.dist`` loads neither torch.distributed nor Ray.
"""

from __future__ import annotations

from rapidrl._lazy import lazy_exports

_LAZY = {
    "DistributedContext": "rapidrl.train.ddp",
    "RayVecEnv": "rapidrl.envs.adapters.ray",
}

__all__ = list(_LAZY)


__getattr__, __dir__ = lazy_exports(__name__, _LAZY, globals())
