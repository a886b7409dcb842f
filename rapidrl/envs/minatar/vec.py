"""``MinAtarVecEnv``: N MinAtar games stepped by one Numba kernel (a ``gymnasium.vector.VectorEnv``)."""

from __future__ import annotations

import math

import gymnasium as gym
import numpy as np
import torch

from rapidrl.envs.base import VecEnvBase, as_numpy_actions, check_actions
from rapidrl.envs.builtin import BuiltinVecEnv
from rapidrl.envs.minatar import kernels
from rapidrl.envs.minatar.ids import GAME_NAMES, MINATAR_ENVS
from rapidrl.kernels import parallel, rng
from rapidrl.kernels.validation import check_int

# Above this many envs the step kernel splits envs over threads: the classic built-ins' threshold. Measured
# on the shared 2-core machine (docs/minatar.md): threads gained up to 1.9x at 512 envs while both cores
# were free, and stalled the step by 100x or more while other jobs ran (a thread waiting for a busy core
# holds up the whole step), so the serial kernel is the default.
PARALLEL_MIN = parallel.ENV_STEP_PARALLEL_MIN


def _ids() -> dict[str, tuple[str, int, tuple[int, ...]]]:
    """env id -> (game, game code, action set as full action indices)."""
    out = {}
    for code, game in enumerate(kernels.GAMES):
        module = kernels._GAME_MODULES[code]
        out[f"MinAtar/{GAME_NAMES[game]}-v0"] = (game, code, tuple(range(6)))
        out[f"MinAtar/{GAME_NAMES[game]}-v1"] = (game, code, tuple(module.MINIMAL_ACTIONS))
    return out


MINATAR_IDS = _ids()
assert tuple(MINATAR_IDS) == MINATAR_ENVS


def list_minatar_envs() -> list[str]:
    """The MinAtar ids rapidrl runs built in (``MinAtar/<Game>-v0``: 6 actions; ``-v1``: minimal set)."""
    return list(MINATAR_IDS)


