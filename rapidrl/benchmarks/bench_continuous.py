"""Continuous control beyond SAC: TQC, CrossQ and DDPG against sb3-contrib / SB3, and HER against SB3's HER.

End to end, each library in its own fresh process (``rapidrl.benchmarks.isolated``) at 1 torch thread and at all
cores, libraries interleaved, each one's best thread count compared:

- ``tqc``: Walker2d-v5, sb3-contrib's TQC defaults (5 critics x 25 quantiles, 256x256, batch 256);
- ``crossq``: Walker2d-v5, sb3-contrib's CrossQ defaults (critics 1024x1024 with Batch Renormalization, actor
  256x256, policy_delay 3, batch 256);
- ``ddpg``: HalfCheetah-v5, SB3's DDPG at CleanRL's settings (256x256, batch 256, lr 3e-4, noise 0.1) with
  SB3's actor update every step (``policy_delay=1`` for rapidrl: the same settings);
- ``td3``: HalfCheetah-v5, SB3's TD3 at CleanRL's settings (256x256, batch 256, lr 3e-4, exploration noise 0.1,
  actor every 2nd update, target noise 0.2 clipped at 0.5: SB3's defaults and rapidrl's);
- ``her``: SAC + HER ("future", 4 sampled goals) on PointReach-v0 (the built-in goal task's Gymnasium twin for SB3,
  Dict observations, ``MultiInputPolicy``), rl-zoo3's FetchReach settings (gamma 0.95, lr 1e-3, 64x64, batch 256).

rapidrl runs at float32 (its default ``precision``, as the peers); for the algorithms in ``AUTO_PRECISION`` it
also runs at ``precision="auto"`` (bf16 autocast where the CPU has native bfloat16 and the algorithm's bf16
learning test passes: ``rapidrl.train.precision``), a contender of its own ("rapidrl/auto", its precision in the
note). Each rapidrl row's speed-up is its best SPS over the peer's best.

A run takes ``warmup`` env steps (random actions until ``learning_starts``, then updates; compilation and caches
included), timed apart, then ``steps`` more: SPS = steps / their wall time (one update per env step throughout).
The HER job trains in chunks, evaluates the success rate (the final step within the goal) of 50 episodes of the
Gymnasium twin after each, and reports the first env step and training wall time at which it reaches 0.95.

SB3 and sb3-contrib run in their own interpreter: ``RAPIDRL_SB3_PYTHON`` (default: this one), e.g. a venv with
``pip install torch==2.13.0 sb3-contrib stable-baselines3 numba`` (numba: to import the built-in goal task's module);
rapidrl's checkout is put on its path.

    python -m rapidrl.benchmarks.bench_continuous [--quick]           (rapidrl bench continuous)
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator

import numpy as np

from rapidrl.benchmarks.peers import sb3_python, source_tree

RUNS = {  # algo -> (env id, quick (warmup, steps), full (warmup, steps))
    "tqc": ("Walker2d-v5", (1_200, 1_000), (1_500, 2_000)),
    "crossq": ("Walker2d-v5", (1_200, 1_000), (1_500, 2_000)),
    "ddpg": ("HalfCheetah-v5", (1_200, 1_000), (1_500, 2_000)),
    "td3": ("HalfCheetah-v5", (1_200, 1_000), (1_500, 2_000)),
}
RAPIDRL_CLASS = {"tqc": "TQC", "crossq": "CrossQ", "ddpg": "DDPG", "td3": "TD3"}
"""rapidrl's class (``rapidrl.<name>``) of each algorithm of ``RUNS``."""
LEARNING_STARTS = 1_000
AUTO_PRECISION = ("tqc", "crossq", "td3")
"""Algorithms also run at precision="auto" (where bf16 measured faster and has a learning test)."""
HER_RUN = {"quick": (4_000, 1_000), "full": (12_000, 1_000)}  # (max steps, evaluation every)


