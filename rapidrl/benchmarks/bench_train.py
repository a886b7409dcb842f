"""End-to-end training: PPO on CartPole-v1 at rlox's default setting against rlox and SB3.

Whole training runs are too long to repeat hundreds of times, so this suite has no micro-cases: ``extras``
trains each contender for the same number of steps in its own fresh process (``rapidrl.benchmarks.isolated``:
no process-wide setting leaks from one library to another), at 1 torch thread and at all cores, seeds and
contenders interleaved, and reports SPS (env steps / wall seconds of the learn call, warm-up excluded and
reported apart) at each thread count and at each contender's best, and the deterministic eval return over
10 episodes. It also measures rapidrl's time to solve CartPole (wall time from the start of ``learn`` until
a 10-episode eval mean >= 475, the fast preset, median of the seeds) and its phase breakdown.
"""

from __future__ import annotations

import statistics
import time

import numpy as np

from rapidrl.benchmarks.episodes import gym_returns
from rapidrl.benchmarks.harness import Context
from rapidrl.benchmarks.isolated import timed_learn

REPEATS = {"quick": 1, "full": 1}

# rlox's PPOConfig defaults (rlox 1.2): the setting the peers are compared at.
RLOX_DEFAULTS = dict(n_envs=8, n_steps=128, n_epochs=4, batch_size=256, learning_rate=2.5e-4, clip_eps=0.2,
                     vf_coef=0.5, ent_coef=0.01, max_grad_norm=0.5, gamma=0.99, gae_lambda=0.95)
# The preset used for time-to-solve: more envs, bigger batches, fewer and larger updates. Chosen by a sweep
# (2026-11-22, seeds 0-10, first 10-episode eval >= 475): 2 epochs at lr 2e-3 solved every seed, median
# 1.6 s (max 4.5 s); the earlier 4 epochs at lr 1e-3 took a median 6.6 s on seeds 0-2.
FAST_PRESET = dict(num_envs=32, num_steps=32, minibatch_size=512, update_epochs=2, learning_rate=2e-3,
                   ent_coef=0.0, anneal_lr=False)


def cases(ctx: Context):
    return iter(())


def _rapidrl_ppo(steps: int, seed: int, threads: int = 1):
    import rapidrl as rr

    d = RLOX_DEFAULTS
    model = rr.PPO("CartPole-v1", num_envs=d["n_envs"], num_steps=d["n_steps"], update_epochs=d["n_epochs"],
                   minibatch_size=d["batch_size"], learning_rate=d["learning_rate"], clip_coef=d["clip_eps"],
                   vf_coef=d["vf_coef"], ent_coef=d["ent_coef"], max_grad_norm=d["max_grad_norm"],
                   gamma=d["gamma"], gae_lambda=d["gae_lambda"], seed=seed, torch_threads=threads)
    wall, phases = timed_learn(model, steps)
    mean, _ = model.evaluate(10)
    return wall, mean, phases


def _rlox_ppo(rlox, steps: int, seed: int):
    d = RLOX_DEFAULTS
    trainer = rlox.Trainer("ppo", "CartPole-v1", config=dict(d), seed=seed)
    t0 = time.perf_counter()
    trainer.train(steps)
    wall = time.perf_counter() - t0
    return wall, _gym_eval(lambda o: int(np.asarray(trainer.predict(o, deterministic=True)).reshape(-1)[0]), seed), {}


WARMUP_STEPS = 2048


def job_ppo(lib: str, steps: int, seed: int) -> dict:
    """One contender's whole run, for ``isolated.run_isolated`` (torch threads are set by the child before this
    runs): a warm-up run of ``WARMUP_STEPS`` (Numba cache loads, allocator, lazy imports; timed apart), then
    the measured run. Returns {"sps", "wall_s", "warmup_s", "eval", "phases"}."""
    import importlib

    import torch

    threads = torch.get_num_threads()
    if lib == "rapidrl":
        def run(n, s):
            return _rapidrl_ppo(n, s, threads)
    elif lib == "rlox":
        rlox = importlib.import_module("rlox")

        def run(n, s):
            return _rlox_ppo(rlox, n, s)
    elif lib == "sb3":
        sb3 = importlib.import_module("stable_baselines3")

        def run(n, s):
            return _sb3_ppo(sb3, n, s)
    else:
        raise ValueError(f"unknown contender {lib!r}")
    t0 = time.perf_counter()
    run(WARMUP_STEPS, 99)
    warmup = time.perf_counter() - t0
    wall, mean, phases = run(steps, seed)
    return {"sps": steps / wall, "wall_s": wall, "warmup_s": warmup, "eval": mean, "phases": phases}


THROUGHPUT_PRESET = "variants/ppo_cartpole_throughput.toml"


def job_throughput(seed: int) -> dict:
    """The throughput preset (1024 envs) in a fresh process: SPS of the measured run (after a warm-up run; the env
    steps it took, whole rollouts, over its wall time) and its eval."""
    import rapidrl as rr
    from rapidrl.runs.config import PRESETS_DIR, read_toml

    preset = read_toml(PRESETS_DIR / THROUGHPUT_PRESET)
    algo, steps = preset["algo"], preset["run"]["timesteps"]
    rr.PPO("CartPole-v1", seed=99, **algo).learn(2 * algo["num_envs"] * algo["num_steps"], progress_bar=False)
    model = rr.PPO("CartPole-v1", seed=seed, **algo)
    wall, phases = timed_learn(model, steps)
    done = model.num_timesteps  # whole rollouts: 400,000 asked is 25 rollouts of 16,384, 409,600 steps
    return {"sps": done / wall, "eval": model.evaluate(10)[0], "phases": phases, "steps": done}


