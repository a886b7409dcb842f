"""Compile the Numba kernels of the common paths ahead of the first run: ``python -m rapidrl.precompile``.

Numba compiles a kernel on its first call and caches the machine code on disk (``__pycache__`` next to the
source, or a user cache directory when site-packages is read-only; ``NUMBA_CACHE_DIR`` overrides both).
Without this step the first ``rapidrl train`` of a fresh install spends most of its time compiling
(measured here: 46 s cold against 15 s warm for ``make train``). ``scripts/setup.sh`` runs it, so the first
``make train`` finds every kernel it needs cached; after a wheel install, run it once yourself.

What it compiles is what the runs call: it runs the same code on tiny sizes (a few PPO iterations on each
built-in env with the fused collector, an evaluation, each env's serial and threaded step), so the compiled
specializations (argument types) are exactly the ones the real runs look up.
"""

from __future__ import annotations

import argparse
import sys
import time


def _ppo(env_id: str) -> None:
    from rapidrl.algos import PPO

    model = PPO(env_id, num_envs=8, num_steps=16, minibatch_size=64, update_epochs=1, seed=0)
    model.learn(total_timesteps=2 * 8 * 16, progress_bar=False)
    model.evaluate(n_episodes=2)


def _env(env_id: str) -> None:
    from rapidrl.envs import BuiltinVecEnv
    from rapidrl.kernels.parallel import ENV_STEP_PARALLEL_MIN

    for n in (8, ENV_STEP_PARALLEL_MIN + 1):  # the serial and the threaded kernel
        env = BuiltinVecEnv(env_id, n, seed=0)
        env.reset(seed=0)
        for _ in range(2):
            env.step(env.action_space.sample())
        env.close()


def _steps(everything: bool) -> list[tuple[str, object]]:
    from rapidrl.envs import list_builtin_envs

    steps = [("PPO CartPole-v1 (the main job)", lambda: _ppo("CartPole-v1"))]
    if everything:
        for env_id in list_builtin_envs():
            steps.append((f"env {env_id}", lambda e=env_id: _env(e)))
            if env_id != "CartPole-v1":
                steps.append((f"PPO {env_id}", lambda e=env_id: _ppo(e)))
    return steps


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m rapidrl.precompile", description=__doc__.splitlines()[0])
    p.add_argument("--all", action="store_true", help="every built-in env, not only the main job's kernels")
    args = p.parse_args(argv)
    t_all = time.perf_counter()
    for name, run in _steps(args.all):
        t0 = time.perf_counter()
        run()
        print(f"precompile: {name}: {time.perf_counter() - t0:.1f} s", file=sys.stderr, flush=True)
    print(f"precompile: done in {time.perf_counter() - t_all:.1f} s (kernels cached for later runs)", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
