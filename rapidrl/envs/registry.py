"""Which family serves an env id: the one table ``make_vec`` and ``rapidrl list envs`` read.

A family is one ``Family`` entry: the ids it serves (a list, or a test for open sets such as Atari's), the
vectorizations it implements itself (the first is its default on the CPU) and how to make its vector env. Adding a
family adds one entry to ``FAMILIES``; a user's env written as Numba functions is added with ``register``. Ids of
no family go to the Gymnasium adapters (``vectorization`` "sync", "subprocess" or "ray"). Family modules are
imported only when one of their envs is made.

A user's envs reach every entry point (``make_vec``, the algorithms, ``rapidrl train``/``eval``/``list``) three
ways, as Gymnasium's do:

- ``"module:EnvId"``: ``import_env_module`` imports ``module`` (which registers ``EnvId``) first;
- an installed package's entry point in the group ``rapidrl.envs`` (``ENTRY_POINT_GROUP``): its name is the env
  id, its value the ``NumbaEnv`` (``"mypkg.envs:MY_ENV"``) or a module that registers the id when imported
  (``"mypkg.envs"``); the id is known without an import and loaded when first made;
- ``register(env)`` in the user's own code (then ``qualified_id`` gives ``"module:EnvId"`` for a saved model, so
  that loading it in a new process imports that module again).
"""

from __future__ import annotations

import difflib
import functools
import importlib
import sys
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from importlib import metadata

from rapidrl.envs.classic import CLASSIC_ENVS, get_spec
from rapidrl.envs.core.numba_env import NumbaEnv, NumbaVecEnv
from rapidrl.envs.minatar.ids import MINATAR_ENVS

GYMNASIUM_VECTORIZATIONS = ("sync", "subprocess", "ray")


@dataclass(frozen=True)
class Family:
    """One family of envs (see the module docstring).

    make(env_id, num_envs, vectorization=..., device=..., **kwargs): its vector env for one of its own
    ``vectorizations``; kwargs are seed, autoreset_mode, copy and the env's own keyword arguments.
    """

    name: str
    ids: Callable[[], Sequence[str]]
    make: Callable
    vectorizations: tuple[str, ...]
    matches: Callable[[str], bool] | None = None  # for open id sets; default: ``env_id in ids()``
    device_vectorization: str | None = None  # what it runs on a non-CPU device (classic: "torch")
    gymnasium: bool = False  # its ids are Gymnasium ids too: the adapters run Gymnasium's env
    gymnasium_setup: Callable[[], None] | None = None  # registers its Gymnasium ids (called before the adapters)
    builtin: bool = False  # listed by ``list_builtin_envs``

    def serves(self, env_id: str) -> bool:
        return self.matches(env_id) if self.matches is not None else env_id in self.ids()


def _load(path: str):
    """'module:attribute' -> the attribute (the module imported on first use)."""
    module, _, attr = path.partition(":")
    return getattr(importlib.import_module(module), attr)


def _lazy(path: str) -> Callable:
    return lambda *args, **kwargs: _load(path)(*args, **kwargs)


ENTRY_POINT_GROUP = "rapidrl.envs"
_USER: dict[str, NumbaEnv] = {}
_USER_MODULE: dict[str, str | None] = {}  # id -> the module that registered it (None: a script or a REPL)


def _definition(env: NumbaEnv) -> tuple:
    """What makes two definitions the same env: the functions (by source, ``kernel_key``) and every other field."""
    def name(f):
        return None if f is None else f"{getattr(f, '__module__', '')}.{getattr(f, '__qualname__', repr(f))}"

    return (env.kernel_key, str(env.observation_space), str(env.action_space), dict(env.params),
            env.max_episode_steps, env.agents, env.reset_params, name(env.check_params), name(env.render),
            env.render_fps, env.reward_threshold)


def register(env: NumbaEnv, *, override: bool = False, module: str | None = None) -> None:
    """Make a ``NumbaEnv`` available by its id: ``make_vec(env.id, n)``, the algorithms (``rr.PPO(env.id)``),
    ``rapidrl list envs``.

    The same definition again (a re-run notebook cell, a module imported again) is accepted. Another definition
    under a registered id is refused, as a built-in id always is; ``override=True`` replaces it with a warning.
    ``module``: the module to import to register it again (default: the caller's, unless it is ``__main__``); a
    saved model records ``"module:id"`` (``qualified_id``) so that loading it in another process imports it.
    """
    if not isinstance(env, NumbaEnv):
        raise TypeError(f"register takes a rapidrl.envs.NumbaEnv, got {type(env).__name__}")
    if any(f.serves(env.id) for f in FAMILIES if f.name != "registered"):
        raise ValueError(f"env id {env.id!r} is taken by a built-in env; register yours under another id")
    if module is None:
        module = sys._getframe(1).f_globals.get("__name__")
    module = None if module == "__main__" else module
    old = _USER.get(env.id)
    if old is not None and old is not env and _definition(old) != _definition(env):
        where = f" by module {_USER_MODULE[env.id]!r}" if _USER_MODULE.get(env.id) else ""
        if not override:
            raise ValueError(f"env id {env.id!r} is already registered{where} with another definition; "
                             "register(env, override=True) replaces it")
        warnings.warn(f"env id {env.id!r} registered{where} is replaced by another definition (override=True)",
                      stacklevel=2)
    _USER[env.id] = env
    _USER_MODULE[env.id] = module


