"""``SubprocVecEnv``: Gymnasium environments stepped in worker processes, results in shared memory.

Data path. All outputs (observations, rewards, flags, final observations, episode statistics) and the
actions live in one shared-memory block (``multiprocessing.RawArray``) mapped by the parent and by every
worker as NumPy arrays; ``step``/``reset`` return views of it. Per step only a few bytes of command cross
each pipe (a command code and, for a partial ``send``, the env indices); nothing is pickled per step.
Each worker holds several envs (contiguous blocks, ``num_workers`` defaults to
``min(num_envs, os.cpu_count())``) and steps them with the same ``step_env`` as ``SyncVecEnv``, so both
give identical trajectories (see ``adapters/gymnasium.py`` for the semantics and the ``info`` layout;
per-env ``info`` dicts are not gathered). The shared block is the env's arena (``rapidrl.envs.core.arena``): the
workers write the engine's outputs, the parent records flags and episode statistics through the env core.

Processes. Workers start with the ``"forkserver"`` method where the platform has it, else ``"spawn"``;
``"fork"`` is refused: forking a parent whose PyTorch/Numba/OpenMP thread pools already run can copy a
held lock into the child and deadlock it. Env factories are sent once, at start-up, with cloudpickle
(lambdas work); they must be importable in a fresh interpreter (``sys.path`` is inherited). Workers are
daemonic (an env cannot start processes of its own) and ignore SIGINT: the parent owns their lifetime.
``close()`` asks them to exit, then terminates and finally kills them; it is idempotent and also runs from
``__del__`` and at interpreter exit.

Failures. An exception in an env, a worker that dies (``os._exit``, a segfault, the OOM killer) or one
that does not answer within ``timeout`` seconds raises ``EnvWorkerError`` naming the env index, its id,
the worker pid and the worker's traceback text; the vector env is then closed (its state is no longer
consistent), so later calls raise ``ClosedEnvError``.

Async API (EnvPool style). ``send(actions, env_ids)`` starts steps; ``recv()`` waits for the first
``batch_size`` envs that finished and returns ``(obs, rewards, terminated, truncated, info, env_ids)``
gathered into preallocated ``[batch_size, ...]`` arrays. ``step()`` is ``send`` to all + ``recv`` of all.
Call order is checked and broken orders raise ``AsyncCallOrderError``.
"""

from __future__ import annotations

import atexit
import multiprocessing as mp
import os
import pickle
import signal
import time
import traceback
import weakref
from collections import deque
from multiprocessing import forkserver
from multiprocessing.connection import wait as wait_any

import cloudpickle
import gymnasium as gym
import numpy as np
from gymnasium.vector import AutoresetMode

from rapidrl.envs.adapters.gymnasium import EnvOutputs, check_spaces, env_name, reset_env, resolve_env_fns, step_env
from rapidrl.envs.core.actions import check_actions
from rapidrl.envs.core.arena import ArenaLayout
from rapidrl.envs.core.base import VecEnvBase, parse_autoreset_mode
from rapidrl.envs.core.seeding import env_seeds
from rapidrl.kernels.validation import check_int, check_scalar

# Pipe messages: one command byte, then a payload (int32 env indices, or a pickled reset request).
_STEP_ALL, _STEP, _RESET, _CLOSE = 1, 2, 3, 4
_OK, _ERROR = b"\x00", b"\x01"
# Seconds close() waits for workers to exit by themselves, then again after SIGTERM.
_CLOSE_GRACE = 2.0
# Seconds workers may take to start and build their envs (at least; ``timeout`` if larger).
_STARTUP_TIMEOUT = 120.0
# Env states seen by the parent.
_IDLE, _PENDING, _READY = 0, 1, 2
_OUTPUT_NAMES = ("obs", "final_obs", "rewards", "terminated", "truncated", "done", "episode_return",
                 "episode_length")  # what recv() gathers


class EnvWorkerError(RuntimeError):
    """A worker process failed: its env raised, the process died, or it did not answer in time.

    Attributes: ``env_index`` (index in the vector env, -1 if unknown), ``env_id``, ``worker_pid`` and
    ``worker_traceback`` (the worker's traceback text; empty when the process died or hung).
    """

    def __init__(self, message: str, *, env_index: int, env_id: str, worker_pid: int | None,
                 worker_traceback: str = ""):
        super().__init__(message)
        self.env_index = env_index
        self.env_id = env_id
        self.worker_pid = worker_pid
        self.worker_traceback = worker_traceback