# -- the libraries, same settings -------------------------------------------------------------------------
def build(lib: str, algo: str, seed: int, precision: str = "fp32", gradient_backend: str = "auto"):
    """A model of ``lib`` ("rapidrl" or "sb3") for ``algo`` with the settings of the module docstring (rapidrl at
    ``precision`` and ``gradient_backend``)."""
    if algo == "her":
        return _build_her(lib, seed)
    env_id = RUNS[algo][0]
    common = dict(learning_rate={"tqc": 3e-4, "crossq": 1e-3, "ddpg": 3e-4, "td3": 3e-4}[algo], batch_size=256,
                  buffer_size=100_000, learning_starts=LEARNING_STARTS, gamma=0.99)
    if lib == "rapidrl":
        import rapidrl as rr

        extra = {"tqc": dict(n_critics=5, n_quantiles=25, top_quantiles_to_drop_per_net=2, tau=0.005,
                             hidden=(256, 256)),
                 "crossq": dict(policy_delay=3, hidden=(256, 256), critic_hidden=(1024, 1024)),
                 "ddpg": dict(policy_delay=1, exploration_noise=0.1, tau=0.005, hidden=(256, 256)),
                 "td3": dict(policy_delay=2, exploration_noise=0.1, target_policy_noise=0.2, target_noise_clip=0.5,
                             tau=0.005, hidden=(256, 256))}[algo]
        cls = getattr(rr, RAPIDRL_CLASS[algo])
        return cls(env_id, seed=seed, torch_threads=None, precision=precision, gradient_backend=gradient_backend,
                   **common, **extra)
    import gymnasium as gym

    env = gym.make(env_id)
    if algo == "tqc":
        from sb3_contrib import TQC

        return TQC("MlpPolicy", env, seed=seed, device="cpu", tau=0.005, top_quantiles_to_drop_per_net=2,
                   policy_kwargs=dict(net_arch=[256, 256], n_critics=5, n_quantiles=25), **common)
    if algo == "crossq":
        from sb3_contrib import CrossQ

        return CrossQ("MlpPolicy", env, seed=seed, device="cpu", policy_delay=3,
                      policy_kwargs=dict(net_arch=dict(pi=[256, 256], qf=[1024, 1024])), **common)
    from stable_baselines3 import DDPG, TD3
    from stable_baselines3.common.noise import NormalActionNoise

    half = (env.action_space.high - env.action_space.low) / 2
    noise = NormalActionNoise(np.zeros_like(half), 0.1 * half)
    if algo == "td3":
        return TD3("MlpPolicy", env, seed=seed, device="cpu", tau=0.005, policy_delay=2, target_policy_noise=0.2,
                   target_noise_clip=0.5, policy_kwargs=dict(net_arch=[256, 256]), action_noise=noise, **common)
    return DDPG("MlpPolicy", env, seed=seed, device="cpu", tau=0.005, policy_kwargs=dict(net_arch=[256, 256]),
                action_noise=noise, **common)


def _build_her(lib: str, seed: int):
    settings = dict(learning_rate=1e-3, batch_size=256, buffer_size=100_000, learning_starts=LEARNING_STARTS,
                    gamma=0.95)
    if lib == "rapidrl":
        import rapidrl as rr

        return rr.SAC("PointReach-v0", seed=seed, torch_threads=None, her=True, her_goal_selection="future",
                      her_n_sampled_goal=4, hidden=(64, 64), **settings)
    import gymnasium as gym
    from stable_baselines3 import SAC, HerReplayBuffer

    from rapidrl.envs.goal.point_reach import MAX_EPISODE_STEPS, PointReachEnv

    env = gym.wrappers.TimeLimit(PointReachEnv(), MAX_EPISODE_STEPS)
    return SAC("MultiInputPolicy", env, seed=seed, device="cpu", replay_buffer_class=HerReplayBuffer,
               replay_buffer_kwargs=dict(n_sampled_goal=4, goal_selection_strategy="future"),
               policy_kwargs=dict(net_arch=[64, 64]), **settings)


def learn(lib: str, model, steps: int) -> None:
    if lib == "rapidrl":
        model.learn(steps, progress_bar=False)
    else:
        model.learn(steps, reset_num_timesteps=False)


