"""``SyncVecEnv``: any Gymnasium environment, N copies stepped in this process, rapidrl's output layout.

It is the in-process counterpart of ``SubprocVecEnv`` (``adapters/subprocess.py``) and ``RayVecEnv``
(``adapters/ray.py``); all three step each env with the same function (``step_env``), so their trajectories are
identical, and record flags and statistics through the env core (``VecEnvBase._record``). Compared with
``gymnasium.vector.SyncVectorEnv``:

- outputs are views of preallocated arrays (``VecEnvBase``): rewards float32, flags bool, and in
  ``AutoresetMode.SAME_STEP`` (the default) a dense ``info["final_obs"]`` instead of an object array;
- episode statistics ``info["episode"] = {"r", "l"}`` / ``info["_episode"]`` are counted here, no
  wrapper needed (the reset step of ``NEXT_STEP`` mode counts neither reward nor length, as in
  Gymnasium's ``RecordEpisodeStatistics``);
- the per-env ``info`` dicts returned by the wrapped envs are **not** gathered: merging N Python dicts
  every step costs more than a cheap env step. ``info`` holds only the keys above.

Action masks (docs/masks.md): a Gymnasium env that states its valid actions, through an ``action_masks()`` method
(sb3-contrib's convention, found through wrappers) or through ``info["action_mask"]`` of ``reset`` and ``step``
(Gymnasium's Taxi), gives them to ``SyncVecEnv`` (``action_masks="method"`` / ``"info"``; the default ``"auto"``
takes the method where the env has one, ``False`` none): its ``info["action_mask"]`` / ``action_masks()`` then hold
them (bool ``[N, M]``, M = n of a Discrete space, ``sum(nvec)`` of a MultiDiscrete one), and
``info["final_action_mask"]`` those of the final observations.

Observations must be fixed-shape arrays: ``Box``, ``Discrete``, ``MultiDiscrete`` or ``MultiBinary``.
Other spaces (``Dict``, ``Tuple``, ``Text``, ``Graph``, ``Sequence``) raise a ``TypeError``; flatten them
first (``gymnasium.wrappers.FlattenObservation``). Actions must be ``Discrete`` or ``Box``.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence

import gymnasium as gym
import numpy as np
from gymnasium.vector import AutoresetMode

from rapidrl.envs.core.actions import as_action_mask, mask_sizes
from rapidrl.envs.core.base import VecEnvBase, parse_autoreset_mode
from rapidrl.envs.core.seeding import env_seeds
from rapidrl.kernels.validation import check_int

SUPPORTED_OBS_SPACES = (gym.spaces.Box, gym.spaces.Discrete, gym.spaces.MultiDiscrete, gym.spaces.MultiBinary)
SUPPORTED_ACTION_SPACES = (gym.spaces.Box, gym.spaces.Discrete, gym.spaces.MultiDiscrete, gym.spaces.MultiBinary)


def resolve_env_fns(env_id_or_fns, num_envs, env_kwargs: dict) -> tuple[list[Callable[[], gym.Env]], str]:
    """Return ``(factories, name)``: one zero-argument env factory per env, and a name for messages.

    ``env_id_or_fns`` is a Gymnasium id (each env is ``gymnasium.make(id, **env_kwargs)``; ``num_envs``
    required) or a sequence of zero-argument factories (``num_envs`` is ``None`` or ``len(fns)``; no
    ``env_kwargs``).
    """
    if isinstance(env_id_or_fns, str):
        n = check_int("num_envs", num_envs, low=1)
        return [functools.partial(gym.make, env_id_or_fns, **env_kwargs)] * n, env_id_or_fns
    if not isinstance(env_id_or_fns, Sequence) or not env_id_or_fns:
        raise TypeError(
            "env_id_or_fns must be a Gymnasium id (str) or a non-empty list of zero-argument env factories, "
            f"got {type(env_id_or_fns).__name__}"
        )
    fns = list(env_id_or_fns)
    for i, fn in enumerate(fns):
        if not callable(fn):
            raise TypeError(f"env_id_or_fns[{i}] must be a zero-argument callable, got {type(fn).__name__}")
    if num_envs is not None and check_int("num_envs", num_envs, low=1) != len(fns):
        raise ValueError(f"num_envs={num_envs} but {len(fns)} env factories were given")
    if env_kwargs:
        raise TypeError(f"env kwargs {sorted(env_kwargs)} only apply to a Gymnasium id, not to env factories")
    fn = getattr(fns[0], "func", fns[0])  # name a functools.partial after its function
    name = getattr(fn, "__qualname__", None) or type(fn).__name__
    return fns, name


def env_name(env: gym.Env, default: str) -> str:
    """The env's registered id if it has one, else ``default``."""
    spec = getattr(env, "spec", None)
    return spec.id if spec is not None else default


