"""MinAtar suite: steps/s of rapidrl's built-in MinAtar kernels against the ``minatar`` package.

Contenders: ``rapidrl`` (``rapidrl.make_vec("MinAtar/<Game>-v1", n)``: one Numba call per batch step,
one thread at these sizes), ``rapidrl/threads`` (the same with ``threads=True``: envs split over
Numba's threads; it wins on a quiet machine and loses badly on a busy one) and ``minatar`` (n
``minatar.Environment`` objects stepped in a Python loop, the way a Python vector env would: ``act``,
``reset`` when done, ``state()`` written into a batch array). Both use sticky actions (0.1) and
difficulty ramping, the package's defaults. Each call is one batch step with a fixed random action
array; env steps = batch steps * n. Episodes end and reset inside the timed steps, as in training.
Breakout at 8, 64 and 512 envs (the issue's targets), the other games at 512.
"""

from __future__ import annotations

import time
from collections.abc import Iterator

import numpy as np

from rapidrl.benchmarks.harness import Case, Context
from rapidrl.benchmarks.isolated import timed_learn, warm_then_run

REPEATS = {"quick": 5, "full": 15}
BREAKOUT_SIZES = (8, 64, 512)
OTHER_GAMES = ("SpaceInvaders", "Freeway", "Asterix", "Seaquest")
OTHER_SIZE = 512
_MODULE_NAMES = {"Breakout": "breakout", "SpaceInvaders": "space_invaders", "Freeway": "freeway",
                 "Asterix": "asterix", "Seaquest": "seaquest"}


def _package_step(minatar, game: str, n: int, action_set, actions: np.ndarray):
    """A zero-argument batch step of n package envs (Python loop), and its batch observation buffer."""
    envs = []
    for i in range(n):
        e = minatar.Environment(_MODULE_NAMES[game])
        e.seed(i)
        e.reset()
        envs.append(e)
    c = envs[0].state_shape()[2]
    obs = np.zeros((n, 10, 10, c), dtype=bool)  # [N, 10, 10, C], the package's layout
    rewards = np.zeros(n, dtype=np.float32)
    dones = np.zeros(n, dtype=bool)
    full = [action_set[a] for a in actions]

    def step():
        for i, e in enumerate(envs):
            r, d = e.act(full[i])
            if d:
                e.reset()
            rewards[i] = r
            dones[i] = d
            obs[i] = e.state()

    return step


def _case(ctx: Context, game: str, n: int) -> Case:
    env_id = f"MinAtar/{game}-v1"
    case = Case(f"minatar_step/{game}/{n}", {}, params={"env": env_id, "num_envs": n}, items_per_call=n,
                item_unit="steps")
    make_vec = ctx.rapidrl("make_vec")
    env = make_vec(env_id, n, seed=0) if make_vec is not None else None
    k = 3 if env is None else env.single_action_space.n
    actions = np.random.default_rng(0).integers(0, k, n)  # [n] int64
    if env is not None:
        env.reset(seed=0)
        case.contenders["rapidrl"] = lambda: env.step(actions)
        case.teardown.append(env.close)
        if n >= 64:  # the same kernel on Numba's threads (the default only above PARALLEL_MIN envs)
            tenv = make_vec(env_id, n, seed=0, threads=True)
            tenv.reset(seed=0)
            case.contenders["rapidrl/threads"] = lambda: tenv.step(actions)
            case.teardown.append(tenv.close)
    minatar = ctx.peer("minatar")
    if minatar is not None:
        from rapidrl.envs.minatar import MINATAR_IDS

        case.contenders["minatar"] = _package_step(minatar, game, n, MINATAR_IDS[env_id][2], actions)
    return case


def cases(ctx: Context) -> Iterator[Case]:
    """Breakout at each size, then the other four games at 512 envs."""
    for n in BREAKOUT_SIZES:
        yield _case(ctx, "Breakout", n)
    for game in OTHER_GAMES:
        yield _case(ctx, game, OTHER_SIZE)


# -- end to end -------------------------------------------------------------------------------------
E2E_ENV = "MinAtar/Breakout-v1"


