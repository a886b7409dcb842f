"""rapidrl: reinforcement learning that is fast end to end.

Everything below is imported lazily on first attribute access, so ``import rapidrl`` stays cheap
and compiles no Numba kernel (kernels compile on first call and are cached on disk). Every algorithm shipped here is
listed in ``__all__`` and ``dir(rapidrl)`` (``tests/test_extending.py`` compares them with ``rapidrl.algos.registry``);
one an installed package registers is reachable by its class name too (``rapidrl.<Name>``).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

from rapidrl._lazy import lazy_exports

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
    "DDPG": "rapidrl.algos",
    "TQC": "rapidrl.algos",
    "CrossQ": "rapidrl.algos",
    "BC": "rapidrl.algos",
    "TD3BC": "rapidrl.algos",
    "IQL": "rapidrl.algos",
    "CQL": "rapidrl.algos",
    "DiscreteCQL": "rapidrl.algos",
    "C51": "rapidrl.algos",
    "Rainbow": "rapidrl.algos",
    "QRDQN": "rapidrl.algos",
    "IQN": "rapidrl.algos",
    "SACDiscrete": "rapidrl.algos",
    "R2D2": "rapidrl.algos",
    "RecurrentSAC": "rapidrl.algos",
    "RecurrentTD3": "rapidrl.algos",
}

__all__ = ["__version__", *_LAZY]


def _registered(name: str):
    """An algorithm (or its config) registered by a module of its own (``rapidrl.algos.registry``), or None."""
    return importlib.import_module("rapidrl.algos.registry").by_class_name(name) if name[:1].isupper() else None


__getattr__, __dir__ = lazy_exports(__name__, _LAZY, globals(), fallback=_registered)


if TYPE_CHECKING:  # pragma: no cover
    from rapidrl import buffers, envs, kernels  # noqa: F401
    from rapidrl.algos import (  # noqa: F401
        A2C,
        BC,
        C51,
        CQL,
        DDPG,
        DQN,
        IMPALA,
        IPPO,
        IQL,
        IQN,
        MAPPO,
        PPO,
        PQN,
        QRDQN,
        R2D2,
        SAC,
        TD3,
        TD3BC,
        TQC,
        CrossQ,
        DiscreteCQL,
        Rainbow,
        RecurrentSAC,
        RecurrentTD3,
        SACDiscrete,
    )
    from rapidrl.buffers import PrioritizedReplayBuffer, ReplayBuffer, RolloutBuffer  # noqa: F401
    from rapidrl.envs import make_vec  # noqa: F401