class MinAtarVecEnv(VecEnvBase):
    """N copies of a MinAtar game (Young & Tian 2019) in one Numba kernel, exact to the ``minatar`` package.

    Observations: uint8[N, C, 10, 10], channels first (the package's ``state()`` is bool[10, 10, C]; this is
    its transpose as 0/1). Actions: Discrete, the action set of the package's Gymnasium id (v0: 6 actions,
    v1: the game's minimal set). ``sticky_action_prob`` (default 0.1) and ``difficulty_ramping`` (default
    True) are the package's ``Environment`` arguments. No TimeLimit unless ``max_episode_steps`` is given
    (the package registers none). ``threads``: step the envs on Numba's threads (True), in one thread
    (False), or threads only above ``PARALLEL_MIN`` envs (None); results are identical either way.
    ``step``/``reset`` return views of preallocated arrays (``copy=True`` for copies); ``info`` has
    ``final_obs`` (SAME_STEP) and ``episode`` statistics (see ``base.py``). Per-env random streams derive
    from (seed, env index): results do not depend on threads.
    """

    def __init__(self, env_id: str, num_envs: int, *, seed: int | None = None, autoreset_mode="same_step",
                 copy: bool = False, render_mode: str | None = None, max_episode_steps: int | None = None,
                 sticky_action_prob: float = 0.1, difficulty_ramping: bool = True, threads: bool | None = None):
        if env_id not in MINATAR_IDS:
            raise ValueError(f"unknown MinAtar id {env_id!r}; known: {', '.join(MINATAR_IDS)}")
        if render_mode not in (None, "rgb_array"):
            raise ValueError(f"render_mode must be None or 'rgb_array', got {render_mode!r}")
        game, code, action_set = MINATAR_IDS[env_id]
        module = kernels._GAME_MODULES[code]
        if max_episode_steps is not None:
            max_episode_steps = check_int("max_episode_steps", max_episode_steps, low=1, high=2**31 - 1)
        if isinstance(sticky_action_prob, bool) or not isinstance(sticky_action_prob, (int, float, np.number)) \
                or not 0.0 <= float(sticky_action_prob) <= 1.0:
            raise ValueError(f"sticky_action_prob must be a number in [0, 1], got {sticky_action_prob!r}")
        if threads not in (None, True, False):
            raise TypeError(f"threads must be None, True or False, got {threads!r}")
        if not isinstance(difficulty_ramping, (bool, np.bool_)):
            raise TypeError(f"difficulty_ramping must be a bool, got {difficulty_ramping!r}")
        obs_space = gym.spaces.Box(0, 1, shape=(module.CHANNELS, 10, 10), dtype=np.uint8)
        super().__init__(obs_space, gym.spaces.Discrete(len(action_set)), num_envs,
                         autoreset_mode=autoreset_mode, copy=copy, render_mode=render_mode)
        self.env_id = env_id
        self.game = game
        self.max_episode_steps = max_episode_steps
        self.sticky_action_prob = float(sticky_action_prob)
        self.difficulty_ramping = bool(difficulty_ramping)
        self.metadata["render_fps"] = 15
        n = self.num_envs
        self._code = code
        self._next_step = self.autoreset_mode == gym.vector.AutoresetMode.NEXT_STEP
        # every per-env array is a view of one arena (kernels.unpack): a step is one cheap compiled call
        self._arena = kernels.new_arena(n, module.STATE_SIZE, module.CHANNELS, len(action_set), self._next_step)
        (self._state, self._action_map, self._params, self._elapsed, self._rng_key, self._rng_counter, _,
         self._needs_reset, obs, rewards, terminated, truncated, final_obs, self._running_return,
         self._running_length, done_return, done_length, done) = kernels.unpack(self._arena)
        self._adopt({"_obs": obs, "_rewards": rewards, "_terminated": terminated, "_truncated": truncated,
                     "_final_obs": final_obs, "_episode_return": done_return, "_episode_length": done_length,
                     "_done": done})
        self._action_map[:] = action_set
        self._params[:] = (math.inf if max_episode_steps is None else max_episode_steps, self.sticky_action_prob,
                           float(self.difficulty_ramping))
        self._all = np.ones(n, dtype=np.bool_)
        _, _, self._reset_kernel, step_packed, step_packed_parallel = kernels.KERNELS[code]
        self.threads = n > PARALLEL_MIN if threads is None else threads
        self._step_kernel = step_packed_parallel if self.threads else step_packed
        self._ready = False
        self._views = (self._obs, self._rewards, self._terminated, self._truncated, self._info)
        self._seed(seed)

    _adopt = BuiltinVecEnv._adopt  # swap VecEnvBase's arrays for arena views (the same as the classic built-ins)

    def _seed(self, seed: int | None) -> None:
        rng.derive_keys(seed, self.num_envs, out=self._rng_key)
        self._rng_counter[:] = 0

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        """Start a new episode in every env. ``seed`` re-derives the per-env streams (env i's from (seed, i)).

        The last action (what a sticky action repeats) is set to 0 (no-op), as in a new
        ``minatar.Environment``, so ``reset(seed=s)`` always starts the same way.
        """
        self._check_open()
        if options:
            raise ValueError(f"MinAtar envs take no reset options, got {sorted(options)}")
        if seed is not None:
            self._seed(seed)
        self._state[:, kernels.LAST_ACTION] = 0
        self._reset_kernel(self._state, self._all, self._params, self._rng_key, self._rng_counter, self._obs,
                           self._elapsed, self._needs_reset, self._running_return, self._running_length)
        self._ready = True
        return self._reset_result()

    def step(self, actions):
        """Step all envs with ``actions`` (int[N] in the action space); returns views (see ``base.py``)."""
        a = actions if type(actions) is np.ndarray else as_numpy_actions(actions)
        if a.dtype.kind not in "iu" or a.ndim != 1 or not self._ready:
            self._check_open()
            if not self._ready:
                raise RuntimeError("call reset() before step()")
            check_actions(a, self.single_action_space, self.num_envs)
        bad = self._step_kernel(self._arena, a)
        if bad != -1:
            check_actions(a, self.single_action_space, self.num_envs)
            raise ValueError(f"actions[{bad}] = {a[bad]} is not in the action space {self.single_action_space}")
        if self.copy:
            return self._step_result()
        return self._views

    def state_dict(self) -> dict:
        """The arena (game states, RNG keys and counters, counters, episode sums, last outputs) and readiness."""
        return {"arena": torch.from_numpy(self._arena.copy()), "ready": self._ready}

    def load_state_dict(self, state: dict) -> None:
        self._check_open()
        np.copyto(self._arena, state["arena"].numpy())
        self._ready = bool(state["ready"])

    def close_extras(self, **kwargs) -> None:
        self._ready = False
        super().close_extras(**kwargs)

    def render(self, env_ids=None) -> np.ndarray | None:
        """uint8[len(env_ids) or N, 10, 10, 3]: each cell colored by its highest set channel (black if none)."""
        self._check_open()
        if self.render_mode is None:
            gym.logger.warn("render() called without render_mode; use render_mode='rgb_array'")
            return None
        ids = range(self.num_envs) if env_ids is None else [
            check_int("env_ids[k]", i, low=0, high=self.num_envs - 1) for i in env_ids]
        frames = self._obs[list(ids)]  # [B, C, 10, 10]
        c = frames.shape[1]
        level = (frames * np.arange(1, c + 1, dtype=np.uint8)[None, :, None, None]).max(axis=1)  # [B, 10, 10]
        palette = np.zeros((c + 1, 3), dtype=np.uint8)
        hues = np.linspace(0.0, 1.0, c, endpoint=False)
        palette[1:] = (255 * (0.5 + 0.5 * np.stack([np.cos(2 * np.pi * (hues + k / 3)) for k in range(3)], 1)))
        return palette[level]

    def __repr__(self) -> str:
        return f"MinAtarVecEnv({self.env_id}, num_envs={self.num_envs})"
