"""PPO InvertedPendulum-v5 with the shipped preset over many seeds, one process per seed (the learning test's
protocol: 10-episode evaluations every 10,240 steps, stop at 950). Prints one JSON line per seed: the step at which
it reached 950 within the preset's budget (or null) and the evaluation history.

    python scripts/ip_seeds.py --seeds 0-15 --jobs 16 [--checkout PATH]
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor

CHILD = """
import json, sys
sys.path.insert(0, 'tests')
import rapidrl as rr
from test_learning_mujoco import ENV, preset, reaches
seed = int(sys.argv[1])
kw, budget = preset('ppo')
ok, history = reaches(rr.PPO(ENV, seed=seed, **kw), 950, budget, 10_240)
hit = next((s for s, m in history if m >= 950), None)
print(json.dumps({'seed': seed, 'reached_at': hit, 'history': history}))
"""


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--seeds", default="0-15")
    p.add_argument("--jobs", type=int, default=os.cpu_count())
    p.add_argument("--checkout", default=".")
    a = p.parse_args()
    lo, _, hi = a.seeds.partition("-")
    seeds = range(int(lo), int(hi or lo) + 1)
    env = dict(os.environ, PYTHONPATH=os.path.abspath(a.checkout), OMP_NUM_THREADS="1")

    def one(seed: int) -> str:
        r = subprocess.run([sys.executable, "-c", CHILD, str(seed)], cwd=a.checkout, env=env,
                           capture_output=True, text=True)
        return r.stdout.strip().splitlines()[-1] if r.returncode == 0 else json.dumps(
            {"seed": seed, "error": r.stderr[-500:]})

    with ThreadPoolExecutor(a.jobs) as pool:
        for line in pool.map(one, seeds):
            print(line, flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