def registered_envs() -> dict[str, str | None]:
    """Ids registered in this process (``register``) -> the module that registered each (None: a script)."""
    return dict(_USER_MODULE)


def qualified_id(env_id: str) -> str:
    """``"module:env_id"`` for an id registered by an importable module (what a saved model records, so that a new
    process imports the module again); other ids unchanged."""
    module = _USER_MODULE.get(env_id)
    return f"{module}:{env_id}" if module and ":" not in env_id and env_id not in _entry_points() else env_id


def import_env_module(env_id: str) -> str:
    """For ``"module:EnvId"``, import ``module`` (which registers ``EnvId``, as ``gymnasium.make`` does) and return
    ``"EnvId"``; other ids unchanged. ValueError naming the module when it cannot be imported (not found, or an
    exception raised by its own code)."""
    module, colon, name = env_id.partition(":")
    if not colon:
        return env_id
    if not module or not name:
        raise ValueError(f"env id {env_id!r} must be 'module:EnvId' or 'EnvId'")
    try:
        importlib.import_module(module)
    except Exception as e:  # not found, or the module itself fails (any exception its import raises)
        first = (str(e).splitlines() or [""])[0]
        raise ValueError(f"env id {env_id!r}: cannot import module {module!r} ({type(e).__name__}: {first})") from None
    return name


@functools.cache
def _entry_points() -> dict[str, metadata.EntryPoint]:
    """The installed packages' entry points of ``ENTRY_POINT_GROUP``, by name (the env id); read once."""
    return {ep.name: ep for ep in metadata.entry_points(group=ENTRY_POINT_GROUP)}


def _load_entry_point(env_id: str) -> None:
    """Register the env of entry point ``env_id``: its value is the ``NumbaEnv``, or a module that registers it."""
    ep = _entry_points()[env_id]
    where = f"entry point {env_id!r} ({ep.value}) of the group {ENTRY_POINT_GROUP!r}"
    try:
        value = ep.load()
    except Exception as e:
        raise ValueError(f"{where} cannot be loaded ({type(e).__name__}: {e})") from None
    if isinstance(value, NumbaEnv):
        if value.id != env_id:
            raise ValueError(f"{where} is a NumbaEnv with id {value.id!r}; the entry point's name must be its id")
        register(value, module=ep.module)
    elif env_id not in _USER:
        raise ValueError(f"{where} must name a rapidrl.envs.NumbaEnv or a module that registers {env_id!r}; "
                         f"it is {type(value).__name__}")


def _registered_ids() -> tuple[str, ...]:
    return tuple(dict.fromkeys([*_USER, *_entry_points()]))


def numba_env(env_id: str) -> NumbaEnv:
    """The ``NumbaEnv`` of a classic-control or registered id (ValueError listing the built-ins otherwise)."""
    if env_id in CLASSIC_ENVS:
        return get_spec(env_id)
    if env_id not in _USER and env_id in _entry_points():
        _load_entry_point(env_id)
    if env_id in _USER:
        return _USER[env_id]
    if env_id in MINATAR_ENVS:
        raise ValueError(f"{env_id!r} is a MinAtar env: make it with rapidrl.make_vec (a MinAtarVecEnv)")
    raise ValueError(unknown_env_message(env_id))


class BuiltinVecEnv(NumbaVecEnv):
    """The ``NumbaVecEnv`` of a classic-control or registered env id (``NumbaVecEnv(numba_env(env_id), ...)``)."""

    def __init__(self, env_id: str, num_envs: int, **kwargs):
        super().__init__(numba_env(env_id), num_envs, **kwargs)


def _make_numba(env_id: str, num_envs: int, *, vectorization: str, device, **kwargs):
    if vectorization == "torch":
        from rapidrl.envs.classic.torch_vec import TorchVecEnv

        kwargs.pop("copy")  # its outputs are fresh tensors anyway
        return TorchVecEnv(env_id, num_envs, device=device, **kwargs)
    return BuiltinVecEnv(env_id, num_envs, **kwargs)


def _make_minatar(env_id: str, num_envs: int, *, vectorization: str, device, **kwargs):
    return _load("rapidrl.envs.minatar.vec:MinAtarVecEnv")(env_id, num_envs, **kwargs)


def _register_minatar_gymnasium_ids() -> None:
    import gymnasium as gym

    if "MinAtar/Breakout-v1" not in gym.registry:  # the package registers its ids through gymnasium's entry points
        from minatar.gym import register_envs

        register_envs()