def _preset() -> dict:
    from rapidrl.runs.config import preset_path, read_toml

    return read_toml(preset_path("ppo", E2E_ENV))["algo"]


def _rapidrl_ppo(steps: int, seed: int):
    import torch

    import rapidrl as rr

    model = rr.PPO(E2E_ENV, seed=seed, torch_threads=torch.get_num_threads(), **_preset())
    wall, phases = timed_learn(model, steps)
    return wall, phases


def _sb3_ppo(steps: int, seed: int):
    """SB3's PPO with the same hyperparameters and the same network (the MinAtar CNN as a features extractor:
    SB3's NatureCNN needs images of at least 36 pixels), on the ``minatar`` package's Gymnasium envs."""
    import gymnasium as gym
    import minatar.gym
    import torch
    from stable_baselines3 import PPO
    from stable_baselines3.common.env_util import make_vec_env
    from stable_baselines3.common.torch_layers import BaseFeaturesExtractor

    class MinAtarCNN(BaseFeaturesExtractor):
        def __init__(self, space: gym.spaces.Box):
            super().__init__(space, features_dim=128)
            c = space.shape[2]  # the package's frames are [10, 10, C]
            self.net = torch.nn.Sequential(torch.nn.Conv2d(c, 16, 3), torch.nn.ReLU(), torch.nn.Flatten(),
                                           torch.nn.Linear(16 * 8 * 8, 128), torch.nn.ReLU())

        def forward(self, obs):
            return self.net(obs.permute(0, 3, 1, 2).float())

    minatar.gym.register_envs()  # MinAtar/<Game>-v1 in Gymnasium's registry
    p = _preset()
    env = make_vec_env(E2E_ENV, n_envs=p["num_envs"], seed=seed)
    model = PPO("MlpPolicy", env, n_steps=p["num_steps"], batch_size=p["minibatch_size"], n_epochs=p["update_epochs"],
                learning_rate=p["learning_rate"], clip_range=p["clip_coef"], ent_coef=p["ent_coef"],
                gamma=p["gamma"], gae_lambda=p["gae_lambda"], seed=seed, device="cpu", verbose=0,
                policy_kwargs={"features_extractor_class": MinAtarCNN, "net_arch": {"pi": [], "vf": []}})
    t0 = time.perf_counter()
    model.learn(steps)
    wall = time.perf_counter() - t0
    env.close()
    return wall, {}


def job_ppo_minatar(lib: str, steps: int, seed: int) -> dict:
    """One contender's run in its own process: a one-rollout warm-up (timed apart), then ``steps`` env steps."""
    run = {"rapidrl": _rapidrl_ppo, "sb3": _sb3_ppo}.get(lib)
    if run is None:
        raise ValueError(f"unknown contender {lib!r}")
    p = _preset()
    warmup, (wall, phases) = warm_then_run(run, p["num_envs"] * p["num_steps"], steps, seed)
    return {"sps": steps / wall, "wall_s": wall, "warmup_s": warmup, "phases": phases}


def extras(ctx: Context):
    """PPO on MinAtar Breakout end to end at the preset (32 envs x 64, 4 epochs of 512), rapidrl vs SB3."""
    from rapidrl.benchmarks.isolated import interleaved, run_isolated, sps_rows, thread_counts

    p = _preset()
    rollout = p["num_envs"] * p["num_steps"]
    steps = 2 * rollout if ctx.quick else 25 * rollout
    libs = ["rapidrl"] + (["sb3"] if ctx.peer("sb3") is not None and ctx.peer("minatar") is not None else [])
    target = f"{__name__}:job_ppo_minatar"
    jobs = {lib: (lambda seed, t, lib=lib: run_isolated(target, {"lib": lib, "steps": steps, "seed": seed},
                                                         torch_threads=t)) for lib in libs}
    results = interleaved(jobs, [0], thread_counts())
    case = f"PPO {E2E_ENV} {steps} steps (preset: 32 envs x 64, 4 epochs, mb 512, MinAtar CNN)"
    return "PPO on MinAtar end to end (each run in its own process; threads and contenders interleaved)", \
        sps_rows(case, results)
