"""The peer of the results page's ``memory`` row: sb3-contrib's RecurrentPPO at rl-zoo3's CartPoleNoVel-v1 setting
on Gymnasium's CartPole-v1 with the velocities masked, steps and wall-clock to solve.

    PEER_VENV/bin/python tools/results/sb3_contrib_memory.py --seeds 0,1 --timesteps 100000

PEER_VENV is a virtual environment of its own, not rapidrl's (``python3 -m venv PEER_VENV``, then
``PEER_VENV/bin/pip install torch`` first, at rapidrl's torch version, then ``sb3-contrib gymnasium``). rapidrl is not
needed: the task is built here from Gymnasium's CartPole-v1 and an observation wrapper that keeps the cart position
and the pole angle. The setting is rl-zoo3's
``hyperparams/ppo_lstm.yml`` entry ``CartPoleNoVel-v1`` (DLR-RM/rl-baselines3-zoo, commit 22e3ff2): ``normalize:
True`` (rl-zoo3 wraps the env in ``VecNormalize(gamma=0.98)``: observations and rewards), 8 envs x 32 steps,
batch 256, 20 epochs, gamma 0.98, lambda 0.8, lr and clip range linear from 1e-3 and 0.2, no entropy bonus, and
``policy_kwargs=dict(ortho_init=False, activation_fn=nn.ReLU, lstm_hidden_size=64, enable_critic_lstm=True,
net_arch=dict(pi=[64], vf=[64]))``. One torch thread, as rapidrl's runs.

The protocol is the row's (``tools/results``): every ``--eval-every`` steps, 10 deterministic episodes
(one per eval env, raw rewards, observations normalized with the training statistics frozen), timed apart from
training; solved at = the first evaluation >= 475, stays solved from = the first evaluation from which every later
one is >= 475. Each seed's result replaces that seed's rows in ``--out``/memory-peer.csv and memory-peer-evals.csv.
"""

from __future__ import annotations

import argparse
import csv
import datetime as dt
import time
from pathlib import Path

import gymnasium as gym
import numpy as np
import torch
from sb3_contrib import RecurrentPPO
from stable_baselines3.common.callbacks import BaseCallback
from stable_baselines3.common.env_util import make_vec_env
from stable_baselines3.common.vec_env import VecNormalize

SOLVE = 475.0
TASK = "Gymnasium CartPole-v1, velocities masked"
SETTING = ("sb3-contrib RecurrentPPO at rl-zoo3's CartPoleNoVel-v1 setting (hyperparams/ppo_lstm.yml: VecNormalize of "
           "observations and rewards, LSTM 64 for the actor and its own for the critic, pi/vf [64] ReLU, "
           "ortho_init False, 8 envs x 32 steps, batch 256, 20 epochs, gamma 0.98, lambda 0.8, lr 1e-3 and clip 0.2 "
           "linear), 1 torch thread, on " + TASK + " (tools/results/sb3_contrib_memory.py)")
RESULT_FIELDS = ["library", "task", "seed", "timesteps", "solve_step", "solve_wall_s", "stable_step", "eval_mean",
                 "eval_episodes", "wall_s", "date_utc", "setting"]
EVAL_FIELDS = ["seed", "step", "eval_mean", "wall_s"]


class PositionsOnly(gym.ObservationWrapper):
    """CartPole observing (cart position, pole angle): columns 0 and 2."""

    def __init__(self, env: gym.Env):
        super().__init__(env)
        box = env.observation_space
        self.observation_space = gym.spaces.Box(box.low[[0, 2]], box.high[[0, 2]], dtype=np.float32)

    def observation(self, obs):
        return obs[[0, 2]]


def make_task() -> gym.Env:
    return PositionsOnly(gym.make("CartPole-v1"))


def evaluate(model: RecurrentPPO, venv: VecNormalize, episodes: int, seed: int) -> float:
    """Mean return of ``episodes`` deterministic episodes, one per env, stepped together (LSTM state per env)."""
    envs = [make_task() for _ in range(episodes)]
    obs = np.stack([e.reset(seed=seed + i)[0] for i, e in enumerate(envs)])
    returns, done = np.zeros(episodes), np.zeros(episodes, bool)
    state, starts = None, np.ones(episodes, bool)
    while not done.all():
        actions, state = model.predict(venv.normalize_obs(obs), state=state, episode_start=starts, deterministic=True)
        starts = np.zeros(episodes, bool)
        for i, e in enumerate(envs):
            if done[i]:
                continue
            o, r, terminated, truncated, _ = e.step(int(actions[i]))
            obs[i], returns[i] = o, returns[i] + r
            done[i] = terminated or truncated
    return float(returns.mean())


