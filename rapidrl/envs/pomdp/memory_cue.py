"""MemoryCue-v0: a cue shown at the first step must be named ``delay`` steps later.

With ``pixels=True`` the same task is seen as images (uint8 [2, 10, 10], 0/1 like MinAtar's frames, so the MinAtar
CNN reads them): the cue a 2x2 block at one of up to 9 places of channel 0 at step 0, the query all of channel 1 at
step ``delay``, blank frames between. A network must both see and remember: R2D2's CNN + LSTM (the memory task with
pixels).

``MemoryCueEnv`` is the single Gymnasium env (the reference); ``MemoryCueVecEnv`` steps N of them together in NumPy,
on the core's bookkeeping (``VecEnvBase._record``: episode statistics, autoreset in both modes).
"""

from __future__ import annotations

from typing import ClassVar

import gymnasium as gym
import numpy as np
import torch
from gymnasium.vector import AutoresetMode

from rapidrl.envs.core.base import VecEnvBase
from rapidrl.envs.core.seeding import env_generators
from rapidrl.kernels.validation import check_int

PIXEL_SIZE = 10
"""The side of a pixel observation (MinAtar's)."""
PIXEL_CUES = 9
"""How many cues fit a pixel observation: 2x2 blocks on a 3 x 3 grid (rows and columns 1, 4, 7)."""


def observation_space(num_cues: int, pixels: bool) -> gym.spaces.Box:
    """float32 [num_cues + 1] (the cue one-hot, then the query flag), or with ``pixels`` uint8 [2, 10, 10] of 0/1."""
    if pixels:
        return gym.spaces.Box(0, 1, (2, PIXEL_SIZE, PIXEL_SIZE), np.uint8)
    return gym.spaces.Box(0.0, 1.0, (num_cues + 1,), np.float32)


