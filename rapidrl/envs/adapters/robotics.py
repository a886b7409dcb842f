"""gymnasium-robotics (Fetch, Shadow hand, mazes) on MuJoCo 4: its joint-type checks, made to compare as intended.

gymnasium-robotics 1.4.2 (the newest release) reads and writes joint positions through
``gymnasium_robotics.utils.mujoco_utils`` (``set_joint_qpos``, ``get_joint_qpos``, ``set_joint_qvel``,
``get_joint_qvel``), each of which checks ``assert joint_type in (mujoco.mjtJoint.mjJNT_HINGE,
mujoco.mjtJoint.mjJNT_SLIDE)`` with ``joint_type = model.jnt_type[i]``, a ``numpy.int32``. A tuple's ``in``
compares ``member == joint_type``: with MuJoCo 4.0's enums that comparison is False (``joint_type == member`` is
still True: numpy converts the enum), so every Fetch task fails its first reset with a bare ``AssertionError``.

``fix_joint_type_checks()`` gives that one module a view of ``mujoco`` whose ``mjtJoint`` members are plain ints
(the same values): gymnasium-robotics' own functions then run unchanged and compare as they did on MuJoCo 3;
nothing else in either package changes and no physics is touched. It does nothing where the comparison already
works or gymnasium-robotics is not installed. ``make_vec`` applies it before it makes a gymnasium-robotics id
(docs/her.md).
"""

from __future__ import annotations

import types

import numpy as np


def enum_compares_with_numpy_ints(mujoco) -> bool:
    """Whether ``mjtJoint.mjJNT_HINGE == numpy.int32(its value)`` holds (it did before MuJoCo 4.0)."""
    hinge = mujoco.mjtJoint.mjJNT_HINGE
    return bool(hinge == np.int32(int(hinge)))


class _IntJointTypes(types.ModuleType):
    """``mujoco`` with ``mjtJoint`` as a namespace of plain ints; every other name is the module's own."""

    def __init__(self, mujoco):
        super().__init__(mujoco.__name__, mujoco.__doc__)
        self._module = mujoco
        self.mjtJoint = types.SimpleNamespace(**{k: int(v) for k, v in mujoco.mjtJoint.__members__.items()})

    def __getattr__(self, name: str):
        return getattr(self._module, name)


def fix_joint_type_checks() -> bool:
    """Give gymnasium-robotics' ``mujoco_utils`` plain-int joint types where MuJoCo's enums do not compare equal to
    numpy ints (module docstring). True where it did so now or before; False where nothing needed changing."""
    try:
        from gymnasium_robotics.utils import mujoco_utils
    except ImportError:
        return False
    current = mujoco_utils.mujoco
    if isinstance(current, _IntJointTypes):
        return True
    if enum_compares_with_numpy_ints(current):
        return False
    mujoco_utils.mujoco = _IntJointTypes(current)
    return True


def is_robotics_id(env_id: str) -> bool:
    """Whether Gymnasium's registry makes ``env_id`` from gymnasium-robotics."""
    import gymnasium as gym

    spec = gym.registry.get(env_id)
    entry = getattr(spec, "entry_point", None)
    module = entry.partition(":")[0] if isinstance(entry, str) else getattr(entry, "__module__", "")
    return module.split(".")[0] == "gymnasium_robotics"


def make(env_id: str, **env_kwargs):
    """``gymnasium.make(env_id, **env_kwargs)`` after ``fix_joint_type_checks()``: the env factory of a
    gymnasium-robotics id, so that envs made in other processes (``SubprocVecEnv``, ``RayVecEnv``) get it too."""
    import gymnasium as gym

    fix_joint_type_checks()
    return gym.make(env_id, **env_kwargs)