class Probe(BaseCallback):
    """Evaluate every ``every`` steps; ``evals`` holds (step, mean, training wall-clock without evaluations)."""

    def __init__(self, every: int, episodes: int, seed: int):
        super().__init__()
        self.every, self.episodes, self.seed = every, episodes, seed
        self.evals: list[tuple[int, float, float]] = []
        self.eval_s = 0.0

    def _on_training_start(self) -> None:
        self.t0 = time.perf_counter()

    def _on_step(self) -> bool:
        if self.num_timesteps % self.every == 0:
            t = time.perf_counter()
            wall = t - self.t0 - self.eval_s
            mean = evaluate(self.model, self.model.get_env(), self.episodes, self.seed + 10_000 + len(self.evals))
            self.evals.append((self.num_timesteps, mean, wall))
            self.eval_s += time.perf_counter() - t
        return True


def run(seed: int, timesteps: int, every: int, episodes: int) -> tuple[dict, list[dict]]:
    torch.set_num_threads(1)
    env = VecNormalize(make_vec_env(make_task, n_envs=8, seed=seed), gamma=0.98)
    model = RecurrentPPO(
        "MlpLstmPolicy", env, n_steps=32, batch_size=256, n_epochs=20, gamma=0.98, gae_lambda=0.8, ent_coef=0.0,
        learning_rate=lambda f: 1e-3 * f, clip_range=lambda f: 0.2 * f, seed=seed, device="cpu", verbose=0,
        policy_kwargs=dict(ortho_init=False, activation_fn=torch.nn.ReLU, lstm_hidden_size=64,
                           enable_critic_lstm=True, net_arch=dict(pi=[64], vf=[64])))
    probe = Probe(every, episodes, seed)
    t0 = time.perf_counter()
    model.learn(timesteps, callback=probe)
    wall = time.perf_counter() - t0 - probe.eval_s
    final = evaluate(model, env, episodes, seed + 20_000)
    first = next(((s, w) for s, m, w in probe.evals if m >= SOLVE), None)
    stable = ""
    for s, m, _ in reversed(probe.evals):
        if m < SOLVE:
            break
        stable = s
    if final < SOLVE:
        stable = ""
    import sb3_contrib

    result = {"library": f"sb3-contrib {sb3_contrib.__version__}", "task": TASK, "seed": seed,
              "timesteps": model.num_timesteps, "solve_step": first[0] if first else "",
              "solve_wall_s": round(first[1], 1) if first else "", "stable_step": stable, "eval_mean": round(final, 2),
              "eval_episodes": episodes, "wall_s": round(wall, 1),
              "date_utc": dt.datetime.now(dt.timezone.utc).date().isoformat(), "setting": SETTING}
    evals = [{"seed": seed, "step": s, "eval_mean": round(m, 2), "wall_s": round(w, 1)} for s, m, w in probe.evals]
    return result, evals


def _replace(path: Path, fields: list[str], rows: list[dict], seed: int) -> None:
    old = []
    if path.is_file():
        with open(path, newline="") as f:
            old = [r for r in csv.DictReader(f) if int(r["seed"]) != seed]
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, fields)
        w.writeheader()
        w.writerows(sorted(old + rows, key=lambda r: (int(r["seed"]), int(r.get("step", 0)))))


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--seeds", default="0,1")
    p.add_argument("--timesteps", type=int, default=100_000)
    p.add_argument("--eval-every", type=int, default=5_120)
    p.add_argument("--episodes", type=int, default=10)
    p.add_argument("--out", default=str(Path(__file__).resolve().parents[2] / "docs" / "results"))
    args = p.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    for seed in (int(s) for s in args.seeds.split(",")):
        result, evals = run(seed, args.timesteps, args.eval_every, args.episodes)
        _replace(out / "memory-peer.csv", RESULT_FIELDS, [result], seed)
        _replace(out / "memory-peer-evals.csv", EVAL_FIELDS, evals, seed)
        print(f"seed {seed}: solved at {result['solve_step'] or '-'} steps ({result['solve_wall_s'] or '-'} s), "
              f"stays solved from {result['stable_step'] or '-'}, final eval {result['eval_mean']}, "
              f"training {result['wall_s']} s; evals " + " ".join(f"{e['step'] // 1000}k:{e['eval_mean']:.0f}"
                                                                  for e in evals), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
