"""Pixels suite: Atari frames/s by vectorization engine, and PPO on Atari end to end against Stable-Baselines3.

Env cases (``atari_step/Breakout/<n>``, n = 8, 16, 32): one call is one agent step of all n games with the
standard preprocessing (frame skip 4 with max-pool, 84x84 gray, 4-frame stack, 30 no-op resets, sticky actions
0.25 as ``ALE/Breakout-v5``), a fixed random action array; frames/s counts emulator frames (4 per agent step).
Contenders, each at its own best thread setting (the C++ pools at one thread per core):

- ``rapidrl``: ``rapidrl.make_vec("ALE/Breakout-v5", n)``, the default (``AtariVecEnv`` on ale-py's vector env,
  episodic life and reward clipping done in NumPy to keep the real scores);
- ``ale_py``: ``ale_py.vector_env.AtariVectorEnv`` alone (the engine underneath: the limit);
- ``envpool``: ``envpool.make("Breakout-v5", env_type="gymnasium", ...)`` with the same settings;
- ``gymnasium``: ``gymnasium.vector.AsyncVectorEnv`` of n processes running ``AtariPreprocessing`` +
  ``FrameStackObservation`` (what a Gymnasium user writes).

End to end (``extras``): PPO at CleanRL's ppo_atari setting (8 envs x 128 steps, 4 epochs of 4 minibatches,
Nature CNN) on Breakout, rapidrl (``configs/ppo_atari.toml``) against SB3's ``PPO("CnnPolicy")`` on
``make_atari_env`` + ``VecFrameStack(4)`` (its standard Atari pipeline), each run in its own process at 1 torch
thread and at all cores, warm-up apart; SPS = agent steps per second of the measured ``learn`` call.
DQN at CleanRL's dqn_atari setting (batch 32 every 4 steps, Nature CNN; a 20k replay, which SB3 can hold; plain
DQN targets as CleanRL and SB3, where rapidrl's preset is Double DQN) against SB3's ``DQN("CnnPolicy")``: SPS of
the learning phase, as the SAC comparison of ``bench_mujoco``.
``--precision bf16`` adds rapidrl with ``precision="bf16"`` as the contender ``rapidrl/bf16``.
"""

from __future__ import annotations

import time
from collections.abc import Iterator

import numpy as np

from rapidrl.benchmarks.harness import Case, Context, rapidrl_precision
from rapidrl.benchmarks.isolated import timed_learn

REPEATS = {"quick": 5, "full": 15}
SIZES = (8, 16, 32)
GAME, ENV_ID, ENVPOOL_ID = "breakout", "ALE/Breakout-v5", "Breakout-v5"
FRAME_SKIP = 4


def _gymnasium_async(n: int):
    import ale_py
    import gymnasium as gym

    gym.register_envs(ale_py)

    def make():
        import ale_py
        import gymnasium as gym

        gym.register_envs(ale_py)
        env = gym.make(ENV_ID, frameskip=1, repeat_action_probability=0.25)
        env = gym.wrappers.AtariPreprocessing(env, noop_max=30, frame_skip=FRAME_SKIP, screen_size=84,
                                              terminal_on_life_loss=False, grayscale_obs=True)
        return gym.wrappers.FrameStackObservation(env, 4)

    return gym.vector.AsyncVectorEnv([make] * n)


def _case(ctx: Context, n: int) -> Case:
    case = Case(f"atari_step/Breakout/{n}", {}, params={"env": ENV_ID, "num_envs": n}, items_per_call=n * FRAME_SKIP,
                item_unit="frames")
    actions = np.random.default_rng(0).integers(0, 4, n)  # [n] int64, Breakout's minimal action set
    make_vec = ctx.rapidrl("make_vec")
    if make_vec is not None:
        case.add_env("rapidrl", make_vec(ENV_ID, n, seed=0), actions)
    ale_py = ctx.peer("ale_py")
    if ale_py is not None:
        from ale_py.vector_env import AtariVectorEnv

        raw = AtariVectorEnv(GAME, n, repeat_action_probability=0.25, autoreset_mode="SameStep", episodic_life=True,
                             reward_clipping=True)
        case.add_env("ale_py", raw, actions)
    envpool = ctx.peer("envpool")
    if envpool is not None:
        pool = envpool.make(ENVPOOL_ID, env_type="gymnasium", num_envs=n, seed=0, repeat_action_probability=0.25,
                            episodic_life=True, reward_clip=True)
        pool.reset()
        case.add_env("envpool", pool, actions.astype(np.int32), reset=False)
    if ctx.peer("gymnasium") is not None:
        case.add_env("gymnasium/async", _gymnasium_async(n), actions)
    return case


