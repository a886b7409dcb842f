"""Evaluate a saved model with its stochastic policy (sampled actions), next to the deterministic evaluation that
`rapidrl train` and the results rows report.

    python scripts/stochastic_eval.py runs/results/full/ppo-breakout/seed-0/model.pt --episodes 20

The published Atari figures (CleanRL's training returns, rl-zoo3's Atari evaluation) sample actions; a greedy Atari
policy can score lower (docs/RESULTS.md, the Breakout row).
"""
import argparse
import time

import rapidrl as rr


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("model", help="a PPO model.pt or checkpoint written by rapidrl")
    parser.add_argument("--episodes", type=int, default=20)
    args = parser.parse_args()
    model = rr.PPO.load(args.model)
    for deterministic in (False, True):
        start = time.perf_counter()
        mean, std = model.evaluate(args.episodes, deterministic=deterministic)
        kind = "deterministic" if deterministic else "stochastic"
        print(f"{kind}: {mean:.1f} ± {std:.1f} over {args.episodes} episodes ({time.perf_counter() - start:.0f} s)")


if __name__ == "__main__":
    main()
