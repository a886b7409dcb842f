"""``RayVecEnv``: Gymnasium environments stepped by Ray actors, on this machine or across a cluster.

For environments whose step is expensive (simulators, games) and that need more cores than one machine
has. Each actor owns a contiguous slice of the envs and steps it with the same ``step_env`` as
``SyncVecEnv`` and ``SubprocVecEnv`` (``adapters/gymnasium.py``: auto-reset, final observations), so all three
give identical trajectories for the same seeds and actions. Per step there is one remote call per actor; the actors
run in parallel and their results (NumPy arrays) are copied into this env's arena, where the env core records
flags and episode statistics.

Ray must be initialised by the caller for a cluster (``ray.init(address="auto")``); otherwise the first
remote call starts a local Ray instance. Each actor asks Ray for ``actor_options`` (default one CPU);
actors that cannot start within ``start_timeout`` seconds (e.g. Ray has fewer free CPUs than actors
need, which would otherwise wait forever) raise a ``RuntimeError`` naming the resources.

Failures. An actor that dies (its process killed, its node lost: ``ray.exceptions.RayActorError``) is
replaced: a new actor builds its envs again and resets them, env ``i`` with seed
``s_i + num_envs * restarts`` where ``s_i`` is its seed at the last ``reset`` (``None`` stays ``None``)
and ``restarts`` counts restarts so far. The restart is reported, never silent: a ``RuntimeWarning``,
the counter ``restarts`` and, for that step, ``info["restarted_envs"]`` (bool ``[N]``). The step's
action of those envs is lost and their episodes cut: they come back ``truncated`` with reward 0, their
``final_obs`` (``SAME_STEP``) is the last observation seen before the failure and ``info["episode"]``
holds the statistics up to it, so learners bootstrap as at a time limit. After ``max_restarts``
restarts the next failure raises ``EnvWorkerError`` and closes the env. An exception raised inside an env
is not a failure of the actor: it closes the env and raises ``EnvWorkerError`` naming the env.
A hung actor is not detected (no timeout).
"""

from __future__ import annotations

import os
import warnings

import gymnasium as gym
import numpy as np
from gymnasium.vector import AutoresetMode

from rapidrl.envs.adapters.gymnasium import EnvOutputs, check_spaces, env_name, reset_env, resolve_env_fns, step_env
from rapidrl.envs.adapters.subprocess import ClosedWhenCollected, EnvWorkerError
from rapidrl.envs.core.base import VecEnvBase, parse_autoreset_mode
from rapidrl.envs.core.seeding import env_seeds
from rapidrl.kernels.validation import check_int, check_scalar

try:
    import ray
    from ray.exceptions import RayActorError
except ImportError as e:  # pragma: no cover - depends on the installation
    raise ImportError("RayVecEnv needs Ray: pip install 'rapidrl[ray]'") from e

_OUTPUT_NAMES = ("obs", "final_obs", "rewards", "terminated", "truncated")  # what an actor's step returns


class _EnvWorker:
    """Ray actor: builds envs ``first .. first + len(fns) - 1`` and steps them all in one call."""

    def __init__(self, fns: list, first: int, same_step: bool, default_name: str):
        self.envs: list[gym.Env] = []
        try:
            for k, fn in enumerate(fns):
                env = fn()
                self.envs.append(env)
                check_spaces(env, first + k, self.envs[0] if k else None)
        except BaseException:
            self.close()
            raise
        space, n = self.envs[0].observation_space, len(fns)
        self.out = EnvOutputs(np.zeros((n, *space.shape), space.dtype), np.zeros((n, *space.shape), space.dtype),
                              np.zeros(n, np.float32), np.zeros(n, np.bool_), np.zeros(n, np.bool_),
                              np.zeros(n, np.bool_))
        self.first, self.same_step, self.default_name = first, same_step, default_name

    def describe(self) -> tuple:
        """(observation space, action space, render mode, env name, process id)."""
        env = self.envs[0]
        return env.observation_space, env.action_space, env.render_mode, env_name(env, self.default_name), os.getpid()

    def reset(self, seeds: list, options) -> np.ndarray:
        """Reset every env (env ``k`` with ``seeds[k]``). Returns the observations [k, *obs_shape]."""
        for k, env in enumerate(self.envs):
            reset_env(env, k, self.out, seeds[k], options)
        return self.out.obs

    def step(self, actions: np.ndarray, needs_reset: np.ndarray) -> tuple[np.ndarray, ...]:
        """Step every env with its row of ``actions`` (or reset it where ``needs_reset``, NEXT_STEP); return the
        outputs in ``_OUTPUT_NAMES`` order."""
        out = self.out
        np.copyto(out.needs_reset, needs_reset)
        for k, env in enumerate(self.envs):
            try:
                step_env(env, k, actions[k], out, self.same_step)
            except Exception as e:
                raise RuntimeError(f"env {self.first + k} raised {type(e).__name__}: {e}") from e
        return tuple(getattr(out, name) for name in _OUTPUT_NAMES)

    def close(self) -> None:
        for env in self.envs:
            env.close()


