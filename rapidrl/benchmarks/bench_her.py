"""SAC + HER on gymnasium-robotics' Fetch tasks: rapidrl against SB3's SAC with its ``HerReplayBuffer``.

Each library in its own fresh process (``rapidrl.benchmarks.isolated``) at 1 torch thread and at all cores, the
libraries interleaved; both step the same gymnasium-robotics env on the same MuJoCo (``sb3_python()``'s
interpreter needs gymnasium-robotics and the same ``mujoco`` version as this one: the suite checks it). On MuJoCo 4
both run with ``rapidrl.envs.adapters.robotics.fix_joint_type_checks`` (gymnasium-robotics 1.4.2's joint-type
assert; no physics changes), the SB3 job importing it from this checkout.

Settings: rl-zoo3's SAC + HER for FetchReach (its ``hyperparams`` FetchReach entries): "future" goals, 4 sampled per
transition, gamma 0.95, learning rate 1e-3, batch 256, 1,000 random steps, 64x64 networks, one update per env step,
SAC's other defaults (two critics, tau 0.005, automatic entropy). rl-zoo3 also wraps the env in a TimeFeatureWrapper
and normalises observations (VecNormalize): neither library does here, so the comparison is of the same algorithm
on the same raw observations.

- ``reach``: FetchReach-v4 trained in chunks of ``every`` steps; after each, the success rate of 50 evaluation
  episodes (deterministic actions, ``info["is_success"]`` of the final step, the same 50 seeds for both libraries);
  it reports the first env step and the training wall time (evaluations excluded) at which it reaches 0.95.
- ``push``: FetchPush-v4 for a fixed budget, the success rate at its end (same evaluation).

SPS = env steps trained / training wall time (random steps and compilation included: the whole run); the first
chunk's seconds (``every`` steps: the 1,000 random steps, the first updates, loading compiled kernels) are reported
apart, with the SPS of the chunks after it.

    RAPIDRL_SB3_PYTHON=/path/to/venv/bin/python python -m rapidrl.benchmarks.bench_her [--quick]  (rapidrl bench her)

``RAPIDRL_BENCH_HER``: the tasks (default "reach"; "reach,push" adds FetchPush); ``RAPIDRL_BENCH_HER_SEEDS``:
seeds (default "0" with ``--quick``, else "0,1,2"); ``RAPIDRL_BENCH_HER_THREADS``: torch thread counts (default 1
and all cores).
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator

import numpy as np

from rapidrl.benchmarks.peers import sb3_python, source_tree

ENV_IDS = {"reach": "FetchReach-v4", "push": "FetchPush-v4"}
RUNS = {  # task -> mode -> (max steps, evaluate every, stop at success rate or None)
    "reach": {"quick": (6_000, 1_000, 0.95), "full": (20_000, 1_000, 0.95)},
    "push": {"quick": (10_000, 10_000, None), "full": (30_000, 10_000, None)},
}
SETTINGS = dict(learning_rate=1e-3, batch_size=256, buffer_size=1_000_000, learning_starts=1_000, gamma=0.95)
"""rl-zoo3's SAC + HER FetchReach settings (module docstring), shared by both libraries."""
HER = dict(n_sampled_goal=4, goal_selection_strategy="future")
HIDDEN = (64, 64)
EVAL_EPISODES = 50
EVAL_SEED = 10_000


def make_env(env_id: str):
    """One gymnasium-robotics env (its time limit included), with MuJoCo 4's joint-type fix where needed."""
    from rapidrl.envs.adapters import robotics

    return robotics.make(env_id)


def build(lib: str, env_id: str, seed: int):
    """SAC + HER of ``lib`` ("rapidrl" or "sb3") on ``env_id`` with ``SETTINGS``."""
    if lib == "rapidrl":
        import rapidrl as rr

        return rr.SAC(f"gymnasium_robotics:{env_id}", seed=seed, torch_threads=None, her=True,
                      her_goal_selection=HER["goal_selection_strategy"], her_n_sampled_goal=HER["n_sampled_goal"],
                      hidden=HIDDEN, **SETTINGS)
    from stable_baselines3 import SAC, HerReplayBuffer

    return SAC("MultiInputPolicy", make_env(env_id), seed=seed, device="cpu", replay_buffer_class=HerReplayBuffer,
               replay_buffer_kwargs=HER, policy_kwargs=dict(net_arch=list(HIDDEN)), **SETTINGS)


def learn(lib: str, model, steps: int) -> None:
    if lib == "rapidrl":
        model.learn(steps, progress_bar=False)
    else:
        model.learn(steps, reset_num_timesteps=False)


def success_rate(lib: str, model, env_id: str, episodes: int = EVAL_EPISODES, seed: int = EVAL_SEED) -> float:
    """Fraction of ``episodes`` (seeds ``seed``, ``seed + 1``, ...) whose final step has ``info["is_success"]``,
    acting with each library's deterministic ``predict`` (rapidrl on the flat encoding of the Dict observation its
    env trains on, SB3 on the Dict)."""
    from rapidrl.envs.spaces import encode_observation

    env = make_env(env_id)
    wins = 0
    for k in range(episodes):
        obs, _ = env.reset(seed=seed + k)
        done, info = False, {}
        while not done:
            x = encode_observation(env.observation_space, obs, np.float32) if lib == "rapidrl" else obs
            action = model.predict(x, deterministic=True)
            action = action[0] if isinstance(action, tuple) else action
            obs, _, terminated, truncated, info = env.step(action)
            done = terminated or truncated
        wins += bool(info.get("is_success", 0.0))
    env.close()
    return wins / episodes


