"""Overlapping collection and learning: PPO with ``async_collect`` against the same PPO without it.

``extras`` trains each setting for the same number of env steps, interleaved (sync, async, sync, ...), and
reports SPS (env steps / wall seconds of the learn call), the speedup and the share of wall time the
learner spent waiting for a rollout (``time/frac_collect_wait``). Settings:

- built-in CartPole-v1 with the fused collector (its Numba kernel runs without the GIL);
- a Gymnasium CartPole-v1 whose every step also does NumPy matrix products ("numpy-heavy": NumPy releases the
  GIL inside each product) or a pure-Python loop ("python-heavy": holds the GIL), through the per-step path
  (``vectorization="sync"``), with more update epochs so that collection and update cost about the same.

Run: ``python -m rapidrl.benchmarks.run scale [--quick]`` (``SUITES`` registers this module as "scale").
"""

from __future__ import annotations

import functools
import statistics
import time

import gymnasium as gym
import numpy as np

from rapidrl.benchmarks.bench_train import RLOX_DEFAULTS
from rapidrl.benchmarks.harness import Context

REPEATS = {"quick": 1, "full": 1}
HEAVY_IDS = {"numpy-heavy": "RapidrlNumpyHeavyCartPole-v0", "python-heavy": "RapidrlPythonHeavyCartPole-v0"}


def _make_heavy(kind: str) -> gym.Env:
    return _HeavyStep(gym.make("CartPole-v1").unwrapped, kind)


class _HeavyStep(gym.Wrapper):
    """CartPole whose step also burns CPU: NumPy matrix products (GIL released) or a Python loop (GIL held)."""

    def __init__(self, env, kind: str):
        super().__init__(env)
        self.kind = kind
        self.a = np.random.default_rng(0).normal(size=(96, 96)) / 10.0

    def step(self, action):
        if self.kind == "numpy":
            x = self.a
            for _ in range(4):
                x = np.tanh(x @ self.a)
        else:
            sum(i * i for i in range(3000))
        return self.env.step(action)


def _register() -> None:
    for kind, env_id in HEAVY_IDS.items():
        if env_id not in gym.registry:
            gym.register(env_id, entry_point=functools.partial(_make_heavy, kind.split("-")[0]), max_episode_steps=500)


def cases(ctx: Context):
    return iter(())


def _train(env_id: str, steps: int, seed: int, async_collect: bool, vectorization: str | None, **overrides):
    import rapidrl as rr

    d = RLOX_DEFAULTS
    hyper = dict(num_envs=d["n_envs"], num_steps=d["n_steps"], update_epochs=d["n_epochs"],
                 minibatch_size=d["batch_size"], learning_rate=d["learning_rate"], ent_coef=d["ent_coef"])
    hyper.update(overrides)
    env = rr.make_vec(env_id, hyper["num_envs"], seed=seed, vectorization=vectorization)
    model = rr.PPO(env, seed=seed, async_collect=async_collect, **hyper)
    t0 = time.perf_counter()
    model.learn(steps, progress_bar=False)
    wall = time.perf_counter() - t0
    return steps / wall, model.metrics.get("time/frac_collect_wait", 0.0), model.metrics.get("time/frac_update")


def extras(ctx: Context):
    _register()
    seeds = [0] if ctx.quick else [0, 1, 2]
    settings = [
        ("PPO CartPole-v1, fused collector (8 envs x 128, 4 epochs)", "CartPole-v1", None, {},
         20_000 if ctx.quick else 50_000),
        ("PPO numpy-heavy CartPole, per-step path (8 envs x 128, 16 epochs)", HEAVY_IDS["numpy-heavy"], "sync",
         {"update_epochs": 16}, 4_096 if ctx.quick else 16_384),
        ("PPO python-heavy CartPole, per-step path (8 envs x 128, 16 epochs)", HEAVY_IDS["python-heavy"], "sync",
         {"update_epochs": 16}, 4_096 if ctx.quick else 16_384),
    ]
    _train("CartPole-v1", 2048, 99, True, None)  # warm-up: loads the compiled kernels from Numba's cache
    rows = []
    for title, env_id, vectorization, overrides, steps in settings:
        runs = {False: [], True: []}
        for seed in seeds:  # interleaved
            for mode in (False, True):
                runs[mode].append(_train(env_id, steps, seed, mode, vectorization, **overrides))
        base = statistics.median(r[0] for r in runs[False])
        for mode in (False, True):
            sps = statistics.median(r[0] for r in runs[mode])
            rows.append({"case": f"{title}, {steps} steps", "contender": "async" if mode else "sync",
                         "SPS (median)": f"{sps:,.0f}", "speedup vs sync": f"{sps / base:.2f}x",
                         "wait share": f"{statistics.median(r[1] for r in runs[mode]):.2f}" if mode else "",
                         "update share": f"{statistics.median(r[2] for r in runs[mode]):.2f}"})
    return "Overlapped collection and learning (async_collect), seeds interleaved", rows
