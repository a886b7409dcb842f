"""The value-distribution family and discrete SAC against the peers that ship them, end to end, each run in its own
process: C51 against CleanRL's ``c51.py``, QR-DQN against sb3-contrib, IQN against Tianshou's, Rainbow against
CleanRL's ``rainbow_atari.py``, SAC-discrete against CleanRL's ``sac_atari.py``.

Each contender trains with the peer's settings (``CASES``: the peer's defaults, with the budget, the replay size and
the warm-up cut to fit this machine; both sides get the same cuts). Every child prints a line per finished training
episode with its global step (CleanRL's own ``global_step=..., episodic_return=...`` lines; rapidrl and sb3-contrib
through a callback that prints the same line); this process stamps each line with the wall-clock since it started
the child. Per run:

- **training SPS**: env steps per second between the first episode that ends after ``learning_starts`` and the last
  one (the learning phase only: interpreter start, imports, compilation and the random warm-up are outside it);
- the whole run's wall-clock, and the mean return of the last ``WINDOW`` episodes.

The ratio is rapidrl's training SPS over the peer's, each at its best torch thread count (1 and all cores;
CleanRL through ``OMP_NUM_THREADS``/``MKL_NUM_THREADS``), seeds and contenders interleaved.

The CleanRL side needs ``RAPIDRL_CLEANRL_DIR`` (a directory holding ``cleanrl/`` and ``cleanrl_utils/`` of
github.com/vwxyzjn/cleanrl) and ``RAPIDRL_CLEANRL_PYTHON`` (an interpreter with CleanRL's requirements: torch,
gymnasium 0.29, ale-py, tyro, tensorboard); the sb3-contrib side ``RAPIDRL_SB3_PYTHON`` (``peers.sb3_python``); the
Tianshou side ``RAPIDRL_TIANSHOU_PYTHON`` (an interpreter with ``tianshou==2.0.1``; its run is Tianshou's own classes
driven as its ``OffPolicyTrainer`` drives them, collect then update, printing a line per finished episode).
A contender whose interpreter is missing is skipped and named. ``rapidrl bench value_dist`` runs every case;
``python -m rapidrl.benchmarks.bench_value_dist --case c51_cartpole --seeds 0 1 2`` one of them.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

from rapidrl.benchmarks.harness import Case, Context
from rapidrl.benchmarks.isolated import interleaved, stream_episodes, thread_counts
from rapidrl.benchmarks.peers import sb3_python

WINDOW = 20
EPISODE = re.compile(r"global_step=(\d+), episodic_return=\[?(-?[\d.]+)")

# CleanRL's Atari env ids are the v4 "NoFrameskip" games under its own wrappers (no sticky actions, 4-frame skip,
# 84x84 grey, 4 stacked); rapidrl's ALE/Breakout-v5 preset does the same preprocessing with the v5 default of
# sticky actions (0.25): the same frames per agent step and network, slightly different dynamics.
CASES: dict[str, dict] = {
    "c51_cartpole": dict(
        title="C51 CartPole-v1 (CleanRL c51.py defaults: 101 atoms in [-100, 100], batch 128 every 10 steps, "
              "target every 500, replay 10,000; 60k steps, learning from 10k)",
        algo="c51", env="CartPole-v1", steps=60_000, learning_starts=10_000,
        cleanrl=("c51.py", ["--env-id", "CartPole-v1"]),
        rapidrl=dict(learning_rate=2.5e-4, num_envs=1, n_atoms=101, v_min=-100.0, v_max=100.0, buffer_size=10_000,
                     gamma=0.99, target_update_interval=500, batch_size=128, exploration_initial_eps=1.0,
                     exploration_final_eps=0.05, exploration_fraction=0.5, train_freq=10, gradient_steps=1,
                     hidden=(120, 84), double_q=False, tau=1.0, adam_eps=0.01 / 128)),
    "qrdqn_cartpole": dict(
        title="QR-DQN CartPole-v1 (rl-zoo qrdqn.yml: 10 quantiles, 256x256, 128 gradient steps of 64 every 256 "
              "steps; 30k steps, learning from 1k)",
        algo="qrdqn", env="CartPole-v1", steps=30_000, learning_starts=1_000,
        sb3=dict(policy_kwargs=dict(net_arch=[256, 256], n_quantiles=10), learning_rate=2.3e-3, batch_size=64,
                 buffer_size=100_000, learning_starts=1_000, gamma=0.99, target_update_interval=10, train_freq=256,
                 gradient_steps=128, exploration_fraction=0.16, exploration_final_eps=0.04),
        rapidrl=dict(n_quantiles=10, hidden=(256, 256), learning_rate=2.3e-3, batch_size=64, buffer_size=100_000,
                     learning_starts=1_000, gamma=0.99, target_update_interval=10, train_freq=256, gradient_steps=128,
                     exploration_fraction=0.16, exploration_final_eps=0.04, double_q=False)),
    "rainbow_breakout": dict(
        title="Rainbow Breakout (CleanRL rainbow_atari.py defaults: noisy dueling C51 51 atoms, 3-step, PER "
              "alpha 0.5, batch 32 every 4 steps; replay 20,000, 12k steps, learning from 4k)",
        algo="rainbow", env="ALE/Breakout-v5", steps=12_000, learning_starts=4_000,
        cleanrl=("rainbow_atari.py", ["--env-id", "BreakoutNoFrameskip-v4", "--buffer-size", "20000"]),
        rapidrl=dict(buffer_size=20_000, batch_size=32, train_freq=4, gradient_steps=1, learning_rate=6.25e-5,
                     n_step=3, target_update_interval=8000, tau=1.0, n_atoms=51, v_min=-10.0, v_max=10.0,
                     adam_eps=1.5e-4, per_alpha=0.5, per_beta=0.4, per_beta_anneal_steps=2_000, encoder="nature")),
    "iqn_cartpole": dict(
        title="IQN CartPole-v1 (Tianshou 2.0.1's test/discrete/test_iqn.py settings: 10 envs, a 64-64 feature MLP, "
              "64 cosines, 8 + 8 fractions in the loss, 32 for acting, 3-step returns, gamma 0.9, Adam 3e-3, batch 64, "
              "one gradient step per 10 env steps, target copied every 320 gradient steps, replay 20,000, epsilon 0.1 "
              "to 10k steps then falling to 0.01 at 50k; 50k steps, learning from 640)",
        algo="iqn", env="CartPole-v1", steps=50_000, learning_starts=640,
        tianshou=dict(num_envs=10, hidden=[64, 64], num_cosines=64, sample_size=32, online_sample_size=8,
                      target_sample_size=8, n_step=3, gamma=0.9, lr=3e-3, batch_size=64, collect_steps=10,
                      updates_per_collect=1, target_update_freq=320, buffer_size=20_000, eps_train=0.1,
                      eps_decay=[10_000, 50_000], eps_final=0.01),
        # rapidrl counts the target interval in env steps (320 gradient steps x 10 env steps) and decays epsilon
        # linearly over the whole run (Tianshou holds it for the first 10k steps)
        rapidrl=dict(num_envs=10, hidden=(64, 64), quantile_embedding_dim=64, num_quantile_samples=32,
                     num_tau_samples=8, num_tau_prime_samples=8, n_step=3, gamma=0.9, learning_rate=3e-3,
                     batch_size=64, train_freq=1, gradient_steps=1, target_update_interval=3_200, tau=1.0,
                     buffer_size=20_000, exploration_initial_eps=0.1, exploration_final_eps=0.01,
                     exploration_fraction=1.0, adam_eps=1e-8, double_q=False, max_grad_norm=0.0)),
    "sac_discrete_breakout": dict(
        title="SAC-discrete Breakout (CleanRL sac_atari.py defaults: batch 64 every 4 steps, target every 8000, "
              "autotuned alpha, entropy scale 0.89; replay 20,000, 12k steps, learning from 4k; rapidrl at the "
              "Atari preset's precision=\"auto\": bf16 where native, the peer float32)",
        algo="sac_discrete", env="ALE/Breakout-v5", steps=12_000, learning_starts=4_000,
        cleanrl=("sac_atari.py", ["--env-id", "BreakoutNoFrameskip-v4", "--buffer-size", "20000"]),
        rapidrl=dict(buffer_size=20_000, batch_size=64, train_freq=4, gradient_steps=1, learning_rate=3e-4,
                     tau=1.0, target_update_interval=8000, target_entropy_scale=0.89, encoder="nature",
                     precision="auto")),  # the Atari preset's: bf16 where the CPU has it natively (the peer: float32)
}


def _episode_line(step: int, ret: float) -> str:
    return f"global_step={step}, episodic_return={ret}"


def job_rapidrl(case: str, seed: int) -> dict:
    """rapidrl's run of ``case`` in a child process: a CleanRL-style line per finished episode."""
    import torch

    from rapidrl.algos.registry import get_algorithm

    spec = CASES[case]
    settings = {**spec["rapidrl"], "learning_starts": spec["learning_starts"], "seed": seed,
                "torch_threads": torch.get_num_threads()}
    model = get_algorithm(spec["algo"])(spec["env"], **settings)
    seen = [0]

    def report(m) -> bool:
        new = m.num_episodes - seen[0]
        seen[0] = m.num_episodes
        for r in (m.recent_returns(100)[-new:] if new else []):
            print(_episode_line(m.num_timesteps, r), flush=True)
        return True

    model.learn(spec["steps"], callback=report, progress_bar=False)
    return {}


