"""MinAtar on the env core: each game's rules as a ``NumbaEnv``, and ``MinAtarVecEnv``.

Each game module (``breakout.py``, ...) holds only its rules, on one env's state row:

    reset(state, i, ramping, rng_key, rng_counter)                            # start a new episode in row i
    act(state, i, a, ramping, rng_key, rng_counter) -> (reward, terminal)     # a = full action 0..5
    observe(state, i, obs)                                                    # obs[i] := uint8[C, 10, 10] frame

``game_env(game)`` adds what ``minatar.Environment`` adds on top (the action set of the env id and sticky
actions) as the core's ``reset``/``step`` functions, and the core adds the time limit, autoreset and episode
statistics. A game module may mark its ``act`` and ``observe`` ``inline="always"`` to have them compiled into the
loop: measured on Breakout (512 envs, CPU time), 44 ns per env step with both inline, 59 with neither. Breakout,
SpaceInvaders, Freeway and Asterix inline ``act``; only Breakout inlines ``observe`` (Numba's inliner warns on the
others' loops); Seaquest inlines neither (its ``act`` alone doubled the compile time).

State: int32 [N, S]; row i is env i's whole game state (fixed-capacity fields, layout documented in the game
module). Column 0 is the last action taken (full action index), shared by all games: a sticky action repeats it.
It survives auto-resets, as ``minatar.Environment.last_action`` does. params: (time limit or inf,
sticky_action_prob, difficulty_ramping 0/1, then the id's action set as full action indices).

Random draws per env and step, in this order (``draws.py``): the sticky-action uniform, the game's draws, then
the reset's draws if the episode ended. Only env i's own stream is used for env i, so results do not depend on
threads.
"""

from __future__ import annotations

import functools

import gymnasium as gym
import numba
import numpy as np

from rapidrl.envs.core.numba_env import NumbaEnv, NumbaVecEnv
from rapidrl.envs.minatar import asterix, breakout, draws, freeway, seaquest, space_invaders
from rapidrl.envs.minatar.draws import rand
from rapidrl.envs.minatar.ids import GAME_NAMES, MINATAR_ENVS
from rapidrl.kernels import parallel
from rapidrl.kernels.validation import check_int

GAMES = tuple(GAME_NAMES)  # game codes: position in this tuple
_GAME_MODULES = (breakout, space_invaders, freeway, asterix, seaquest)
assert tuple(m.__name__.rsplit(".", 1)[1] for m in _GAME_MODULES) == GAMES
LAST_ACTION = 0  # state column shared by all games
STICKY, RAMPING, ACTION_SET = 1, 2, 3  # params entries

# Above this many envs the step splits envs over threads: the classic built-ins' threshold. Measured on the shared
# 2-core machine (docs/minatar.md): threads gained up to 1.9x at 512 envs while both cores were free, and stalled
# the step by 100x or more while other jobs ran (a thread waiting for a busy core holds up the whole step), so
# the serial kernel is the default.
PARALLEL_MIN = parallel.ENV_STEP_PARALLEL_MIN


@functools.cache
def game_functions(code: int) -> tuple:
    """(reset, step) of game ``code`` in the core's protocol: the id's action map and sticky actions on top of
    the game's rules."""
    game = _GAME_MODULES[code]
    reset_game, act = game.reset, game.act

    @numba.njit(cache=True, inline="always")
    def reset(state, i, params, rng_key, rng_counter):
        reset_game(state, i, params[RAMPING] != 0.0, rng_key, rng_counter)

    @numba.njit(cache=True, inline="always")
    def step(state, i, actions, params, elapsed, rng_key, rng_counter):
        a = np.int64(params[ACTION_SET + actions[i]])
        if rand(rng_key, rng_counter, i) < params[STICKY]:
            a = state[i, LAST_ACTION]
        state[i, LAST_ACTION] = a
        return act(state, i, a, params[RAMPING] != 0.0, rng_key, rng_counter)

    return reset, step


def _check_params(params: np.ndarray) -> None:
    if not 0.0 <= params[STICKY] <= 1.0:
        raise ValueError(f"sticky_action_prob must be a number in [0, 1], got {params[STICKY]!r}")


