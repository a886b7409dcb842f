"""Multi-agent suite: MPE simple_spread (3 agents) env steps/s and MAPPO training SPS against the peers.

Env cases (``env steps`` = agent-steps: one copy step of 3 agents counts 3): ``rapidrl`` is
``make_vec("MPE/simple_spread-v3", E)`` (E copies x 3 agents as rows, one Numba call per batch step, rows carry
[local obs | agent id | global state]); ``mpe2`` steps E of the reference package's parallel envs in a Python
loop (dict actions in, dicts out, reset when the episode ends), the way a Python vector env would. Discrete
actions, fixed random action arrays, episodes end and reset inside the timed steps.

Training (``extras``, each run in its own fresh process at each torch thread count, contenders and seeds
interleaved): ``rapidrl`` MAPPO (parameter-shared actor, centralized critic) against SuperSuit
(``pettingzoo_env_to_vec_env_v1`` + ``concat_vec_envs_v1``) + Stable-Baselines3 PPO (parameter sharing, local
critic) on the same task, the same number of agent-steps, rollout and minibatch sizes. SPS = agent-steps / wall
seconds of the learn call (a two-rollout warm-up run timed apart); each contender's best thread count is compared.
"""

from __future__ import annotations

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
    """Train ``lib`` for ``steps`` agent-steps in this process (a two-rollout warm-up timed apart); returns SPS."""
    t = TRAIN
    if lib == "rapidrl":
        import torch

        import rapidrl as rr
        from rapidrl.benchmarks.isolated import timed_learn

        def run(n, s):
            model = rr.MAPPO("MPE/simple_spread-v3", num_envs=t["copies"] * N_AGENTS, num_steps=t["num_steps"],
                             minibatch_size=t["minibatch_size"], update_epochs=t["update_epochs"],
                             learning_rate=t["learning_rate"], seed=s, torch_threads=torch.get_num_threads())
            return timed_learn(model, n)
    elif lib == "sb3":
        import supersuit as ss
        import torch
        from mpe2 import simple_spread_v3
        from stable_baselines3 import PPO

        def run(n, s):
            env = ss.pettingzoo_env_to_vec_env_v1(simple_spread_v3.parallel_env())
            env = ss.concat_vec_envs_v1(env, t["copies"], num_cpus=0, base_class="stable_baselines3")
            torch.manual_seed(s)  # SuperSuit's ConcatVecEnv has no seed(), which PPO(seed=...) would call
            model = PPO("MlpPolicy", env, n_steps=t["num_steps"], batch_size=t["minibatch_size"],
                        n_epochs=t["update_epochs"], learning_rate=t["learning_rate"], verbose=0, device="cpu")
            t0 = time.perf_counter()
            model.learn(n)
            return time.perf_counter() - t0, {}
    else:
        raise ValueError(f"unknown contender {lib!r}")
    from rapidrl.benchmarks.isolated import warm_then_run

    warmup, (wall, phases) = warm_then_run(run, t["copies"] * N_AGENTS * t["num_steps"] * 2, steps, seed)
    return {"sps": steps / wall, "warmup_s": warmup, "phases": phases}


def extras(ctx: Context):
    """rapidrl's MAPPO vs SuperSuit + SB3 PPO on simple_spread, own processes, best thread count each."""
    from rapidrl.benchmarks.isolated import interleaved, run_isolated, sps_rows, thread_counts

    steps = 24_000 if ctx.quick else 240_000
    seeds = [0] if ctx.quick else [0, 1, 2]
    libs = ["rapidrl"]
    if ctx.peer("supersuit") is not None and ctx.peer("sb3") is not None:
        libs.append("sb3")
    else:
        print("supersuit or stable-baselines3 is not installed: pip install supersuit stable-baselines3 (skipped)")
    target = f"{__name__}:job_train"
    jobs = {("rapidrl" if lib == "rapidrl" else "supersuit+sb3"):
            (lambda seed, th, lib=lib: run_isolated(target, {"lib": lib, "steps": steps, "seed": seed},
                                                    torch_threads=th)) for lib in libs}
    results = interleaved(jobs, seeds, thread_counts())
    case = (f"MAPPO simple_spread {steps} agent-steps ({TRAIN['copies']} copies x 3 agents x {TRAIN['num_steps']}, "
            f"{TRAIN['update_epochs']} epochs, mb {TRAIN['minibatch_size']}), seeds {seeds}")
    return "MAPPO training on simple_spread (each run in its own process; threads, seeds and contenders " \
        "interleaved)", sps_rows(case, results)
