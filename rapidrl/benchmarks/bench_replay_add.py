"""Is the replay buffer's raw-pointer fast ``add`` worth keeping? End-to-end DQN and SAC with it and without it.

``ReplayBuffer.add`` first tries ``rapidrl._unsafe.replay_table.add_fast_core`` (one compiled call that holds the
GIL and copies rows through a table of raw addresses, ~1 us cheaper per call than the checked path), then falls
back to the plain Numba ``write_rows`` under the buffer's lock. This benchmark trains the bench_offpolicy
end-to-end runs (DQN CartPole-v1, SAC Pendulum-v1, rapidrl's hyperparameters there) twice per seed, each run in
a fresh process (``rapidrl.benchmarks.isolated``), interleaved: once as shipped ("fast"), once with the fast
path switched off for every buffer ("plain": every add takes the checked path). If "fast" does not beat "plain"
by more than the run-to-run noise, the raw-pointer add can go.

    python -m rapidrl.benchmarks.bench_replay_add [--seeds 3] [--dqn-steps 50000] [--sac-steps 5000] [--out FILE]

Prints a table (median SPS per variant, their ratio) and writes JSON.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path


def job(algo: str, variant: str, steps: int, seed: int) -> dict:
    """One end-to-end run in this (fresh) process; ``variant`` "plain" disables the fast add first."""
    from rapidrl._unsafe.replay_table import T_MAXBYTES
    from rapidrl.benchmarks import bench_offpolicy as off
    from rapidrl.buffers.replay import ReplayBuffer

    if variant == "plain":
        original = ReplayBuffer._set_fast_add
        ReplayBuffer._set_fast_add = lambda self, enabled: original(self, False)
    build = {"dqn": off.rapidrl_dqn, "sac": off.rapidrl_sac}[algo]
    warm = build(seed=seed)
    t0 = time.perf_counter()
    off.train("rapidrl", warm, min(steps, 2_000))  # compiles the kernels: timed apart
    warmup = time.perf_counter() - t0
    model = build(seed=seed)
    t0 = time.perf_counter()
    off.train("rapidrl", model, steps)
    wall = time.perf_counter() - t0
    return {"sps": steps / wall, "wall_s": wall, "warmup_s": warmup,
            "fast_add": bool(model.buffer._table[T_MAXBYTES] > 0)}  # the fast path is on


def main(argv: list[str] | None = None) -> int:
    from rapidrl.benchmarks.bench_offpolicy import THREADS
    from rapidrl.benchmarks.isolated import interleaved, run_isolated

    p = argparse.ArgumentParser(prog="python -m rapidrl.benchmarks.bench_replay_add",
                                description=__doc__.split("\n")[0])
    p.add_argument("--seeds", type=int, default=3)
    p.add_argument("--dqn-steps", type=int, default=50_000)
    p.add_argument("--sac-steps", type=int, default=5_000)
    p.add_argument("--out", default="bench_results/replay_add.json")
    args = p.parse_args(argv)
    results = {}
    for algo, steps in (("dqn", args.dqn_steps), ("sac", args.sac_steps)):
        jobs = {variant: (lambda seed, t, v=variant, a=algo, n=steps: run_isolated(
            "rapidrl.benchmarks.bench_replay_add:job", {"algo": a, "variant": v, "steps": n, "seed": seed},
            torch_threads=t)) for variant in ("fast", "plain")}
        runs = interleaved(jobs, range(args.seeds), [THREADS[algo]],
                           progress=lambda m, a=algo: print(f"  {a}: {m}", file=sys.stderr, flush=True))
        results[algo] = {v: runs[v][THREADS[algo]] for v in runs}
    print(f"{'run':<28}{'fast add SPS':>14}{'plain SPS':>12}{'fast/plain':>12}")
    for algo, steps in (("dqn", args.dqn_steps), ("sac", args.sac_steps)):
        fast = statistics.median(r["sps"] for r in results[algo]["fast"])
        plain = statistics.median(r["sps"] for r in results[algo]["plain"])
        assert all(r["fast_add"] for r in results[algo]["fast"]) and not any(
            r["fast_add"] for r in results[algo]["plain"]), "a variant did not take the path it names"
        print(f"{algo + f' {steps} steps':<28}{fast:>14.0f}{plain:>12.0f}{fast / plain:>12.3f}")
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(results, indent=1) + "\n")
    print(f"results: {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