_SB3_JOB = """
import json, sys, torch
from sb3_contrib import QRDQN
from stable_baselines3.common.callbacks import BaseCallback
spec, seed = json.loads(sys.argv[1]), int(sys.argv[2])
class Report(BaseCallback):
    def _on_step(self):
        for info in self.locals.get("infos", []):
            if "episode" in info:
                print(f"global_step={self.num_timesteps}, episodic_return={info['episode']['r']}", flush=True)
        return True
kw = dict(spec["sb3"]); kw["learning_starts"] = spec["learning_starts"]
model = QRDQN("MlpPolicy", spec["env"], seed=seed, device="cpu", **kw)
model.learn(spec["steps"], callback=Report())
"""


_TIANSHOU_JOB = """
import json, sys
import gymnasium as gym, numpy as np, torch
from tianshou.algorithm import IQN
from tianshou.algorithm.modelfree.iqn import IQNPolicy
from tianshou.algorithm.optim import AdamOptimizerFactory
from tianshou.data import Collector, CollectStats, VectorReplayBuffer
from tianshou.env import DummyVectorEnv
from tianshou.utils.net.common import Net
from tianshou.utils.net.discrete import ImplicitQuantileNetwork
from tianshou.utils.torch_utils import policy_within_training_step
spec, seed = json.loads(sys.argv[1]), int(sys.argv[2])
ts = spec["tianshou"]
np.random.seed(seed)
torch.manual_seed(seed)
envs = DummyVectorEnv([lambda: gym.make(spec["env"]) for _ in range(ts["num_envs"])])
envs.seed(seed)
probe = gym.make(spec["env"])
feature = Net(state_shape=probe.observation_space.shape, action_shape=ts["hidden"][-1], hidden_sizes=ts["hidden"][:-1],
              softmax=False)
net = ImplicitQuantileNetwork(preprocess_net=feature, action_shape=int(probe.action_space.n),
                              num_cosines=ts["num_cosines"])
policy = IQNPolicy(model=net, action_space=probe.action_space, sample_size=ts["sample_size"],
                   online_sample_size=ts["online_sample_size"], target_sample_size=ts["target_sample_size"],
                   eps_training=ts["eps_train"], eps_inference=0.05)
algorithm = IQN(policy=policy, optim=AdamOptimizerFactory(lr=ts["lr"]), gamma=ts["gamma"],
                n_step_return_horizon=ts["n_step"], target_update_freq=ts["target_update_freq"])
buf = VectorReplayBuffer(ts["buffer_size"], buffer_num=ts["num_envs"])
collector = Collector[CollectStats](algorithm, envs, buf, exploration_noise=True)
step = 0
def report(stats):
    global step
    step += stats.n_collected_steps
    for r in stats.returns:
        print(f"global_step={step}, episodic_return={float(r)}", flush=True)
start, end = ts["eps_decay"]
with policy_within_training_step(policy):  # as Tianshou's OffPolicyTrainer: collect, then update
    collector.reset()
    report(collector.collect(n_step=spec["learning_starts"]))
    while step < spec["steps"]:
        frac = min(max((step - start) / (end - start), 0.0), 1.0)
        policy.set_eps_training(ts["eps_train"] + frac * (ts["eps_final"] - ts["eps_train"]))
        report(collector.collect(n_step=ts["collect_steps"]))
        for _ in range(ts["updates_per_collect"]):
            algorithm.update(buffer=buf, sample_size=ts["batch_size"])
"""


