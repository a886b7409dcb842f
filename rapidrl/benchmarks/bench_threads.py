"""Torch threads: why every algorithm defaults to ``torch_threads=1``.

Each algorithm's default settings, ``precision="auto"``, trained in a fresh process (``rapidrl.benchmarks.isolated``)
at 1 torch thread and at every usable core, in two conditions:

- ``alone``: nothing else of this benchmark runs (the machine's own load is in the row; a report needs it idle);
- ``beside 1 busy process``: a neighbour process runs 1-thread float32 matrix products the whole time, as a second
  training run, a test suite or another seed would.

The online algorithms (SAC, TD3, DDPG, TQC, CrossQ) take ``learning_starts`` random steps on Walker2d-v5, then a
timed warm-up and ``steps`` timed env steps with one update each; the offline ones (BC, TD3+BC, IQL, CQL) take
gradient steps on ``bench_offline``'s dataset (a timed warm-up, then ``steps``). SPS = timed steps / their wall time.
On the 2-core development machine a second thread gained 1.2-1.9x alone and lost 1.8-3x beside one busy process
(docs/BENCHMARKS.md, section threads): OpenMP's workers spin while they wait, on the core the main thread needs.

    python -m rapidrl.benchmarks.bench_threads [--quick]           (rapidrl bench threads)
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

ONLINE_ENV = "Walker2d-v5"
LEARNING_STARTS = 1_000
STEPS = {  # algo -> (quick, full) timed steps; the warm-up is a quarter of them
    "sac": (200, 800), "td3": (200, 800), "ddpg": (200, 800), "tqc": (100, 400), "crossq": (50, 200),
    "bc": (400, 1_600), "td3_bc": (150, 600), "iql": (150, 600), "cql": (30, 120),
}
OFFLINE = ("bc", "td3_bc", "iql", "cql")
CONDITIONS = ("alone", "beside 1 busy process")
NEIGHBOUR = ("import torch\ntorch.set_num_threads(1)\na = torch.randn(512, 512)\n"
             "while True:\n    a = torch.tanh(a @ a)\n")


def cases(ctx) -> Iterator:
    """No micro-benchmark: the suite's table is ``extras``'."""
    return iter(())


def job_sps(algo: str, steps: int, seed: int = 0, dataset: str = "") -> dict:
    """``algo`` at its defaults and precision "auto" in this process (whose torch threads ``run_isolated`` set): a
    timed warm-up of ``steps // 4`` steps (after ``LEARNING_STARTS`` random ones online), then ``steps`` timed."""
    from rapidrl.algos.registry import get_algorithm
    from rapidrl.benchmarks.harness import timed_learn

    cls = get_algorithm(algo)
    if algo in OFFLINE:
        model = cls(dataset=dataset, seed=seed, torch_threads=None, precision="auto")
        first = steps // 4
    else:
        model = cls(ONLINE_ENV, seed=seed, torch_threads=None, precision="auto", learning_starts=LEARNING_STARTS)
        first = LEARNING_STARTS + steps // 4
    warm, wall = timed_learn(lambda n: model.learn(n, progress_bar=False), first, steps)
    return {"sps": steps / wall, "warmup_s": warm, "precision": model.precision}


@contextmanager
def busy_neighbour(busy: bool):
    """A process doing 1-thread matrix products for the duration, yielded (None when ``busy`` is False)."""
    if not busy:
        yield None
        return
    proc = subprocess.Popen([sys.executable, "-c", NEIGHBOUR], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            env={**os.environ, "OMP_NUM_THREADS": "1"})
    try:
        time.sleep(1.0)  # torch imported, the loop running
        yield proc
    finally:
        proc.kill()
        proc.wait()


def measure(algos, threads, repeats: int, quick: bool, dataset: str, progress=None) -> list[dict]:
    """Rows (algo, condition, threads, median SPS over ``repeats`` fresh processes, load average, 2-thread ratio):
    for each repeat, each condition, each algorithm, the thread counts one after another."""
    from rapidrl.benchmarks.isolated import run_isolated

    sps: dict[tuple, list[float]] = {}
    info: dict[tuple, dict] = {}
    for _ in range(repeats):
        for condition in CONDITIONS:
            with busy_neighbour(condition != "alone"):
                for algo in algos:
                    for t in threads:
                        if progress:
                            progress(f"{algo} {condition} at {t} torch thread(s)")
                        r = run_isolated(f"{__name__}:job_sps", {"algo": algo, "steps": STEPS[algo][not quick],
                                                                  "dataset": dataset}, torch_threads=t, timeout=1800)
                        key = (algo, condition, t)
                        sps.setdefault(key, []).append(r["sps"])
                        info[key] = {"precision": r["precision"], "load (1 min, after)": round(os.getloadavg()[0], 2)}
    rows = []
    for (algo, condition, t), values in sps.items():
        median = statistics.median(values)
        one = statistics.median(sps[(algo, condition, 1)])
        rows.append({"algorithm": algo, "condition": condition, "torch threads": t, "SPS (median)": round(median, 1),
                     "runs": len(values), "vs 1 thread": round(median / one, 2), **info[(algo, condition, t)]})
    return rows


def extras(ctx) -> tuple[str, list[dict]]:
    """SPS of every algorithm at 1 thread and at every core, alone and beside one busy process."""
    from rapidrl.benchmarks.bench_offline import bench_dataset
    from rapidrl.benchmarks.isolated import thread_counts

    only = os.environ.get("RAPIDRL_BENCH_THREADS", ",".join(STEPS)).split(",")
    algos = [a for a in STEPS if a in only]
    with tempfile.TemporaryDirectory() as workdir:
        dataset = bench_dataset(Path(workdir))[0] if set(algos) & set(OFFLINE) else ""
        rows = measure(algos, thread_counts(), 1 if ctx.quick else 2, ctx.quick, dataset,
                       progress=lambda text: print(text, file=sys.stderr, flush=True))
    return "Torch threads: every algorithm at 1 thread and at every core, alone and beside one busy process", rows


def main(argv: list[str] | None = None) -> int:
    """``python -m rapidrl.benchmarks.bench_threads [options]``: ``rapidrl bench threads [options]``."""
    from rapidrl.benchmarks.run import main as run_main  # the suite is in run.SUITES

    return run_main(["threads", *(sys.argv[1:] if argv is None else argv)])


if __name__ == "__main__":
    sys.exit(main())
