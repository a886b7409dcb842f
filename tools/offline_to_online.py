"""Offline-to-online against SAC from scratch: the ``iql_pendulum`` preset (20,000 steps on the dataset, then 5,000
env steps) beside the ``sac_pendulum`` preset at the same 5,000 env steps, evaluated along the way.

    MINARI_DATASETS_PATH=datasets python -m tools.offline_to_online --seeds 0,1,2 --eval-every 1000

The runs take turns in this process (run it under the heavy-work lock on a shared machine); the models are built
from the presets as ``rapidrl train`` builds them (``rapidrl.runs.config.resolve``), with an ``EvalCallback`` (10
deterministic episodes every ``--eval-every`` steps: IQL's curve runs across the switch). Prints, per seed: IQL's
evaluation at the switch (the offline start), at the end of the online budget, and SAC's at that budget; writes the
curves as JSON (--out).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path


def run(algo: str, env: str, seed: int, eval_every: int, episodes: int, timesteps: int | None = None) -> dict:
    from rapidrl.runs.config import resolve
    from rapidrl.train.callbacks import EvalCallback

    config = resolve([("benchmark", {"run": {"algo": algo, "env": env, "seed": seed}})])
    model = config.algo_class(config.run.env, config.algo_config, env_kwargs=config.env_kwargs)
    total = timesteps or config.run.timesteps
    ev = EvalCallback(eval_freq=eval_every, n_episodes=episodes)
    t0 = time.perf_counter()
    model.learn(total, callback=ev, progress_bar=False)
    wall = time.perf_counter() - t0
    curve = [(0, model.evaluate(episodes)[0])] if not ev.history or ev.history[0][0] != 0 else []
    curve += [(int(s), float(m)) for s, m, _, _ in ev.history]
    if curve[-1][0] != model.num_timesteps:
        curve.append((model.num_timesteps, model.evaluate(episodes)[0]))
    return {"algo": algo, "seed": seed, "curve": curve, "wall_s": wall,
            "offline_steps": getattr(config.algo_config, "offline_steps", None)}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m tools.offline_to_online", description=__doc__)
    p.add_argument("--seeds", default="0,1,2")
    p.add_argument("--eval-every", type=int, default=1000)
    p.add_argument("--episodes", type=int, default=10)
    p.add_argument("--out", default="bench_results/offline-to-online.json")
    args = p.parse_args(argv)
    seeds = [int(s) for s in args.seeds.split(",")]
    runs = []
    for seed in seeds:
        iql = run("iql", "Pendulum-v1", seed, args.eval_every, args.episodes)
        online = iql["curve"][-1][0] - iql["offline_steps"]
        sac = run("sac", "Pendulum-v1", seed, args.eval_every, args.episodes, timesteps=online)
        start = next(m for s, m in iql["curve"] if s == iql["offline_steps"])
        print(f"seed {seed}: IQL offline start {start:.1f}, after {online:,} env steps {iql['curve'][-1][1]:.1f} "
              f"({iql['wall_s']:.0f} s); SAC from scratch at {online:,} env steps {sac['curve'][-1][1]:.1f} "
              f"({sac['wall_s']:.0f} s)", flush=True)
        runs += [iql, sac]
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(runs, indent=1))

    def summary(values: list[float]) -> str:
        return f"{statistics.mean(values):.1f} ± {statistics.pstdev(values):.1f}"

    iqls = [r for r in runs if r["algo"] == "iql"]
    starts = [next(m for s, m in r["curve"] if s == r["offline_steps"]) for r in iqls]
    print(f"IQL offline start {summary(starts)}; fine-tuned {summary([r['curve'][-1][1] for r in iqls])}; "
          f"SAC from scratch {summary([r['curve'][-1][1] for r in runs if r['algo'] == 'sac'])} "
          f"(mean ± std over seeds {seeds}); curves: {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
