"""CORL's IQL (tinkoff-ai/CORL ``algorithms/offline/iql.py``) on a rapidrl dataset's arrays: the reference that
rapidrl's IQL is compared with (docs/offline.md, "IQL's late fall"; issue 61).

    python -m tools.corl_iql CORL/algorithms/offline/iql.py rapidrl/hopper/medium-replay-v0 --steps 300000 \\
        --eval-every 25000 --seed 0 --out corl-iql-seed0.csv

CORL's file is not vendored; pass its path, e.g. from a clone of https://github.com/tinkoff-ai/CORL. Its classes run
unchanged: ``ImplicitQLearning``, ``TwinQ``, ``ValueFunction``, ``DeterministicPolicy`` / ``GaussianPolicy``,
``modify_reward``, ``compute_mean_std``, ``normalize_states`` and ``ReplayBuffer``. Its ``train()`` loop is written out
here, because the original needs d4rl, old gym, pyrallis and wandb (stubbed so the module imports). Its settings are
those of CORL's hopper-medium-replay config: beta 3, expectile 0.7, tau 0.001, Adam 3e-4, batch 256, rewards scaled by
1000 / (max - min episode return), states normalised with eps 1e-3, and the actor's cosine schedule over ``--steps``.
The data is what ``d4rl.qlearning_dataset`` would hold: every transition, ``terminals`` the true terminations. It is
evaluated every ``--eval-every`` steps on the dataset's gymnasium env (10 deterministic episodes, seeds seed..seed+9,
states normalised), and the score is on the dataset's reference scale. A repository tool, not part of the package.
"""

from __future__ import annotations

import argparse
import csv
import importlib.util
import sys
import time
import types


def load_corl(path: str):
    """CORL's iql.py as a module, with its training-only imports (d4rl, pyrallis, wandb; old gym) stubbed."""
    import gymnasium

    for name in ("d4rl", "pyrallis", "wandb"):
        stub = types.ModuleType(name)
        stub.wrap = lambda *a, **k: (lambda f: f)  # pyrallis.wrap() decorates train()
        sys.modules.setdefault(name, stub)
    sys.modules.setdefault("gym", gymnasium)
    spec = importlib.util.spec_from_file_location("corl_iql", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def d4rl_arrays(dataset_id: str) -> tuple[dict, object]:
    """(``d4rl.qlearning_dataset``-style arrays of a rapidrl/Minari dataset, its header)."""
    import numpy as np

    from rapidrl.buffers.dataset import iter_episodes, read_header

    header = read_header(dataset_id)
    parts: dict[str, list] = {k: [] for k in ("observations", "actions", "rewards", "next_observations", "terminals")}
    for ep in iter_episodes(header):
        parts["observations"].append(ep.observations[:-1])
        parts["next_observations"].append(ep.observations[1:])
        parts["actions"].append(ep.actions)
        parts["rewards"].append(ep.rewards)
        parts["terminals"].append(ep.terminations)
    return {k: np.concatenate(v).astype(np.float32) for k, v in parts.items()}, header


def main(argv: list[str] | None = None) -> int:
    import gymnasium as gym
    import numpy as np
    import torch

    p = argparse.ArgumentParser(prog="python -m tools.corl_iql", description=__doc__.split("\n\n")[0])
    p.add_argument("corl_iql", help="path of CORL's algorithms/offline/iql.py")
    p.add_argument("dataset", help="a rapidrl/Minari dataset id (Box observations and actions)")
    p.add_argument("--steps", type=int, default=1_000_000)
    p.add_argument("--eval-every", type=int, default=5_000)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--deterministic-actor", action=argparse.BooleanOptionalAction, default=True,
                   help="CORL's iql_deterministic (true in its hopper-medium-replay config)")
    p.add_argument("--out", required=True, help="CSV of step, return, score, wall_s")
    args = p.parse_args(argv)
    torch.set_num_threads(1)
    C = load_corl(args.corl_iql)
    data, header = d4rl_arrays(args.dataset)
    obs_dim, act_dim = data["observations"].shape[1], data["actions"].shape[1]
    C.modify_reward(data, header.env_id.lower())  # locomotion: 1000 / (max - min episode return)
    mean, std = C.compute_mean_std(data["observations"], eps=1e-3)
    data["observations"] = C.normalize_states(data["observations"], mean, std)
    data["next_observations"] = C.normalize_states(data["next_observations"], mean, std)
    buffer = C.ReplayBuffer(obs_dim, act_dim, len(data["rewards"]))
    buffer.load_d4rl_dataset(data)
    C.set_seed(args.seed)
    env = gym.make(header.env_id)
    max_action = float(env.action_space.high[0])
    q, v = C.TwinQ(obs_dim, act_dim), C.ValueFunction(obs_dim)
    actor = (C.DeterministicPolicy if args.deterministic_actor else C.GaussianPolicy)(obs_dim, act_dim, max_action)
    trainer = C.ImplicitQLearning(
        max_action=max_action, actor=actor, actor_optimizer=torch.optim.Adam(actor.parameters(), 3e-4),
        q_network=q, q_optimizer=torch.optim.Adam(q.parameters(), 3e-4), v_network=v,
        v_optimizer=torch.optim.Adam(v.parameters(), 3e-4), discount=0.99, tau=0.001, device="cpu", beta=3.0,
        iql_tau=0.7, max_steps=args.steps)
    lo, hi = header.ref_min_score, header.ref_max_score

    def evaluate() -> float:
        actor.eval()
        returns = []
        for i in range(10):
            o, _ = env.reset(seed=args.seed + i)
            done, total = False, 0.0
            while not done:
                o, r, terminated, truncated, _ = env.step(actor.act((o - mean) / std))
                total += float(r)
                done = terminated or truncated
            returns.append(total)
        actor.train()
        return float(np.mean(returns))

    rows, t0 = [], time.time()
    for t in range(args.steps):
        trainer.train(buffer.sample(256))
        if (t + 1) % args.eval_every == 0:
            ret = evaluate()
            score = 100 * (ret - lo) / (hi - lo) if lo is not None and hi is not None else float("nan")
            rows.append((t + 1, round(ret, 2), round(score, 2), round(time.time() - t0, 1)))
            print(f"step {t + 1:,}: return {ret:.1f}, score {score:.1f} ({time.time() - t0:.0f} s)", flush=True)
            with open(args.out, "w", newline="") as f:
                csv.writer(f).writerows([("step", "return", "score", "wall_s"), *rows])
    return 0


if __name__ == "__main__":
    sys.exit(main())
