"""Action validation, written once: the rules, and their NumPy, Numba and PyTorch forms.

The rules for a batch of N actions (N rows of the vector env):

- ``Discrete(n, start)``: an integer dtype, shape [N], values in [start, start + n);
- ``Box``: a float dtype, shape [N, *shape], no NaN or inf (out-of-range values are clipped by the dynamics, as
  in Gymnasium);
- ``MultiDiscrete``/``MultiBinary``: an integer (or bool) dtype, shape [N, *shape], values in
  [start, start + nvec) / {0, 1}.

``check_actions`` (NumPy) validates and explains; envs stepped in Python call it on every step. Compiled envs
check shape and values inside their step kernel (``first_bad_discrete``/``first_bad_box``: one pass, nothing
stepped when an action is bad) and call ``check_actions`` only to explain a failure. Device envs use
``check_torch_actions``, whose value check is the one op that reads back from the device.
"""

from __future__ import annotations

import gymnasium as gym
import numba
import numpy as np


def as_numpy_actions(actions) -> np.ndarray:
    """NumPy view of ``actions`` (a NumPy array or a CPU torch tensor; never copied)."""
    if isinstance(actions, np.ndarray):
        return actions
    if type(actions).__module__.startswith("torch"):
        if actions.device.type != "cpu":
            raise TypeError(
                f"actions is a torch tensor on {actions.device}; this env runs on the CPU "
                "(use device=... in make_vec for a device-resident env)"
            )
        return actions.detach().numpy()
    raise TypeError(f"actions must be a numpy.ndarray or a torch.Tensor, got {type(actions).__name__}")


def as_action_mask(mask, what: str = "action_masks") -> np.ndarray:
    """An env's action mask as bool, the one rule for every path (the vector envs' adapters, ``predict``): bool as it
    is; integers or floats holding only 0 and 1 (Gymnasium's Taxi gives int8, PettingZoo's classic envs int8) as bool;
    anything else (other values, strings, objects) is refused naming ``what`` rather than read as True."""
    m = np.asarray(mask)
    if m.dtype == np.bool_:
        return m
    if m.dtype.kind not in "iuf":
        raise TypeError(f"{what} must be a bool array (or 0/1 integers or floats), got dtype {m.dtype}")
    valid = (m == 0) | (m == 1)
    if not valid.all():
        raise ValueError(f"{what} must hold only 0 and 1 (False and True), got {m[~valid].flat[0]!r}")
    return m.astype(np.bool_)


def check_actions(actions, space: gym.Space, num_envs: int) -> np.ndarray:
    """Validate a batch of actions for ``space`` (the rules above) and return it as a NumPy array (no copy)."""
    a = as_numpy_actions(actions)
    if isinstance(space, gym.spaces.Discrete):
        if a.shape != (num_envs,):
            raise ValueError(f"actions must have shape ({num_envs},) for a Discrete space, got {a.shape}")
        if a.dtype.kind not in "iu":
            raise TypeError(f"actions must have an integer dtype for a Discrete space, got {a.dtype}")
        lo, hi = int(space.start), int(space.start + space.n)
        if num_envs and (a.min() < lo or a.max() >= hi):
            raise ValueError(f"actions must lie in [{lo}, {hi}), got values in [{a.min()}, {a.max()}]")
        return a
    if isinstance(space, gym.spaces.Box):
        want = (num_envs, *space.shape)
        if a.shape != want:
            raise ValueError(f"actions must have shape {want} for this Box space, got {a.shape}")
        if a.dtype.kind != "f":
            raise TypeError(f"actions must have a float dtype for a Box space, got {a.dtype}")
        if not np.isfinite(a).all():
            raise ValueError("actions contain NaN or inf")
        return a
    if isinstance(space, (gym.spaces.MultiDiscrete, gym.spaces.MultiBinary)):
        want = (num_envs, *space.shape)
        if a.shape != want:
            raise ValueError(f"actions must have shape {want} for {space}, got {a.shape}")
        if a.dtype.kind not in "iub":
            raise TypeError(f"actions must have an integer dtype for {space}, got {a.dtype}")
        if isinstance(space, gym.spaces.MultiBinary):
            lo, hi = np.zeros(space.shape, np.int64), np.full(space.shape, 2)
        else:
            lo, hi = space.start, space.start + space.nvec
        if num_envs and ((a < lo).any() or (a >= hi).any()):
            raise ValueError(f"actions must lie in [start, start + nvec) of {space}, got values in "
                             f"[{a.min()}, {a.max()}]")
        return a
    raise TypeError(f"unsupported action space {space}")