def job_sps(lib: str, algo: str, warmup: int, steps: int, seed: int, precision: str = "fp32",
            gradient_backend: str = "auto") -> dict:
    """One library's run in a fresh process: warm-up, then ``steps`` timed env steps (rapidrl at ``precision`` and
    ``gradient_backend``)."""
    from rapidrl.benchmarks.harness import timed_learn

    model = build(lib, algo, seed, precision, gradient_backend)
    warm, wall = timed_learn(lambda n: learn(lib, model, n), warmup, steps)
    ran = f"precision {model.precision}, gradient backend {model.gradient_backend}" if lib == "rapidrl" else ""
    return {"sps": steps / wall, "wall_s": wall, "warmup_s": warm, "ran": ran}


def success_rate(lib: str, model, episodes: int = 50, seed: int = 10_000) -> float:
    """Fraction of ``episodes`` of the PointReach-v0 Gymnasium twin whose final step is within the goal, acting with
    each library's deterministic ``predict`` on the same episodes."""
    from rapidrl.envs.goal.point_reach import MAX_EPISODE_STEPS, PointReachEnv
    from rapidrl.envs.spaces import encode_observation

    env = PointReachEnv()
    wins = 0
    for k in range(episodes):
        obs, _ = env.reset(seed=seed + k)
        reward = -1.0
        for _ in range(MAX_EPISODE_STEPS):
            x = encode_observation(env.observation_space, obs, np.float32) if lib == "rapidrl" else obs
            action = model.predict(x, deterministic=True)
            action = action[0] if isinstance(action, tuple) else action
            obs, reward, *_ = env.step(action)
        wins += reward == 0.0
    return wins / episodes


def job_her(lib: str, max_steps: int, every: int, seed: int) -> dict:
    """SAC + HER until the success rate reaches 0.95 (or ``max_steps``): first step, training wall time, SPS."""
    model = build(lib, "her", seed)
    trained, wall, history = 0, 0.0, []
    reached = None
    while trained < max_steps:
        t0 = time.perf_counter()
        learn(lib, model, every)
        wall += time.perf_counter() - t0
        trained += every
        rate = success_rate(lib, model)
        history.append((trained, rate))
        if rate >= 0.95 and reached is None:
            reached = (trained, wall)
            break
    return {"sps": trained / wall, "wall_s": wall, "reached_step": reached and reached[0],
            "reached_wall_s": reached and reached[1], "history": history}


# -- the suite --------------------------------------------------------------------------------------------
def _update_call(algo: str, precision: str):
    """One gradient update of rapidrl's ``algo`` (its buffer filled by random steps) at ``precision``."""
    import rapidrl as rr

    env_id = RUNS[algo][0]
    cls = getattr(rr, RAPIDRL_CLASS[algo])
    extra = {"crossq": dict(critic_hidden=(1024, 1024), policy_delay=1), "tqc": {}, "ddpg": {}}[algo]
    model = cls(env_id, seed=0, torch_threads=None, precision=precision, batch_size=256, learning_starts=1_000,
                buffer_size=10_000, **extra)
    model.learn(1_000, progress_bar=False)  # random actions only: fills the buffer
    from rapidrl.benchmarks.harness import as_in_learn

    return as_in_learn(model, model._train_step)


def cases(ctx) -> Iterator:
    """One update (batch 256) of CrossQ (critics 1024x1024, the actor's step every update) and of TQC (5 x 25
    quantiles), float32 against bfloat16 autocast, at 1 torch thread: where bf16 pays (``precision``)."""
    import torch

    from rapidrl.benchmarks.harness import Case
    from rapidrl.train.precision import cpu_native_bf16

    torch.set_num_threads(1)
    for algo in ("crossq", "tqc"):
        contenders = {"rapidrl": _update_call(algo, "fp32")}
        if cpu_native_bf16():  # emulated bf16 is ~11x slower (rapidrl.train.precision): not a contender
            contenders["rapidrl/bf16"] = _update_call(algo, "bf16")
        yield Case(f"{algo}/update/b256", contenders, params={"algo": algo}, items_per_call=1, item_unit="updates")


def _sb3_available() -> str | None:
    """None when the SB3 interpreter has sb3-contrib, else why not."""
    probe = subprocess.run([sb3_python(), "-c", "import sb3_contrib, stable_baselines3"], capture_output=True)
    return None if probe.returncode == 0 else f"{sb3_python()} lacks sb3-contrib (set RAPIDRL_SB3_PYTHON)"