def tianshou_python() -> str | None:
    """The interpreter with Tianshou 2.0 (``RAPIDRL_TIANSHOU_PYTHON``: torch, gymnasium, tianshou), or None."""
    return os.environ.get("RAPIDRL_TIANSHOU_PYTHON") or None


_IMPORT_ALE = "try:\n    import ale_py  # noqa: F401\nexcept ImportError:\n    pass\n"


def _threads_env(threads: int) -> dict:
    return {**os.environ, "OMP_NUM_THREADS": str(threads), "MKL_NUM_THREADS": str(threads)}


def cleanrl_paths() -> tuple[str, Path] | None:
    """(interpreter, CleanRL directory) from the environment, or None."""
    root, python = os.environ.get("RAPIDRL_CLEANRL_DIR"), os.environ.get("RAPIDRL_CLEANRL_PYTHON")
    if not root or not python:
        return None
    if not (Path(root) / "cleanrl").is_dir() or not (Path(root) / "cleanrl_utils").is_dir():
        raise FileNotFoundError(f"RAPIDRL_CLEANRL_DIR={root} must hold CleanRL's cleanrl/ and cleanrl_utils/")
    return python, Path(root)


def _parse(line: str) -> list[tuple[int, float]]:
    m = EPISODE.search(line)
    return [(int(m.group(1)), float(m.group(2)))] if m else []


