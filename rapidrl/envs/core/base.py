"""``VecEnvBase``: what every rapidrl vector env shares (spaces, the arena of outputs, the ``info`` layout).

Every vector env (envs written as Numba functions, PyTorch device envs, engines, wrapped Gymnasium envs)
subclasses ``VecEnvBase`` and therefore is a ``gymnasium.vector.VectorEnv``. Its outputs live in an arena
(``rapidrl.envs.core.arena``): ``step``/``reset`` return views of preallocated arrays that the next call
overwrites (``copy=True`` at construction returns fresh copies instead). The ``info`` dict is reused too:

- ``info["final_obs"]``: ``[N, *obs_shape]`` the final observation of episodes that ended this step (valid where
  ``info["_final_obs"]`` is True). Only in ``AutoresetMode.SAME_STEP``; unlike Gymnasium's object array it is a
  dense array of the observation dtype.
- ``info["episode"] = {"r": float32[N], "l": int32[N]}``: return and length of episodes that ended this step,
  valid where ``info["_episode"]`` is True (the layout of Gymnasium's RecordEpisodeStatistics).
- action masks, for an env that states which actions are valid (``has_action_masks``; docs/masks.md):
  ``info["action_mask"]`` bool ``[N, M]``, the valid actions of the observations returned (also in ``reset``'s
  info, and ``action_masks()``, sb3-contrib's name), and in SAME_STEP ``info["final_action_mask"]``, those of
  ``info["final_obs"]`` (valid where ``info["_final_obs"]``; a row may have no valid action there, e.g. a finished
  game). M is the number of actions of a Discrete space, ``sum(nvec)`` of a MultiDiscrete one.

Envs stepped in Python write the engine's observations, rewards, terminated and truncated flags into the arena
and call ``_record()``: the core's compiled bookkeeping (``rapidrl.envs.core.bookkeeping``) then adds the time
limit, the episode statistics and the autoreset flags, exactly as for the compiled envs.
"""

from __future__ import annotations

import gymnasium as gym
import numpy as np
from gymnasium.vector import AutoresetMode
from gymnasium.vector.utils import batch_space

from rapidrl.envs.core.actions import check_actions, mask_sizes
from rapidrl.envs.core.arena import ArenaLayout
from rapidrl.envs.core.kernels import clear_rows, cut_steps, record_steps


class ClosedEnvError(RuntimeError):
    """Raised when a closed vector env is used."""


class ResetNeeded(gym.error.ResetNeeded, RuntimeError):
    """Raised when a vector env is stepped before its first ``reset()``."""


class ActionMaskError(ValueError):
    """An env returned an action mask row with no valid action for a state the agent must act in (raised by the
    ``step`` or ``reset`` that produced it, naming the env and the step of its episode); ``row``: that row."""

    def __init__(self, row: int, message: str):
        super().__init__(message)
        self.row = row


def mask_rows_valid(mask: np.ndarray, sizes: list[int] | None) -> bool:
    """Whether every row of the bool [R, M] ``mask`` has a valid action in each component (``sizes``, the
    components' widths: ``mask_sizes``; None or one: the whole row): one vectorised pass."""
    if sizes is None or len(sizes) <= 1:
        return bool(mask.any(axis=1).all())
    return bool(np.logical_or.reduceat(mask, np.cumsum([0, *sizes[:-1]]), axis=1).all())


def empty_mask_rows(mask: np.ndarray, sizes: list[int] | None) -> tuple[np.ndarray, int]:
    """(rows of the bool [R, M] ``mask`` with no valid action in some component, the first such component's start
    column): ``sizes`` are the components' widths (``mask_sizes``; None or one: the whole row). One vectorised pass
    when every row has a valid action."""
    if sizes is None or len(sizes) <= 1:
        return np.flatnonzero(~mask.any(axis=1)), 0
    starts = np.cumsum([0, *sizes[:-1]])
    none = ~np.logical_or.reduceat(mask, starts, axis=1)
    rows = np.flatnonzero(none.any(axis=1))
    return rows, int(starts[int(np.argmax(none[rows[0]]))]) if rows.size else 0


