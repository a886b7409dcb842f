"""Compile the Numba kernels of the common paths ahead of the first run: ``python -m rapidrl.precompile``.

Numba compiles a kernel on its first call and caches the machine code on disk (``__pycache__`` next to the
source, or a user cache directory when site-packages is read-only; ``NUMBA_CACHE_DIR`` overrides both).
Without this step the first ``rapidrl train`` of a fresh install spends most of its time compiling
(the main job from a wheel: 41 s cold against 8.4 s warm). ``scripts/setup.sh`` runs it, so the first
``make train`` finds every kernel it needs cached.

A wheel carries them: ``python -m rapidrl.precompile --portable rapidrl/_kernel_cache`` (``make wheel`` runs it
before building) compiles the same workload once per portable x86-64 level (``LEVELS``: Numba told the CPU is that
level, with no features of this machine's), each in a fresh process with an empty cache, and gathers the cache files
by package directory with a manifest. The wheel ships them; when the first model is built after
``pip install``, ``rapidrl.kernels.cache.install_shipped_cache`` installs the best level the CPU runs (same Numba,
Python and CPU family only). Other machines compile on first use, as without it.

What it costs and buys, measured on the 2-core AMD EPYC (Zen 4) machine, load ~1.5, the main job
(``rapidrl train ppo CartPole-v1 --timesteps 100000 --seed 0``) from a wheel in a fresh venv with an empty
``NUMBA_CACHE_DIR``: first run 9.0 s and 8.5 s (two fresh caches) against 8.3-8.5 s warm; without the shipped
kernels 41.1 s against 8.3-8.5 s warm. The wheel grows from 0.6 MB to 5.6 MB (10.9 MiB of cache files for three
levels); ``make wheel`` takes ~100 s more. Warm runs are as fast on the installed x86-64-v4 code as on code compiled for
this CPU (znver4): CartPole stepping 8.3 vs 8.1-8.8 M steps/s at 8 envs, 36.5-37.5 vs 37.4-37.8 at 512, PPO learn
16k steps 0.64-0.66 vs 0.64-0.67 s (three alternating fresh processes each). The alternatives do not reach 1.5x: of
the ~33 s of a cold main job's compilation, the fused collector takes ~17 s and the compiled PPO epoch ~11 s (each
one specialisation already), and compiling in the background cannot hide 33 s behind a 5 s training run.

What it compiles is what the runs call: it runs the same code on tiny sizes (a few PPO iterations on each
built-in env with the fused collector, an evaluation, each env's serial and threaded step), so the compiled
specializations (argument types) are exactly the ones the real runs look up.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path


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


LEVELS = ("x86-64-v4", "x86-64-v3", "x86-64")
"""The x86-64 levels a portable cache is built for, best first (AVX-512; AVX2 and FMA; the x86-64 baseline)."""


def build_portable_cache(out: Path, levels=LEVELS, everything: bool = False, command: list[str] | None = None
                         ) -> dict:
    """Compile the precompile workload for each of ``levels`` in a fresh process (its own empty Numba cache,
    ``NUMBA_CPU_NAME`` the level, ``NUMBA_CPU_FEATURES`` empty) and gather the cache files into
    ``out/<level>/<package directory>/`` with ``out/manifest.json`` (what ``install_shipped_cache`` reads).
    ``out`` is replaced. ``command``: another workload (a Python command line; tests). Returns the manifest."""
    import hashlib
    import json
    import os
    import shutil
    import subprocess
    import tempfile

    import numba

    from rapidrl._unsafe.numba_cache import X86_64_LEVELS, cache_subdir_name, host_magic_tuple
    from rapidrl.kernels.cache import PACKAGE, python_tag

    unknown = [lv for lv in levels if lv not in X86_64_LEVELS]
    if unknown or not levels:
        raise ValueError(f"levels must be among {list(X86_64_LEVELS)}, got {list(levels)}")
    directories = {}  # Numba's cache subdirectory name -> (package directory, one of its source files)
    for py in sorted(PACKAGE.rglob("*.py")):
        directories.setdefault(cache_subdir_name(py), (py.parent.relative_to(PACKAGE).as_posix(), py.name))
    out = Path(out)
    shutil.rmtree(out, ignore_errors=True)
    files: dict = {}
    digest = hashlib.sha256()
    with tempfile.TemporaryDirectory(prefix="rapidrl-portable-") as tmp:
        for level in levels:
            cache = Path(tmp) / level
            env = {**os.environ, "NUMBA_CACHE_DIR": str(cache), "NUMBA_CPU_NAME": level, "NUMBA_CPU_FEATURES": "",
                   "RAPIDRL_NO_SHIPPED_CACHE": "1", "PYTHONPATH": os.pathsep.join(
                       [str(PACKAGE.parent), os.environ.get("PYTHONPATH", "")])}
            t0 = time.perf_counter()
            workload = command or [sys.executable, "-m", "rapidrl.precompile", *(["--all"] if everything else [])]
            subprocess.run(workload, env=env, check=True)
            print(f"precompile --portable: {level}: {time.perf_counter() - t0:.1f} s", file=sys.stderr, flush=True)
            files[level] = {}
            for sub in sorted(p for p in cache.iterdir() if p.is_dir()):
                if sub.name not in directories:  # a source outside rapidrl (none today): not shipped
                    continue
                directory, source = directories[sub.name]
                names = sorted(f.name for f in sub.iterdir() if f.suffix in (".nbi", ".nbc", ".sha256"))
                (out / level / directory).mkdir(parents=True, exist_ok=True)
                for name in names:
                    shutil.copyfile(sub / name, out / level / directory / name)
                    digest.update(f"{level}/{directory}/{name}".encode())
                    digest.update((sub / name).read_bytes())
                files[level][directory] = {"source": source, "files": names}
    manifest = {"format": 1, "numba": numba.__version__, "python": python_tag(), "triple": host_magic_tuple()[0],
                "levels": list(levels), "build": digest.hexdigest()[:16], "files": files}
    (out / "manifest.json").write_text(json.dumps(manifest, indent=1))
    return manifest


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m rapidrl.precompile", description=__doc__.splitlines()[0])
    p.add_argument("--all", action="store_true", help="every built-in env, not only the main job's kernels")
    p.add_argument("--portable", metavar="DIR", help="build the cache a wheel ships into DIR (rapidrl/_kernel_cache), "
                   f"for the x86-64 levels {', '.join(LEVELS)}")
    args = p.parse_args(argv)
    if args.portable:
        t0 = time.perf_counter()
        manifest = build_portable_cache(Path(args.portable), everything=args.all)
        size = sum(f.stat().st_size for f in Path(args.portable).rglob("*") if f.is_file())
        print(f"precompile --portable: {len(manifest['levels'])} levels, {size / 2**20:.1f} MiB in {args.portable} "
              f"({time.perf_counter() - t0:.1f} s)", file=sys.stderr)
        return 0
    t_all = time.perf_counter()
    for name, run in _steps(args.all):
        t0 = time.perf_counter()
        run()
        print(f"precompile: {name}: {time.perf_counter() - t0:.1f} s", file=sys.stderr, flush=True)
    print(f"precompile: done in {time.perf_counter() - t_all:.1f} s (kernels cached for later runs)", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
