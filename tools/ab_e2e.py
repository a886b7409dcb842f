"""Before/after of the classic-control end-to-end runs against rlox, in one run: PPO CartPole (bench_train.job_ppo),
DQN CartPole and SAC Pendulum (bench_offpolicy.job_train), rapidrl from checkout A, rapidrl from checkout B and
rlox, each run in its own fresh process (``rapidrl.benchmarks.isolated``'s child protocol) at 1 and all torch
threads, contenders interleaved; the table gives each contender's best median SPS and the ratios.

    python tools/ab_e2e.py --a ../wt-pre28 --b . [--seeds 0,1] [--python ../bench-venv/bin/python] [--peer none]

``--peer none`` leaves rlox out (an interpreter without it): the table then has A and B only. Each run starts from a
neutral working directory with only its checkout on PYTHONPATH and reports the rapidrl it imported; a run that imported
another tree is refused (``run_isolated``'s guard, ``rapidrl.benchmarks.isolated.MixedTreeError``); the first line per
side says which file it was.
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

if __package__ in (None, ""):  # run as a script: tools/ab_e2e.py
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from rapidrl.benchmarks.isolated import run_isolated

JOBS = {
    "PPO CartPole-v1 50k": ("rapidrl.benchmarks.bench_train:job_ppo", {"steps": 50_000}),
    "DQN CartPole-v1 50k": ("rapidrl.benchmarks.bench_offpolicy:job_train", {"algo": "dqn", "steps": 50_000}),
    "SAC Pendulum-v1 5k": ("rapidrl.benchmarks.bench_offpolicy:job_train", {"algo": "sac", "steps": 5_000}),
    # rapidrl only (no "lib" argument, no peer): the throughput preset, 1024 envs x 32 steps
    "PPO CartPole-v1 throughput preset": ("rapidrl.benchmarks.bench_train:job_throughput", None),
}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--a", required=True, help="checkout A (before)")
    p.add_argument("--b", required=True, help="checkout B (after); rlox runs from it too")
    p.add_argument("--seeds", default="0", help="comma-separated seeds (default 0)")
    p.add_argument("--threads", default="1,2", help="torch thread counts; each contender's best counts (default 1,2)")
    p.add_argument("--jobs", default=",".join(JOBS), help=f"comma-separated runs among: {', '.join(JOBS)}")
    p.add_argument("--python", default=sys.executable, help="the interpreter (one with rlox installed)")
    p.add_argument("--peer", default="rlox", choices=("rlox", "none"), help="the peer run beside A and B")
    args = p.parse_args()
    contenders = {"A rapidrl": (Path(args.a), "rapidrl"), "B rapidrl": (Path(args.b), "rapidrl")}
    if args.peer == "rlox":
        contenders["rlox"] = (Path(args.b), "rlox")
        print("| run | A rapidrl SPS | B rapidrl SPS | rlox SPS | B/A | A/rlox | B/rlox | eval A / B / rlox |")
        print("|---|---:|---:|---:|---:|---:|---:|---|")
    else:
        print("| run | A rapidrl SPS | B rapidrl SPS | B/A | eval A / B |")
        print("|---|---:|---:|---:|---|")
    shown: set[str] = set()
    for name in args.jobs.split(","):
        target, kw = JOBS[name]
        job_contenders = contenders if kw is not None else {c: v for c, v in contenders.items() if c != "rlox"}
        sps: dict[str, dict[int, list[float]]] = {c: {} for c in job_contenders}
        evals: dict[str, list[float]] = {c: [] for c in job_contenders}
        for k, seed in enumerate(int(s) for s in args.seeds.split(",")):
            for t in (int(x) for x in args.threads.split(",")):
                order = list(job_contenders)[k % len(job_contenders):] + list(job_contenders)[:k % len(job_contenders)]
                for c in order:
                    checkout, lib = job_contenders[c]
                    job_kw = {"seed": seed} if kw is None else {**kw, "lib": lib, "seed": seed}
                    r = run_isolated(target, job_kw, torch_threads=t, python=args.python, checkout=checkout)
                    sps[c].setdefault(t, []).append(r["sps"])
                    if c not in shown:
                        shown.add(c)
                        print(f"  {c}: rapidrl imported from {r['rapidrl_file']}", file=sys.stderr, flush=True)
                    evals[c].append(r.get("eval", float("nan")))
                    print(f"  {name} {c} seed {seed} threads {t}: {r['sps']:,.0f} SPS", file=sys.stderr, flush=True)
        best = {c: max(statistics.median(v) for v in by_t.values()) for c, by_t in sps.items()}
        a, b = best["A rapidrl"], best["B rapidrl"]
        ev = " / ".join(f"{statistics.median(evals[c]):.0f}" for c in job_contenders)
        if "rlox" in best:
            x = best["rlox"]
            print(f"| {name} | {a:,.0f} | {b:,.0f} | {x:,.0f} | {b / a:.2f}x | {a / x:.2f}x | {b / x:.2f}x | {ev} |",
                  flush=True)
        elif args.peer == "rlox":  # a rapidrl-only job in the table with rlox's columns
            print(f"| {name} | {a:,.0f} | {b:,.0f} | - | {b / a:.2f}x | - | - | {ev} |", flush=True)
        else:
            print(f"| {name} | {a:,.0f} | {b:,.0f} | {b / a:.2f}x | {ev} |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
