"""Action masks: rapidrl's PPO against sb3-contrib's MaskablePPO on sb3-contrib's own masked identity task.

The task is sb3-contrib's ``test_identity`` (``tests/test_invalid_actions.py``): ``InvalidActionEnvDiscrete(dim=70,
n_invalid_actions=55)`` (a one-hot target among 70 actions, 55 others invalid at every step, 100-step episodes),
``MaskablePPO("MlpPolicy", env, gamma=0.4, seed=...)`` at its defaults otherwise (one env, 2,048-step rollouts,
minibatches of 64, 10 epochs, learning rate 3e-4 constant, 64x64 tanh MLPs), passing at a mean return >= 90 over
20 deterministic episodes (a random valid action scores ~6.7; unmasked PPO ~30 at this budget, its docstring says).
rapidrl trains PPO with the same settings (``num_envs=1, num_steps=2048, minibatch_size=64, update_epochs=10,
anneal_lr=False, clip_vloss=False``: SB3's constant learning rate and unclipped value loss) on its built-in twin of
the task, ``InvalidActionDiscrete-v0`` (``rapidrl.envs.masked``), and evaluates 20 deterministic episodes the same
way (masked greedy actions).

Runs, each library in its own fresh process (``rapidrl.benchmarks.isolated``) at 1 torch thread and at all cores,
contenders and seeds interleaved:

- ``dim 70``: 2,048 steps (the budget the issue names: one rollout and one update) and 4,096 steps (what sb3-contrib's
  test's ``learn(3000)`` runs: two 2,048-step rollouts): pass rate (eval >= 90) and SPS;
- ``dim 1024``: the same task at 1,024 actions with 1,009 invalid (15 valid, as 70 / 55), at ``LARGE_STEPS`` (8,192:
  four rollouts; at MaskablePPO's settings neither library reaches 90 there, the evaluations compare how far each
  got, and the SPS how fast; rapidrl's test reaches ~40 at this budget with larger steps,
  ``tests/test_masks_onpolicy.py``).

A run's warm-up (one 2,048-step rollout and update: compilation, first allocations) is timed apart; SPS = training
steps / their wall time. The peer runs in its own interpreter, ``RAPIDRL_SB3_PYTHON`` (e.g. a venv with ``pip install
torch==2.13.0 sb3-contrib numba``); rapidrl's checkout is put on its path.

    python -m rapidrl.benchmarks.bench_masks [--quick]          (rapidrl bench masks)
"""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Iterator

import numpy as np

from rapidrl.benchmarks.peers import sb3_python, source_tree

EVAL_EPISODES = 20
PASS = 90.0
ROLLOUT = 2_048
LARGE_STEPS = 8_192
TASKS = {"dim 70": dict(dim=70, n_invalid_actions=55), "dim 1024": dict(dim=1024, n_invalid_actions=1009)}


def cases(ctx) -> Iterator:
    return iter(())


def _rapidrl(task: dict, steps: int, seed: int):
    import torch

    import rapidrl as rr

    model = rr.PPO("InvalidActionDiscrete-v0", num_envs=1, num_steps=ROLLOUT, minibatch_size=64, update_epochs=10,
                   learning_rate=3e-4, anneal_lr=False, gamma=0.4, gae_lambda=0.95, clip_coef=0.2, clip_vloss=False,
                   ent_coef=0.0, vf_coef=0.5, max_grad_norm=0.5, hidden=(64, 64), seed=seed,
                   torch_threads=torch.get_num_threads(), env_kwargs=task)
    t0 = time.perf_counter()
    model.learn(steps, progress_bar=False)
    wall = time.perf_counter() - t0
    return wall, lambda: model.evaluate(EVAL_EPISODES)[0]


def _sb3_contrib(task: dict, steps: int, seed: int):
    from sb3_contrib import MaskablePPO
    from sb3_contrib.common.envs import InvalidActionEnvDiscrete
    from sb3_contrib.common.maskable.evaluation import evaluate_policy

    env = InvalidActionEnvDiscrete(**task)
    model = MaskablePPO("MlpPolicy", env, gamma=0.4, seed=seed, device="cpu", verbose=0)
    t0 = time.perf_counter()
    model.learn(steps)
    wall = time.perf_counter() - t0
    return wall, lambda: float(evaluate_policy(model, env, n_eval_episodes=EVAL_EPISODES, warn=False)[0])


