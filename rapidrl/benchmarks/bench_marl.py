"""Multi-agent suite: MPE simple_spread (3 agents) env steps/s and MAPPO training SPS against the peers.

Env cases (``env steps`` = agent-steps: one copy step of 3 agents counts 3): ``rapidrl`` is
``make_vec("MPE/simple_spread-v3", E)`` (E copies x 3 agents as rows, one Numba call per batch step, rows carry
[local obs | agent id | global state]); ``mpe2`` steps E of the reference package's parallel envs in a Python
loop (dict actions in, dicts out, reset when the episode ends), the way a Python vector env would. Discrete
actions, fixed random action arrays, episodes end and reset inside the timed steps.

Training (``extras``, each run in its own process): ``rapidrl`` MAPPO (parameter-shared actor, centralized
critic) against SuperSuit (``pettingzoo_env_to_vec_env_v1`` + ``concat_vec_envs_v1``) + Stable-Baselines3 PPO
(parameter sharing, local critic) on the same task, the same number of agent-steps, rollout and minibatch
sizes. SPS = agent-steps / wall seconds of the learn call (warm-up run excluded).
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Iterator

import numpy as np

from rapidrl.benchmarks.harness import Case, Context

REPEATS = {"quick": 5, "full": 15}
SIZES = (8, 64, 512)
N_AGENTS = 3
TRAIN = dict(copies=32, num_steps=25, minibatch_size=600, update_epochs=5, learning_rate=7e-4)


def _reference_step(mpe2_ss, n: int, actions: np.ndarray):
    envs = [mpe2_ss.parallel_env() for _ in range(n)]
    for i, e in enumerate(envs):
        e.reset(seed=i)
    names = envs[0].possible_agents
    obs = np.zeros((n * N_AGENTS, 18), np.float32)
    rewards = np.zeros(n * N_AGENTS, np.float32)

    def step():
        for i, e in enumerate(envs):
            o, r, _, _, _ = e.step({a: actions[i * N_AGENTS + j] for j, a in enumerate(names)})
            for j, a in enumerate(names):
                obs[i * N_AGENTS + j] = o[a]
                rewards[i * N_AGENTS + j] = r[a]
            if not e.agents:
                e.reset()

    return step


def cases(ctx: Context) -> Iterator[Case]:
    for n in SIZES:
        case = Case(f"simple_spread_step/{n}x{N_AGENTS}", {}, params={"copies": n, "agents": N_AGENTS},
                    items_per_call=n * N_AGENTS, item_unit="agent-steps")
        actions = np.random.default_rng(0).integers(0, 5, n * N_AGENTS)
        make_vec = ctx.rapidrl("make_vec")
        if make_vec is not None:
            env = make_vec("MPE/simple_spread-v3", n, seed=0)
            env.reset(seed=0)
            case.contenders["rapidrl"] = lambda env=env, actions=actions: env.step(actions)
        mpe2 = ctx.peer("mpe2")
        if mpe2 is not None:
            from mpe2 import simple_spread_v3

            case.contenders["mpe2"] = _reference_step(simple_spread_v3, n, actions)
        yield case


def job_train(lib: str, steps: int, seed: int) -> dict:
    """Train ``lib`` for ``steps`` agent-steps (after a short untimed warm-up run); returns SPS."""
    t = TRAIN
    if lib == "rapidrl":
        import rapidrl as rr

        def run(n, s):
            model = rr.MAPPO("MPE/simple_spread-v3", num_envs=t["copies"] * N_AGENTS, num_steps=t["num_steps"],
                             minibatch_size=t["minibatch_size"], update_epochs=t["update_epochs"],
                             learning_rate=t["learning_rate"], seed=s)
            model.learn(n, progress_bar=False)
    else:
        import supersuit as ss
        from mpe2 import simple_spread_v3
        from stable_baselines3 import PPO

        def run(n, s):
            env = ss.pettingzoo_env_to_vec_env_v1(simple_spread_v3.parallel_env())
            env = ss.concat_vec_envs_v1(env, t["copies"], num_cpus=0, base_class="stable_baselines3")
            import torch

            torch.manual_seed(s)  # SuperSuit's ConcatVecEnv has no seed(), which PPO(seed=...) would call
            model = PPO("MlpPolicy", env, n_steps=t["num_steps"], batch_size=t["minibatch_size"],
                        n_epochs=t["update_epochs"], learning_rate=t["learning_rate"], verbose=0, device="cpu")
            model.learn(n)

    t0 = time.perf_counter()
    run(t["copies"] * N_AGENTS * t["num_steps"] * 2, seed)
    warmup = time.perf_counter() - t0
    t0 = time.perf_counter()
    run(steps, seed)
    return {"sps": steps / (time.perf_counter() - t0), "warmup_s": warmup}


def extras(ctx: Context):
    from rapidrl.benchmarks.isolated import run_isolated

    steps = 24_000 if ctx.quick else 240_000
    seeds = [0] if ctx.quick else [0, 1, 2]
    libs = ["rapidrl"]
    if ctx.peer("supersuit") is not None and ctx.peer("sb3") is not None:
        libs.append("sb3")
    results: dict[str, list[dict]] = {lib: [] for lib in libs}
    for seed in seeds:  # contenders interleaved
        for lib in libs:
            results[lib].append(run_isolated(f"{__name__}:job_train", {"lib": lib, "steps": steps, "seed": seed},
                                             torch_threads=1))
    base = statistics.median(r["sps"] for r in results["rapidrl"])
    case = (f"MAPPO simple_spread {steps} agent-steps ({TRAIN['copies']} copies x 3 agents x {TRAIN['num_steps']}, "
            f"{TRAIN['update_epochs']} epochs, mb {TRAIN['minibatch_size']}), own process, 1 torch thread")
    rows = []
    for lib, runs in results.items():
        sps = statistics.median(r["sps"] for r in runs)
        rows.append({"case": case, "contender": lib if lib == "rapidrl" else "supersuit+sb3",
                     "SPS (median)": f"{sps:,.0f}",
                     "warm-up s": f"{statistics.median(r['warmup_s'] for r in runs):.1f}",
                     "rapidrl speedup": f"{base / sps:.2f}x"})
    return "MAPPO training on simple_spread (each run in its own process)", rows
