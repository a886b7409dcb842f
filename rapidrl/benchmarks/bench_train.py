"""End-to-end training: PPO on CartPole-v1 at rlox's default setting against rlox and SB3 in one process.

Whole training runs are too long to repeat hundreds of times, so this suite has no micro-cases: ``extras``
trains each contender for the same number of steps, seeds interleaved round-robin (rapidrl, rlox, sb3,
rapidrl, ...), and reports SPS (env steps / wall seconds of the learn call) and the deterministic eval
return over 10 episodes. It also measures rapidrl's time to solve CartPole (wall time from the start of
``learn`` until a 10-episode eval mean >= 475, the fast preset, median of the seeds) and its phase breakdown.
"""

from __future__ import annotations

import statistics
import time

import numpy as np

from rapidrl.benchmarks.harness import Context

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


def _rapidrl_ppo(steps: int, seed: int):
    import rapidrl as rr

    d = RLOX_DEFAULTS
    model = rr.PPO("CartPole-v1", num_envs=d["n_envs"], num_steps=d["n_steps"], update_epochs=d["n_epochs"],
                   minibatch_size=d["batch_size"], learning_rate=d["learning_rate"], clip_coef=d["clip_eps"],
                   vf_coef=d["vf_coef"], ent_coef=d["ent_coef"], max_grad_norm=d["max_grad_norm"],
                   gamma=d["gamma"], gae_lambda=d["gae_lambda"], seed=seed)
    t0 = time.perf_counter()
    model.learn(steps, progress_bar=False)
    wall = time.perf_counter() - t0
    mean, _ = model.evaluate(10)
    phases = {k[len("time/frac_"):]: round(v, 3) for k, v in model.metrics.items() if k.startswith("time/frac_")}
    return wall, mean, phases


def _rlox_ppo(rlox, steps: int, seed: int):
    d = RLOX_DEFAULTS
    trainer = rlox.Trainer("ppo", "CartPole-v1", config=dict(d), seed=seed)
    t0 = time.perf_counter()
    trainer.train(steps)
    wall = time.perf_counter() - t0
    return wall, _gym_eval(lambda o: int(np.asarray(trainer.predict(o, deterministic=True)).reshape(-1)[0]), seed), {}


def _gym_eval(act, seed: int, episodes: int = 10) -> float:
    """Mean return of ``episodes`` deterministic CartPole-v1 episodes (rlox's own evaluate() hands the env a
    tensor that CartPole rejects, so the peer is evaluated here with its predict())."""
    import gymnasium as gym

    env = gym.make("CartPole-v1")
    total = 0.0
    for k in range(episodes):
        obs, _ = env.reset(seed=seed + 1000 + k)
        done = False
        while not done:
            obs, r, term, trunc, _ = env.step(act(obs))
            total += r
            done = term or trunc
    return total / episodes


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
    steps = 50_000
    seeds = [0] if ctx.quick else [0, 1, 2]
    runners = {"rapidrl": _rapidrl_ppo}
    rlox = ctx.peer("rlox")
    if rlox is not None:
        runners["rlox"] = lambda s, seed: _rlox_ppo(rlox, s, seed)
    sb3 = ctx.peer("sb3")
    if sb3 is not None:
        runners["sb3"] = lambda s, seed: _sb3_ppo(sb3, s, seed)
    _rapidrl_ppo(2048, 99)  # warm-up: loads the compiled kernels from Numba's cache
    results: dict[str, list[tuple[float, float, dict]]] = {n: [] for n in runners}
    for seed in seeds:  # interleaved: every contender runs each seed before the next seed starts
        for name, run in runners.items():
            results[name].append(run(steps, seed))
    base_sps = statistics.median(steps / r[0] for r in results["rapidrl"])
    rows = []
    for name, runs in results.items():
        sps = statistics.median(steps / r[0] for r in runs)
        rows.append({"case": f"PPO CartPole-v1 {steps} steps (8 envs x 128, 4 epochs, mb 256)", "contender": name,
                     "SPS (median)": f"{sps:,.0f}", "eval mean per seed": ", ".join(f"{r[1]:.0f}" for r in runs),
                     "rapidrl speedup": f"{base_sps / sps:.2f}x" if name != "rapidrl" else "1.00x",
                     "phases": str(runs[0][2]) if runs[0][2] else ""})
    solves = [time_to_solve(seed) for seed in seeds]
    times = [t for t, _ in solves if t is not None]
    rows.append({"case": "PPO CartPole-v1 time to solve (eval >= 475), fast preset", "contender": "rapidrl",
                 "SPS (median)": "", "eval mean per seed": ", ".join(
                     f"{t:.1f}s @ {n} steps" if t is not None else f"not solved in {n} steps" for t, n in solves),
                 "rapidrl speedup": f"median {np.median(times):.1f}s" if len(times) == len(solves) else "",
                 "phases": str(FAST_PRESET)})
    return "End-to-end training (seeds interleaved across contenders)", rows