def run_contender(case: str, contender: str, seed: int, threads: int) -> dict:
    spec = CASES[case]
    env = _threads_env(threads)
    cwd = None
    if contender == "rapidrl":
        cmd = [sys.executable, "-m", "rapidrl.benchmarks.isolated", "rapidrl.benchmarks.bench_value_dist:job_rapidrl",
               json.dumps({"case": case, "seed": seed}), str(threads)]
    elif contender == "cleanrl":
        python, root = cleanrl_paths()
        script, args = spec["cleanrl"]
        cmd = [python, str(root / "cleanrl" / script), *args, "--seed", str(seed), "--no-cuda",
               "--total-timesteps", str(spec["steps"]), "--learning-starts", str(spec["learning_starts"])]
        cwd = tempfile.mkdtemp(prefix="cleanrl_runs_")  # its tensorboard files
        # ale-py 0.9 registers the Atari ids when imported; CleanRL's gym.make does not import it: a sitecustomize does
        Path(cwd, "sitecustomize.py").write_text(_IMPORT_ALE)
        env["PYTHONPATH"] = os.pathsep.join([str(root), cwd])
    elif contender == "tianshou":
        cmd = [tianshou_python(), "-c", _TIANSHOU_JOB, json.dumps(spec), str(seed)]
        cwd = tempfile.gettempdir()
    else:  # sb3-contrib
        cmd = [sb3_python(), "-c", _SB3_JOB, json.dumps(spec), str(seed)]
        cwd = tempfile.gettempdir()
    events, wall, _ = stream_episodes(cmd, env, cwd, _parse)
    return summary(events, wall, spec["learning_starts"])


