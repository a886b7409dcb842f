"""Partially observed tasks, built in: they need memory, which is what recurrent policies are tested on.

- ``CartPoleNoVel-v1``: CartPole-v1 with the velocities hidden; observations are (cart position, pole angle)
  only (the name and the observation of rl-zoo3's benchmark env for sb3-contrib's RecurrentPPO). Batched on
  the built-in Numba CartPole, so its dynamics are exactly Gymnasium's.
- ``MemoryCue-v0``: a cue (one of ``num_cues``) is shown on the first step only; ``delay`` steps later the
  observation's query flag asks for it, and the action at that step earns 1 if it names the cue, else 0; the
  episode then ends. Any policy without memory scores 1 / num_cues on average, a policy with memory 1.

Both exist as single Gymnasium envs too (``gymnasium.make("CartPoleNoVel-v1")`` after importing rapidrl), which
is how the tests check the batched versions step by step and how other libraries train on the same task.
"""

from __future__ import annotations

from typing import ClassVar

import gymnasium as gym
import numpy as np

from rapidrl.envs.base import VecEnvBase
from rapidrl.kernels.validation import check_int

CARTPOLE_POSITIONS = (0, 2)
"""Columns of CartPole's observation that CartPoleNoVel keeps: cart position and pole angle."""

POMDP_ENVS = ("CartPoleNoVel-v1", "MemoryCue-v0")


# -- single Gymnasium envs (the references) --------------------------------------------------------
class MaskVelocity(gym.ObservationWrapper):
    """CartPole with only the cart position and the pole angle observed."""

    def __init__(self, env: gym.Env):
        super().__init__(env)
        box = env.observation_space
        keep = list(CARTPOLE_POSITIONS)
        self.observation_space = gym.spaces.Box(box.low[keep], box.high[keep], dtype=box.dtype)

    def observation(self, observation: np.ndarray) -> np.ndarray:
        return observation[list(CARTPOLE_POSITIONS)]


def make_cartpole_novel(**kwargs) -> gym.Env:
    """``gymnasium.make("CartPole-v1", **kwargs)`` with the velocities masked (the Gymnasium entry point)."""
    return MaskVelocity(gym.make("CartPole-v1", **kwargs))


class MemoryCueEnv(gym.Env):
    """The memory task as one Gymnasium env. Observation float32 [num_cues + 1]: the cue one-hot at step 0,
    the query flag (last entry) at step ``delay``, zeros otherwise. Discrete(num_cues) actions."""

    metadata: ClassVar[dict] = {"render_modes": []}

    def __init__(self, num_cues: int = 4, delay: int = 8):
        self.num_cues = check_int("num_cues", num_cues, low=2)
        self.delay = check_int("delay", delay, low=1)
        self.observation_space = gym.spaces.Box(0.0, 1.0, (self.num_cues + 1,), np.float32)
        self.action_space = gym.spaces.Discrete(self.num_cues)
        self._cue, self._t = 0, 0

    def _observe(self) -> np.ndarray:
        obs = np.zeros(self.num_cues + 1, np.float32)
        if self._t == 0:
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


def register_envs() -> None:
    """Register both ids with Gymnasium (idempotent)."""
    if "CartPoleNoVel-v1" not in gym.registry:
        gym.register("CartPoleNoVel-v1", entry_point="rapidrl.envs.pomdp:make_cartpole_novel")
    if "MemoryCue-v0" not in gym.registry:
        gym.register("MemoryCue-v0", entry_point="rapidrl.envs.pomdp:MemoryCueEnv")