def mask_sizes(space: gym.Space) -> list[int] | None:
    """The widths of the action masks of ``space``'s components, side by side in a mask row (sb3-contrib's layout):
    Discrete [n]; MultiDiscrete nvec; MultiBinary 2 per entry; None for a space without masks (Box)."""
    if isinstance(space, gym.spaces.Discrete):
        return [int(space.n)]
    if isinstance(space, gym.spaces.MultiDiscrete):
        return [int(n) for n in space.nvec.ravel()]
    if isinstance(space, gym.spaces.MultiBinary):
        return [2] * int(np.prod(space.shape))
    return None


@numba.njit(cache=True, inline="always")
def first_bad_discrete(actions, n, num_actions):
    """-2 if ``actions`` is not [n], else the index of the first action outside [0, num_actions), or -1."""
    if actions.shape[0] != n:
        return -2
    for i in range(n):
        if actions[i] < 0 or actions[i] >= num_actions:
            return i
    return -1


@numba.njit(cache=True, inline="always")
def first_bad_box(actions, n, size):
    """-2 if ``actions`` is not [n, size], else the first row whose action holds NaN or inf, or -1."""
    if actions.shape[0] != n or actions.shape[1] != size:
        return -2
    for i in range(n):
        for j in range(size):
            if not np.isfinite(actions[i, j]):
                return i
    return -1


def check_torch_actions(actions, space: gym.Space, num_envs: int, device, check_values: bool = True):
    """The rules above for a torch tensor (a NumPy array is moved to ``device``); returns the tensor.

    ``check_values=False`` skips the range/finiteness check, the one part that synchronises with the device.
    ``device``: the env's device as ``rapidrl._device.resolve_device`` gives it (with its index: "cuda:0").
    """
    import torch

    if isinstance(actions, np.ndarray):
        actions = torch.as_tensor(actions, device=device)
    if not isinstance(actions, torch.Tensor):
        raise TypeError(f"actions must be a torch.Tensor or numpy.ndarray, got {type(actions).__name__}")
    if actions.device != device and not (actions.device.type == torch.device(device).type == "cpu"):
        raise TypeError(f"actions are on {actions.device}, the env on {device}")
    want = (num_envs, *space.shape)
    if tuple(actions.shape) != want:
        raise ValueError(f"actions must have shape {want}, got {tuple(actions.shape)}")
    if isinstance(space, gym.spaces.Discrete):
        if actions.dtype.is_floating_point or actions.dtype.is_complex or actions.dtype == torch.bool:
            raise TypeError(f"actions must have an integer dtype for a Discrete space, got {actions.dtype}")
        lo, hi = int(space.start), int(space.start + space.n)
        if check_values and bool(((actions < lo) | (actions >= hi)).any()):
            raise ValueError(f"actions must lie in [{lo}, {hi})")
    elif isinstance(space, gym.spaces.Box):
        if not actions.dtype.is_floating_point:
            raise TypeError(f"actions must have a float dtype for a Box space, got {actions.dtype}")
        if check_values and not bool(torch.isfinite(actions).all()):
            raise ValueError("actions contain NaN or inf")
    else:
        raise TypeError(f"unsupported action space {space} for a device env")
    return actions
