"""Before/after of the off-policy updates: one gradient step of TD3, DDPG, SAC and TQC (Pendulum, batch 256, 256x256
networks, one torch thread, the "auto" and "torch" backends) on two checkouts, in alternating fresh processes.

    python tools/ab_updates.py --a ../wt-base --b . --rounds 4

Each side runs a self-contained timing program (``MEASURE``, which needs nothing of the tree but its public API and
``Algorithm._train_step``, so old trees run it too) from a neutral working directory with only its own checkout on
``PYTHONPATH``; a side that imported another tree is refused (``tools/trees.py``). The order alternates between
rounds. Prints, per case, each side's median per-update time over the rounds and B's speed over A's (> 1: B faster),
with the per-round ratios: on a noisy machine their spread is the noise.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

if __package__ in (None, ""):  # run as a script: tools/ab_updates.py
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from rapidrl.benchmarks.isolated import boot_code, check_imported, imported_from, tree_env

CASES = [("td3/auto", "TD3", {}), ("td3/torch", "TD3", {"gradient_backend": "torch"}), ("ddpg/auto", "DDPG", {}),
         ("sac/auto", "SAC", {}), ("sac/torch", "SAC", {"gradient_backend": "torch"}), ("tqc/auto", "TQC", {})]

MEASURE = """
import json, statistics, sys, time
import torch
import rapidrl as rr
from rapidrl.benchmarks.harness import as_in_learn
torch.set_num_threads(1)
out = {}
for name, cls, kw in json.loads(sys.argv[1]):
    model = getattr(rr, cls)("Pendulum-v1", learning_starts=1000, batch_size=256, seed=0, torch_threads=1, **kw)
    model.learn(1000, progress_bar=False)  # random actions: fills the replay buffer
    step = as_in_learn(model, model._train_step)
    for _ in range(20):
        step()
    times = []
    for _ in range(7):
        t0 = time.perf_counter()
        for _ in range(30):
            step()
        times.append((time.perf_counter() - t0) / 30 * 1e3)
    out[name] = statistics.median(times)
print("RESULT " + json.dumps(out), flush=True)
"""


def run_side(python: str, checkout: Path) -> dict[str, float]:
    """Per-update milliseconds of every case on ``checkout``, in a fresh process from a neutral directory."""
    with tempfile.TemporaryDirectory(prefix="rapidrl-side-") as neutral:
        proc = subprocess.run([python, "-c", boot_code(MEASURE), json.dumps(CASES)], env=tree_env(checkout),
                              cwd=neutral, capture_output=True, text=True, timeout=1200)
    check_imported(imported_from(proc.stdout), checkout, what=f"the update timing on {checkout}")
    if proc.returncode != 0:
        sys.stderr.write(proc.stderr[-4000:])
        raise subprocess.CalledProcessError(proc.returncode, [python, "-c", "MEASURE"], proc.stdout, proc.stderr)
    line = next(x for x in proc.stdout.splitlines() if x.startswith("RESULT "))
    return json.loads(line[len("RESULT "):])


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python tools/ab_updates.py", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--a", required=True, help="checkout A (before)")
    p.add_argument("--b", required=True, help="checkout B (after)")
    p.add_argument("--rounds", type=int, default=4)
    p.add_argument("--python", default=sys.executable)
    args = p.parse_args(argv)
    trees = {"A": Path(args.a).resolve(), "B": Path(args.b).resolve()}
    runs: dict[str, list[dict[str, float]]] = {"A": [], "B": []}
    for r in range(args.rounds):
        for side in ("A", "B") if r % 2 == 0 else ("B", "A"):
            runs[side].append(run_side(args.python, trees[side]))
            print(f"round {r + 1}/{args.rounds}: {side} ({trees[side]}) done", flush=True)
    print("\n| case | A ms | B ms | B speed over A | per-round A/B |\n|---|---:|---:|---:|---|")
    for name, _, _ in CASES:
        a = [x[name] for x in runs["A"]]
        b = [x[name] for x in runs["B"]]
        ratios = ", ".join(f"{x / y:.2f}" for x, y in zip(a, b))
        print(f"| {name} | {statistics.median(a):.2f} | {statistics.median(b):.2f} | "
              f"{statistics.median(a) / statistics.median(b):.2f}x | {ratios} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