def explain_empty_mask(row: int, agents: int, step: int | None, what: str, column: int = 0,
                       sizes: list[int] | None = None) -> ActionMaskError:
    """The ``ActionMaskError`` for env row ``row`` (of ``agents`` rows per env) whose mask has no valid action after
    ``what`` (e.g. "step 7 of its episode")."""
    who = f"env {row}" if agents == 1 else f"row {row} (env {row // agents}, agent {row % agents})"
    part = ""
    if sizes is not None and len(sizes) > 1:
        width = sizes[list(np.cumsum([0, *sizes[:-1]])).index(column)]
        part = f" in its action component [{column}, {column + width})"
    when = what if step is None else (f"{what} {step} of its episode" if step else
                                      "the reset that started its new episode")
    return ActionMaskError(row, f"{who} has no valid action{part} after {when}: its action mask row is all False. A "
                           "state the agent acts in must leave at least one action valid (only a finished episode's "
                           "final state may have none); fix the env's mask (docs/masks.md)")


def current_action_masks(env) -> np.ndarray | None:
    """bool [N, M]: the valid actions of each row's current observation where the vector ``env`` states action masks
    (``has_action_masks``: rapidrl's envs, the Gymnasium adapters of sb3-contrib-style ``action_masks()``, PettingZoo
    observation masks), else None: the one place where acting outside training (evaluation, ``rapidrl collect``,
    multi-agent evaluation) fetches them."""
    if getattr(env, "has_action_masks", False):
        return np.asarray(env.action_masks(), bool)
    return None


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


def check_num_envs(num_envs, name: str = "num_envs") -> int:
    if isinstance(num_envs, bool) or not isinstance(num_envs, (int, np.integer)) or num_envs < 1:
        raise ValueError(f"{name} must be a positive int, got {num_envs!r}")
    return int(num_envs)


