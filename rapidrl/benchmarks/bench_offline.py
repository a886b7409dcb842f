"""Offline RL against d3rlpy: gradient steps per second of BC, TD3+BC, IQL and CQL, and returns at a fixed budget.

    rapidrl bench offline [--quick]                      # gradient steps/s, each library in its own process
    python -m rapidrl.benchmarks.bench_offline returns iql --steps 20000 --seeds 0,1,2 --eval-every 2000

Both libraries train on the same arrays (the dataset ``rapidrl/hopper/medium-replay-v0`` when it is built, else 20,000
steps of uniform-random actions on Hopper-v5 written for the run), with the same settings: rapidrl's preset
(``rapidrl/configs/<algo>_hopper.toml``, CORL's) translated to d3rlpy's config (``peer_d3rlpy._config``: network
sizes, batch, learning rates, the losses' constants, observation standardisation, D4RL reward scaling). d3rlpy
2.8 runs in its own venv (it pins gymnasium 1.0), named by ``$RAPIDRL_D3RLPY_PYTHON`` (unset: d3rlpy is skipped), and
imports the jobs from ``$RAPIDRL_SOURCE_TREE`` (``rapidrl.benchmarks.peers``); for example
``python3 -m venv ../peers/d3rlpy && ../peers/d3rlpy/bin/pip install torch==2.13.0 'd3rlpy>=2.8,<2.9' mujoco imageio``.
Every run is a fresh process (``rapidrl.benchmarks.isolated``) at 1 torch thread
and at all cores; each library's best thread count is compared. A first ``warm-up`` fit (model construction, first
allocations) is timed apart; sampling is included in both libraries' time (d3rlpy's ``fit``, rapidrl's ``learn``).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib
from collections.abc import Iterator
from pathlib import Path

import numpy as np

from rapidrl.benchmarks.harness import Case, Context
from rapidrl.benchmarks.peers import d3rlpy_python, source_tree

ALGOS = ("bc", "td3_bc", "iql", "cql")
DATASET = "rapidrl/hopper/medium-replay-v0"
ENV = "Hopper-v5"
STEPS = {"quick": {"cql": 20, "other": 100}, "full": {"cql": 150, "other": 1500}}
WARMUP = {"cql": 5, "other": 50}
REPEATS = {"quick": 1, "full": 1}


def preset_settings(algo: str) -> dict:
    """The learning settings of rapidrl's preset ``<algo>_hopper.toml`` over the algorithm's defaults (JSON-able)."""
    import dataclasses

    from rapidrl.algos.registry import get_algorithm
    from rapidrl.runs.config import PRESETS_DIR, read_toml

    defaults = dataclasses.asdict(get_algorithm(algo).config_class())
    preset = read_toml(PRESETS_DIR / f"{algo}_hopper.toml").get("algo", {})
    out = {**defaults, **preset}
    return {k: (list(v) if isinstance(v, tuple) else v) for k, v in out.items()
            if isinstance(v, (int, float, str, bool, list, tuple)) or v is None}


def export_arrays(source, path: Path) -> Path:
    """The dataset's transitions in D4RL's layout (observations, actions, rewards, terminals, timeouts: episodes
    contiguous, an episode's end a terminal or a timeout) in ``path`` (.npz): what d3rlpy's MDPDataset reads."""
    from rapidrl.buffers.dataset import iter_episodes

    parts: dict[str, list] = {k: [] for k in ("observations", "actions", "rewards", "terminals", "timeouts")}
    for e in iter_episodes(source):
        parts["observations"].append(e.observations[:-1])
        parts["actions"].append(e.actions)
        parts["rewards"].append(e.rewards)
        parts["terminals"].append(e.terminations)
        timeouts = e.truncations.copy()
        timeouts[-1] |= not e.terminations[-1]
        parts["timeouts"].append(timeouts)
    arrays = {k: np.concatenate(v).astype(np.float32) for k, v in parts.items()}
    np.savez(path, **arrays)
    return path


def bench_dataset(workdir: Path) -> tuple[str, str]:
    """(dataset source for rapidrl, .npz for d3rlpy): ``DATASET`` when built, else 20,000 random steps on Hopper-v5."""
    from rapidrl.buffers.dataset import DatasetError, collect_episodes, read_header, write_dataset
    from rapidrl.envs import make_vec

    try:
        source = str(read_header(DATASET).path)
    except DatasetError:
        env = make_vec(ENV, 8, seed=0)
        space = env.single_action_space
        rng = np.random.default_rng(0)
        act = lambda o: rng.uniform(space.low, space.high, (len(o), *space.shape)).astype(np.float32)  # noqa: E731
        source = str(write_dataset("bench/hopper/random-v0", collect_episodes(env, act, 20_000),
                                   env.single_observation_space, space, env_id=ENV, root=workdir / "datasets"))
    return source, str(export_arrays(source, workdir / "arrays.npz"))


def job_rapidrl(algo: str, data: str, steps: int, seed: int, warmup: int = 0, eval_every: int = 0,
                eval_episodes: int = 10, settings: dict | None = None, precision: str = "fp32", **_ignored) -> dict:
    """rapidrl's ``algo`` with ``settings`` (default: its preset's) for ``steps`` gradient steps on dataset ``data`` (a
    path), timed as ``peer_d3rlpy.job_d3rlpy`` times d3rlpy (warm-up apart, evaluations not counted). The torch thread
    count is the process's (``isolated.run_isolated`` sets it). precision: "fp32" (d3rlpy's arithmetic) or "bf16"."""
    from rapidrl.algos.registry import get_algorithm
    from rapidrl.train.callbacks import EvalCallback

    cls = get_algorithm(algo)
    config = cls.config_class()
    hp = {k: v for k, v in (settings or preset_settings(algo)).items()
          if hasattr(config, k) and k not in ("dataset", "torch_threads", "seed")}
    hp["precision"] = precision
    warmup_s = 0.0
    if warmup:
        t0 = time.perf_counter()
        cls(dataset=data, seed=99, torch_threads=None, **hp).learn(warmup, progress_bar=False)
        warmup_s = time.perf_counter() - t0
    model = cls(dataset=data, seed=seed, torch_threads=None, **hp)

    class TimedEval(EvalCallback):
        spent = 0.0

        def on_update_end(self, algo_) -> bool:
            t0 = time.perf_counter()
            out = super().on_update_end(algo_)
            TimedEval.spent += time.perf_counter() - t0
            return out

    callback = TimedEval(eval_freq=eval_every, n_episodes=eval_episodes) if eval_every else None
    t0 = time.perf_counter()
    model.learn(steps, callback=callback, progress_bar=False)
    wall = time.perf_counter() - t0 - TimedEval.spent
    curve = [(int(s), float(m)) for s, m, _, _ in (callback.history if callback else [])]
    return {"sps": steps / wall, "wall_s": wall, "warmup_s": warmup_s, "curve": curve}


def _jobs(ctx: Context | None, algo: str, source: str, arrays: str, steps: int, warmup: int,
          overrides: dict | None = None, **extra) -> dict:
    """Both libraries' job for ``algo``: (seed, torch threads) -> result. overrides: settings over the preset's, for
    both (e.g. IQL's Gaussian actor, the one d3rlpy has)."""
    from rapidrl.benchmarks.harness import rapidrl_precision
    from rapidrl.benchmarks.isolated import run_isolated

    both = {**preset_settings(algo), **(overrides or {}), "schedule_steps": warmup + steps}

    def rapidrl_job(precision: str):  # the module by name: __name__ is "__main__" under python -m
        return lambda seed, t: run_isolated("rapidrl.benchmarks.bench_offline:job_rapidrl", {
            "algo": algo, "data": source, "steps": steps, "seed": seed, "warmup": warmup, "settings": both,
            "precision": precision, **extra}, torch_threads=t)

    jobs = {lib: rapidrl_job(rapidrl_precision(lib))
            for lib in (ctx.rapidrl_contenders() if ctx is not None else ["rapidrl"])}
    python = d3rlpy_python()
    if python is None or not python.is_file():
        if ctx is not None:
            ctx.skipped["d3rlpy"] = ("RAPIDRL_D3RLPY_PYTHON is not set" if python is None
                                     else f"no interpreter at {python} (RAPIDRL_D3RLPY_PYTHON)")
        return jobs
    repo = source_tree(python)
    jobs["d3rlpy"] = lambda seed, t: run_isolated("rapidrl.benchmarks.peer_d3rlpy:job_d3rlpy", {
        "algo": algo, "data": arrays, "settings": both, "steps": steps, "seed": seed, "warmup": warmup,
        **extra}, torch_threads=t, python=str(python), checkout=repo)
    return jobs


def cases(ctx: Context) -> Iterator[Case]:
    return iter(())  # every contender runs in its own process: extras()


def extras(ctx: Context) -> tuple[str, list[dict]]:
    """Gradient steps per second of each algorithm, each library at 1 torch thread and at all cores."""
    from rapidrl.benchmarks.isolated import best_by_threads, interleaved, thread_counts

    mode = "quick" if ctx.quick else "full"
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        source, arrays = bench_dataset(Path(tmp))
        for algo in ALGOS:
            kind = "cql" if algo == "cql" else "other"
            steps, warmup = STEPS[mode][kind], WARMUP[kind]
            results = interleaved(_jobs(ctx, algo, source, arrays, steps, warmup), [0], thread_counts())
            bases = {lib: best_by_threads(r)[1] for lib, r in results.items() if lib.startswith("rapidrl")}
            for lib, by_threads in results.items():
                best_t, best = best_by_threads(by_threads)
                speedup = ", ".join(f"{name}: {base / best:.2f}" for name, base in bases.items())
                for t, (r,) in sorted(by_threads.items()):
                    rows.append({"algorithm": algo, "library": lib + (f" {r['version']}" if "version" in r else ""),
                                 "torch threads": f"{t}{' (best)' if t == best_t else ''}",
                                 "gradient steps/s": round(r["sps"], 1), "steps timed": steps,
                                 "warm-up s": round(r["warmup_s"], 1),
                                 "rapidrl speedup (best threads)": speedup if t == best_t and lib == "d3rlpy" else ""})
    title = (f"Offline RL gradient steps per second on {Path(source).parent.name} (batch 256, each library's preset "
             "settings, in its own process; rapidrl in float32 as d3rlpy, rapidrl/bf16 with bfloat16 autocast)")
    return title, rows


# -- returns at a fixed budget ------------------------------------------------------------------------------------
def returns_main(argv: list[str]) -> int:
    """``returns ALGO``: both libraries' learning curves (evaluation every --eval-every steps) over seeds, written as
    JSON to --out; prints the final means and their spread."""
    p = argparse.ArgumentParser(prog="python -m rapidrl.benchmarks.bench_offline returns")
    p.add_argument("algo", choices=ALGOS)
    p.add_argument("--steps", type=int, default=20_000)
    p.add_argument("--seeds", default="0,1,2")
    p.add_argument("--eval-every", type=int, default=2_000)
    p.add_argument("--eval-episodes", type=int, default=10)
    p.add_argument("--threads", type=int, default=1, help="torch threads of every run (default 1)")
    p.add_argument("--libs", default="rapidrl,d3rlpy", help="rapidrl (float32), rapidrl/bf16, d3rlpy")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                   help="a setting over the preset's for both libraries, e.g. deterministic_actor=false (TOML values)")
    p.add_argument("--out", default="bench_results/offline-returns")
    args = p.parse_args(argv)
    seeds = [int(s) for s in args.seeds.split(",")]
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    source, arrays = bench_dataset(out)
    extra = {"eval_every": args.eval_every, "eval_episodes": args.eval_episodes, "env_id": ENV}
    overrides = {}
    for assignment in args.set:
        key, value = assignment.split("=", 1)
        overrides[key] = tomllib.loads(f"v = {value}")["v"]
    ctx = Context(precisions=tuple(lib.split("/", 1)[1] for lib in args.libs.split(",") if lib.startswith("rapidrl/")))
    jobs = _jobs(ctx, args.algo, source, arrays, args.steps, 0, overrides, **extra)
    results: dict[str, list[dict]] = {}
    for seed in seeds:
        for lib in [x for x in args.libs.split(",") if x in jobs]:
            r = jobs[lib](seed, args.threads)
            results.setdefault(lib, []).append({"seed": seed, **r})
            print(f"{args.algo} {lib} seed {seed}: final {r['curve'][-1][1]:.1f}, {r['sps']:.1f} steps/s, "
                  f"{r['wall_s']:.0f} s", flush=True)
    path = out / f"{args.algo}.json"
    path.write_text(json.dumps({"algo": args.algo, "dataset": source, "steps": args.steps, "threads": args.threads,
                                "overrides": overrides, "results": results}, indent=1))
    for lib, runs in results.items():
        finals = [r["curve"][-1][1] for r in runs]
        spread = statistics.stdev(finals) if len(finals) > 1 else 0.0
        print(f"{args.algo} {lib}: final return {statistics.mean(finals):.1f} ± {spread:.1f} over seeds {seeds}")
    print(f"wrote {path}")
    return 0


def main(argv: list[str] | None = None) -> int:
    """``python -m rapidrl.benchmarks.bench_offline [returns ALGO ...| suite options]``."""
    argv = sys.argv[1:] if argv is None else list(argv)
    if argv and argv[0] == "returns":
        return returns_main(argv[1:])
    from rapidrl.benchmarks.run import main as run_main  # the suite is in run.SUITES

    return run_main(["offline", *argv])


if __name__ == "__main__":
    sys.exit(main())