def job_fetch(lib: str, env_id: str, max_steps: int, every: int, seed: int, stop_at: float | None = None) -> dict:
    """Train ``lib``'s SAC + HER on ``env_id`` in chunks of ``every`` steps, evaluating after each, until the success
    rate reaches ``stop_at`` (None: the whole ``max_steps``). SPS over the training time only."""
    model = build(lib, env_id, seed)
    trained, wall, history, reached = 0, 0.0, [], None
    while trained < max_steps:
        t0 = time.perf_counter()
        learn(lib, model, every)
        chunk = time.perf_counter() - t0
        wall += chunk
        trained += every
        rate = success_rate(lib, model, env_id)
        history.append((trained, rate, round(chunk, 2)))
        if stop_at is not None and rate >= stop_at:
            reached = (trained, round(wall, 2))
            break
    first = history[0][2]  # the random steps, the first updates and (rapidrl) loading compiled kernels
    after = (trained - every) / (wall - first) if trained > every else None
    return {"sps": trained / wall, "sps_after_first": after, "first_chunk_s": first, "wall_s": wall,
            "steps": trained, "final_success": history[-1][1], "reached_step": reached and reached[0],
            "reached_wall_s": reached and reached[1], "history": history}


# -- the suite --------------------------------------------------------------------------------------------
def cases(ctx) -> Iterator:
    """No per-call cases: the suite is its end-to-end runs (``extras``)."""
    return iter(())


def _peer_missing() -> str | None:
    """None when the SB3 interpreter has SB3 and gymnasium-robotics on this interpreter's MuJoCo, else why not."""
    import mujoco

    probe = subprocess.run([sb3_python(), "-c", "import stable_baselines3, gymnasium_robotics, mujoco; "
                            "print(mujoco.__version__)"], capture_output=True, text=True)
    if probe.returncode != 0:
        return f"{sb3_python()} lacks stable-baselines3 or gymnasium-robotics (set RAPIDRL_SB3_PYTHON)"
    theirs = probe.stdout.strip().splitlines()[-1]
    if theirs != mujoco.__version__:
        return f"{sb3_python()} has mujoco {theirs}, this interpreter {mujoco.__version__}: not the same physics"
    return None


def _run(lib: str, kwargs: dict, threads: int) -> dict:
    from rapidrl.benchmarks.isolated import run_isolated

    python = None if lib == "rapidrl" else sb3_python()
    return run_isolated(f"{__name__}:job_fetch", {"lib": lib, **kwargs}, torch_threads=threads, python=python,
                        checkout=source_tree(python), timeout=3600)


def _ints(name: str, default: str) -> list[int]:
    return [int(x) for x in os.environ.get(name, default).split(",") if x.strip()]


def extras(ctx) -> tuple[str, list[dict]]:
    """Per task, library and thread count: median SPS over the seeds, the steps and training seconds to 0.95 success
    (reach) or the final success rate (push); rapidrl's speed-up at each library's best thread count."""
    import statistics

    from rapidrl.benchmarks.isolated import best_by_threads, interleaved, thread_counts

    missing = _peer_missing()
    libs = ["rapidrl"] + ([] if missing else ["sb3"])
    mode = "quick" if ctx.quick else "full"
    seeds = _ints("RAPIDRL_BENCH_HER_SEEDS", "0" if ctx.quick else "0,1,2")
    threads = _ints("RAPIDRL_BENCH_HER_THREADS", ",".join(map(str, thread_counts())))
    rows = []
    for task in os.environ.get("RAPIDRL_BENCH_HER", "reach").split(","):
        max_steps, every, stop_at = RUNS[task][mode]
        kw = dict(env_id=ENV_IDS[task], max_steps=max_steps, every=every, stop_at=stop_at)
        jobs = {lib: (lambda seed, t, lib=lib, kw=kw: _run(lib, {**kw, "seed": seed}, t)) for lib in libs}
        results = interleaved(jobs, seeds, threads)
        peer = best_by_threads(results["sb3"])[1] if "sb3" in results else None
        for lib, by_threads in results.items():
            best_t, best = best_by_threads(by_threads)
            for t, runs in sorted(by_threads.items()):
                if stop_at is None:
                    outcome = f"success at {max_steps:,}: {[r['final_success'] for r in runs]}"
                else:
                    outcome = (f"{stop_at:.0%} at steps {[r['reached_step'] for r in runs]}, training s "
                               f"{[r['reached_wall_s'] for r in runs]}")
                rows.append({"run": f"SAC+HER {ENV_IDS[task]} seeds {seeds}", "library": lib,
                             "torch threads": f"{t}{' (best)' if t == best_t else ''}",
                             "SPS (median)": round(statistics.median(r["sps"] for r in runs), 1),
                             "SPS after the first chunk": [r["sps_after_first"] and round(r["sps_after_first"], 1)
                                                           for r in runs],
                             "first chunk s": [r["first_chunk_s"] for r in runs], "outcome": outcome,
                             "rapidrl speed-up": round(best / peer, 2) if lib == "rapidrl" and peer and t == best_t
                             else "", "history": [r["history"] for r in runs]})
    if missing:
        rows.append({"run": "sb3", "library": "skipped", "torch threads": "", "SPS (median)": None,
                     "SPS after the first chunk": "", "first chunk s": "", "outcome": missing, "rapidrl speed-up": "",
                     "history": ""})
    return "SAC + HER on Fetch (each library in its own process, at its best torch threads)", rows


def main(argv: list[str] | None = None) -> int:
    """``python -m rapidrl.benchmarks.bench_her [options]``: ``rapidrl bench her [options]``."""
    from rapidrl.benchmarks.run import main as run_main

    return run_main(["her", *(sys.argv[1:] if argv is None else argv)])


if __name__ == "__main__":
    sys.exit(main())
