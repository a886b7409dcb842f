"""MuJoCo suite: steps/s of the batched MuJoCo env against Gymnasium's vector envs and the bare engine.

Cases ``mujoco_step/<Task>/<n>`` for HalfCheetah-v5 and Humanoid-v5 at n = 1, 8, 64. One call is one step of
all n envs with a fixed random action array (float32 [n, act_dim]); episodes end and reset inside the timed
steps, as in training. Contenders:

- ``rapidrl``: ``rapidrl.make_vec(id, n)`` (``MujocoVecEnv``: observations, rewards, terminations and info
  terms of Gymnasium v5, its default thread count: one per core from 2 * cores envs up);
- ``rapidrl/1thread``: the same with ``num_threads=1`` (shows what the thread pool buys);
- ``mujoco/bare``: a Python loop over the same n ``MjData`` doing only ``ctrl[:] = a; mj_step(m, d,
  frame_skip); mj_rnePostConstraint(m, d)``, no observation, reward or reset: the limit of a Python-driven
  step on one thread;
- ``gymnasium/sync``: ``gymnasium.vector.SyncVectorEnv`` of ``gymnasium.make(id)``;
- ``gymnasium/async``: ``AsyncVectorEnv`` (one process per env; n <= 8 with ``--quick``, else every n);
- ``envpool/v4``: EnvPool's batched C++ MuJoCo env of the same model at version v4 (EnvPool has no v5; same
  XML and frame skip, v4 observation), synchronous ``step`` with its default thread pool: the multi-threaded
  engine-speed reference.
"""

from __future__ import annotations

import time
from collections.abc import Iterator

import numpy as np

from rapidrl.benchmarks.harness import Case, Context, rapidrl_precision

REPEATS = {"quick": 5, "full": 20}
TASKS = ("HalfCheetah-v5", "Humanoid-v5")
SIZES = (1, 8, 64)
ASYNC_MAX_QUICK = 8


def _bare_step(mujoco, env_id: str, n: int, actions: np.ndarray):
    """A zero-argument step of n bare MjData of the task's model (same frame skip as the task)."""
    from rapidrl.envs.engines.mujoco import MUJOCO_TASKS, _assets

    task = MUJOCO_TASKS[env_id]
    model = mujoco.MjModel.from_xml_path(str(_assets() / task.xml))
    datas = [mujoco.MjData(model) for _ in range(n)]
    skip = task.frame_skip

    def step():
        for i, d in enumerate(datas):
            d.ctrl[:] = actions[i]
            mujoco.mj_step(model, d, nstep=skip)
            mujoco.mj_rnePostConstraint(model, d)

    return step


def _case(ctx: Context, env_id: str, n: int) -> Case:
    case = Case(f"mujoco_step/{env_id.split('-')[0]}/{n}", {}, params={"env": env_id, "num_envs": n},
                items_per_call=n, item_unit="steps")
    gym = ctx.peer("gymnasium")
    probe = gym.make(env_id) if gym is not None else None
    act_dim = probe.action_space.shape[0] if probe is not None else {"HalfCheetah-v5": 6, "Humanoid-v5": 17}[env_id]
    if probe is not None:
        probe.close()
    actions = np.random.default_rng(0).uniform(-0.4, 0.4, (n, act_dim)).astype(np.float32)  # [n, act_dim]
    make_vec = ctx.rapidrl("make_vec")
    if make_vec is not None:
        env = make_vec(env_id, n, seed=0)
        case.add_env("rapidrl", env, actions)
        if getattr(env, "num_threads", 1) > 1:
            case.add_env("rapidrl/1thread", make_vec(env_id, n, seed=0, num_threads=1), actions)
    mujoco = ctx.peer("mujoco")
    if mujoco is not None:
        case.contenders["mujoco/bare"] = _bare_step(mujoco, env_id, n, actions)
    if gym is not None:
        case.add_env("gymnasium/sync", gym.vector.SyncVectorEnv([lambda: gym.make(env_id)] * n), actions)
        if n <= ASYNC_MAX_QUICK or not ctx.quick:
            case.add_env("gymnasium/async", gym.vector.AsyncVectorEnv([lambda: gym.make(env_id)] * n), actions)
        else:
            case.notes.append(f"gymnasium/async skipped at {n} envs with --quick ({n} processes)")
    envpool = ctx.peer("envpool")
    if envpool is not None:
        pool = envpool.make(env_id.replace("-v5", "-v4"), env_type="gymnasium", num_envs=n, seed=0)
        pool.reset()
        case.add_env("envpool/v4", pool, actions.astype(np.float64), reset=False)
    return case