def summary(events: list[tuple[float, int, float]], wall: float, learning_starts: int) -> dict:
    """Training SPS between the first episode ending after ``learning_starts`` and the last one, the whole run's
    seconds and the mean of the last ``WINDOW`` returns."""
    learning = [(sec, step) for sec, step, _ in events if step > learning_starts]
    sps = None
    if len(learning) >= 2 and learning[-1][0] > learning[0][0]:
        sps = (learning[-1][1] - learning[0][1]) / (learning[-1][0] - learning[0][0])
    returns = [ret for _, _, ret in events][-WINDOW:]
    return {"train_sps": sps, "wall_s": wall, "final": statistics.mean(returns) if returns else None,
            "episodes": len(events)}


def contenders(case: str) -> list[str]:
    spec = CASES[case]
    out = ["rapidrl"]
    if "cleanrl" in spec and cleanrl_paths() is not None:
        out.append("cleanrl")
    if "sb3" in spec:
        out.append("sb3_contrib")
    if "tianshou" in spec and tianshou_python() is not None:
        out.append("tianshou")
    return out


def compare(case: str, seeds: list[int], threads: list[int], progress=print) -> dict:
    def job(name: str):
        def run(seed: int, t: int) -> dict:
            result = run_contender(case, name, seed, t)
            progress(f"{case} {name} seed {seed} threads {t}: {json.dumps(result)}")
            return result
        return run

    return interleaved({name: job(name) for name in contenders(case)}, seeds, threads)


def _median(runs: list[dict], key: str) -> float | None:
    values = [r[key] for r in runs]
    return None if any(v is None for v in values) else statistics.median(values)


def rows(case: str, results: dict) -> list[dict]:
    best = {name: max(by_t, key=lambda t: _median(by_t[t], "train_sps") or 0.0) for name, by_t in results.items()}
    peer = next((n for n in results if n != "rapidrl"), None)
    ratio = ""
    if peer is not None:
        ours, theirs = (_median(results[n][best[n]], "train_sps") for n in ("rapidrl", peer))
        ratio = f"{ours / theirs:.2f}x {peer}" if ours and theirs else "n/a"
    out = []
    for name, by_t in results.items():
        for t, runs in sorted(by_t.items()):
            out.append({
                "case": CASES[case]["title"], "contender": name,
                "threads": f"{t}{' (best)' if t == best[name] else ''}",
                "training SPS (per seed)": " / ".join("n/a" if r["train_sps"] is None else f"{r['train_sps']:,.0f}"
                                                      for r in runs),
                "whole run s": " / ".join(f"{r['wall_s']:.1f}" for r in runs),
                f"mean of last {WINDOW} returns": " / ".join("n/a" if r["final"] is None else f"{r['final']:.1f}"
                                                           for r in runs),
                "rapidrl / peer (best vs best)": ratio if name == "rapidrl" and t == best[name] else "",
            })
    return out


def cases(ctx: Context) -> Iterator[Case]:
    return iter(())


def extras(ctx: Context):
    """Every case, 3 seeds (quick: one seed, the CartPole cases)."""
    names = [c for c in CASES if "cartpole" in c] if ctx.quick else list(CASES)
    seeds = [0] if ctx.quick else [0, 1, 2]
    out = []
    for name in names:
        out += rows(name, compare(name, seeds, thread_counts()))
    return ("C51, QR-DQN, IQN, Rainbow and SAC-discrete against the peers that ship them (each run in its own process; "
            "training SPS after the warm-up, stamped by the parent)"), out


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--case", choices=sorted(CASES), nargs="+", default=sorted(CASES))
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    p.add_argument("--threads", type=int, nargs="+", default=None, help="torch threads to try (default: 1 and all)")
    p.add_argument("--out", default=None, help="write the results as JSON here")
    args = p.parse_args(argv)
    everything = {}
    for case in args.case:
        everything[case] = compare(case, args.seeds, args.threads or thread_counts())
        for row in rows(case, everything[case]):
            print(json.dumps(row), flush=True)
    if args.out:
        Path(args.out).write_text(json.dumps(everything, indent=1))


if __name__ == "__main__":
    main()
