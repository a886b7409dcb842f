"""Per-env seeding, written once: env i's randomness is a function of (seed, i) only.

- Envs written as Numba functions draw from counter-based streams: ``rapidrl.kernels.rng.derive_keys(seed, n)``
  gives env i's key (``NumbaVecEnv``), so results do not depend on threads or on the number of envs.
- Envs stepped in Python seed their engines the Gymnasium way: env i gets ``seed + i`` (``env_seeds``), which is
  what ``gymnasium.vector`` does, so each equals a single Gymnasium env reset with that seed; ``env_generators``
  gives the matching ``numpy.random.default_rng(seed + i)`` (the generator Gymnasium's ``reset(seed=seed + i)``
  creates) to engines that draw with NumPy themselves (MuJoCo, MemoryCue).
"""

from __future__ import annotations

import numpy as np

from rapidrl.kernels.validation import check_int


def env_seeds(seed, num_envs: int) -> list[int | None]:
    """Per-env reset seeds: ``None`` -> all ``None`` (fresh entropy); ``s`` -> ``[s, s+1, ...]``; a list -> itself."""
    if seed is None:
        return [None] * num_envs
    if isinstance(seed, (int, np.integer)) and not isinstance(seed, bool):
        s = check_int("seed", seed, low=0)
        return [s + i for i in range(num_envs)]
    if isinstance(seed, (list, tuple, np.ndarray)):
        if len(seed) != num_envs:
            raise ValueError(f"seed must have one entry per env ({num_envs}), got {len(seed)}")
        return [None if s is None else check_int(f"seed[{i}]", s, low=0) for i, s in enumerate(seed)]
    raise TypeError(f"seed must be None, a non-negative int or a list of them, got {type(seed).__name__}")


def env_generators(seed, num_envs: int) -> list[np.random.Generator]:
    """``numpy.random.default_rng(seed + i)`` for each env (fresh entropy where the seed is None)."""
    return [np.random.default_rng(s) for s in env_seeds(seed, num_envs)]