def cases(ctx: Context) -> Iterator[Case]:
    for env_id in TASKS:
        for n in SIZES:
            yield _case(ctx, env_id, n)


# -- end to end -------------------------------------------------------------------------------------
SAC_ENV = "HalfCheetah-v5"
SAC_ZOO = dict(learning_rate=3e-4, batch_size=256, buffer_size=1_000_000, gamma=0.99, tau=0.005)
"""rl-zoo3's SAC on HalfCheetah (SB3 defaults, 256x256, 1 env); learning_starts is set per run."""


def _sac(lib: str, seed: int, learning_starts: int, device: str = "cpu"):
    precision = rapidrl_precision(lib)  # "rapidrl/bf16": precision="bf16" (--precision bf16)
    if precision is not None:
        from rapidrl.algos.sac import SAC

        return SAC(SAC_ENV, seed=seed, hidden=(256, 256), learning_starts=learning_starts, torch_threads=None,
                   precision=precision, device=device, **SAC_ZOO)
    if lib == "sb3":
        from stable_baselines3 import SAC

        return SAC("MlpPolicy", SAC_ENV, seed=seed, device=device, policy_kwargs=dict(net_arch=[256, 256]),
                   learning_starts=learning_starts, **SAC_ZOO)
    if lib == "rlox":
        if device != "cpu":
            raise ValueError("rlox runs on the CPU only")
        from rlox.algorithms.sac import SAC

        return SAC(SAC_ENV, seed=seed, hidden=256, learning_starts=learning_starts, **SAC_ZOO)
    raise ValueError(f"unknown contender {lib!r}")


def job_sac(lib: str, learning_starts: int, steps: int, seed: int, device: str = "cpu") -> dict:
    """One library in a fresh process, networks on ``device``: a short warm-up run (compilation, first
    allocations; timed apart), a run of ``learning_starts`` random steps alone, then a run of
    ``learning_starts + steps``; SPS of the learning phase = steps / (difference of the two walls)."""
    from rapidrl.benchmarks.bench_offpolicy import train

    t0 = time.perf_counter()
    train(lib, _sac(lib, seed + 99, 100, device), 200)
    warmup = time.perf_counter() - t0
    t0 = time.perf_counter()
    train(lib, _sac(lib, seed, learning_starts, device), learning_starts)
    random_wall = time.perf_counter() - t0
    t0 = time.perf_counter()
    train(lib, _sac(lib, seed, learning_starts, device), learning_starts + steps)
    wall = time.perf_counter() - t0
    return {"sps": steps / max(wall - random_wall, 1e-9), "wall_s": wall, "warmup_s": warmup,
            "phases": {"random_phase_s": round(random_wall, 2)}}


# rl-zoo3's PPO HalfCheetah setting (hyperparams/ppo.yml; the shipped preset before it moved to CleanRL's setting),
# kept here so that the speed comparison stays the one measured in earlier reports: larger networks, more epochs.
PPO_ZOO = dict(num_envs=1, num_steps=512, minibatch_size=64, update_epochs=20, gamma=0.98, gae_lambda=0.92,
               learning_rate=2.0633e-5, anneal_lr=False, clip_coef=0.1, ent_coef=4.01762e-4, vf_coef=0.58096,
               max_grad_norm=0.8, hidden=(256, 256), activation="relu", log_std_init=-2.0, normalize_obs=True,
               normalize_reward=True)


def _ppo_zoo() -> dict:
    return dict(PPO_ZOO)


