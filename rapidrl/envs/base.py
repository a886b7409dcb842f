"""The part every rapidrl vector env shares: spaces, preallocated outputs, the info layout, checks.

Every vector env (built-in Numba kernels, PyTorch device envs, wrapped Gymnasium envs) subclasses
``VecEnvBase`` and therefore is a ``gymnasium.vector.VectorEnv``.

Outputs of ``step``/``reset`` are views of preallocated arrays that the next call overwrites
(``copy=True`` at construction returns fresh copies instead). The ``info`` dict is reused too:

- ``info["final_obs"]``: ``[N, *obs_shape]`` the final observation of episodes that ended this step
  (valid where ``info["_final_obs"]`` is True). Only in ``AutoresetMode.SAME_STEP``; unlike Gymnasium's
  object array it is a dense array of the observation dtype.
- ``info["episode"] = {"r": float32[N], "l": int32[N]}``: return and length of episodes that ended this
  step, valid where ``info["_episode"]`` is True (the layout of Gymnasium's RecordEpisodeStatistics).
"""

from __future__ import annotations

import gymnasium as gym
import numpy as np
from gymnasium.vector import AutoresetMode
from gymnasium.vector.utils import batch_space


class ClosedEnvError(RuntimeError):
    """Raised when a closed vector env is used."""


def parse_autoreset_mode(mode) -> AutoresetMode:
    """Accept an ``AutoresetMode`` or its name/value ('same_step', 'SameStep', ...)."""
    if isinstance(mode, AutoresetMode):
        return mode
    if isinstance(mode, str):
        key = mode.replace("_", "").replace("-", "").lower()
        for m in (AutoresetMode.SAME_STEP, AutoresetMode.NEXT_STEP):
            if key in (m.name.replace("_", "").lower(), m.value.lower()):
                return m
    raise ValueError(f"autoreset_mode must be AutoresetMode.SAME_STEP or NEXT_STEP, got {mode!r}")


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


def check_actions(actions, space: gym.Space, num_envs: int) -> np.ndarray:
    """Validate a batch of actions for ``space`` and return it as a NumPy array (no copy).

    Discrete: integer dtype, shape [N], values in [0, n). MultiDiscrete/MultiBinary: integer dtype, shape
    [N, *shape], values in [start, start + nvec) / {0, 1}. Box: float dtype, shape [N, *shape], no NaN
    (out-of-range values are clipped by the dynamics, as in Gymnasium).
    """
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


class VecEnvBase(gym.vector.VectorEnv):
    """Spaces, preallocated outputs and the shared ``info`` layout of a rapidrl vector env.

    Subclasses fill ``self._obs`` [N, *obs], ``self._rewards`` float32 [N], ``self._terminated`` and
    ``self._truncated`` bool [N], ``self._final_obs`` (same shape as obs), ``self._episode_return``
    float32 [N], ``self._episode_length`` int32 [N] and ``self._done`` bool [N] (the mask of envs whose
    episode ended this step), then return ``self._step_result()``.
    """

    def __init__(
        self,
        single_observation_space: gym.Space,
        single_action_space: gym.Space,
        num_envs: int,
        *,
        autoreset_mode=AutoresetMode.SAME_STEP,
        copy: bool = False,
        render_mode: str | None = None,
    ):
        if isinstance(num_envs, bool) or not isinstance(num_envs, (int, np.integer)) or num_envs < 1:
            raise ValueError(f"num_envs must be a positive int, got {num_envs!r}")
        self.num_envs = int(num_envs)
        self.single_observation_space = single_observation_space
        self.single_action_space = single_action_space
        self.observation_space = batch_space(single_observation_space, self.num_envs)
        self.action_space = batch_space(single_action_space, self.num_envs)
        self.autoreset_mode = parse_autoreset_mode(autoreset_mode)
        self.metadata = {"autoreset_mode": self.autoreset_mode, "render_modes": ["rgb_array"]}
        self.render_mode = render_mode
        self.copy = bool(copy)
        self.closed = False

        n, obs_shape = self.num_envs, single_observation_space.shape
        obs_dtype = single_observation_space.dtype
        self._obs = np.zeros((n, *obs_shape), dtype=obs_dtype)
        self._final_obs = np.zeros((n, *obs_shape), dtype=obs_dtype)
        self._rewards = np.zeros(n, dtype=np.float32)
        self._terminated = np.zeros(n, dtype=np.bool_)
        self._truncated = np.zeros(n, dtype=np.bool_)
        self._done = np.zeros(n, dtype=np.bool_)
        self._episode_return = np.zeros(n, dtype=np.float32)
        self._episode_length = np.zeros(n, dtype=np.int32)
        self._info: dict = {"episode": {"r": self._episode_return, "l": self._episode_length},
                            "_episode": self._done}
        if self.autoreset_mode == AutoresetMode.SAME_STEP:
            self._info["final_obs"] = self._final_obs
            self._info["_final_obs"] = self._done

    # -- helpers for subclasses -------------------------------------------------------------------
    def _check_open(self) -> None:
        if self.closed:
            raise ClosedEnvError(f"{type(self).__name__} is closed; create a new one with rapidrl.make_vec")

    def _check_actions(self, actions) -> np.ndarray:
        self._check_open()
        return check_actions(actions, self.single_action_space, self.num_envs)

    def _step_result(self):
        """(obs, rewards, terminated, truncated, info) as views, or copies when ``copy=True``."""
        if not self.copy:
            return self._obs, self._rewards, self._terminated, self._truncated, self._info
        info = {k: (v.copy() if isinstance(v, np.ndarray) else {kk: vv.copy() for kk, vv in v.items()})
                for k, v in self._info.items()}
        return self._obs.copy(), self._rewards.copy(), self._terminated.copy(), self._truncated.copy(), info

    def _reset_result(self):
        """(obs, info) after a reset; the info holds no finished episodes."""
        self._done[:] = False
        return (self._obs.copy() if self.copy else self._obs), {}

    # -- exact resume ------------------------------------------------------------------------------
    def state_dict(self) -> dict | None:
        """What fixes this env's future exactly, as tensors and plain values (a training checkpoint stores it), or
        None where the env cannot be captured (engines such as MuJoCo and the ALE, Python envs): a resumed run
        then starts fresh episodes. The built-in families return their whole arena."""
        return None

    def load_state_dict(self, state: dict) -> None:
        """Restore a ``state_dict()`` in place (views of the outputs held elsewhere stay valid)."""
        raise NotImplementedError(f"{type(self).__name__} has no state to restore (its state_dict() is None)")

    def close_extras(self, **kwargs) -> None:
        self.closed = True
