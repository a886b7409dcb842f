"""Tasks with action masks, built in: what the action-mask paths of every discrete algorithm are tested on
(docs/masks.md).

- ``InvalidActionDiscrete-v0`` (``identity.py``): sb3-contrib's ``InvalidActionEnvDiscrete`` (identity task, a random
  subset of the actions invalid at each step); ``make_vec(..., dim=70, n_invalid_actions=55)``.
- ``TicTacToe-v3`` (``tictactoe.py``): PettingZoo classic's Tic-Tac-Toe against a random or one-step-lookahead
  player, exact to PettingZoo move by move.
- ``MaskedCue-v0`` (``masked_cue.py``): a task that needs memory and masks both (the recurrent test task);
  ``make_vec(..., num_cues=6, delay=2, valid=3)``.

All three are envs written as Numba functions with a ``mask`` function (``rapidrl.envs.NumbaEnv``), so the fused
collectors mask inside their compiled loop.
"""

from __future__ import annotations

import numpy as np

from rapidrl.envs.core.numba_env import NumbaVecEnv

MASKED_ENVS = ("InvalidActionDiscrete-v0", "TicTacToe-v3", "MaskedCue-v0")

__all__ = ["MASKED_ENVS", "make_masked_vec", "masked_env", "size_arg"]


def size_arg(env_id: str, name: str, value) -> int:
    """``value`` as an int, checked >= 2: the size argument of a sized masked env (``dim``, ``num_cues``)."""
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 2:
        raise ValueError(f"{env_id}: {name} must be an int >= 2, got {value!r}")
    return int(value)


def masked_env(env_id: str, **kwargs):
    """The ``NumbaEnv`` of ``env_id`` (``dim`` / ``num_cues`` pick the size of the first and last) and the remaining
    keyword arguments (its params)."""
    if env_id == "InvalidActionDiscrete-v0":
        from rapidrl.envs.masked.identity import invalid_action_env

        return invalid_action_env(kwargs.pop("dim", 70)), kwargs
    if env_id == "MaskedCue-v0":
        from rapidrl.envs.masked.masked_cue import masked_cue_env

        return masked_cue_env(kwargs.pop("num_cues", 6)), kwargs
    if env_id == "TicTacToe-v3":
        from rapidrl.envs.masked.tictactoe import TICTACTOE

        return TICTACTOE, kwargs
    raise ValueError(f"{env_id!r} is not one of {MASKED_ENVS}")


def make_masked_vec(env_id: str, num_envs: int, *, vectorization: str = "numba", device="cpu", **kwargs) -> NumbaVecEnv:
    """The family's ``make`` (``rapidrl.envs.registry``): a ``NumbaVecEnv`` of ``env_id``."""
    env, kwargs = masked_env(env_id, **kwargs)
    return NumbaVecEnv(env, num_envs, **kwargs)