def check_spaces(env: gym.Env, index: int, reference: gym.Env | None = None) -> None:
    """Raise a clear error if env ``index`` has unsupported spaces or differs from ``reference``."""
    obs_space, act_space = env.observation_space, env.action_space
    if not isinstance(obs_space, SUPPORTED_OBS_SPACES):
        raise TypeError(
            f"env {index}: observation space {obs_space} is not supported; rapidrl vector envs need a "
            "fixed-shape array observation (Box, Discrete, MultiDiscrete, MultiBinary). Use "
            "make_vec(..., flatten_observations=True) (the algorithms do) to encode Tuple/Dict observations as "
            "one vector"
        )
    if not isinstance(act_space, SUPPORTED_ACTION_SPACES):
        raise TypeError(f"env {index}: action space {act_space} is not supported (Discrete, MultiDiscrete, "
                        "MultiBinary or Box)")
    if reference is not None and (
        obs_space != reference.observation_space or act_space != reference.action_space
    ):
        raise ValueError(
            f"env {index} has spaces ({obs_space}, {act_space}) but env 0 has "
            f"({reference.observation_space}, {reference.action_space}); all envs must share their spaces"
        )


class EnvOutputs:
    """The arrays ``step_env``/``reset_env`` write into (row ``i`` belongs to env ``i``): views of the arena, or an
    actor's own arrays (Ray). With action masks: ``action_mask``/``final_action_mask`` [N, M] and ``maskers[i]``,
    env i's ``masker`` (None: no masks)."""

    __slots__ = ("action_mask", "final_action_mask", "final_obs", "maskers", "needs_reset", "obs", "rewards",
                 "terminated", "truncated")

    def __init__(self, obs, final_obs, rewards, terminated, truncated, needs_reset, action_mask=None,
                 final_action_mask=None, maskers=None):
        self.obs, self.final_obs, self.rewards = obs, final_obs, rewards
        self.terminated, self.truncated, self.needs_reset = terminated, truncated, needs_reset
        self.action_mask, self.final_action_mask, self.maskers = action_mask, final_action_mask, maskers

    @classmethod
    def of(cls, env: VecEnvBase, maskers=None) -> EnvOutputs:
        a = env.arrays
        return cls(a.obs, a.final_obs, a.rewards, a.terminated, a.truncated, a.needs_reset, a.action_mask,
                   a.final_action_mask, maskers)


def mask_source(env: gym.Env, action_masks) -> str | None:
    """Where ``env``'s action masks come from: "method" (its ``action_masks()``, through wrappers), "info"
    (``info["action_mask"]``) or None, for the ``action_masks`` setting ("auto", "method", "info" or False)."""
    if action_masks not in ("auto", "method", "info", False, None):
        raise ValueError(f"action_masks must be 'auto', 'method', 'info' or False, got {action_masks!r}")
    if not action_masks:
        return None
    if action_masks == "info":
        source = "info"
    else:
        try:
            has_method = callable(env.get_wrapper_attr("action_masks"))
        except AttributeError:
            has_method = False
        if not has_method and action_masks == "method":
            raise TypeError(f"action_masks='method' but {env} has no action_masks() method")
        source = "method" if has_method else None
    if source is not None and mask_sizes(env.action_space) is None:
        raise TypeError(f"action masks need a Discrete, MultiDiscrete or MultiBinary action space, got "
                        f"{env.action_space}")
    return source


def masker(env: gym.Env, source: str | None, width: int):
    """``read(info) -> bool [width]``: the valid actions of ``env``'s current state from ``source``
    (``mask_source``), checked; None for None."""
    if source is None:
        return None
    method = env.get_wrapper_attr("action_masks") if source == "method" else None

    def read(info: dict) -> np.ndarray:
        if method is not None:
            mask = method()
        elif "action_mask" in info:
            mask = info["action_mask"]
        else:
            raise KeyError(f"{env}: action_masks='info' but its info holds no 'action_mask' (keys: {sorted(info)})")
        mask = np.asarray(mask).reshape(-1)
        if mask.shape != (width,):
            raise ValueError(f"{env}: the action mask must have {width} entries, got {mask.shape}")
        return as_action_mask(mask, f"{env}: the action mask")

    return read


def reset_env(env: gym.Env, i: int, out: EnvOutputs, seed, options) -> None:
    """Reset env ``i`` with ``seed``/``options`` (the caller then clears its counters: ``VecEnvBase._clear``)."""
    out.obs[i], info = env.reset(seed=seed, options=options)
    if out.maskers is not None:
        out.action_mask[i] = out.maskers[i](info)