def job_identity(lib: str, task: str, steps: int, seed: int) -> dict:
    """One contender's run in its own process: a one-rollout warm-up (seed 99, timed apart), then ``steps`` training
    steps from scratch with ``seed`` and the evaluation."""
    run = {"rapidrl": _rapidrl, "sb3_contrib": _sb3_contrib}[lib]
    t0 = time.perf_counter()
    run(TASKS[task], ROLLOUT, 99)
    warmup = time.perf_counter() - t0
    wall, evaluate = run(TASKS[task], steps, seed)
    score = evaluate()
    return {"sps": steps / wall, "wall_s": wall, "warmup_s": warmup, "eval": score, "passed": score >= PASS}


def _sb3_available() -> str | None:
    probe = subprocess.run([sb3_python(), "-c", "import sb3_contrib"], capture_output=True)
    return None if probe.returncode == 0 else f"{sb3_python()} lacks sb3-contrib (set RAPIDRL_SB3_PYTHON)"


def _run(lib: str, kwargs: dict, threads: int) -> dict:
    from rapidrl.benchmarks.isolated import run_isolated

    python = None if lib == "rapidrl" else sb3_python()
    return run_isolated(f"{__name__}:job_identity", {"lib": lib, **kwargs}, torch_threads=threads, python=python,
                        checkout=source_tree(python), timeout=7200)


def extras(ctx) -> tuple[str, list[dict]]:
    """Pass rate, evaluations and SPS per library and budget, rapidrl's best thread count against the peer's."""
    from rapidrl.benchmarks.isolated import best_by_threads, interleaved, thread_counts

    missing = _sb3_available()
    libs = ["rapidrl"] + ([] if missing else ["sb3_contrib"])
    seeds = [0, 1] if ctx.quick else [0, 1, 2]
    runs = [("dim 70", ROLLOUT, seeds), ("dim 70", 2 * ROLLOUT, seeds), ("dim 1024", LARGE_STEPS, seeds[:2])]
    if ctx.quick:
        runs = runs[:1]
    rows = []
    for task, steps, run_seeds in runs:
        kw = dict(task=task, steps=steps)
        jobs = {lib: (lambda seed, t, lib=lib, kw=kw: _run(lib, {**kw, "seed": seed}, t)) for lib in libs}
        results = interleaved(jobs, run_seeds, thread_counts())
        _, base = best_by_threads(results["rapidrl"])
        for lib, by_threads in results.items():
            best_t, best = best_by_threads(by_threads)
            for t, rs in sorted(by_threads.items()):
                rows.append({"run": f"{task} ({TASKS[task]['n_invalid_actions']} invalid), {steps:,} steps",
                             "library": lib, "torch threads": f"{t}{' (best)' if t == best_t else ''}",
                             f"passed (eval >= {PASS:g})": f"{sum(r['passed'] for r in rs)}/{len(rs)}",
                             "eval per seed": " / ".join(f"{r['eval']:.0f}" for r in rs),
                             "SPS (median)": round(float(np.median([r["sps"] for r in rs])), 1),
                             "warm-up s": round(float(np.median([r["warmup_s"] for r in rs])), 1),
                             "rapidrl speed-up": round(base / best, 2) if t == best_t and lib != "rapidrl" else ""})
    if missing:
        rows.append({"run": "sb3-contrib", "library": "skipped", "torch threads": "", "note": missing})
    return ("Action masks: PPO vs sb3-contrib's MaskablePPO on its masked identity task (each library in its own "
            f"process; seeds {seeds}, {seeds[:2]} at 1,024 actions)"), rows


def main(argv: list[str] | None = None) -> int:
    """``python -m rapidrl.benchmarks.bench_masks [options]``: ``rapidrl bench masks [options]``."""
    from rapidrl.benchmarks.run import SUITES
    from rapidrl.benchmarks.run import main as run_main

    SUITES.setdefault("masks", __name__)
    return run_main(["masks", *(sys.argv[1:] if argv is None else argv)])


if __name__ == "__main__":
    raise SystemExit(main())