_RemoteEnvWorker = ray.remote(max_restarts=0)(_EnvWorker)


class RayVecEnv(ClosedWhenCollected, VecEnvBase):
    """N Gymnasium environments stepped by ``num_workers`` Ray actors (see the module docstring).

    Args:
        env_id_or_fns: a Gymnasium id (``gymnasium.make(id, **env_kwargs)`` per env) or a list of
            zero-argument env factories (serialised to the actors by Ray).
        num_envs: number of envs (required with an id; ``None`` or ``len(fns)`` with factories).
        num_workers: Ray actors; each owns a contiguous block of envs (at most ``num_envs``).
        seed: seed of the first ``reset()`` called without one (env ``i`` gets ``seed + i``); also seeds
            ``action_space``.
        autoreset_mode: ``SAME_STEP`` (default) or ``NEXT_STEP``, as ``SyncVecEnv``.
        copy: return copies instead of views of the preallocated outputs.
        max_restarts: actor restarts allowed over this env's life before a failure becomes an error.
        actor_options: Ray resources of each actor (``.options(**actor_options)``), default
            ``{"num_cpus": 1}``; e.g. ``{"num_cpus": 2, "resources": {"simulator": 1}}``.
        start_timeout: seconds the actors may take to start and build their envs (also on restart).
        **env_kwargs: forwarded to ``gymnasium.make``.
    """

    def __init__(self, env_id_or_fns, num_envs=None, *, num_workers: int = 2, seed=None,
                 autoreset_mode=AutoresetMode.SAME_STEP, copy: bool = False, max_restarts: int = 3,
                 actor_options: dict | None = None, start_timeout: float = 600.0, **env_kwargs):
        fns, default_name = resolve_env_fns(env_id_or_fns, num_envs, env_kwargs)
        autoreset_mode = parse_autoreset_mode(autoreset_mode)
        n = len(fns)
        self._initial_seed = None if seed is None else check_int("seed", seed, low=0)
        self.max_restarts = check_int("max_restarts", max_restarts, low=0)
        self.num_workers = min(n, check_int("num_workers", num_workers, low=1))
        self.start_timeout = check_scalar("start_timeout", start_timeout, low=0.0, low_open=True)
        self.restarts = 0
        self.actors: list = []
        self.worker_pids: list[int] = []
        self.closed = False  # VecEnvBase sets it too; close() may run before that if start-up fails
        self._fns, self._default_name = fns, default_name
        self._same_step = autoreset_mode == AutoresetMode.SAME_STEP
        self._actor_options = {"num_cpus": 1} if actor_options is None else dict(actor_options)
        bounds = np.linspace(0, n, self.num_workers + 1).astype(np.int64)
        self._bounds = bounds.tolist()  # actor w owns envs bounds[w] .. bounds[w + 1] - 1
        try:
            for w in range(self.num_workers):
                self.actors.append(self._start_actor(w))
            described = self._wait_started([a.describe.remote() for a in self.actors])
        except BaseException:
            self.close()
            raise
        obs_space, act_space, render_mode, self.env_id, _ = described[0]
        for w, (o, a, *_) in enumerate(described[1:], start=1):
            if o != obs_space or a != act_space:
                self.close()
                raise ValueError(f"envs of worker {w} have spaces ({o}, {a}) but env 0 has ({obs_space}, "
                                 f"{act_space}); all envs must share their spaces")
        self.worker_pids = [d[4] for d in described]
        super().__init__(obs_space, act_space, n, autoreset_mode=autoreset_mode, copy=copy, render_mode=render_mode)
        if self._initial_seed is not None:
            self.action_space.seed(self._initial_seed)
            self.single_action_space.seed(self._initial_seed)
        self._restarted = np.zeros(n, np.bool_)
        self._info["restarted_envs"] = self._restarted
        self._actions = np.zeros(self.action_space.shape, dtype=self.single_action_space.dtype)
        self._seeds: list = [None] * n  # per-env seeds of the last reset

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.env_id}, num_envs={self.num_envs}, num_workers={self.num_workers})"

    def _start_actor(self, w: int):
        lo, hi = self._bounds[w], self._bounds[w + 1]
        return _RemoteEnvWorker.options(**self._actor_options).remote(self._fns[lo:hi], lo, self._same_step,
                                                                       self._default_name)

    def _wait_started(self, refs: list) -> list:
        """``ray.get(refs)`` within ``start_timeout``; a clear error if actors cannot be scheduled."""
        try:
            return ray.get(refs, timeout=self.start_timeout)
        except ray.exceptions.GetTimeoutError:
            raise RuntimeError(
                f"{type(self).__name__}: actors did not start within start_timeout={self.start_timeout:g} s; each "
                f"needs {self._actor_options} and Ray has {ray.available_resources()} free of "
                f"{ray.cluster_resources()} (lower actor_options['num_cpus'], close unused envs, or add nodes)"
            ) from None

    # -- public API -------------------------------------------------------------------------------
    def reset(self, *, seed=None, options: dict | None = None):
        """Reset every env: ``seed`` int ``s`` -> env ``i`` seeded ``s + i``; a list gives one per env.

        ``options`` is passed to every env's ``reset``. Returns ``(obs, {})``.
        """
        self._check_open()
        if seed is None:
            seed, self._initial_seed = self._initial_seed, None
        self._seeds = env_seeds(seed, self.num_envs)
        refs = [a.reset.remote(self._seeds[lo:hi], options) for a, lo, hi in self._slices()]
        for w, ref in enumerate(refs):
            lo, hi = self._bounds[w], self._bounds[w + 1]
            try:
                self._obs[lo:hi] = self._get(ref, w)
            except RayActorError as e:
                self._obs[lo:hi] = self._restart(w, e, self._seeds[lo:hi], options)
        self._clear()
        return self._reset_result()

    def step(self, actions):
        """Step every env with ``actions`` ([N] ints for Discrete, [N, *shape] floats for Box).

        One remote call per actor, all in flight at once. ``info["restarted_envs"]`` marks envs whose
        actor died during this step and was restarted (see the module docstring).
        """
        np.copyto(self._actions, self._check_actions(actions), casting="same_kind")
        needs_reset = self.arrays.needs_reset
        refs = [a.step.remote(self._actions[lo:hi], needs_reset[lo:hi]) for a, lo, hi in self._slices()]
        self._restarted[:] = False
        for w, ref in enumerate(refs):
            lo, hi = self._bounds[w], self._bounds[w + 1]
            try:
                results = self._get(ref, w)
            except RayActorError as e:
                self._cut_episodes(w, e)
                continue
            for name, value in zip(_OUTPUT_NAMES, results):
                getattr(self, "_" + name)[lo:hi] = value
        self._record(self._all_rows[~self._restarted])
        return self._step_result()

    def close_extras(self, **kwargs) -> None:
        """Kill every actor (idempotent)."""
        if ray.is_initialized():
            for actor in self.actors:
                ray.kill(actor)
        self.actors = []
        super().close_extras(**kwargs)

    # -- failures ---------------------------------------------------------------------------------
    def _slices(self):
        return [(a, self._bounds[w], self._bounds[w + 1]) for w, a in enumerate(self.actors)]

    def _get(self, ref, w: int):
        """``ray.get(ref)``; an exception raised inside an env closes this env and becomes EnvWorkerError."""
        try:
            return ray.get(ref)
        except RayActorError:
            raise
        except ray.exceptions.RayTaskError as e:
            lo, hi = self._bounds[w], self._bounds[w + 1]
            self.close()
            raise EnvWorkerError(f"an env of worker {w} (envs {lo}..{hi - 1}, {self.env_id}) raised; "
                                 f"{type(self).__name__} is now closed\n{e}", env_index=-1, env_id=self.env_id,
                                 worker_pid=self.worker_pids[w], worker_traceback=str(e)) from e

    def _cut_episodes(self, w: int, error: Exception) -> None:
        """Actor ``w`` died during a step: restart it and report its envs as truncated (module docstring)."""
        lo, hi = self._bounds[w], self._bounds[w + 1]
        seeds = [None if s is None else s + self.num_envs * (self.restarts + 1) for s in self._seeds[lo:hi]]
        rows = slice(lo, hi)
        if self._same_step:
            self._final_obs[rows] = self._obs[rows]
        obs = self._restart(w, error, seeds, None)
        if self._same_step:
            self._obs[rows] = obs  # in NEXT_STEP mode the last observation stays: the next step resets
        self._cut(self._all_rows[rows])
        self._restarted[rows] = True

    def _restart(self, w: int, error: Exception, seeds: list, options) -> np.ndarray:
        """Replace dead actor ``w`` by a new one, reset its envs with ``seeds``; return their observations."""
        lo, hi = self._bounds[w], self._bounds[w + 1]
        while True:
            self.restarts += 1
            if self.restarts > self.max_restarts:
                self.close()
                raise EnvWorkerError(
                    f"worker {w} (envs {lo}..{hi - 1}, {self.env_id}) died and max_restarts={self.max_restarts} "
                    f"restarts are used up; {type(self).__name__} is now closed. Last error: {error}",
                    env_index=-1, env_id=self.env_id, worker_pid=self.worker_pids[w]) from error
            warnings.warn(f"{type(self).__name__}: worker {w} (envs {lo}..{hi - 1}, pid {self.worker_pids[w]}) "
                          f"died ({type(error).__name__}); restarting it, restart {self.restarts} of "
                          f"{self.max_restarts}", RuntimeWarning, stacklevel=4)
            ray.kill(self.actors[w])
            self.actors[w] = self._start_actor(w)
            try:
                *_, self.worker_pids[w] = self._wait_started([self.actors[w].describe.remote()])[0]
                return self._get(self.actors[w].reset.remote(seeds, options), w)
            except RayActorError as e:
                error = e