def step_env(env: gym.Env, i: int, action, out: EnvOutputs, same_step: bool) -> None:
    """Advance env ``i`` by one vector step and write the engine's outputs into row ``i`` of ``out``.

    ``out.needs_reset[i]`` (NEXT_STEP: the env's episode ended on the previous step) makes this step a reset
    instead (``action`` ignored). In ``SAME_STEP`` mode an ending episode's last observation goes to
    ``out.final_obs[i]`` and the env is reset at once, so ``out.obs[i]`` is the first observation of the next
    episode. Statistics and the autoreset flags are the core's (``VecEnvBase._record`` on these rows).
    """
    masks = out.maskers[i] if out.maskers is not None else None
    if out.needs_reset[i]:
        out.obs[i], info = env.reset()
        if masks is not None:
            out.action_mask[i] = masks(info)
        return
    obs, reward, terminated, truncated, info = env.step(action)
    out.rewards[i] = reward
    out.terminated[i] = terminated
    out.truncated[i] = truncated
    if same_step and (terminated or truncated):
        out.final_obs[i] = obs
        if masks is not None:
            out.final_action_mask[i] = masks(info)
        obs, info = env.reset()
    out.obs[i] = obs
    if masks is not None:
        out.action_mask[i] = masks(info)


class SyncVecEnv(VecEnvBase):
    """N Gymnasium environments stepped one after another in this process.

    Args:
        env_id_or_fns: a Gymnasium id (``gymnasium.make(id, **env_kwargs)`` per env) or a list of
            zero-argument env factories.
        num_envs: number of envs (required with an id; ``None`` or ``len(fns)`` with factories).
        seed: seed of the first ``reset()`` called without one (env ``i`` gets ``seed + i``); also seeds
            ``action_space``. ``reset(seed=...)`` overrides it.
        autoreset_mode: ``SAME_STEP`` (default) or ``NEXT_STEP`` (Gymnasium's default), see module doc.
        copy: return copies instead of views of the preallocated outputs.
        action_masks: where the envs' action masks come from (module docstring): "auto" (an ``action_masks()``
            method if the env has one, else none), "method", "info" (``info["action_mask"]``) or False (none).
        **env_kwargs: forwarded to ``gymnasium.make`` (e.g. ``max_episode_steps=50``).
    """

    def __init__(self, env_id_or_fns, num_envs=None, *, seed=None, autoreset_mode=AutoresetMode.SAME_STEP,
                 copy: bool = False, action_masks="auto", **env_kwargs):
        fns, default_name = resolve_env_fns(env_id_or_fns, num_envs, env_kwargs)
        autoreset_mode = parse_autoreset_mode(autoreset_mode)  # checked before any env exists
        self._initial_seed = None if seed is None else check_int("seed", seed, low=0)
        self.envs: list[gym.Env] = []
        try:
            for i, fn in enumerate(fns):
                env = fn()
                self.envs.append(env)
                check_spaces(env, i, self.envs[0] if i else None)
        except BaseException:
            for env in self.envs:
                env.close()
            raise
        first = self.envs[0]
        self.env_id = env_name(first, default_name)
        try:
            source = mask_source(first, action_masks)
        except BaseException:
            for env in self.envs:
                env.close()
            raise
        width = sum(mask_sizes(first.action_space)) if source is not None else 0
        super().__init__(first.observation_space, first.action_space, len(fns), autoreset_mode=autoreset_mode,
                         copy=copy, render_mode=first.render_mode, mask_size=width)
        if self._initial_seed is not None:
            self.action_space.seed(self._initial_seed)
            self.single_action_space.seed(self._initial_seed)
        maskers = None if source is None else [masker(env, source, width) for env in self.envs]
        self._out = EnvOutputs.of(self, maskers)
        self._same_step = self.autoreset_mode == AutoresetMode.SAME_STEP
        self._actions = np.zeros(self.action_space.shape, dtype=self.single_action_space.dtype)

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.env_id}, num_envs={self.num_envs})"

    def reset(self, *, seed=None, options: dict | None = None):
        """Reset every env: ``seed`` int ``s`` -> env ``i`` seeded ``s + i``; a list gives one per env.

        ``options`` is passed to every env's ``reset``. Returns ``(obs, {})``.
        """
        self._check_open()
        if seed is None:
            seed, self._initial_seed = self._initial_seed, None
        seeds = env_seeds(seed, self.num_envs)
        for i, env in enumerate(self.envs):
            reset_env(env, i, self._out, seeds[i], options)
        self._clear()
        return self._reset_result()

    def step(self, actions):
        """Step every env with ``actions`` ([N] ints for Discrete, [N, *shape] floats for Box).

        Each env receives its action cast to the action space's dtype (as ``SubprocVecEnv`` does), so
        pass actions of that dtype to reproduce ``gymnasium.vector.SyncVectorEnv`` bit for bit.
        """
        np.copyto(self._actions, self._check_actions(actions), casting="same_kind")
        out, same_step, a = self._out, self._same_step, self._actions
        for i, env in enumerate(self.envs):
            step_env(env, i, a[i], out, same_step)
        self._record()
        return self._step_result()

    def close_extras(self, **kwargs) -> None:
        """Close every wrapped env."""
        for env in self.envs:
            env.close()
        super().close_extras(**kwargs)
