"""Environments written as Numba functions on one env's state: ``NumbaEnv`` (the definition) and ``NumbaVecEnv``.

This is how every built-in batched env is written (classic control, MinAtar, MPE, CartPoleNoVel) and how a user
writes a fast env of their own (docs/custom-envs.md). A ``NumbaEnv`` names three ``numba.njit`` functions and the
spaces; the core (``rapidrl.envs.core.kernels``) compiles them into one batched loop with autoreset in both modes,
``final_obs``, episode statistics, action validation, per-env random streams and threads above a size threshold,
and ``NumbaVecEnv`` serves it as a ``gymnasium.vector.VectorEnv``.

The three functions, on env ``i`` of a batch (arrays are the whole batch; touch only env i):

    reset(state, i, params, rng_key, rng_counter)                     # draw env i's initial state
    step(state, i, actions, params, elapsed, rng_key, rng_counter)    # advance env i -> (reward, terminated)
    observe(state, i, obs)                                            # write obs[i] from the state

- ``state``: one array for the whole batch, ``state_dtype``, of ``state_shape`` with ``None`` at the env axis
  (``(4, None)``: float64[4, N], env i is column i; ``(None, 20)``: env i is row i).
- ``actions``: int [N] (Discrete) or float [N, A] (Box), validated before ``step`` runs (``actions[i]`` is in
  range, or finite); the dtype is the caller's (Numba compiles one version per dtype).
- ``params``: float64 [P]; ``params[0]`` is the time limit (``inf`` for none; the core truncates), then the
  env's ``params`` in their order (a tuple default takes consecutive entries).
- ``elapsed``: int32 [N], steps since env i's reset (0 on the first step of an episode).
- ``rng_key``, ``rng_counter``: uint64 [N], env i's counter-based stream: ``rapidrl.kernels.rng.next_uniform(
  rng_key, rng_counter, i)`` draws the next float64 in [0, 1). Streams derive from (seed, i), so results do not
  depend on threads or on how many envs run.
- ``obs``: [N, *observation_space.shape] of the observation space's dtype.

A multi-agent env (``agents > 1``: env i owns rows ``i * agents .. i * agents + agents - 1`` of the outputs and
actions) has ``step(state, i, actions, params, elapsed, rng_key, rng_counter, rewards) -> terminated``, writing its
rows' rewards itself, and ``observe`` writes its rows.

Action masks (docs/masks.md): an env whose valid actions depend on its state (a Discrete action space) also names

    mask(state, i, mask_out)                                          # write mask_out[i] (bool [N, n]) from the state

called wherever ``observe`` is (after each step and reset, and for the final observation of an episode that ends):
``mask_out[i, a]`` True where action a is valid. At least one action must be valid in a state the agent acts in (a
finished episode's final state may have none). The vector env then returns the masks (``info["action_mask"]``,
``action_masks()``), every discrete algorithm acts on the valid actions only, and the fused collectors mask inside
their compiled loop.

Compiled code finds an env's functions by its kernel key (``NumbaEnv.kernel_key``): the functions' qualified
names, the dtypes, and a hash of their modules' source files (plus ``cache_dependencies`` and closure contents),
so an edit recompiles and the compiled kernels cache on disk. Functions whose source cannot be read (defined in
a REPL) compile without the disk cache.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import importlib
import inspect
import pickle
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

import gymnasium as gym
import numpy as np
import torch
from gymnasium.vector import AutoresetMode

from rapidrl.envs.core import kernels
from rapidrl.envs.core.actions import as_numpy_actions, check_actions
from rapidrl.envs.core.arena import H_NEXT_STEP, HEADER_BYTES, ArenaLayout
from rapidrl.envs.core.base import VecEnvBase, check_num_envs, explain_empty_mask
from rapidrl.envs.core.contract import check_functions
from rapidrl.envs.core.debug import bounds_checked_twin, call_checked
from rapidrl.kernels import parallel, rng
from rapidrl.kernels.validation import check_int

_DISCRETE_CHARS = "bBhHiIlLqQ"  # action dtypes the compiled step accepts for a Discrete space
_BOX_CHARS = "fd"


@dataclass(frozen=True, eq=False, kw_only=True)
class NumbaEnv:
    """An environment written as Numba functions on one env's state (see the module docstring).

    Args:
        id: the env's name (``make_vec`` finds it under this id after ``rapidrl.envs.register``).
        observation_space: one env's (one row's) observation space: a ``Box`` of a numeric dtype.
        action_space: ``Discrete(n)`` (start 0) or a 1-D ``Box``.
        state_shape: the batched state's shape, ``None`` marking the env axis.
        state_dtype: the state's dtype (default float64).
        reset, step, observe: the ``numba.njit`` functions.
        mask: optional ``numba.njit`` function ``mask(state, i, mask_out)`` writing env i's valid actions (Discrete
            action spaces; see the module docstring). None: every action is always valid.
        params: name -> default of the env's settable constants (``make_vec(id, n, name=value)``).
        max_episode_steps: the time limit (None: no limit).
        agents: rows per env (multi-agent envs; see the module docstring).
        reset_params: names of ``params`` that ``reset(options={...})`` may set (as Gymnasium's reset bounds).
        check_params: ``check_params(params)`` raises ValueError for values the env rejects.
        render: ``render(state_of_env, params) -> uint8 [H, W, 3]`` (Python), for ``render_mode="rgb_array"``.
        render_fps: frames per second of rendered videos.
        reward_threshold: the return at which the task counts as solved (informative).
        cache_dependencies: other modules (or source paths) the compiled functions call into: their source is
            hashed into the kernel key, so an edit there recompiles too.
        debug: the bounds-checked mode: the functions run compiled with Numba's ``boundscheck``, and an index out
            of range raises an ``IndexError`` naming the function, the array and the index (``rapidrl.envs.core.
            debug``; ``make_vec(..., debug=True)`` and ``rapidrl.envs.check`` use it). Slower; for finding bugs.

    The functions are held to their contracts when the env is defined (``rapidrl.envs.core.contract``): a wrong
    number of arguments or return type is a TypeError naming the function and what it must take or return.
    """

    id: str
    observation_space: gym.spaces.Box
    action_space: gym.Space
    state_shape: tuple
    reset: Callable
    step: Callable
    observe: Callable
    mask: Callable | None = None
    state_dtype: object = np.float64
    params: Mapping[str, float | tuple] = field(default_factory=dict)
    max_episode_steps: int | None = None
    agents: int = 1
    reset_params: tuple[str, ...] = ()
    check_params: Callable | None = None
    render: Callable | None = None
    render_fps: int = 30
    reward_threshold: float | None = None
    cache_dependencies: tuple = ()
    debug: bool = False

    def __post_init__(self):
        if not isinstance(self.id, str) or not self.id:
            raise TypeError(f"id must be a non-empty str, got {self.id!r}")
        obs = self.observation_space
        if not isinstance(obs, gym.spaces.Box) or obs.dtype is None or obs.dtype.kind not in "biuf":
            raise TypeError(f"{self.id}: observation_space must be a numeric Box, got {obs}")
        act = self.action_space
        if isinstance(act, gym.spaces.Discrete):
            if int(act.start) != 0:
                raise ValueError(f"{self.id}: a Discrete action space must start at 0, got start={act.start}")
        elif not (isinstance(act, gym.spaces.Box) and len(act.shape) == 1 and act.dtype.kind == "f"):
            raise TypeError(f"{self.id}: action_space must be Discrete(n) or a 1-D float Box, got {act}")
        if self.mask is not None and not isinstance(act, gym.spaces.Discrete):
            raise TypeError(f"{self.id}: a mask function needs a Discrete action space (it says which of the n "
                            f"actions are valid), got {act}")
        shape = tuple(self.state_shape)
        if shape.count(None) != 1 or not all(d is None or (isinstance(d, (int, np.integer)) and d >= 0)
                                             for d in shape):
            raise ValueError(f"{self.id}: state_shape must hold non-negative ints and one None (the env axis), "
                             f"got {self.state_shape!r}")
        object.__setattr__(self, "state_shape", shape)
        object.__setattr__(self, "state_dtype", np.dtype(self.state_dtype))
        check_int("agents", self.agents, low=1)
        if not isinstance(self.debug, bool):
            raise TypeError(f"{self.id}: debug must be True or False, got {self.debug!r}")
        if self.max_episode_steps is not None:
            check_int("max_episode_steps", self.max_episode_steps, low=1, high=2**31 - 1)
        names = list(self.params)
        unknown = set(self.reset_params) - set(names)
        if unknown:
            raise ValueError(f"{self.id}: reset_params {sorted(unknown)} are not among params {names}")
        if not (getattr(getattr(self.step, "py_func", None), "__module__", None) or "").startswith("rapidrl.envs."):
            check_functions(self)  # rapidrl's own envs: tests/test_envs_contract.py (typing them compiles their
            # helpers, which would write Numba's cache when rapidrl is imported)

    # -- what the tests and collectors read --------------------------------------------------------
    @property
    def action_kind(self) -> str:
        """"discrete" or "box"."""
        return "discrete" if isinstance(self.action_space, gym.spaces.Discrete) else "box"

    @property
    def action_size(self) -> int:
        """The number of discrete actions, or the Box's size."""
        return int(self.action_space.n) if self.action_kind == "discrete" else int(self.action_space.shape[0])

    @property
    def action_low(self):
        """Box bounds (a float when all components share it; None for Discrete)."""
        return None if self.action_kind == "discrete" else _scalar_if_uniform(self.action_space.low)

    @property
    def action_high(self):
        return None if self.action_kind == "discrete" else _scalar_if_uniform(self.action_space.high)

    @property
    def env_axis(self) -> int:
        return self.state_shape.index(None)

    def batch_state_shape(self, num_envs: int) -> tuple[int, ...]:
        return tuple(num_envs if d is None else int(d) for d in self.state_shape)

    # -- params ------------------------------------------------------------------------------------
    def param_slices(self) -> dict[str, slice]:
        """name -> the entries of ``params`` it occupies (``params[0]`` is the time limit)."""
        out, k = {}, 1
        for name, default in self.params.items():
            size = len(default) if isinstance(default, (tuple, list, np.ndarray)) else 1
            out[name] = slice(k, k + size)
            k += size
        return out

    def make_params(self, max_episode_steps: int | None = None, **kwargs) -> np.ndarray:
        """``params`` float64 [P] from the defaults, overridden by ``kwargs`` (names from ``params``)."""
        unknown = set(kwargs) - set(self.params)
        if unknown:
            raise TypeError(f"{self.id} got unexpected keyword argument(s) {sorted(unknown)}; "
                            f"accepted: max_episode_steps, {', '.join(self.params) or '(none)'}")
        steps = self.max_episode_steps if max_episode_steps is None else check_int(
            "max_episode_steps", max_episode_steps, low=1, high=2**31 - 1)
        values = [np.inf if steps is None else float(steps)]
        for name, default in self.params.items():
            v = kwargs.get(name, default)
            parts = list(v) if isinstance(default, (tuple, list, np.ndarray)) else [v]
            if isinstance(default, (tuple, list, np.ndarray)) and len(parts) != len(default):
                raise ValueError(f"{self.id}: {name} must have {len(default)} entries, got {len(parts)}")
            for x in parts:
                if isinstance(x, (bool, np.bool_)):
                    x = float(x)
                if not isinstance(x, (int, float, np.integer, np.floating)) or not np.isfinite(x):
                    raise ValueError(f"{self.id}: {name} must be a finite number, got {v!r}")
                values.append(float(x))
        params = np.array(values, dtype=np.float64)
        if self.check_params is not None:
            self.check_params(params)
        return params

    # -- compiled kernels --------------------------------------------------------------------------
    @functools.cached_property
    def kernel_key(self) -> str:
        """The compile-time name of this env's functions in compiled code (see the module docstring)."""
        fns = (self.reset, self.step, self.observe) + (() if self.mask is None else (self.mask,))
        names = "|".join(f"{f.py_func.__module__}.{f.py_func.__qualname__}" for f in fns)
        layout = (f"{self.state_dtype.str}{len(self.state_shape)}:{np.dtype(self.observation_space.dtype).str}"
                  f"{1 + len(self.observation_space.shape)}:{self.action_kind}:{'multi' if self.agents > 1 else '1'}")
        digest = _source_digest(fns, self.cache_dependencies)
        if digest is None:  # no readable source: a key unique to these function objects, never cached
            digest = "nocache-" + "-".join(str(id(f)) for f in fns)
        key = f"{names}@{layout}@{digest}"
        if self.debug:  # the bounds-checked twins, under a key of their own (their machine code differs)
            fns = tuple(bounds_checked_twin(f) for f in fns)
            key += "@boundscheck"
        kernels.register(key, kernels.EnvFunctions(
            *fns[:3], self.agents > 1, self.state_dtype.type, len(self.state_shape),
            np.dtype(self.observation_space.dtype).type, 1 + len(self.observation_space.shape), self.action_kind,
            fns[3] if len(fns) > 3 else None))
        return key

    @functools.cached_property
    def bounds_checked(self) -> NumbaEnv:
        """This env in the bounds-checked mode (``debug=True``; itself if it is)."""
        return self if self.debug else dataclasses.replace(self, debug=True)

    @functools.cached_property
    def kernels(self) -> kernels.EnvKernels:
        """The compiled entry points (``rapidrl.envs.core.kernels.EnvKernels``), compiled on first call."""
        key = self.kernel_key
        return _compiled(key, "@nocache-" not in key)

    def layout(self, num_envs: int) -> ArenaLayout:
        """The arena of ``num_envs`` copies."""
        return ArenaLayout(num_envs, num_envs * self.agents, self.batch_state_shape(num_envs), self.state_dtype,
                           self.observation_space.shape, self.observation_space.dtype,
                           1 + sum(s.stop - s.start for s in self.param_slices().values()), self.action_size,
                           self.action_size if self.mask is not None else 0)

    def make_vec(self, num_envs: int, **kwargs) -> NumbaVecEnv:
        """``NumbaVecEnv(self, num_envs, **kwargs)``."""
        return NumbaVecEnv(self, num_envs, **kwargs)


def _scalar_if_uniform(x: np.ndarray):
    return float(x.flat[0]) if np.all(x == x.flat[0]) else x.copy()


@functools.cache
def _compiled(key: str, cache: bool) -> kernels.EnvKernels:
    return kernels.compile_kernels(key, cache)


def _source_digest(fns, dependencies) -> str | None:
    """sha256 (16 hex digits) of the source files of ``fns``' modules and of ``dependencies``, and of the
    functions' closure contents (a jitted function in a closure counts by its name and source file); None if a
    source is not a readable file or a closure cannot be pickled."""
    digest = hashlib.sha256()
    paths = set()
    todo, seen = list(fns), set()
    while todo:
        f = todo.pop()
        if id(f) in seen:
            continue
        seen.add(id(f))
        try:
            paths.add(inspect.getsourcefile(f.py_func))
        except TypeError:
            return None
        digest.update(f"{f.py_func.__module__}.{f.py_func.__qualname__}".encode())
        for cell in f.py_func.__closure__ or ():
            value = cell.cell_contents
            if hasattr(value, "py_func"):  # a jitted function: by name and source, not by its (per-process) id
                todo.append(value)
                continue
            try:
                digest.update(pickle.dumps(value))
            except Exception:
                return None
    for dep in dependencies:
        if isinstance(dep, str) and not dep.endswith(".py"):
            dep = importlib.import_module(dep)
        paths.add(dep.__file__ if hasattr(dep, "__file__") else str(dep))
    for path in sorted(str(p) for p in paths):
        if path is None or not Path(path).is_file():
            return None
        digest.update(Path(path).read_bytes())
    return digest.hexdigest()[:16]


class NumbaVecEnv(VecEnvBase):
    """N copies of a ``NumbaEnv`` stepped by one compiled call; a ``gymnasium.vector.VectorEnv``.

    ``step``/``reset`` return views of preallocated arrays (``copy=True`` for copies). Actions may be NumPy arrays
    or CPU torch tensors of any integer (Discrete) or float32/float64 (Box) dtype, used without a copy;
    ``torch.from_numpy(obs)`` shares memory with the env. ``params`` set the env's constants (``NumbaEnv.params``,
    e.g. ``g`` for Pendulum-v1); ``max_episode_steps`` overrides the time limit. ``seed`` seeds the per-env random
    streams now (``None``: fresh entropy); ``reset(seed=...)`` reseeds. ``threads``: step the envs on Numba's
    threads (True), in one thread (False), or threads above ``rapidrl.kernels.parallel.ENV_STEP_PARALLEL_MIN``
    envs (None); results are identical either way. ``debug``: the bounds-checked mode (``NumbaEnv.debug``): an
    index out of range in the env's functions raises an ``IndexError`` naming the function, the array and the index.

    Public accessors: ``arena`` (the uint8 buffer of every per-env array, ``rapidrl.envs.core.arena``), ``arrays``
    (its NumPy views), ``kernel_key`` (the name compiled callers such as the fused rollout collector use) and
    ``state_dict()``/``load_state_dict()`` (the arena, for exact resume).
    """

    _masks_checked_in_step = True  # inside the compiled step loop (first_empty_mask_row)

    def __init__(self, env: NumbaEnv, num_envs: int, *, seed: int | None = None, autoreset_mode="same_step",
                 copy: bool = False, render_mode: str | None = None, max_episode_steps: int | None = None,
                 threads: bool | None = None, debug: bool = False, **params):
        if not isinstance(env, NumbaEnv):
            raise TypeError(f"env must be a rapidrl.envs.NumbaEnv, got {type(env).__name__} (for an id, use "
                            "rapidrl.make_vec)")
        if not isinstance(debug, bool):
            raise TypeError(f"debug must be True or False, got {debug!r}")
        if debug:
            env = env.bounds_checked
        if render_mode not in (None, "rgb_array"):
            raise ValueError(f"render_mode must be None or 'rgb_array', got {render_mode!r}")
        if threads not in (None, True, False):
            raise TypeError(f"threads must be None, True or False, got {threads!r}")
        n = check_num_envs(num_envs)
        values = env.make_params(max_episode_steps, **params)
        super().__init__(env.observation_space, env.action_space, n * env.agents, autoreset_mode=autoreset_mode,
                         copy=copy, render_mode=render_mode, layout=env.layout(n))
        self.definition = env
        self.env_id = env.id
        self.copies = n
        self.metadata["render_fps"] = env.render_fps
        self.max_episode_steps = None if np.isinf(values[0]) else int(values[0])
        a = self.arrays
        self._state, self._params, self._elapsed = a.state, a.params, a.elapsed
        self._rng_key, self._rng_counter, self._needs_reset = a.rng_key, a.rng_counter, a.needs_reset
        self._params[:] = values
        self._all = np.ones(n, dtype=np.bool_)
        self._action_ndim = len(self.action_space.shape)
        discrete = env.action_kind == "discrete"
        self._action_chars = _DISCRETE_CHARS if discrete else _BOX_CHARS
        self._dtype_ok = np.dtype(np.int64 if discrete else np.float32)
        self.threads = n > parallel.ENV_STEP_PARALLEL_MIN if threads is None else threads
        self._kernel = self._not_ready  # the compiled step after the first reset
        self._views = (self._obs, self._rewards, self._terminated, self._truncated, self._info)
        self._seed(seed)

    # -- public accessors --------------------------------------------------------------------------
    @property
    def kernel_key(self) -> str:
        """The compile-time key of this env's functions (``rapidrl.envs.core.kernels``)."""
        return self.definition.kernel_key

    @property
    def agents(self) -> int:
        return self.definition.agents

    @property
    def debug(self) -> bool:
        """Whether this env runs in the bounds-checked mode (``NumbaEnv.debug``)."""
        return self.definition.debug

    def bounds_checked(self) -> NumbaVecEnv:
        """A new env of the same definition, size, autoreset mode, threads and params (not the same state) in the
        bounds-checked mode (``rapidrl.envs.check`` runs it)."""
        twin = NumbaVecEnv(self.definition, self.copies, autoreset_mode=self.autoreset_mode, threads=self.threads,
                           debug=True)
        twin._params[:] = self._params
        twin.max_episode_steps = self.max_episode_steps
        return twin

    def _step_kernel(self):
        d = self.definition
        kernel = d.kernels.step_threads if self.threads else d.kernels.step
        if d.debug:
            return functools.partial(call_checked, d.id, d.kernel_key, kernel)
        return kernel

    def _reset_envs(self, mask: np.ndarray, redraw: bool) -> None:
        """The reset kernel on the envs where ``mask`` (bounds-checked in debug mode)."""
        d = self.definition
        if d.debug:
            call_checked(d.id, d.kernel_key, d.kernels.reset, self.arena, mask, redraw)
        else:
            d.kernels.reset(self.arena, mask, redraw)

    # -- the VectorEnv API -------------------------------------------------------------------------
    def _seed(self, seed: int | None) -> None:
        rng.derive_keys(seed, self.copies, out=self._rng_key)
        self._rng_counter[:] = 0

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        """Reset every env. ``seed`` re-derives the per-env streams (env i's key from (seed, i)).

        ``options`` may set the env's ``reset_params`` (e.g. ``{"low": -0.1, "high": 0.1}`` for CartPole); like
        Gymnasium's vector envs they also apply to later automatic resets.
        """
        self._check_open()
        if options:
            self._apply_options(options)
        if seed is not None:
            self._seed(seed)
        self._reset_envs(self._all, True)
        self._kernel = self._step_kernel()
        return self._reset_result()

    def _apply_options(self, options: dict) -> None:
        d = self.definition
        unknown = set(options) - set(d.reset_params)
        if unknown:
            raise ValueError(f"{d.id} reset options must be among {sorted(d.reset_params)}, got {sorted(unknown)}")
        new = self._params.copy()
        slices = d.param_slices()
        for key, value in options.items():
            try:
                new[slices[key]] = value
            except (TypeError, ValueError) as e:
                raise ValueError(f"reset option {key!r} must be a number, got {value!r}") from e
        if d.check_params is not None:
            d.check_params(new)
        self._params[:] = new

    def step(self, actions):
        """Step all envs; returns (obs, rewards, terminated, truncated, info) views (see ``VecEnvBase``).

        The hot path: one dtype/rank check in Python and one compiled call that checks the shape and values of
        ``actions`` before stepping anything. Before reset/after close ``self._kernel`` raises the matching error.
        """
        a = actions if type(actions) is np.ndarray else as_numpy_actions(actions)
        if a.dtype is not self._dtype_ok or a.ndim != self._action_ndim:
            self._check_dtype(a)
        bad = self._kernel(self.arena, a)
        if bad != -1:
            self._explain_bad_step(a, bad)
        if self.copy:
            return self._step_result()
        return self._views

    def _check_dtype(self, a: np.ndarray) -> None:
        """Accept (and remember) a supported action dtype, else raise the precise error."""
        if a.ndim == self._action_ndim and a.dtype.char in self._action_chars:
            self._dtype_ok = a.dtype
            return
        self._explain_bad_step(a)

    def _not_ready(self, arena, actions) -> int:
        self._check_ready()  # raises: the kernel is swapped in when the env becomes ready
        raise AssertionError("unreachable")

    def _explain_bad_step(self, a: np.ndarray, bad: int = -1) -> None:
        """Raise the precise error for a step that failed the fast checks (or, ``bad <= -3``, stepped into a state
        whose action mask has no valid action: ``ActionMaskError``)."""
        if bad <= -3:
            row = -3 - bad
            agents = self.num_envs // len(self.arrays.elapsed)
            raise explain_empty_mask(row, agents, int(self.arrays.elapsed[row // agents]), "step")
        self._check_open()
        check_actions(a, self.single_action_space, self.num_envs)  # shape, dtype kind, values
        if bad >= 0:
            raise ValueError(f"actions[{bad}] = {a[bad]} is not in the action space {self.single_action_space}")
        raise TypeError(f"actions dtype {a.dtype} is not supported; use an integer dtype for a Discrete space or "
                        "float32/float64 for a Box space")

    # -- exact resume ------------------------------------------------------------------------------
    def state_dict(self) -> dict:
        """The arena (every per-env array: state, random streams, counters, episode sums, last outputs) and whether
        the envs have been reset."""
        return {"arena": torch.from_numpy(self.arena.copy()), "ready": self._ready}

    def load_state_dict(self, state: dict) -> None:
        self._check_open()
        arena = state["arena"]
        arena = arena.numpy() if isinstance(arena, torch.Tensor) else np.asarray(arena)
        self.layout.check(arena, "the stored arena")
        if bool(arena[:HEADER_BYTES].view(np.int64)[H_NEXT_STEP]) != (self.autoreset_mode == AutoresetMode.NEXT_STEP):
            raise ValueError("the stored arena was made in another autoreset mode")
        np.copyto(self.arena, arena)
        self._ready = bool(state["ready"])
        self._kernel = self._step_kernel() if self._ready else self._not_ready

    def close_extras(self, **kwargs) -> None:
        self._kernel = self._not_ready
        super().close_extras(**kwargs)

    # -- state access (alignment tests, scenarios) ---------------------------------------------------
    def get_state(self, i: int | None = None) -> np.ndarray:
        """A copy of the whole state (``NumbaEnv.state_shape``, env axis filled in), or of env ``i``'s."""
        if i is None:
            return self._state.copy()
        i = check_int("i", i, low=0, high=self.copies - 1)
        return np.take(self._state, i, axis=self.definition.env_axis)

    def set_state(self, i: int, values) -> np.ndarray:
        """Set env i's state to ``values`` and start a new episode there; returns its observation rows."""
        self._check_open()
        i = check_int("i", i, low=0, high=self.copies - 1)
        env_view = np.moveaxis(self._state, self.definition.env_axis, 0)
        env_view[i] = np.asarray(values, dtype=self._state.dtype).reshape(env_view.shape[1:])
        mask = np.zeros(self.copies, dtype=np.bool_)
        mask[i] = True
        self._reset_envs(mask, False)
        self._ready = True
        self._kernel = self._step_kernel()
        rows = slice(i * self.agents, (i + 1) * self.agents)
        return self._obs[rows][0] if self.agents == 1 else self._obs[rows]

    def render(self, env_ids=None) -> np.ndarray | None:
        """uint8 [len(env_ids) or N, H, W, 3] frames from the env's ``render`` (``render_mode="rgb_array"``)."""
        self._check_open()
        if self.render_mode is None:
            gym.logger.warn("render() called without render_mode; use render_mode='rgb_array'")
            return None
        if self.definition.render is None:
            raise NotImplementedError(f"{self.env_id} defines no render function")
        ids = range(self.copies) if env_ids is None else [
            check_int("env_ids[k]", i, low=0, high=self.copies - 1) for i in env_ids]
        axis = self.definition.env_axis
        return np.stack([self.definition.render(np.take(self._state, i, axis=axis), self._params) for i in ids])

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.env_id}, num_envs={self.num_envs})"
