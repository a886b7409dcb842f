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
import tempfile
import time
from collections import deque
from collections.abc import Callable, Iterable
from pathlib import Path

from rapidrl._system import usable_cpu_count

RESULT_PREFIX = "RESULT "
IMPORTED_PREFIX = "RAPIDRL_IMPORTED_FROM "


class MixedTreeError(RuntimeError):
    """A child imported rapidrl from somewhere else than the source tree it was started on."""


def boot_code(call: str) -> str:
    """A ``python -c`` program that imports rapidrl, prints ``IMPORTED_PREFIX`` + the file it came from (before
    anything else runs), then executes ``call``. It needs nothing of the tree but ``rapidrl`` itself, so it starts
    old trees too (before/after comparisons)."""
    return ("import importlib, sys\nimport rapidrl\n"
            f"print({IMPORTED_PREFIX!r} + rapidrl.__file__, flush=True)\n{call}\n")


def imported_from(stdout: str) -> Path | None:
    """The ``rapidrl/__init__.py`` a child started by ``boot_code`` reported, or None if it reported none."""
    for line in stdout.splitlines():
        if line.startswith(IMPORTED_PREFIX):
            return Path(line[len(IMPORTED_PREFIX):].strip())
    return None


def tree_env(checkout: str | os.PathLike, base: dict[str, str] | None = None) -> dict[str, str]:
    """The environment of a child that must import rapidrl from the source tree ``checkout`` only: PYTHONPATH is
    that tree and nothing else; PYTHONSAFEPATH keeps the working directory off ``sys.path`` (``python -m``/``-c``
    put it ahead of PYTHONPATH: started from another tree's root, the child would import that tree)."""
    env = dict(os.environ if base is None else base)
    env["PYTHONPATH"] = str(Path(checkout).resolve())
    env["PYTHONSAFEPATH"] = "1"
    return env


def check_imported(reported: Path | None, checkout: str | os.PathLike, what: str = "the child") -> Path:
    """Raise ``MixedTreeError`` unless ``reported`` (a child's ``rapidrl.__file__``) lies inside ``checkout``."""
    root = Path(checkout).resolve()
    if reported is None:
        raise MixedTreeError(f"{what} did not report which rapidrl it imported; refusing the run")
    if not Path(reported).resolve().is_relative_to(root):
        raise MixedTreeError(f"{what} imported rapidrl from {reported}, not from the tree it was started on ({root}):"
                             " a before/after would compare the wrong trees; refusing the run")
    return Path(reported)


def thread_counts() -> list[int]:
    """Torch thread counts to try each contender at: 1 and all usable cores (one entry on a 1-core machine)."""
    return sorted({1, usable_cpu_count()})


def run_isolated(target: str, kwargs: dict, *, torch_threads: int, timeout: float = 3600.0,
                 python: str | None = None, checkout: str | os.PathLike | None = None) -> dict:
    """Run ``module:function(**kwargs)`` in a fresh Python process with torch at ``torch_threads`` threads.

    python: the interpreter (default: this one). checkout: a rapidrl source tree to import instead of the installed
    one (before/after comparisons: ``tools/ab_e2e.py``; a peer's interpreter running a rapidrl job): the child runs
    from a neutral working directory with only that tree on PYTHONPATH (``tree_env``), and a child that imported
    rapidrl from anywhere else is refused (``MixedTreeError``).

    Returns the function's dict plus ``"torch_threads"`` and ``"rapidrl_file"`` (the rapidrl the child imported).
    Raises RuntimeError with the child's stderr tail if the child fails or prints no result.
    """
    if ":" not in target:
        raise ValueError(f"target must be 'module:function', got {target!r}")
    if isinstance(torch_threads, bool) or not isinstance(torch_threads, int) or torch_threads < 1:
        raise ValueError(f"torch_threads must be a positive int, got {torch_threads!r}")
    cmd = [python or sys.executable, "-c", boot_code("from rapidrl.benchmarks.isolated import _child\n"
                                                      "_child(sys.argv[1:])"),
           target, json.dumps(kwargs), str(torch_threads)]
    with tempfile.TemporaryDirectory(prefix="rapidrl-job-") as neutral:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout,
                              env=None if checkout is None else tree_env(checkout),
                              cwd=None if checkout is None else neutral)
    reported = imported_from(proc.stdout)
    if checkout is not None:
        check_imported(reported, checkout, what=f"{target} at {torch_threads} threads")
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith(RESULT_PREFIX)]
    if proc.returncode != 0 or not lines:
        raise RuntimeError(f"{target}({kwargs}) at {torch_threads} threads failed (exit {proc.returncode}):\n"
                           f"{proc.stderr[-2000:]}")
    result = json.loads(lines[-1][len(RESULT_PREFIX):])
    result["torch_threads"] = torch_threads
    result["rapidrl_file"] = str(reported)
    return result


def interleaved(jobs: dict[str, Callable[[int, int], dict]], seeds: Iterable[int], threads: Iterable[int],
                progress: Callable[[str], None] | None = None) -> dict[str, dict[int, list[dict]]]:
    """Run every ``jobs[name](seed, threads)`` round-robin: for each seed, each thread count, every contender
    (order rotated by seed) before the next. Returns name -> threads -> results in seed order. progress: called
    with a line before each job (default: the line and, after the job, its wall time on stderr, so a suite of
    end-to-end runs that takes many minutes says where it is)."""
    names = list(jobs)
    out: dict[str, dict[int, list[dict]]] = {n: {} for n in names}
    seeds, threads = list(seeds), list(threads)
    total, done = len(seeds) * len(threads) * len(names), 0
    for k, seed in enumerate(seeds):
        order = names[k % len(names):] + names[:k % len(names)]
        for t in threads:
            for name in order:
                done += 1
                line = f"{name} seed {seed} at {t} torch thread(s) (job {done}/{total})"
                if progress:
                    progress(line)
                else:
                    print(f"  {line} ...", file=sys.stderr, flush=True)
                start = time.perf_counter()
                out[name].setdefault(t, []).append(jobs[name](seed, t))
                if not progress:
                    print(f"  {line}: {time.perf_counter() - start:.1f} s", file=sys.stderr, flush=True)
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


def stream_episodes(cmd: list[str], env: dict, cwd: str | None, parse
                    ) -> tuple[list[tuple[float, int, float]], float, str]:
    """Run a peer's training command ``cmd`` in its own process; ``parse(line) -> [(step, return), ...]`` per stdout
    line, each stamped with the seconds since the child started. Returns ([(seconds, step, return)], total seconds,
    stdout tail); a failed child raises with its stderr's tail."""
    t0 = time.perf_counter()
    events, tail = [], deque(maxlen=40)
    with tempfile.TemporaryFile("w+") as err:
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=err, text=True, env=env, cwd=cwd, bufsize=1)
        for line in proc.stdout:
            now = time.perf_counter() - t0
            tail.append(line)
            events += [(now, step, ret) for step, ret in parse(line)]
        code = proc.wait()
        wall = time.perf_counter() - t0
        if code != 0:
            err.seek(0)
            raise RuntimeError(f"{' '.join(cmd)} failed (exit {code}):\n{err.read()[-3000:]}")
    return events, wall, "".join(tail)
