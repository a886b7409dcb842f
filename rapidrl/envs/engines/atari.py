"""Atari 2600 games through the Arcade Learning Environment (``ale-py``), batched and preprocessed in C++.

``AtariVecEnv`` drives ale-py's own multithreaded vector env (``ale_py.vector_env.AtariVectorEnv``), which
steps N emulators on a C++ thread pool and does the standard preprocessing there (Mnih et al. 2015; Machado et
al. 2018; CleanRL's ppo_atari), explicit in the constructor's arguments:

- ``noop_max=30``: a random number (0..30) of no-op actions after every reset;
- ``frame_skip=4``: each action is repeated for 4 emulator frames and the observation is the pixel-wise max of
  the last two (removes sprite flicker);
- ``screen_size=84``: grayscale, resized to 84x84 (area interpolation);
- ``frame_stack=4``: the observation is the last 4 preprocessed frames, ``uint8 [N, 4, 84, 84]``; at a reset the
  missing older frames are zeros;
- ``fire_reset=True``: FIRE is pressed after a reset in games that need it to start;
- ``press_fire=False``: in games whose action set has FIRE, the actions of the first ``FIRE_STEPS`` (2) agent steps
  of every game and after every lost life (the game going on) are replaced by FIRE, as the reference wrappers'
  ``FireResetEnv`` presses it at every reset, the per-life resets of ``EpisodicLifeEnv`` included. ale-py's own
  FIRE reset is swallowed by sticky actions in about half of Breakout's games, and one FIRE step (4 frames) in
  0.25^4 = 0.4% of presses; two steps leave 0.25^8. Evaluation turns it on, so a policy that never presses FIRE
  cannot stall a game;
- ``episodic_life`` (default: ``training``): the loss of a life is reported as ``terminated`` (the learner stops
  bootstrapping there), while the game itself continues: the env is not reset;
- ``clip_rewards`` (default: ``training``): rewards are their sign (-1, 0, 1);
- ``repeat_action_probability`` (sticky actions; default the id's, 0.25 for ``-v5``): with this probability the
  emulator repeats the previous action instead of the new one, on every frame;
- ``max_episode_frames=108000`` (30 minutes of play): the game is then truncated.

Episode statistics (``info["episode"]``, ``info["_episode"]``) are always the real game: the unclipped score
and the number of agent steps from a reset to the game's end (all lives), never a clipped or per-life return.
``training=False`` gives the evaluation setting (no episodic life, unclipped rewards); ``Algorithm.evaluate``
builds its env that way, with ``press_fire=True`` (``eval_overrides``).
"""

from __future__ import annotations

from typing import ClassVar

import numpy as np
from gymnasium.vector import AutoresetMode

from rapidrl.envs.core.base import VecEnvBase, parse_autoreset_mode
from rapidrl.kernels.validation import check_int

__all__ = ["AtariVecEnv", "atari_game", "is_atari_id"]


def _register() -> None:
    import ale_py
    import gymnasium as gym

    gym.register_envs(ale_py)


def is_atari_id(env_id: str) -> bool:
    """True for the ALE's Gymnasium ids (``ALE/<Game>-v5``, ``<Game>NoFrameskip-v4``, ...), without importing
    ale-py unless the id could be one."""
    if env_id.startswith("ALE/"):
        return True
    if "NoFrameskip" not in env_id and "Deterministic" not in env_id:
        return False
    try:
        _register()
    except ImportError:
        return False
    import gymnasium as gym

    return env_id in gym.registry and "ale_py" in str(gym.spec(env_id).entry_point)


def atari_game(env_id: str) -> tuple[str, dict]:
    """(ale game name, the id's registered keyword arguments) of an ALE Gymnasium id."""
    try:
        _register()
    except ImportError as e:
        raise ImportError(f"{env_id!r} needs the Atari extra: pip install 'rapidrl[atari]' (ale-py)") from e
    import gymnasium as gym

    if env_id not in gym.registry:
        raise ValueError(f"unknown Atari id {env_id!r}; ids look like 'ALE/Breakout-v5'")
    kwargs = dict(gym.spec(env_id).kwargs)
    return kwargs.pop("game"), kwargs


