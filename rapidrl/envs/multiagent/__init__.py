"""Multi-agent envs: the row layout (``base.py``) and the built-in MPE tasks (``mpe/``). The PettingZoo adapter is
``rapidrl.envs.adapters.pettingzoo``."""

from __future__ import annotations

from rapidrl.envs.multiagent.base import MultiAgentVecEnvBase, row_observation_space

__all__ = ["MultiAgentVecEnvBase", "row_observation_space"]