class AsyncCallOrderError(RuntimeError):
    """``send``/``recv``/``step``/``reset`` were called in an order the async protocol does not allow."""


class _SharedLayout:
    """Where each named array lives inside one shared byte buffer (64-byte aligned); picklable."""

    def __init__(self, specs: dict[str, tuple[tuple[int, ...], np.dtype]]):
        self.fields: dict[str, tuple[int, tuple[int, ...], str]] = {}
        offset = 0
        for name, (shape, dtype) in specs.items():
            dtype = np.dtype(dtype)
            self.fields[name] = (offset, tuple(shape), dtype.str)
            nbytes = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
            offset += -(-max(nbytes, 1) // 64) * 64
        self.nbytes = offset

    def views(self, raw) -> dict[str, np.ndarray]:
        """NumPy views of every field of ``raw`` (a buffer of ``self.nbytes`` bytes)."""
        buf = np.frombuffer(raw, dtype=np.uint8)
        out = {}
        for name, (offset, shape, dtype) in self.fields.items():
            dt = np.dtype(dtype)
            size = int(np.prod(shape, dtype=np.int64)) * dt.itemsize
            out[name] = buf[offset:offset + size].view(dt).reshape(shape)
        return out


def _worker(conn, raw_arena, arena_layout: ArenaLayout, arena_start: int, raw, layout: _SharedLayout,
            fns_blob: bytes, first: int, worker_index: int, same_step: bool) -> None:
    """Worker process: build envs ``first..first+len(fns)-1``, then serve commands until close/EOF.

    Before touching env ``i`` it writes ``i`` to ``current[worker_index]`` so that the parent can name the
    env if this process dies or hangs; -1 means idle.
    """
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    views = layout.views(raw)
    current, actions = views["current"], views["actions"]
    arena = np.frombuffer(raw_arena, np.uint8, count=arena_layout.nbytes, offset=arena_start)
    a = arena_layout.views(arena)
    out = EnvOutputs(a.obs, a.final_obs, a.rewards, a.terminated, a.truncated, a.needs_reset)
    envs: list[gym.Env] = []
    try:
        try:
            for k, fn in enumerate(cloudpickle.loads(fns_blob)):
                current[worker_index] = first + k
                envs.append(fn())
            current[worker_index] = -1
        except Exception:
            conn.send_bytes(_ERROR + traceback.format_exc().encode())
            return
        conn.send_bytes(_OK)
        all_ids = list(range(first, first + len(envs)))
        while True:
            msg = conn.recv_bytes()
            cmd = msg[0]
            if cmd == _CLOSE:
                return
            try:
                if cmd == _RESET:
                    seeds, options = pickle.loads(msg[1:])
                    for k, i in enumerate(all_ids):
                        current[worker_index] = i
                        reset_env(envs[k], i, out, seeds[k], options)
                else:
                    ids = all_ids if cmd == _STEP_ALL else np.frombuffer(msg, np.int32, offset=1).tolist()
                    for i in ids:
                        current[worker_index] = i
                        step_env(envs[i - first], i, actions[i], out, same_step)
                current[worker_index] = -1
                conn.send_bytes(_OK)
            except Exception:
                conn.send_bytes(_ERROR + traceback.format_exc().encode())
    except (EOFError, BrokenPipeError):
        pass  # the parent is gone: nothing left to serve
    finally:
        for env in envs:
            try:
                env.close()
            except Exception:
                traceback.print_exc()
        conn.close()


def default_start_method() -> str:
    """``"forkserver"`` where available (Linux, macOS), else ``"spawn"``."""
    return "forkserver" if "forkserver" in mp.get_all_start_methods() else "spawn"


def _mp_context(method: str):
    """The multiprocessing context for ``method``.

    A forkserver that is not running yet is also told to preload this module (hence NumPy, Gymnasium
    and cloudpickle): it imports them once and every worker forks with them loaded, instead of each
    worker importing them again (seconds per worker on a busy machine). The preload list keeps its
    existing entries.
    """
    ctx = mp.get_context(method)
    if method == "forkserver":
        preload = list(getattr(forkserver._forkserver, "_preload_modules", ["__main__"]))
        if __name__ not in preload:
            ctx.set_forkserver_preload([*preload, __name__])
    return ctx


_LIVE: weakref.WeakSet = weakref.WeakSet()


@atexit.register
def _close_all_at_exit() -> None:
    for env in list(_LIVE):
        env.close()


class ClosedWhenCollected:
    """A vector env whose workers (processes, Ray actors) must not outlive it: ``close()`` when it is
    garbage-collected (``SubprocVecEnv``, ``RayVecEnv``)."""

    def __del__(self):
        try:
            self.close()
        except Exception:
            pass  # interpreter shutdown: modules (Ray) may already be gone


class SubprocVecEnv(ClosedWhenCollected, VecEnvBase):
    """N Gymnasium environments stepped in worker processes that write into shared memory.

    Args:
        env_id_or_fns: a Gymnasium id (``gymnasium.make(id, **env_kwargs)`` per env) or a list of
            zero-argument env factories (cloudpickled to the workers).
        num_envs: number of envs (required with an id; ``None`` or ``len(fns)`` with factories).
        seed: seed of the first ``reset()`` called without one (env ``i`` gets ``seed + i``); also seeds
            ``action_space``.
        autoreset_mode: ``SAME_STEP`` (default) or ``NEXT_STEP``.
        copy: return copies instead of views of the shared/preallocated outputs.
        num_workers: worker processes; default ``min(num_envs, os.cpu_count())``.
        batch_size: envs returned by each ``recv()``; default ``num_envs``.
        timeout: seconds a worker may take to answer a command before ``EnvWorkerError``.
        start_method: ``"forkserver"`` or ``"spawn"`` (default: ``default_start_method()``).
        **env_kwargs: forwarded to ``gymnasium.make``.

    Async loop (each ``recv`` returns the ``batch_size`` envs that finished first)::

        envs = SubprocVecEnv("Taxi-v4", 8, batch_size=4)
        envs.reset(seed=0)
        envs.send(first_actions)                      # [8] actions, one per env
        for _ in range(steps):
            obs, rewards, terminated, truncated, info, env_ids = envs.recv()   # [4, ...] each
            envs.send(policy(obs), env_ids)           # the same envs step again
        envs.reset()                                  # waits for what is in flight, drops it
    """

    def __init__(self, env_id_or_fns, num_envs=None, *, seed=None, autoreset_mode=AutoresetMode.SAME_STEP,
                 copy: bool = False, num_workers: int | None = None, batch_size: int | None = None,
                 timeout: float = 60.0, start_method: str | None = None, **env_kwargs):
        fns, default_name = resolve_env_fns(env_id_or_fns, num_envs, env_kwargs)
        autoreset_mode = parse_autoreset_mode(autoreset_mode)  # checked before any env exists
        n = len(fns)
        self._initial_seed = None if seed is None else check_int("seed", seed, low=0)
        self.timeout = check_scalar("timeout", timeout, low=0.0, low_open=True)
        self.batch_size = n if batch_size is None else check_int("batch_size", batch_size, low=1, high=n)
        workers = (os.cpu_count() or 1) if num_workers is None else check_int("num_workers", num_workers, low=1)
        self.num_workers = min(n, workers)
        method = default_start_method() if start_method is None else start_method
        if method not in ("forkserver", "spawn"):
            raise ValueError(f"start_method must be 'forkserver' or 'spawn' (fork is unsafe once threads run), "
                             f"got {start_method!r}")
        # One env in this process to read the spaces, as gymnasium.vector.AsyncVectorEnv does.
        probe = fns[0]()
        try:
            check_spaces(probe, 0)
            self.env_id = env_name(probe, default_name)
            obs_space, act_space, render_mode = probe.observation_space, probe.action_space, probe.render_mode
        finally:
            probe.close()
        ctx = _mp_context(method)
        arena_layout = ArenaLayout(n, n, (), np.uint8, obs_space.shape, obs_space.dtype)
        self._raw_arena = ctx.RawArray("B", arena_layout.nbytes + 64)  # the arena, shared with the workers
        super().__init__(obs_space, act_space, n, autoreset_mode=autoreset_mode, copy=copy, render_mode=render_mode,
                         layout=arena_layout, buffer=self._raw_arena)
        if self._initial_seed is not None:
            self.action_space.seed(self._initial_seed)
            self.single_action_space.seed(self._initial_seed)

        layout = _SharedLayout({
            "actions": (self.action_space.shape, self.single_action_space.dtype),
            "current": ((self.num_workers,), np.int32),
        })
        self._raw = ctx.RawArray("B", layout.nbytes)
        shared = layout.views(self._raw)
        self._actions, self._current = shared["actions"], shared["current"]
        arena_start = self.arena.ctypes.data - np.frombuffer(self._raw_arena, np.uint8).ctypes.data

        bounds = np.linspace(0, n, self.num_workers + 1).astype(np.int64)
        self._bounds = bounds.tolist()  # worker w holds envs bounds[w] .. bounds[w + 1] - 1
        self._worker_of = np.repeat(np.arange(self.num_workers), np.diff(bounds))
        self._conns: list = []
        self._procs: list = []
        self.worker_pids: list[int] = []
        self._state = np.zeros(n, dtype=np.int8)
        self._pending: list[deque] = [deque() for _ in range(self.num_workers)]
        self._finished: deque[int] = deque()  # envs whose step finished, in completion order
        self._started = False
        self._alloc_batch()
        _LIVE.add(self)
        same_step = self.autoreset_mode == AutoresetMode.SAME_STEP
        try:
            for w in range(self.num_workers):
                lo, hi = self._bounds[w], self._bounds[w + 1]
                try:
                    blob = cloudpickle.dumps(fns[lo:hi])
                except Exception as e:
                    raise TypeError(f"env factories must be picklable (cloudpickle) for SubprocVecEnv: {e}") from e
                parent_conn, child_conn = ctx.Pipe()
                proc = ctx.Process(target=_worker, name=f"rapidrl-env-worker-{w}", daemon=True,
                                   args=(child_conn, self._raw_arena, arena_layout, arena_start, self._raw, layout,
                                         blob, lo, w, same_step))
                proc.start()
                child_conn.close()
                self._conns.append(parent_conn)
                self._procs.append(proc)
                self.worker_pids.append(proc.pid)
                self._pending[w].append((list(range(lo, hi)), time.monotonic()))
            # start-up handshake: every worker built its envs
            self._wait_all(timeout=max(self.timeout, _STARTUP_TIMEOUT))
            self._started = True
        except BaseException:
            self.close()
            raise

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.env_id}, num_envs={self.num_envs}, num_workers={self.num_workers})"

    # -- set-up helpers ---------------------------------------------------------------------------
    def _alloc_batch(self) -> None:
        """Preallocated ``[batch_size, ...]`` outputs of ``recv`` and their ``info`` dict."""
        b = self.batch_size
        self._batch_ids = np.zeros(b, dtype=np.int64)
        self._b = {name: np.zeros((b, *getattr(self, "_" + name).shape[1:]), getattr(self, "_" + name).dtype)
                   for name in _OUTPUT_NAMES}
        self._batch_info: dict = {"episode": {"r": self._b["episode_return"], "l": self._b["episode_length"]},
                                  "_episode": self._b["done"]}
        if self.autoreset_mode == AutoresetMode.SAME_STEP:
            self._batch_info["final_obs"] = self._b["final_obs"]
            self._batch_info["_final_obs"] = self._b["done"]

    # -- public API -------------------------------------------------------------------------------
    def reset(self, *, seed=None, options: dict | None = None):
        """Reset every env (``seed`` int ``s`` -> env ``i`` seeded ``s + i``; or one seed per env).

        ``options`` is passed to every env's ``reset``. Returns ``(obs, {})``. Steps still in flight
        from ``send`` are waited for and their results dropped: this is how an async loop ends.
        """
        self._check_open()
        self._wait_all()
        self._finished.clear()
        if seed is None:
            seed, self._initial_seed = self._initial_seed, None
        seeds = env_seeds(seed, self.num_envs)
        now = time.monotonic()
        for w in range(self.num_workers):
            lo, hi = self._bounds[w], self._bounds[w + 1]
            self._send_bytes(w, bytes([_RESET]) + pickle.dumps((seeds[lo:hi], options)))
            self._pending[w].append((list(range(lo, hi)), now))
        self._wait_all()
        self._clear()
        return self._reset_result()

    def step(self, actions):
        """Step every env (``send`` to all, then wait for all); returns views of the shared outputs."""
        a = self._check_actions(actions)
        self._check_all_idle("step()")
        np.copyto(self._actions, a, casting="same_kind")
        self._dispatch_all()
        self._wait_all()
        self._record()
        return self._step_result()

    def send(self, actions, env_ids=None) -> None:
        """Start one step of the envs ``env_ids`` (default: all) with ``actions`` ``[len(env_ids), ...]``.

        Every env in ``env_ids`` must be idle: its previous result already returned by ``recv``.
        """
        self._check_ready()
        if env_ids is None:
            a = check_actions(actions, self.single_action_space, self.num_envs)
            self._check_all_idle("send() to all envs")
            np.copyto(self._actions, a, casting="same_kind")
            self._dispatch_all()
            return
        ids = self._check_env_ids(env_ids)
        a = check_actions(actions, self.single_action_space, len(ids))
        busy = ids[self._state[ids] != _IDLE]
        if busy.size:
            raise AsyncCallOrderError(f"envs {busy.tolist()} still have a step in flight; recv() their results "
                                      "before sending to them again")
        self._actions[ids] = a
        self._state[ids] = _PENDING
        now = time.monotonic()
        owners = self._worker_of[ids]
        for w in np.unique(owners).tolist():
            mine = ids[owners == w].astype(np.int32)
            self._send_bytes(w, bytes([_STEP]) + mine.tobytes())
            self._pending[w].append((mine.tolist(), now))

    def recv(self):
        """Wait for the first ``batch_size`` envs whose step finished (in completion order).

        Returns ``(obs, rewards, terminated, truncated, info, env_ids)``, each ``[batch_size, ...]``:
        preallocated arrays overwritten by the next ``recv`` (copies when ``copy=True``).
        """
        self._check_open()
        in_flight = int(np.count_nonzero(self._state))
        if in_flight == 0:
            raise AsyncCallOrderError("recv() called with no step in flight; call send() first")
        if in_flight < self.batch_size:
            raise AsyncCallOrderError(f"recv() returns batch_size={self.batch_size} envs but only {in_flight} "
                                      "are in flight; send() to more envs first")
        self._wait_ready(self.batch_size)
        ids = self._batch_ids
        for j in range(self.batch_size):
            ids[j] = self._finished.popleft()
        self._state[ids] = _IDLE
        b = self._b
        for name in _OUTPUT_NAMES:
            np.take(getattr(self, "_" + name), ids, axis=0, out=b[name])
        if not self.copy:
            return b["obs"], b["rewards"], b["terminated"], b["truncated"], self._batch_info, ids
        info = {k: (v.copy() if isinstance(v, np.ndarray) else {kk: vv.copy() for kk, vv in v.items()})
                for k, v in self._batch_info.items()}
        return b["obs"].copy(), b["rewards"].copy(), b["terminated"].copy(), b["truncated"].copy(), info, ids.copy()

    def close_extras(self, **kwargs) -> None:
        """Ask every worker to exit; terminate, then kill, those still alive after a grace period."""
        _LIVE.discard(self)
        procs, conns = getattr(self, "_procs", []), getattr(self, "_conns", [])
        for conn in conns:
            try:
                conn.send_bytes(bytes([_CLOSE]))
            except OSError:
                pass  # the worker is already gone
        deadline = time.monotonic() + _CLOSE_GRACE
        for proc in procs:
            proc.join(max(0.0, deadline - time.monotonic()))
        for stop in ("terminate", "kill"):
            alive = [p for p in procs if p.exitcode is None]
            for proc in alive:
                getattr(proc, stop)()
            for proc in alive:
                proc.join(_CLOSE_GRACE)
        for conn in conns:
            conn.close()
        super().close_extras(**kwargs)

    # -- internals --------------------------------------------------------------------------------
    def _check_all_idle(self, what: str) -> None:
        busy = np.flatnonzero(self._state)
        if busy.size:
            raise AsyncCallOrderError(f"{what} while envs {busy.tolist()} have steps in flight or unreceived "
                                      "results; recv() them first")

    def _check_env_ids(self, env_ids) -> np.ndarray:
        ids = np.asarray(env_ids)
        if ids.ndim != 1 or ids.dtype.kind not in "iu":
            raise TypeError(f"env_ids must be a 1-D integer array, got dtype {ids.dtype} shape {ids.shape}")
        if ids.size == 0:
            raise ValueError("env_ids must not be empty")
        if ids.min() < 0 or ids.max() >= self.num_envs:
            raise ValueError(f"env_ids must lie in [0, {self.num_envs}), got values in [{ids.min()}, {ids.max()}]")
        if np.unique(ids).size != ids.size:
            raise ValueError(f"env_ids must not repeat an env, got {ids.tolist()}")
        return ids.astype(np.int64, copy=False)

    def _dispatch_all(self) -> None:
        self._state[:] = _PENDING
        now = time.monotonic()
        msg = bytes([_STEP_ALL])
        for w in range(self.num_workers):
            lo, hi = self._bounds[w], self._bounds[w + 1]
            self._send_bytes(w, msg)
            self._pending[w].append((range(lo, hi), now))

    def _send_bytes(self, w: int, msg: bytes) -> None:
        try:
            self._conns[w].send_bytes(msg)
        except OSError:
            self._fail(w, "died")

    def _wait_all(self, timeout: float | None = None) -> None:
        """Collect the answer to every pending command (step, reset, start-up); all envs end idle.

        Workers are polled one after another: they run in parallel, so this waits for the slowest.
        A command unanswered ``timeout`` (default ``self.timeout``) seconds after it was sent fails.
        """
        timeout = self.timeout if timeout is None else timeout
        for w, conn in enumerate(self._conns):
            while self._pending[w]:
                if not conn.poll(max(0.0, self._pending[w][0][1] + timeout - time.monotonic())):
                    self._fail(w, "died" if self._procs[w].exitcode is not None else "hung", timeout=timeout)
                self._take_reply(w)
        self._state[:] = _IDLE

    def _wait_ready(self, need: int) -> None:
        """Collect worker answers, in completion order, until ``need`` envs are ready for ``recv``."""
        pending, conns, procs = self._pending, self._conns, self._procs
        while len(self._finished) < need:
            busy = [w for w in range(self.num_workers) if pending[w]]
            oldest = min(busy, key=lambda w: pending[w][0][1])
            remaining = pending[oldest][0][1] + self.timeout - time.monotonic()
            if remaining <= 0:
                self._fail(oldest, "hung", timeout=self.timeout)
            objs = {conns[w]: w for w in busy}
            objs.update({procs[w].sentinel: w for w in busy})
            for obj in wait_any(list(objs), timeout=remaining):
                w = objs[obj]
                if not pending[w]:
                    continue  # both its pipe and its sentinel fired; already handled
                if obj is not conns[w] and not conns[w].poll():
                    self._fail(w, "died")
                ids = self._take_reply(w)
                self._record(np.asarray(ids, dtype=np.int64))
                self._state[ids] = _READY
                self._finished.extend(ids)

    def _take_reply(self, w: int):
        """Read worker ``w``'s answer to its oldest command; return that command's env ids."""
        try:
            reply = self._conns[w].recv_bytes()
        except (EOFError, OSError):
            self._fail(w, "died")
        if reply[:1] == _ERROR:
            self._fail(w, "raised", reply[1:].decode(errors="replace"))
        return self._pending[w].popleft()[0]

    def _fail(self, w: int, how: str, worker_traceback: str = "", timeout: float = 0.0):
        """Close this vector env and raise ``EnvWorkerError`` for worker ``w``."""
        env_index = int(self._current[w])  # the env the worker was inside, -1 if none
        lo, hi = self._bounds[w], self._bounds[w + 1]
        which = f"env {env_index} ({self.env_id})" if env_index >= 0 else f"envs {lo}..{hi - 1} ({self.env_id})"
        proc = self._procs[w]
        if how == "hung":
            proc.kill()  # do not wait for a hung worker to exit by itself
            what = f"did not answer within timeout={timeout:g} s"
        elif how == "died":
            proc.join(_CLOSE_GRACE)
            what = f"died (exit code {proc.exitcode})"
        else:
            what = "raised an exception"
        self.close()
        message = (f"{which} in worker {w} (pid {proc.pid}) {what}; "
                   f"{type(self).__name__} is now closed")
        if how == "died" and not self._started:
            message += ("; a worker dying at start-up is often a script without the `if __name__ == "
                        "'__main__':` guard that the spawn and forkserver start methods need")
        if worker_traceback:
            message += "\nworker traceback:\n" + worker_traceback
        raise EnvWorkerError(message, env_index=env_index, env_id=self.env_id, worker_pid=proc.pid,
                             worker_traceback=worker_traceback)