def _run(lib: str, target: str, kwargs: dict, threads: int) -> dict:
    """``target(lib=lib, **kwargs)`` in a fresh process at ``threads`` torch threads; lib "rapidrl/auto" is rapidrl
    at precision="auto"."""
    from rapidrl.benchmarks.isolated import run_isolated

    if lib == "rapidrl/auto":
        lib, kwargs = "rapidrl", {**kwargs, "precision": "auto"}
    python = None if lib == "rapidrl" else sb3_python()
    return run_isolated(f"{__name__}:{target}", {"lib": lib, **kwargs}, torch_threads=threads, python=python,
                        checkout=source_tree(python), timeout=7200)


def _rows(results: dict, run: str, columns) -> list[dict]:
    """One row per (library, thread count) of ``interleaved``'s one-seed ``results``: SPS, ``columns(result)``, and
    at each rapidrl contender's best thread count its speed-up over the peer's best (where a peer ran)."""
    from rapidrl.benchmarks.isolated import best_by_threads

    rows = []
    peer = next((best_by_threads(r)[1] for lib, r in results.items() if not lib.startswith("rapidrl")), None)
    for lib, by_threads in results.items():
        best_t, best = best_by_threads(by_threads)
        for t, (r,) in sorted(by_threads.items()):
            ours = lib.startswith("rapidrl") and peer is not None and t == best_t
            rows.append({"run": run, "library": lib, "torch threads": f"{t}{' (best)' if t == best_t else ''}",
                         "SPS": round(r["sps"], 1), **columns(r),
                         "rapidrl speed-up": round(best / peer, 2) if ours else ""})
    return rows


def extras(ctx) -> tuple[str, list[dict]]:
    """End-to-end SPS (and HER's steps and wall time to 95% success) per library at its best thread count."""
    from rapidrl.benchmarks.isolated import interleaved, thread_counts

    missing = _sb3_available()
    libs = ["rapidrl"] + ([] if missing else ["sb3"])
    only = os.environ.get("RAPIDRL_BENCH_CONTINUOUS", "tqc,crossq,ddpg,td3,her").split(",")
    rows = []
    for algo, (env_id, quick, full) in RUNS.items():
        if algo not in only:
            continue
        warm, steps = quick if ctx.quick else full
        kw = dict(algo=algo, warmup=warm, steps=steps)
        contenders = libs + (["rapidrl/auto"] if algo in AUTO_PRECISION else [])
        jobs = {lib: (lambda seed, t, lib=lib, kw=kw: _run(lib, "job_sps", {**kw, "seed": seed}, t))
                for lib in contenders}
        rows += _rows(interleaved(jobs, [0], thread_counts()), f"{algo} {env_id} {steps} steps after {warm}",
                      lambda r: {"warm-up s": round(r["warmup_s"], 1), "note": r.get("ran", "")})
    if "her" in only:
        max_steps, every = HER_RUN["quick" if ctx.quick else "full"]
        jobs = {lib: (lambda seed, t, lib=lib: _run(lib, "job_her", dict(max_steps=max_steps, every=every,
                                                                          seed=seed), t)) for lib in libs}
        rows += _rows(interleaved(jobs, [0], thread_counts()),
                      f"SAC+HER PointReach-v0 to 95% success (max {max_steps})",
                      lambda r: {"warm-up s": None, "note": f"95% at step {r['reached_step']}, {r['reached_wall_s']} s "
                                                           f"of training; success by step: {r['history']}"})
    if missing:
        rows.append({"run": "sb3 / sb3-contrib", "library": "skipped", "torch threads": "", "SPS": None,
                     "warm-up s": None, "note": missing, "rapidrl speed-up": ""})
    return "TQC, CrossQ, DDPG and HER end to end (each library in its own process, at its best torch threads)", rows


def main(argv: list[str] | None = None) -> int:
    """``python -m rapidrl.benchmarks.bench_continuous [options]``: ``rapidrl bench continuous [options]``."""
    from rapidrl.benchmarks.run import main as run_main  # the suite is in run.SUITES

    return run_main(["continuous", *(sys.argv[1:] if argv is None else argv)])


if __name__ == "__main__":
    sys.exit(main())
