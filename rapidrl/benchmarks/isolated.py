"""Each contender in its own fresh process, at its own best torch thread count.

End-to-end benchmarks (whole training runs) must not share a process: libraries change process-wide state
(torch threads, denormal flushing, allocator thresholds, compiled caches in memory), and the same peer was
measured at 4.2k SPS in a shared harness and 21.8k SPS in a fresh process (PERFORMANCE.md). So a *job* (a
module-level function returning a JSON-able dict) runs in a new interpreter:

    run_isolated("rapidrl.benchmarks.bench_train:job_ppo", {"lib": "sb3", "steps": 50_000, "seed": 0},
                 torch_threads=2)

The child sets ``torch.set_num_threads`` before it imports the job's module, runs the job and prints one
``RESULT <json>`` line; warm-up inside a job is timed and reported apart by the job itself. ``thread_counts()``
gives the counts every contender is tried at (1 and all cores); ``best_by_threads`` keeps each contender's best.
"""

from __future__ import annotations

import importlib
import json
import os
import statistics
import subprocess
import sys
from collections.abc import Callable, Iterable
from pathlib import Path

from rapidrl._system import usable_cpu_count

RESULT_PREFIX = "RESULT "


def thread_counts() -> list[int]:
    """Torch thread counts to try each contender at: 1 and all usable cores (one entry on a 1-core machine)."""
    return sorted({1, usable_cpu_count()})


def run_isolated(target: str, kwargs: dict, *, torch_threads: int, timeout: float = 3600.0,
                 python: str | None = None, checkout: str | os.PathLike | None = None) -> dict:
    """Run ``module:function(**kwargs)`` in a fresh Python process with torch at ``torch_threads`` threads.

    python: the interpreter (default: this one). checkout: a rapidrl source tree to import instead of the installed
    one (before/after comparisons: ``tools/ab_e2e.py``); the child runs there with it first on PYTHONPATH.

    Returns the function's dict (plus ``"torch_threads"``). Raises RuntimeError with the child's stderr tail if
    the child fails or prints no result.
    """
    if ":" not in target:
        raise ValueError(f"target must be 'module:function', got {target!r}")
    if isinstance(torch_threads, bool) or not isinstance(torch_threads, int) or torch_threads < 1:
        raise ValueError(f"torch_threads must be a positive int, got {torch_threads!r}")
    cmd = [python or sys.executable, "-m", "rapidrl.benchmarks.isolated", target, json.dumps(kwargs),
           str(torch_threads)]
    env = None if checkout is None else {**os.environ, "PYTHONPATH": str(Path(checkout).resolve())}
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env, cwd=checkout)
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith(RESULT_PREFIX)]
    if proc.returncode != 0 or not lines:
        raise RuntimeError(f"{target}({kwargs}) at {torch_threads} threads failed (exit {proc.returncode}):\n"
                           f"{proc.stderr[-2000:]}")
    result = json.loads(lines[-1][len(RESULT_PREFIX):])
    result["torch_threads"] = torch_threads
    return result


def interleaved(jobs: dict[str, Callable[[int, int], dict]], seeds: Iterable[int], threads: Iterable[int],
                progress: Callable[[str], None] | None = None) -> dict[str, dict[int, list[dict]]]:
    """Run every ``jobs[name](seed, threads)`` round-robin: for each seed, each thread count, every contender
    (order rotated by seed) before the next. Returns name -> threads -> results in seed order."""
    names = list(jobs)
    out: dict[str, dict[int, list[dict]]] = {n: {} for n in names}
    for k, seed in enumerate(seeds):
        order = names[k % len(names):] + names[:k % len(names)]
        for t in threads:
            for name in order:
                if progress:
                    progress(f"{name} seed {seed} at {t} torch thread(s)")
                out[name].setdefault(t, []).append(jobs[name](seed, t))
    return out


def best_by_threads(runs: dict[int, list[dict]], key: str = "sps") -> tuple[int, float]:
    """(thread count, median of ``key`` over seeds) of the thread count with the highest median."""
    medians = {t: statistics.median(r[key] for r in rs) for t, rs in runs.items()}
    best = max(medians, key=medians.get)
    return best, medians[best]


def job_process_state() -> dict:
    """A job reporting the child's process state (tests: the thread count is set, nothing leaked in)."""
    import torch

    return {"torch_threads": torch.get_num_threads(), "pid": os.getpid(),
            "rapidrl_modules": sorted(m for m in sys.modules if m.startswith("rapidrl."))}


def _child(argv: list[str]) -> None:
    target, kwargs, threads = argv[0], json.loads(argv[1]), int(argv[2])
    import torch

    torch.set_num_threads(threads)
    module, func = target.split(":")
    result = getattr(importlib.import_module(module), func)(**kwargs)
    print(RESULT_PREFIX + json.dumps(result), flush=True)


if __name__ == "__main__":
    _child(sys.argv[1:])


def timed_learn(model, steps: int) -> tuple[float, dict[str, float]]:
    """(wall seconds of ``model.learn(steps)``, its phase fractions from the ``time/frac_*`` metrics)."""
    import time

    t0 = time.perf_counter()
    model.learn(steps, progress_bar=False)
    wall = time.perf_counter() - t0
    return wall, {k[len("time/frac_"):]: round(v, 3) for k, v in model.metrics.items() if k.startswith("time/frac_")}


def warm_then_run(run: Callable, warmup_steps: int, steps: int, seed: int) -> tuple[float, object]:
    """``run(warmup_steps, 99)`` timed as the warm-up (compilation, first allocations; reported apart), then
    ``(warm-up seconds, run(steps, seed))``."""
    import time

    t0 = time.perf_counter()
    run(warmup_steps, 99)
    return time.perf_counter() - t0, run(steps, seed)


def sps_rows(case: str, results: dict[str, dict[int, list[dict]]],
             columns: dict[str, Callable[[list[dict]], str]] | None = None) -> list[dict]:
    """Report rows of end-to-end runs (``interleaved`` output whose results hold ``sps``, ``warmup_s`` and
    ``phases``): one row per contender and thread count, the speedup of rapidrl's best over each peer's best.
    ``columns``: more columns, each computed from one contender's runs at one thread count."""
    _, base = best_by_threads(results["rapidrl"])
    rows = []
    for lib, by_threads in results.items():
        best_t, best = best_by_threads(by_threads)
        for t, runs in sorted(by_threads.items()):
            rows.append({"case": case, "contender": lib, "torch threads": f"{t}{' (best)' if t == best_t else ''}",
                         "SPS (median)": f"{statistics.median(r['sps'] for r in runs):,.0f}",
                         "warm-up s": f"{statistics.median(r['warmup_s'] for r in runs):.1f}",
                         **{name: f(runs) for name, f in (columns or {}).items()},
                         "rapidrl speedup (best vs best)": (f"{base / best:.2f}x" if lib != "rapidrl" else "1.00x")
                         if t == best_t else "",
                         "phases": str(runs[0].get("phases") or "")})
    return rows