def cases(ctx: Context) -> Iterator[Case]:
    for n in SIZES:
        yield _case(ctx, n)


# -- end to end -------------------------------------------------------------------------------------
CLEANRL = dict(num_envs=8, num_steps=128, update_epochs=4, minibatch_size=256, learning_rate=2.5e-4, clip_coef=0.1,
               ent_coef=0.01, vf_coef=0.5, max_grad_norm=0.5, gamma=0.99, gae_lambda=0.95)


def _rapidrl_ppo(steps: int, seed: int, threads: int, precision: str = "fp32", device: str = "cpu"):
    import rapidrl as rr

    model = rr.PPO(ENV_ID, seed=seed, torch_threads=threads, precision=precision, device=device, **CLEANRL)
    wall, phases = timed_learn(model, steps)
    model.env.close()
    return wall, phases


def _sb3_ppo(steps: int, seed: int, device: str = "cpu"):
    import ale_py
    import gymnasium as gym
    from stable_baselines3 import PPO
    from stable_baselines3.common.env_util import make_atari_env
    from stable_baselines3.common.vec_env import VecFrameStack

    gym.register_envs(ale_py)
    c = CLEANRL
    env = VecFrameStack(make_atari_env(ENV_ID, n_envs=c["num_envs"], seed=seed, env_kwargs={"frameskip": 1}), 4)
    model = PPO("CnnPolicy", env, n_steps=c["num_steps"], batch_size=c["minibatch_size"], n_epochs=c["update_epochs"],
                learning_rate=c["learning_rate"], clip_range=c["clip_coef"], ent_coef=c["ent_coef"],
                vf_coef=c["vf_coef"], max_grad_norm=c["max_grad_norm"], gamma=c["gamma"], gae_lambda=c["gae_lambda"],
                seed=seed, device=device, verbose=0)
    t0 = time.perf_counter()
    model.learn(steps)
    wall = time.perf_counter() - t0
    env.close()
    return wall, {}


def job_ppo_atari(lib: str, steps: int, seed: int, device: str = "cpu") -> dict:
    """One contender's run in its own process (``isolated.run_isolated``): a one-rollout warm-up (timed apart),
    then ``steps`` agent steps, networks on ``device``. Returns {"sps", "wall_s", "warmup_s", "phases"}."""
    import torch

    threads = torch.get_num_threads()
    precision = rapidrl_precision(lib)  # "rapidrl/bf16": rapidrl with precision="bf16" (--precision bf16)
    if precision is not None:
        def run(n, s):
            return _rapidrl_ppo(n, s, threads, precision, device)
    elif lib == "sb3":
        def run(n, s):
            return _sb3_ppo(n, s, device)
    else:
        raise ValueError(f"unknown contender {lib!r}")
    t0 = time.perf_counter()
    run(CLEANRL["num_envs"] * CLEANRL["num_steps"], 99)
    warmup = time.perf_counter() - t0
    wall, phases = run(steps, seed)
    return {"sps": steps / wall, "wall_s": wall, "warmup_s": warmup, "phases": phases}


# DQN at CleanRL's dqn_atari setting (configs/dqn_atari.toml) but a replay of DQN_BUFFER transitions: SB3 stores
# obs and next_obs whole (56 KB a transition), so its 1M replay would not fit; the speed of a step does not depend
# on the capacity.
DQN_CLEANRL = dict(batch_size=32, learning_rate=1e-4, gamma=0.99, train_freq=4, gradient_steps=1,
                   target_update_interval=1000, exploration_fraction=0.1, exploration_final_eps=0.01)
DQN_BUFFER = 20_000