def job_time_to_solve(seed: int) -> dict:
    t, n = time_to_solve(seed)
    return {"seconds": t, "steps": n}


def _gym_eval(act, seed: int, episodes: int = 10) -> float:
    """Mean return of ``episodes`` deterministic CartPole-v1 episodes (rlox's own evaluate() hands the env a
    tensor that CartPole rejects, so the peer is evaluated here with its predict())."""
    return float(np.mean(gym_returns(act, "CartPole-v1", episodes, seed + 1000)))


def _sb3_ppo(sb3, steps: int, seed: int):
    from stable_baselines3.common.env_util import make_vec_env
    from stable_baselines3.common.evaluation import evaluate_policy

    d = RLOX_DEFAULTS
    env = make_vec_env("CartPole-v1", n_envs=d["n_envs"], seed=seed)
    model = sb3.PPO("MlpPolicy", env, n_steps=d["n_steps"], batch_size=d["batch_size"], n_epochs=d["n_epochs"],
                    learning_rate=d["learning_rate"], clip_range=d["clip_eps"], vf_coef=d["vf_coef"],
                    ent_coef=d["ent_coef"], max_grad_norm=d["max_grad_norm"], gamma=d["gamma"],
                    gae_lambda=d["gae_lambda"], seed=seed, device="cpu", verbose=0)
    t0 = time.perf_counter()
    model.learn(steps)
    wall = time.perf_counter() - t0
    mean, _ = evaluate_policy(model, make_vec_env("CartPole-v1", n_envs=1, seed=seed + 1), n_eval_episodes=10)
    return wall, float(mean), {}


def time_to_solve(seed: int, budget: int = 300_000, threshold: float = 475.0) -> tuple[float | None, int]:
    """Wall seconds from learn() start until the eval mean reaches ``threshold`` (None if never), steps used."""
    import rapidrl as rr
    from rapidrl.train.callbacks import EvalCallback

    model = rr.PPO("CartPole-v1", seed=seed, **FAST_PRESET)
    stop = EvalCallback(eval_freq=8192, n_episodes=10, reward_threshold=threshold)
    model.learn(budget, callback=stop, progress_bar=False)
    solved = [h for h in stop.history if h[1] >= threshold]
    return (solved[0][3], solved[0][0]) if solved else (None, model.num_timesteps)


def extras(ctx: Context):
    from rapidrl.benchmarks.isolated import best_by_threads, interleaved, run_isolated, thread_counts

    steps = 10_000 if ctx.quick else 50_000
    seeds = [0] if ctx.quick else [0, 1, 2]
    libs = ["rapidrl"] + [p for p in ("rlox", "sb3") if ctx.peer(p) is not None]
    target = f"{__name__}:job_ppo"
    jobs = {lib: (lambda seed, t, lib=lib: run_isolated(target, {"lib": lib, "steps": steps, "seed": seed},
                                                         torch_threads=t)) for lib in libs}
    results = interleaved(jobs, seeds, thread_counts())
    _, base_sps = best_by_threads(results["rapidrl"])
    case = f"PPO CartPole-v1 {steps} steps (8 envs x 128, 4 epochs, mb 256), own process"
    rows = []
    for lib, by_threads in results.items():
        best_t, best_sps = best_by_threads(by_threads)
        for t, runs in sorted(by_threads.items()):
            sps = statistics.median(r["sps"] for r in runs)
            rows.append({"case": case, "contender": lib, "torch threads": f"{t}{' (best)' if t == best_t else ''}",
                         "SPS (median)": f"{sps:,.0f}",
                         "warm-up s": f"{statistics.median(r['warmup_s'] for r in runs):.1f}",
                         "eval mean per seed": ", ".join(f"{r['eval']:.0f}" for r in runs),
                         "rapidrl speedup (best vs best)": (f"{base_sps / best_sps:.2f}x" if lib != "rapidrl"
                                                            else "1.00x") if t == best_t else "",
                         "phases": str(runs[0]["phases"]) if runs[0]["phases"] else ""})
    thr = [run_isolated(f"{__name__}:job_throughput", {"seed": seed}, torch_threads=1) for seed in seeds]
    rows.append({"case": f"PPO CartPole-v1 throughput preset ({THROUGHPUT_PRESET}, {thr[0]['steps']} steps), "
                         "own process", "contender": "rapidrl", "torch threads": "1",
                 "SPS (median)": f"{statistics.median(r['sps'] for r in thr):,.0f}", "warm-up s": "",
                 "eval mean per seed": ", ".join(f"{r['eval']:.0f}" for r in thr),
                 "rapidrl speedup (best vs best)": "", "phases": str(thr[0]["phases"])})
    solves = [run_isolated(f"{__name__}:job_time_to_solve", {"seed": seed}, torch_threads=1) for seed in seeds]
    times = [r["seconds"] for r in solves if r["seconds"] is not None]
    rows.append({"case": "PPO CartPole-v1 time to solve (eval >= 475), fast preset, own process",
                 "contender": "rapidrl", "torch threads": "1", "SPS (median)": "", "warm-up s": "",
                 "eval mean per seed": ", ".join(f"{r['seconds']:.1f}s @ {r['steps']} steps" if r["seconds"] is not None
                                                 else f"not solved in {r['steps']} steps" for r in solves),
                 "rapidrl speedup (best vs best)": f"median {np.median(times):.1f}s" if len(times) == len(solves)
                 else "", "phases": str(FAST_PRESET)})
    return "End-to-end training (each run in its own process; seeds, threads and contenders interleaved)", rows
