"""Does a trained MinAtar Seaquest policy ever surface? Plays deterministic episodes and counts, per episode, the
oxygen refills (the oxygen gauge, observation channel 7, rising) and whether it ended with the gauge empty.

    python scripts/seaquest_probe.py runs/results/full/ppo-minatar-seaquest/seed-0/model.pt [--episodes 40]
"""

from __future__ import annotations

import argparse

import numpy as np

import rapidrl as rr

OXYGEN_GAUGE = 7


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("model")
    p.add_argument("--episodes", type=int, default=40)
    p.add_argument("--envs", type=int, default=20)
    args = p.parse_args()
    model = rr.PPO.load(args.model)
    n = args.envs
    env = rr.make_vec("MinAtar/Seaquest-v1", n, seed=1000)
    obs, _ = env.reset(seed=1000)
    gauge = obs[:, OXYGEN_GAUGE].reshape(n, -1).sum(1)
    refills, length, ret = np.zeros(n, int), np.zeros(n, int), np.zeros(n)
    episodes = []
    while len(episodes) < args.episodes:
        obs, r, term, trunc, info = env.step(model.predict(obs, deterministic=True))
        length += 1
        ret += r
        now = obs[:, OXYGEN_GAUGE].reshape(n, -1).sum(1)
        refills += (now > gauge) & ~(term | trunc)
        for i in np.flatnonzero(term | trunc):
            last = info["final_obs"][i] if "final_obs" in info else obs[i]
            episodes.append((ret[i], length[i], refills[i], int(last[OXYGEN_GAUGE].sum())))
            refills[i] = length[i] = ret[i] = 0
        gauge = now
    eps = np.array(episodes[:args.episodes], dtype=float)
    print(f"{len(eps)} episodes: mean return {eps[:, 0].mean():.2f}, mean length {eps[:, 1].mean():.1f}")
    print(f"surfaced (an oxygen refill) in {int((eps[:, 2] > 0).sum())}; ended with the oxygen gauge empty: "
          f"{int((eps[:, 3] == 0).sum())}")


if __name__ == "__main__":
    main()