@functools.cache
def game_env(env_id: str) -> NumbaEnv:
    """The ``NumbaEnv`` of a MinAtar id (``MinAtar/<Game>-v0``: 6 actions; ``-v1``: the game's minimal set)."""
    _, code, action_set = MINATAR_IDS[env_id]
    module = _GAME_MODULES[code]
    reset, step = game_functions(code)
    return NumbaEnv(
        id=env_id,
        observation_space=gym.spaces.Box(0, 1, shape=(module.CHANNELS, 10, 10), dtype=np.uint8),
        action_space=gym.spaces.Discrete(len(action_set)),
        state_shape=(None, module.STATE_SIZE),
        state_dtype=np.int32,
        reset=reset,
        step=step,
        observe=module.observe,
        params={"sticky_action_prob": 0.1, "difficulty_ramping": 1.0, "action_set": action_set},
        check_params=_check_params,
        render_fps=15,
        cache_dependencies=(draws, "rapidrl.kernels.rng"),
    )


def _ids() -> dict[str, tuple[str, int, tuple[int, ...]]]:
    """env id -> (game, game code, action set as full action indices)."""
    out = {}
    for code, game in enumerate(GAMES):
        module = _GAME_MODULES[code]
        out[f"MinAtar/{GAME_NAMES[game]}-v0"] = (game, code, tuple(range(6)))
        out[f"MinAtar/{GAME_NAMES[game]}-v1"] = (game, code, tuple(module.MINIMAL_ACTIONS))
    return out


MINATAR_IDS = _ids()
assert tuple(MINATAR_IDS) == MINATAR_ENVS


def list_minatar_envs() -> list[str]:
    """The MinAtar ids rapidrl runs built in (``MinAtar/<Game>-v0``: 6 actions; ``-v1``: minimal set)."""
    return list(MINATAR_IDS)


class MinAtarVecEnv(NumbaVecEnv):
    """N copies of a MinAtar game (Young & Tian 2019) in one Numba kernel, exact to the ``minatar`` package.

    Observations: uint8[N, C, 10, 10], channels first (the package's ``state()`` is bool[10, 10, C]; this is its
    transpose as 0/1). Actions: Discrete, the action set of the package's Gymnasium id (v0: 6 actions, v1: the
    game's minimal set). ``sticky_action_prob`` (default 0.1) and ``difficulty_ramping`` (default True) are the
    package's ``Environment`` arguments. No TimeLimit unless ``max_episode_steps`` is given (the package registers
    none). ``threads``: step the envs on Numba's threads (True), in one thread (False), or threads only above
    ``PARALLEL_MIN`` envs (None); results are identical either way. ``step``/``reset`` return views of
    preallocated arrays (``copy=True`` for copies); ``info`` has ``final_obs`` (SAME_STEP) and ``episode``
    statistics (see ``VecEnvBase``). Per-env random streams derive from (seed, env index).
    """

    def __init__(self, env_id: str, num_envs: int, *, seed: int | None = None, autoreset_mode="same_step",
                 copy: bool = False, render_mode: str | None = None, max_episode_steps: int | None = None,
                 sticky_action_prob: float = 0.1, difficulty_ramping: bool = True, threads: bool | None = None):
        if env_id not in MINATAR_IDS:
            raise ValueError(f"unknown MinAtar id {env_id!r}; known: {', '.join(MINATAR_IDS)}")
        if isinstance(sticky_action_prob, bool) or not isinstance(sticky_action_prob, (int, float, np.number)):
            raise ValueError(f"sticky_action_prob must be a number in [0, 1], got {sticky_action_prob!r}")
        if not isinstance(difficulty_ramping, (bool, np.bool_)):
            raise TypeError(f"difficulty_ramping must be a bool, got {difficulty_ramping!r}")
        super().__init__(game_env(env_id), num_envs, seed=seed, autoreset_mode=autoreset_mode, copy=copy,
                         render_mode=render_mode, max_episode_steps=max_episode_steps, threads=threads,
                         sticky_action_prob=sticky_action_prob, difficulty_ramping=difficulty_ramping)
        self.game = MINATAR_IDS[env_id][0]
        self.sticky_action_prob = float(sticky_action_prob)
        self.difficulty_ramping = bool(difficulty_ramping)

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        """Start a new episode in every env. ``seed`` re-derives the per-env streams (env i's from (seed, i)).

        The last action (what a sticky action repeats) is set to 0 (no-op), as in a new ``minatar.Environment``,
        so ``reset(seed=s)`` always starts the same way.
        """
        self._check_open()
        if options:
            raise ValueError(f"MinAtar envs take no reset options, got {sorted(options)}")
        self._state[:, LAST_ACTION] = 0
        return super().reset(seed=seed)

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
