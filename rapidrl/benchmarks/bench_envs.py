"""Environment suite: CartPole steps/s at 1 to 4096 envs, memory per env, subprocess vectorization.

Contenders: ``rapidrl`` (``rapidrl.make_vec``), ``rlox`` (``rlox.VecEnv``, Rust), ``gymnasium/sync``
(``SyncVectorEnv`` of Python envs), ``gymnasium/vector`` (Gymnasium's own NumPy-vectorized
CartPole) and, for subprocesses, ``gymnasium/async`` (``AsyncVectorEnv``). Each call is one batch step
with a preallocated random action array (int64 [n], uint32 for rlox); env steps = batch steps * n.
Episodes end and auto-reset inside the timed steps, as in training.
"""

from __future__ import annotations

import tracemalloc
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np

from rapidrl.benchmarks.harness import Case, Context

REPEATS = {"quick": 5, "full": 20}
ENV_ID = "CartPole-v1"
SIZES = (1, 8, 64, 512, 4096)
SUBPROC_ENVS = 8
MEMORY_ENVS = 1024


def _actions(n: int, dtype=np.int64) -> np.ndarray:
    return np.random.default_rng(0).integers(0, 2, n).astype(dtype)  # [n]


def _rapidrl_env(ctx: Context, n: int, **kw):
    make_vec = ctx.rapidrl("make_vec")
    if make_vec is None:
        return None
    env = make_vec(ENV_ID, n, seed=0, **kw)
    env.reset(seed=0)
    return env


def _make_gym_sync(gym, n: int):
    env = gym.vector.SyncVectorEnv([lambda: gym.make(ENV_ID)] * n)
    env.reset(seed=0)
    return env


def _make_gym_vector(gym, n: int):
    env = gym.make_vec(ENV_ID, n, vectorization_mode="vector_entry_point")
    env.reset(seed=0)
    return env


def _make_rlox(rlox, n: int):
    env = rlox.VecEnv(n, seed=0, env_id=ENV_ID)
    env.reset_all(0)
    return env


def _step_case(ctx: Context, n: int) -> Case:
    case = Case(f"cartpole_step/{n}", {}, params={"env": ENV_ID, "num_envs": n}, items_per_call=n,
                item_unit="steps")
    a = _actions(n)

    def add(name: str, env, step: Callable[[], Any]) -> None:
        case.contenders[name] = step
        case.teardown.append(env.close if hasattr(env, "close") else (lambda: None))

    try:
        env = _rapidrl_env(ctx, n)
    except NotImplementedError:
        env = None
    if env is not None:
        add("rapidrl", env, lambda: env.step(a))
    rlox = ctx.peer("rlox")
    if rlox is not None:
        renv, ra = _make_rlox(rlox, n), a.astype(np.uint32)
        add("rlox", renv, lambda: renv.step_all(ra))
    gym = ctx.peer("gymnasium")
    if gym is not None:
        senv = _make_gym_sync(gym, n)
        add("gymnasium/sync", senv, lambda: senv.step(a))
        venv = _make_gym_vector(gym, n)
        add("gymnasium/vector", venv, lambda: venv.step(a))
    return case


def _subproc_case(ctx: Context, n: int) -> Case:
    case = Case(f"subprocess_step/{n}", {}, params={"env": ENV_ID, "num_envs": n, "workers": n},
                items_per_call=n, item_unit="steps")
    a = _actions(n)
    try:
        env = _rapidrl_env(ctx, n, vectorization="subprocess")
    except (NotImplementedError, TypeError, ValueError) as exc:
        case.notes.append(f"rapidrl subprocess vectorization unavailable: {exc}")
        env = None
    if env is not None:
        case.add_env("rapidrl", env, a, reset=False)
    gym = ctx.peer("gymnasium")
    if gym is not None:
        case.add_env("gymnasium/async", gym.vector.AsyncVectorEnv([lambda: gym.make(ENV_ID)] * n), a)
    case.notes.append(f"{n} worker processes of Gymnasium's Python {ENV_ID} on a 2-core machine")
    return case


def cases(ctx: Context) -> Iterator[Case]:
    """Stepping throughput at each size, then subprocess vectorization."""
    for n in SIZES:
        yield _step_case(ctx, n)
    yield _subproc_case(ctx, SUBPROC_ENVS)


# ----------------------------------------------------------------------------------------------------
# memory per env


def per_env_array_bytes(env, n: int) -> int:
    """Bytes of the NumPy arrays held by ``env`` (or its ``unwrapped``) that have a dimension of size n."""
    obj = getattr(env, "unwrapped", env)
    total = 0
    for value in getattr(obj, "__dict__", {}).values():  # Rust/C objects have none
        if isinstance(value, np.ndarray) and n in value.shape:
            total += value.nbytes
    return total


def traced_bytes(make: Callable[[], Any]) -> tuple[int, Any]:
    """Python-heap bytes (tracemalloc: Python objects and NumPy buffers) still held after ``make()``."""
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        obj = make()
        after = tracemalloc.get_traced_memory()[0]
    finally:
        tracemalloc.stop()
    return after - before, obj


def extras(ctx: Context) -> tuple[str, list[dict[str, Any]]]:
    """Memory per env at ``MEMORY_ENVS`` envs: per-env arrays found on the env, and tracemalloc total."""
    n = MEMORY_ENVS
    makers: dict[str, Callable[[], Any]] = {}
    if ctx.rapidrl("make_vec") is not None:
        try:
            _rapidrl_env(ctx, 1).step(_actions(1))  # compile before tracing
            makers["rapidrl"] = lambda: _rapidrl_env(ctx, n)
        except NotImplementedError:
            pass
    gym = ctx.peer("gymnasium")
    if gym is not None:
        makers["gymnasium/sync"] = lambda: _make_gym_sync(gym, n)
        makers["gymnasium/vector"] = lambda: _make_gym_vector(gym, n)
    rlox = ctx.peer("rlox")
    if rlox is not None:
        makers["rlox"] = lambda: _make_rlox(rlox, n)
    rows = []
    for name, make in makers.items():
        traced, env = traced_bytes(make)
        arrays = per_env_array_bytes(env, n)
        rows.append({
            "contender": name,
            "num_envs": n,
            "per-env arrays (B/env)": round(arrays / n, 1) if arrays else "n/a",
            "Python heap (B/env)": round(traced / n, 1),
        })
        if hasattr(env, "close"):
            env.close()
    note = ("tracemalloc sees Python objects and NumPy buffers only; rlox's Rust state is invisible to "
            "it, so its figure is an underestimate")
    return f"Memory per env ({ENV_ID}, {n} envs). {note}", rows