class VecEnvBase(gym.vector.VectorEnv):
    """Spaces, the arena of outputs and the shared ``info`` layout of a rapidrl vector env.

    ``layout`` (default: no state, one row per env, no time limit) sizes the arena; ``buffer`` is memory to put it
    in (``SubprocVecEnv`` shares it with its workers). Subclasses write the outputs (``self._obs``, ``_rewards``,
    ``_terminated``, ``_truncated``, ``_final_obs``; or all of the arena through compiled kernels) and return
    ``self._step_result()``. ``self.arrays`` holds every view of the arena (``ArenaViews``).
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
        layout: ArenaLayout | None = None,
        buffer=None,
        mask_size: int = 0,
    ):
        self.num_envs = check_num_envs(num_envs)
        self.single_observation_space = single_observation_space
        self.single_action_space = single_action_space
        self.observation_space = batch_space(single_observation_space, self.num_envs)
        self.action_space = batch_space(single_action_space, self.num_envs)
        self.autoreset_mode = parse_autoreset_mode(autoreset_mode)
        self.metadata = {"autoreset_mode": self.autoreset_mode, "render_modes": ["rgb_array"]}
        self.render_mode = render_mode
        self.copy = bool(copy)
        self.closed = False
        self._ready = False  # reset() has run (and close() has not)

        if layout is None:
            layout = ArenaLayout(self.num_envs, self.num_envs, (), np.uint8, single_observation_space.shape,
                                 single_observation_space.dtype, mask_size=mask_size)
        if layout.rows != self.num_envs:
            raise ValueError(f"the arena has {layout.rows} rows for {self.num_envs} envs")
        self.layout = layout
        self.arena = layout.new(self.autoreset_mode == AutoresetMode.NEXT_STEP, buffer)
        self.arrays = a = layout.views(self.arena)
        a.params[0] = np.inf  # no time limit unless the env sets one
        self._obs, self._final_obs, self._rewards = a.obs, a.final_obs, a.rewards
        self._terminated, self._truncated, self._done = a.terminated, a.truncated, a.done
        self._episode_return, self._episode_length = a.done_return, a.done_length
        self._info: dict = {"episode": {"r": self._episode_return, "l": self._episode_length}, "_episode": self._done}
        if self.autoreset_mode == AutoresetMode.SAME_STEP:
            self._info["final_obs"] = self._final_obs
            self._info["_final_obs"] = self._done
        self._action_mask, self._final_action_mask = a.action_mask, a.final_action_mask
        self.has_action_masks = layout.mask_size > 0
        """The env states which actions are valid (``action_masks()``, ``info["action_mask"]``)."""
        if self.has_action_masks:
            self._info["action_mask"] = self._action_mask
            if self.autoreset_mode == AutoresetMode.SAME_STEP:
                self._info["final_action_mask"] = self._final_action_mask
        self._all_rows = np.arange(self.num_envs, dtype=np.int64)
        self._mask_sizes = mask_sizes(single_action_space) if self.has_action_masks else None

    # -- helpers for subclasses -------------------------------------------------------------------
    def _check_open(self) -> None:
        if self.closed:
            raise ClosedEnvError(f"{type(self).__name__} is closed; create a new one with rapidrl.make_vec")

    def _check_ready(self) -> None:
        """ClosedEnvError after close, ResetNeeded before the first reset."""
        self._check_open()
        if not self._ready:
            raise ResetNeeded("call reset() before step()")

    def _check_actions(self, actions) -> np.ndarray:
        """The actions as a NumPy array, checked (``rapidrl.envs.core.actions``); the env must be ready."""
        self._check_ready()
        return check_actions(actions, self.single_action_space, self.num_envs)

    def _record(self, rows: np.ndarray | None = None) -> int:
        """After an engine step of ``rows`` (default all; int64): time limit, statistics, autoreset flags.

        The engine's rewards/terminated/truncated must be in ``self._rewards`` etc.; rows with
        ``self.arrays.needs_reset`` (NEXT_STEP) count as reset by this step. Returns the number of episodes that
        ended (``self._done``); in SAME_STEP the caller resets those rows unless its engine did.
        """
        return record_steps(self.arena, self._all_rows if rows is None else rows)

    def _clear(self, rows: np.ndarray | None = None) -> None:
        """Rows that were just reset: flags, statistics and counters cleared."""
        clear_rows(self.arena, self._all_rows if rows is None else rows)

    def _cut(self, rows: np.ndarray) -> None:
        """Rows whose engine failed mid-step: their episodes end as truncated, statistics up to the last step."""
        cut_steps(self.arena, rows)

    def _check_action_masks(self, what: str) -> None:
        """``ActionMaskError`` if a row the agent acts in next has no valid action (one vectorised check; rows of an
        env whose NEXT_STEP episode just ended hold its final state, which may have none)."""
        if not self.has_action_masks or mask_rows_valid(self._action_mask, self._mask_sizes):
            return
        rows, column = empty_mask_rows(self._action_mask, self._mask_sizes)
        agents = max(1, self.num_envs // len(self.arrays.elapsed))
        rows = [r for r in rows if not self.arrays.needs_reset[r // agents]]
        if rows:
            step = int(self.arrays.elapsed[rows[0] // agents]) if what == "step" else None
            raise explain_empty_mask(rows[0], agents, step, what, column, self._mask_sizes)

    _masks_checked_in_step = False
    """True where ``step`` checks the masks itself (compiled envs, inside their step loop)."""

    def _step_result(self):
        """(obs, rewards, terminated, truncated, info) as views, or copies when ``copy=True``; ``ActionMaskError``
        for a mask row without a valid action."""
        if not self._masks_checked_in_step:
            self._check_action_masks("step")
        if not self.copy:
            return self._obs, self._rewards, self._terminated, self._truncated, self._info
        info = {k: (v.copy() if isinstance(v, np.ndarray) else {kk: vv.copy() for kk, vv in v.items()})
                for k, v in self._info.items()}
        return self._obs.copy(), self._rewards.copy(), self._terminated.copy(), self._truncated.copy(), info

    def _reset_result(self):
        """(obs, info) after a reset; the info holds no finished episodes (and the action masks of an env that has
        them). The env is ready to step."""
        self._done[:] = False
        self._ready = True
        self._check_action_masks("reset")
        info = {}
        if self.has_action_masks:
            info["action_mask"] = self._action_mask.copy() if self.copy else self._action_mask
        return (self._obs.copy() if self.copy else self._obs), info

    @property
    def action_mask_size(self) -> int:
        """M, the width of a row's action mask (0: the env states no action masks)."""
        return self.layout.mask_size

    def action_masks(self) -> np.ndarray:
        """bool [N, M]: the valid actions of each row's current observation (sb3-contrib's ``action_masks()``): a
        view the next ``step``/``reset`` overwrites (a copy with ``copy=True``). ValueError for an env without
        action masks (``has_action_masks``)."""
        if not self.has_action_masks:
            raise ValueError(f"{type(self).__name__} states no action masks (has_action_masks is False)")
        return self._action_mask.copy() if self.copy else self._action_mask

    # -- exact resume ------------------------------------------------------------------------------
    def state_dict(self) -> dict | None:
        """What fixes this env's future exactly, as tensors and plain values (a training checkpoint stores it), or
        None where the env cannot be captured (engines such as MuJoCo and the ALE, Python envs): a resumed run
        then starts fresh episodes. Envs written as Numba functions return their whole arena."""
        return None

    def load_state_dict(self, state: dict) -> None:
        """Restore a ``state_dict()`` in place (views of the outputs held elsewhere stay valid)."""
        raise NotImplementedError(f"{type(self).__name__} has no state to restore (its state_dict() is None)")

    def close_extras(self, **kwargs) -> None:
        self._ready = False
        self.closed = True