def _ppo_run(lib: str, steps: int, seed: int) -> float:
    """Wall seconds of ``steps`` env steps of PPO at rl-zoo3's HalfCheetah setting (``PPO_ZOO``: 1 env x 512,
    20 epochs of 64, 256x256 ReLU, observation and reward normalization)."""
    p = _ppo_zoo()
    precision = rapidrl_precision(lib)
    if precision is not None:
        from rapidrl.algos.ppo import PPO

        model = PPO(SAC_ENV, seed=seed, torch_threads=None, precision=precision, **p)
        t0 = time.perf_counter()
        model.learn(steps, progress_bar=False)
        return time.perf_counter() - t0
    from stable_baselines3 import PPO
    from stable_baselines3.common.env_util import make_vec_env
    from stable_baselines3.common.vec_env import VecNormalize
    from torch import nn

    env = VecNormalize(make_vec_env(SAC_ENV, n_envs=1, seed=seed), gamma=p["gamma"])
    model = PPO("MlpPolicy", env, n_steps=p["num_steps"], batch_size=p["minibatch_size"], n_epochs=p["update_epochs"],
                gamma=p["gamma"], gae_lambda=p["gae_lambda"], learning_rate=p["learning_rate"],
                clip_range=p["clip_coef"], ent_coef=p["ent_coef"], vf_coef=p["vf_coef"],
                max_grad_norm=p["max_grad_norm"], seed=seed, device="cpu", verbose=0,
                policy_kwargs=dict(log_std_init=p["log_std_init"], ortho_init=False, activation_fn=nn.ReLU,
                                   net_arch=dict(pi=list(p["hidden"]), vf=list(p["hidden"]))))
    t0 = time.perf_counter()
    model.learn(steps)
    return time.perf_counter() - t0


def job_ppo(lib: str, steps: int, seed: int) -> dict:
    """One library in a fresh process: a one-rollout warm-up (timed apart), then ``steps`` env steps."""
    if rapidrl_precision(lib) is None and lib != "sb3":
        raise ValueError(f"unknown contender {lib!r}")
    warmup = _ppo_run(lib, 512, seed + 99)
    wall = _ppo_run(lib, steps, seed)
    return {"sps": steps / wall, "wall_s": wall, "warmup_s": warmup, "phases": {}}


def extras(ctx: Context):
    """SAC (vs SB3 and rlox) and PPO (vs SB3) on HalfCheetah-v5 at rl-zoo3's settings, each run in its own
    process at its best thread count."""
    from rapidrl.benchmarks.isolated import interleaved, run_isolated, sps_rows, thread_counts

    starts, steps = (1_000, 1_000) if ctx.quick else (10_000, 5_000)
    libs = ctx.rapidrl_contenders() + [p for p in ("sb3", "rlox") if ctx.peer(p) is not None]
    jobs = {lib: (lambda seed, t, lib=lib: run_isolated(
        f"{__name__}:job_sac", {"lib": lib, "learning_starts": starts, "steps": steps, "seed": seed},
        torch_threads=t)) for lib in libs}
    results = interleaved(jobs, [0], thread_counts())
    case = f"SAC {SAC_ENV}: {steps} learning steps after {starts} random (batch 256, 256x256, 1 env)"
    rows = sps_rows(case, results)
    ppo_steps = 2 * 512 if ctx.quick else 8 * 512
    libs = ctx.rapidrl_contenders() + (["sb3"] if ctx.peer("sb3") is not None else [])
    jobs = {lib: (lambda seed, t, lib=lib: run_isolated(
        f"{__name__}:job_ppo", {"lib": lib, "steps": ppo_steps, "seed": seed}, torch_threads=t)) for lib in libs}
    rows += sps_rows(f"PPO {SAC_ENV}: {ppo_steps} steps at rl-zoo3's setting (1 env x 512, 20 epochs of 64)",
                     interleaved(jobs, [0], thread_counts()))
    return ("SAC and PPO on MuJoCo end to end (SAC: SPS of the learning phase; each run in its own process; "
            "threads interleaved)", rows)