def _dqn(lib: str, seed: int, learning_starts: int, threads: int, device: str = "cpu"):
    precision = rapidrl_precision(lib)
    if precision is not None:
        import rapidrl as rr

        # double_q=False: CleanRL's dqn_atari and SB3's DQN are plain DQN, so all contenders do the same update
        # (the shipped preset is Double DQN: one more no-grad forward of the batch's next observations)
        return rr.DQN(ENV_ID, seed=seed, torch_threads=threads, precision=precision, device=device,
                      buffer_size=DQN_BUFFER, learning_starts=learning_starts, encoder="nature", max_grad_norm=10.0,
                      double_q=False, **DQN_CLEANRL)
    if lib == "sb3":
        import ale_py
        import gymnasium as gym
        from stable_baselines3 import DQN
        from stable_baselines3.common.env_util import make_atari_env
        from stable_baselines3.common.vec_env import VecFrameStack

        gym.register_envs(ale_py)
        env = VecFrameStack(make_atari_env(ENV_ID, n_envs=1, seed=seed, env_kwargs={"frameskip": 1}), 4)
        return DQN("CnnPolicy", env, buffer_size=DQN_BUFFER, learning_starts=learning_starts, seed=seed,
                   device=device, verbose=0, max_grad_norm=10.0, **DQN_CLEANRL)
    raise ValueError(f"unknown contender {lib!r}")


def job_dqn_atari(lib: str, learning_starts: int, steps: int, seed: int, device: str = "cpu") -> dict:
    """One contender in its own process: a short warm-up run (timed apart), a run of ``learning_starts`` random
    steps alone, then one of ``learning_starts + steps``; SPS of the learning phase = steps / (difference)."""
    import torch

    from rapidrl.benchmarks.bench_offpolicy import train

    threads = torch.get_num_threads()
    t0 = time.perf_counter()
    train(lib, _dqn(lib, seed + 99, 100, threads, device), 300)
    warmup = time.perf_counter() - t0
    t0 = time.perf_counter()
    train(lib, _dqn(lib, seed, learning_starts, threads, device), learning_starts)
    random_wall = time.perf_counter() - t0
    t0 = time.perf_counter()
    train(lib, _dqn(lib, seed, learning_starts, threads, device), learning_starts + steps)
    wall = time.perf_counter() - t0
    return {"sps": steps / max(wall - random_wall, 1e-9), "wall_s": wall, "warmup_s": warmup,
            "phases": {"random_phase_s": round(random_wall, 2)}}


def extras(ctx: Context):
    from rapidrl.benchmarks.isolated import interleaved, run_isolated, sps_rows, thread_counts

    rollout = CLEANRL["num_envs"] * CLEANRL["num_steps"]
    steps = 2 * rollout if ctx.quick else 12 * rollout  # 12 rollouts = 12,288 agent steps = 49,152 frames
    libs = ctx.rapidrl_contenders() + (["sb3"] if ctx.peer("sb3") is not None else [])
    target = f"{__name__}:job_ppo_atari"
    jobs = {lib: (lambda seed, t, lib=lib: run_isolated(target, {"lib": lib, "steps": steps, "seed": seed},
                                                         torch_threads=t)) for lib in libs}
    results = interleaved(jobs, [0], thread_counts())
    case = f"PPO ALE/Breakout-v5 {steps} agent steps ({4 * steps} frames; 8 envs x 128, 4 epochs, mb 256)"
    rows = sps_rows(case, results)
    starts, dqn_steps = (500, 500) if ctx.quick else (2_000, 4_000)
    jobs = {lib: (lambda seed, t, lib=lib: run_isolated(
        f"{__name__}:job_dqn_atari", {"lib": lib, "learning_starts": starts, "steps": dqn_steps, "seed": seed},
        torch_threads=t)) for lib in libs}
    rows += sps_rows(f"DQN ALE/Breakout-v5: {dqn_steps} learning steps after {starts} random (CleanRL dqn_atari: "
                     f"batch 32 every 4 steps; replay {DQN_BUFFER:,})", interleaved(jobs, [0], thread_counts()))
    return "PPO and DQN on Atari end to end (each run in its own process; threads and contenders interleaved)", rows
