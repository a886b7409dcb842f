"""Classic control, built in: CartPole-v1, Acrobot-v1, MountainCar-v0, MountainCarContinuous-v0, Pendulum-v1.

Each module holds one env, written on the core's public API (``rapidrl.envs.NumbaEnv``: Numba functions on one
env's state, ``SPEC``), its PyTorch dynamics beside them (``torch_step``, ``torch_observe``, ``torch_initial``:
``classic.torch_vec.TorchVecEnv``) and its picture (``render.py``). They reproduce Gymnasium's dynamics exactly
(same equations, constants, integrators and float rounding; float64 state, float32 observations) and its
``TimeLimit``; ``tests/test_envs_alignment.py`` steps them beside Gymnasium's envs.
"""

from __future__ import annotations

import importlib

from rapidrl.envs.core.numba_env import NumbaEnv

CLASSIC_ENVS = {
    "CartPole-v1": "cartpole",
    "Acrobot-v1": "acrobot",
    "MountainCar-v0": "mountain_car",
    "MountainCarContinuous-v0": "mountain_car_continuous",
    "Pendulum-v1": "pendulum",
}
"""Env id -> the module of ``rapidrl.envs.classic`` that defines it (imported on first use)."""


def module(env_id: str):
    """The module of classic env ``env_id`` (KeyError if it is not one)."""
    return importlib.import_module(f"rapidrl.envs.classic.{CLASSIC_ENVS[env_id]}")


def get_spec(env_id: str) -> NumbaEnv:
    """The ``NumbaEnv`` of a classic-control id (ValueError otherwise)."""
    if env_id not in CLASSIC_ENVS:
        raise ValueError(f"{env_id!r} is not a classic-control env; known: {', '.join(CLASSIC_ENVS)}")
    return module(env_id).SPEC