FIRE_STEPS = 2
"""Agent steps of FIRE that ``press_fire`` gives a game at its start and after each lost life."""


class AtariVecEnv(VecEnvBase):
    """N Atari games with the standard preprocessing, on ale-py's C++ thread pool (see the module docstring).

    Observations: uint8 [N, frame_stack, screen_size, screen_size]. Actions: Discrete (the game's minimal
    action set unless ``full_action_space``). ``step``/``reset`` return views of preallocated arrays
    (``copy=True`` for copies); ``info`` holds ``final_obs`` where an env's episode for the learner ended
    (``_final_obs``: a game over, a truncation, or with ``episodic_life`` a lost life), ``episode`` statistics
    of finished games and ``lives``. ``num_threads``: C++ worker threads (0: one per core, at most N).
    ``close()`` joins the worker threads.
    """

    eval_overrides: ClassVar[dict] = {"training": False, "press_fire": True}
    """Keyword arguments with which ``Algorithm.evaluate`` builds its evaluation env."""

    def __init__(self, env_id: str, num_envs: int, *, seed: int | None = None, autoreset_mode="same_step",
                 copy: bool = False, render_mode: str | None = None, training: bool = True,
                 repeat_action_probability: float | None = None, noop_max: int = 30, frame_skip: int = 4,
                 frame_stack: int = 4, screen_size: int = 84, episodic_life: bool | None = None,
                 clip_rewards: bool | None = None, fire_reset: bool = True, max_episode_frames: int = 108_000,
                 full_action_space: bool = False, num_threads: int = 0, press_fire: bool = False):
        if parse_autoreset_mode(autoreset_mode) != AutoresetMode.SAME_STEP:  # refused before any emulator starts
            raise ValueError("AtariVecEnv supports autoreset_mode='same_step' only (ale-py resets in the same step)")
        game, spec_kwargs = atari_game(env_id)
        from ale_py.vector_env import AtariVectorEnv

        if render_mode is not None:
            raise ValueError(f"render_mode is not supported by AtariVecEnv, got {render_mode!r}")
        if repeat_action_probability is None:
            repeat_action_probability = float(spec_kwargs.get("repeat_action_probability", 0.0))
        if not 0.0 <= float(repeat_action_probability) <= 1.0:
            raise ValueError(f"repeat_action_probability must be in [0, 1], got {repeat_action_probability!r}")
        for name, value in (("training", training), ("fire_reset", fire_reset),
                            ("full_action_space", full_action_space), ("press_fire", press_fire)):
            if not isinstance(value, (bool, np.bool_)):
                raise TypeError(f"{name} must be a bool, got {value!r}")
        self.noop_max = check_int("noop_max", noop_max, low=0)
        self.frame_skip = check_int("frame_skip", frame_skip, low=1)
        self.frame_stack = check_int("frame_stack", frame_stack, low=1)
        self.screen_size = check_int("screen_size", screen_size, low=1)
        self.max_episode_frames = check_int("max_episode_frames", max_episode_frames, low=1)
        num_threads = check_int("num_threads", num_threads, low=0)
        self.training = bool(training)
        self.episodic_life = self.training if episodic_life is None else bool(episodic_life)
        self.clip_rewards = self.training if clip_rewards is None else bool(clip_rewards)
        self.repeat_action_probability = float(repeat_action_probability)
        self.fire_reset = bool(fire_reset)
        self.env_id, self.game = env_id, game
        if isinstance(num_envs, bool) or not isinstance(num_envs, (int, np.integer)) or num_envs < 1:
            raise ValueError(f"num_envs must be a positive int, got {num_envs!r}")
        # episodic life and reward clipping are done here (the engine's versions would hide the real score)
        self._ale = AtariVectorEnv(game, int(num_envs), num_threads=min(num_threads, int(num_envs)),
                                   max_num_frames_per_episode=self.max_episode_frames,
                                   repeat_action_probability=self.repeat_action_probability,
                                   full_action_space=full_action_space, autoreset_mode="SameStep",
                                   img_height=self.screen_size, img_width=self.screen_size, grayscale=True,
                                   stack_num=self.frame_stack, frameskip=self.frame_skip, maxpool=True,
                                   noop_max=self.noop_max, episodic_life=False, reward_clipping=False,
                                   use_fire_reset=self.fire_reset)
        super().__init__(self._ale.single_observation_space, self._ale.single_action_space, num_envs,
                         autoreset_mode=autoreset_mode, copy=copy, render_mode=render_mode)
        n = self.num_envs
        self._seed = seed
        self._ended = np.zeros(n, np.bool_)  # where final_obs is valid (the learner's episode ended)
        self._info["_final_obs"] = self._ended
        self._lives = np.zeros(n, np.int32)
        self._info["lives"] = self._lives
        self._actions = np.zeros(n, np.int64)
        # FIRE to serve (press_fire): the index of FIRE in the action set (None: the game has no FIRE)
        import ale_py

        action_set = list(self._ale.ale.get_action_set())
        self.fire_action = action_set.index(ale_py.Action.FIRE) if ale_py.Action.FIRE in action_set else None
        self.press_fire = bool(press_fire) and self.fire_action is not None
        self._fire_left = np.zeros(n, np.int8)  # steps of FIRE still due per env (a game began, a life was lost)

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        """Reset every game (env i seeded with ``seed + i``; default: the constructor's seed on the first reset)."""
        self._check_open()
        if options:
            raise ValueError(f"AtariVecEnv.reset takes no options, got {options!r}")
        if seed is None:
            seed, self._seed = self._seed, None
        obs, info = self._ale.reset(seed=None if seed is None else int(seed))
        np.copyto(self._obs, obs)
        np.copyto(self._lives, info["lives"])
        self._ended[:] = False
        self._fire_left[:] = FIRE_STEPS if self.press_fire else 0  # every game begins
        self._clear()
        return self._reset_result()

    def step(self, actions):
        """One agent step (``frame_skip`` frames) of every game; see the class docstring for the outputs.

        ale-py resets ended games itself (in the same step); this maps its outputs into the core's contract: the
        core records the real game (unclipped rewards, game over or truncation: ``info["episode"]``), then the
        learner's view is laid over it (clipped rewards, a lost life as ``terminated``, ``_final_obs`` where the
        learner's episode ended).
        """
        actions = self._check_actions(actions)
        np.copyto(self._actions, actions, casting="unsafe")
        if self.press_fire:
            due = self._fire_left > 0
            if due.any():
                self._actions[due] = self.fire_action
                self._fire_left[due] -= 1
        obs, rewards, game_over, truncated, info = self._ale.step(self._actions)
        np.copyto(self._obs, obs)
        raw = rewards.astype(np.float64)
        np.copyto(self._rewards, raw, casting="unsafe")
        np.copyto(self._terminated, game_over)
        np.copyto(self._truncated, truncated)
        self._record()  # the game's statistics; _done = the games that ended (the engine already reset them)
        game_end = self._done
        lives = info["lives"]
        if self.press_fire:  # FIRE from the next step where a game began (reset in this step) or a life was lost
            self._fire_left[game_end | (lives < self._lives)] = FIRE_STEPS
        if self.episodic_life:
            life_lost = (lives < self._lives) & ~game_end
            np.logical_or(game_over, life_lost, out=self._terminated)
        else:
            life_lost = None
            np.copyto(self._terminated, game_over)
        np.copyto(self._truncated, truncated & ~self._terminated)
        np.copyto(self._lives, lives)
        if self.clip_rewards:
            np.copyto(self._rewards, np.sign(raw), casting="unsafe")
        np.logical_or(self._terminated, self._truncated, out=self._ended)
        if game_end.any():
            np.copyto(self._final_obs, info["final_obs"], where=game_end[:, None, None, None])
        if life_lost is not None and life_lost.any():  # the game goes on: its final obs is the current one
            np.copyto(self._final_obs, obs, where=life_lost[:, None, None, None])
        return self._step_result()

    def close_extras(self, **kwargs) -> None:
        if not self.closed:
            self._ale.close()
            # the C++ interface joins its worker threads when destroyed; ale-py's close() leaves it alive
            self._ale.ale = None
        super().close_extras(**kwargs)