def cue_corner(cue):
    """(row, column) of the top-left pixel of cue ``cue``'s 2x2 block in a pixel observation's channel 0 (ints or
    int arrays)."""
    return 1 + 3 * (cue // 3), 1 + 3 * (cue % 3)


def cue_block(cue: int) -> tuple[slice, slice]:
    """The rows and columns of cue ``cue``'s 2x2 block in a pixel observation's channel 0."""
    row, col = cue_corner(cue)
    return slice(row, row + 2), slice(col, col + 2)


def _check_settings(num_cues, delay, pixels) -> tuple[int, int, bool]:
    num_cues = check_int("num_cues", num_cues, low=2)
    delay = check_int("delay", delay, low=1)
    if not isinstance(pixels, (bool, np.bool_)):
        raise ValueError(f"pixels must be True or False, got {pixels!r}")
    if pixels and num_cues > PIXEL_CUES:
        raise ValueError(f"num_cues must be at most {PIXEL_CUES} with pixels=True (2x2 blocks on a 10x10 image), "
                         f"got {num_cues}")
    return num_cues, delay, bool(pixels)


class MemoryCueEnv(gym.Env):
    """The memory task as one Gymnasium env. Observation float32 [num_cues + 1]: the cue one-hot at step 0,
    the query flag (last entry) at step ``delay``, zeros otherwise; with ``pixels``, uint8 [2, 10, 10] (the module
    docstring). Discrete(num_cues) actions."""

    metadata: ClassVar[dict] = {"render_modes": []}

    def __init__(self, num_cues: int = 4, delay: int = 8, pixels: bool = False):
        self.num_cues, self.delay, self.pixels = _check_settings(num_cues, delay, pixels)
        self.observation_space = observation_space(self.num_cues, self.pixels)
        self.action_space = gym.spaces.Discrete(self.num_cues)
        self._cue, self._t = 0, 0

    def _observe(self) -> np.ndarray:
        obs = np.zeros(self.observation_space.shape, self.observation_space.dtype)
        if self.pixels:
            if self._t == 0:
                obs[(0, *cue_block(self._cue))] = 1
            elif self._t == self.delay:
                obs[1] = 1
        elif self._t == 0:
            obs[self._cue] = 1.0
        elif self._t == self.delay:
            obs[-1] = 1.0
        return obs

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        super().reset(seed=seed)
        self._cue, self._t = int(self.np_random.integers(self.num_cues)), 0
        return self._observe(), {}

    def step(self, action):
        if not self.action_space.contains(action):
            raise ValueError(f"action {action!r} is not in {self.action_space}")
        query = self._t == self.delay
        reward = float(query and int(action) == self._cue)
        self._t += 1
        return self._observe(), reward, query, False, {}


class MemoryCueVecEnv(VecEnvBase):
    """N ``MemoryCueEnv``s stepped together in NumPy. Env i draws its cues from ``default_rng(seed + i)``, the
    generator of ``MemoryCueEnv.reset(seed=seed + i)``, so it equals that env step by step, resets included."""

    def __init__(self, num_envs: int, *, seed: int | None = None, autoreset_mode="same_step", copy: bool = False,
                 num_cues: int = 4, delay: int = 8, pixels: bool = False):
        single = MemoryCueEnv(num_cues, delay, pixels)
        super().__init__(single.observation_space, single.action_space, num_envs, autoreset_mode=autoreset_mode,
                         copy=copy)
        self.env_id = "MemoryCue-v0"
        self.num_cues, self.delay, self.pixels = single.num_cues, single.delay, single.pixels
        self._cue = np.zeros(num_envs, np.int64)
        self._t = np.zeros(num_envs, np.int64)
        self._rngs: list[np.random.Generator] = []
        self._seed(seed)

    def _seed(self, seed: int | None) -> None:
        self._rngs = env_generators(seed, self.num_envs)

    def _new_episodes(self, mask: np.ndarray) -> None:
        for i in np.flatnonzero(mask):
            self._cue[i] = self._rngs[i].integers(self.num_cues)
        self._t[mask] = 0

    def _observe(self, out: np.ndarray, idx=slice(None)) -> None:
        cue, t = self._cue[idx], self._t[idx]
        out[idx] = 0
        rows = np.arange(out.shape[0])[idx]
        if self.pixels:
            first, (row, col) = rows[t == 0], cue_corner(cue[t == 0])
            for dr in (0, 1):  # the 2x2 blocks, all envs at once
                for dc in (0, 1):
                    out[first, 0, row + dr, col + dc] = 1
            out[rows[t == self.delay], 1] = 1
            return
        out[rows, cue] = np.where(t == 0, 1.0, 0.0)
        out[rows, -1] = np.where(t == self.delay, 1.0, 0.0)

    # -- exact resume ------------------------------------------------------------------------------
    def state_dict(self) -> dict:
        """Everything that fixes the future: the arena (last outputs, episode statistics, autoreset flags), each
        env's cue and step, each env's random stream, and whether the envs have been reset."""
        return {"arena": torch.from_numpy(self.arena.copy()), "ready": self._ready,
                "cue": torch.from_numpy(self._cue.copy()), "t": torch.from_numpy(self._t.copy()),
                "rngs": [g.bit_generator.state for g in self._rngs]}

    def load_state_dict(self, state: dict) -> None:
        self._check_open()
        arena = state["arena"]
        arena = arena.numpy() if isinstance(arena, torch.Tensor) else np.asarray(arena)
        self.layout.check(arena, "the stored arena")
        if len(state["rngs"]) != self.num_envs:
            raise ValueError(f"the stored state is of {len(state['rngs'])} envs, this env has {self.num_envs}")
        np.copyto(self.arena, arena)
        np.copyto(self._cue, np.asarray(state["cue"]))
        np.copyto(self._t, np.asarray(state["t"]))
        for g, saved in zip(self._rngs, state["rngs"]):
            g.bit_generator.state = saved
        self._ready = bool(state["ready"])

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        self._check_open()
        if seed is not None:
            self._seed(seed)
        self._new_episodes(np.ones(self.num_envs, bool))
        self._observe(self._obs)
        self._clear()
        return self._reset_result()

    def step(self, actions):
        a = self._check_actions(actions)
        restart = self.arrays.needs_reset.copy()  # NEXT_STEP: envs whose episode ended last step start anew
        query = (self._t == self.delay) & ~restart
        np.copyto(self._rewards, (query & (a == self._cue)).astype(np.float32))
        self._t += 1
        np.copyto(self._terminated, query)
        self._truncated[:] = False
        if restart.any():
            self._new_episodes(restart)
        if self._record() and self.autoreset_mode == AutoresetMode.SAME_STEP:
            self._observe(self._final_obs, self._done)
            self._new_episodes(self._done)
        self._observe(self._obs)
        return self._step_result()