# -- batched versions ------------------------------------------------------------------------------
class CartPoleNoVelVecEnv(VecEnvBase):
    """N CartPole-v1 envs on the built-in kernel, observing (position, angle). Same seeding, autoreset and info
    layout as ``BuiltinVecEnv`` (episode statistics and ``final_obs``, masked the same way)."""

    def __init__(self, num_envs: int, *, seed: int | None = None, autoreset_mode="same_step", copy: bool = False,
                 **env_kwargs):
        from rapidrl.envs.builtin import BuiltinVecEnv

        self.inner = BuiltinVecEnv("CartPole-v1", num_envs, seed=seed, autoreset_mode=autoreset_mode, **env_kwargs)
        box = self.inner.single_observation_space
        keep = list(CARTPOLE_POSITIONS)
        super().__init__(gym.spaces.Box(box.low[keep], box.high[keep], dtype=box.dtype),
                         self.inner.single_action_space, num_envs, autoreset_mode=autoreset_mode, copy=copy)
        self.env_id = "CartPoleNoVel-v1"
        self._keep = np.array(keep)

    def _mask(self, obs: np.ndarray, out: np.ndarray) -> None:
        np.take(obs, self._keep, axis=1, out=out)

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        self._check_open()
        obs, _ = self.inner.reset(seed=seed, options=options)
        self._mask(obs, self._obs)
        return self._reset_result()

    def step(self, actions):
        self._check_open()
        obs, rewards, terminated, truncated, info = self.inner.step(actions)
        self._mask(obs, self._obs)
        np.copyto(self._rewards, rewards)
        np.copyto(self._terminated, terminated)
        np.copyto(self._truncated, truncated)
        np.copyto(self._done, info["_episode"])
        np.copyto(self._episode_return, info["episode"]["r"])
        np.copyto(self._episode_length, info["episode"]["l"])
        if "final_obs" in info:
            self._mask(info["final_obs"], self._final_obs)
        return self._step_result()

    def state_dict(self) -> dict:
        """The inner CartPole's state (the masked observations follow from it)."""
        return self.inner.state_dict()

    def load_state_dict(self, state: dict) -> None:
        self.inner.load_state_dict(state)
        self._mask(self.inner._obs, self._obs)

    def close_extras(self, **kwargs) -> None:
        self.inner.close()
        super().close_extras(**kwargs)


class MemoryCueVecEnv(VecEnvBase):
    """N ``MemoryCueEnv``s stepped together in NumPy. Env i draws its cues from ``default_rng(seed + i)``, the
    generator of ``MemoryCueEnv.reset(seed=seed + i)``, so it equals that env step by step, resets included."""

    def __init__(self, num_envs: int, *, seed: int | None = None, autoreset_mode="same_step", copy: bool = False,
                 num_cues: int = 4, delay: int = 8):
        single = MemoryCueEnv(num_cues, delay)
        super().__init__(single.observation_space, single.action_space, num_envs, autoreset_mode=autoreset_mode,
                         copy=copy)
        if self.autoreset_mode != gym.vector.AutoresetMode.SAME_STEP:
            raise ValueError("MemoryCue-v0 supports autoreset_mode='same_step' only")
        self.env_id = "MemoryCue-v0"
        self.num_cues, self.delay = single.num_cues, single.delay
        self._cue = np.zeros(num_envs, np.int64)
        self._t = np.zeros(num_envs, np.int64)
        self._sum = np.zeros(num_envs, np.float32)  # running episode return and length
        self._len = np.zeros(num_envs, np.int32)
        self._rngs: list[np.random.Generator] = []
        self._seed(seed)
        self._ready = False

    def _seed(self, seed: int | None) -> None:
        base = np.random.SeedSequence().entropy % 2**31 if seed is None else int(seed)
        self._rngs = [np.random.default_rng(base + i) for i in range(self.num_envs)]

    def _new_episodes(self, mask: np.ndarray) -> None:
        for i in np.flatnonzero(mask):
            self._cue[i] = self._rngs[i].integers(self.num_cues)
        self._t[mask] = 0
        self._sum[mask] = 0.0
        self._len[mask] = 0

    def _observe(self, out: np.ndarray, idx=slice(None)) -> None:
        cue, t = self._cue[idx], self._t[idx]
        out[idx] = 0.0
        rows = np.arange(out.shape[0])[idx]
        out[rows, cue] = np.where(t == 0, 1.0, 0.0)
        out[rows, -1] = np.where(t == self.delay, 1.0, 0.0)

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        self._check_open()
        if seed is not None:
            self._seed(seed)
        self._new_episodes(np.ones(self.num_envs, bool))
        self._observe(self._obs)
        self._ready = True
        return self._reset_result()

    def step(self, actions):
        a = self._check_actions(actions)
        if not self._ready:
            raise RuntimeError("call reset() before step()")
        query = self._t == self.delay
        np.copyto(self._rewards, (query & (a == self._cue)).astype(np.float32))
        self._t += 1
        np.copyto(self._terminated, query)
        self._truncated[:] = False
        np.copyto(self._done, query)
        self._sum += self._rewards
        self._len += 1
        np.copyto(self._episode_return, self._sum)  # read where done
        np.copyto(self._episode_length, self._len)
        if query.any():
            self._observe(self._final_obs, query)
            self._new_episodes(query)
        self._observe(self._obs)
        return self._step_result()


def make_pomdp(env_id: str, num_envs: int, **kwargs):
    """The batched env of a ``POMDP_ENVS`` id."""
    if env_id == "CartPoleNoVel-v1":
        return CartPoleNoVelVecEnv(num_envs, **kwargs)
    if env_id == "MemoryCue-v0":
        return MemoryCueVecEnv(num_envs, **kwargs)
    raise ValueError(f"{env_id!r} is not one of {POMDP_ENVS}")