def _make_pomdp(env_id: str, num_envs: int, *, vectorization: str, device, **kwargs):
    if env_id == "CartPoleNoVel-v1":
        return _load("rapidrl.envs.pomdp.cartpole_novel:CartPoleNoVelVecEnv")(num_envs, **kwargs)
    if env_id == "PendulumNoVel-v1":
        return _load("rapidrl.envs.pomdp.pendulum_novel:PendulumNoVelVecEnv")(num_envs, **kwargs)
    return _load("rapidrl.envs.pomdp.memory_cue:MemoryCueVecEnv")(num_envs, **kwargs)


def _make_mpe(env_id: str, num_envs: int, *, vectorization: str, device, **kwargs):
    return _load("rapidrl.envs.multiagent.mpe:make_mpe")(env_id, num_envs, **kwargs)


def _make_atari(env_id: str, num_envs: int, *, vectorization: str, device, **kwargs):
    return _load("rapidrl.envs.engines.atari:AtariVecEnv")(env_id, num_envs, **kwargs)


def _make_mujoco(env_id: str, num_envs: int, *, vectorization: str, device, **kwargs):
    if not _load("rapidrl.envs.engines.mujoco:mujoco_available")():
        raise ValueError(f"vectorization='mujoco' needs the mujoco package (pip install 'rapidrl[mujoco]') for "
                         f"{env_id!r}")
    return _load("rapidrl.envs.engines.mujoco:MujocoVecEnv")(env_id, num_envs, **kwargs)


def _mujoco_ids() -> tuple[str, ...]:
    return tuple(_load("rapidrl.envs.engines.mujoco:MUJOCO_TASKS"))


FAMILIES: list[Family] = [
    Family("classic control", lambda: tuple(CLASSIC_ENVS), _make_numba, ("numba", "torch"),
           device_vectorization="torch", gymnasium=True, builtin=True),
    Family("MinAtar", lambda: MINATAR_ENVS, _make_minatar, ("numba",), gymnasium=True, builtin=True,
           gymnasium_setup=_register_minatar_gymnasium_ids),
    Family("partially observed", lambda: ("CartPoleNoVel-v1", "PendulumNoVel-v1", "MemoryCue-v0"), _make_pomdp,
           ("numba",), gymnasium=True),
    Family("multi-agent (MPE)", lambda: ("MPE/simple_spread-v3",), _make_mpe, ("numba",)),
    Family("Atari (ale-py)", lambda: ("ALE/<Game>-v5", "<Game>NoFrameskip-v4"), _make_atari, ("ale",),
           matches=_lazy("rapidrl.envs.engines.atari:is_atari_id"), gymnasium=True,
           gymnasium_setup=_lazy("rapidrl.envs.engines.atari:_register")),
    Family("MuJoCo", _mujoco_ids, _make_mujoco, ("mujoco",), matches=lambda env_id: env_id in _mujoco_ids(),
           gymnasium=True, gymnasium_setup=_lazy("rapidrl.envs.engines.mujoco:register_novel")),
    Family("goal-conditioned", lambda: ("PointReach-v0", "BitFlipping-v0"), _lazy("rapidrl.envs.goal:make_goal_vec"),
           ("numba",), gymnasium=True, gymnasium_setup=_lazy("rapidrl.envs.goal:register_envs"), builtin=True),
    Family("action masks", lambda: ("InvalidActionDiscrete-v0", "TicTacToe-v3", "MaskedCue-v0"),
           _lazy("rapidrl.envs.masked:make_masked_vec"), ("numba",), builtin=True),
    Family("registered", _registered_ids, _make_numba, ("numba",), builtin=True),
]
"""Every family, in the order ids are matched."""


def family_of(env_id: str) -> Family | None:
    """The family serving ``env_id``, or None (a Gymnasium id, or unknown)."""
    for family in FAMILIES:
        if family.serves(env_id):
            return family
    return None


def list_envs() -> dict[str, tuple[str, ...]]:
    """Family name -> the env ids it serves (``rapidrl list envs``; Atari lists id patterns)."""
    return {f.name: tuple(f.ids()) for f in FAMILIES if f.ids()}


def list_builtin_envs() -> list[str]:
    """Ids of the built-in batched single-agent envs: classic control, MinAtar, then registered envs."""
    return [i for f in FAMILIES if f.builtin for i in f.ids()]


def unknown_env_message(env_id: str, candidates=()) -> str:
    """'unknown env id ...' listing the built-ins, with close matches among built-ins and ``candidates``."""
    known = list_builtin_envs()
    close = difflib.get_close_matches(str(env_id), list(dict.fromkeys([*known, *candidates])), n=3, cutoff=0.6)
    hint = f" Did you mean {', '.join(repr(c) for c in close)}?" if close else ""
    return (f"unknown env id {env_id!r}.{hint} Built-in envs: {', '.join(known)}. An env of your own: "
            "'module:EnvId' imports the module that registers it.")
