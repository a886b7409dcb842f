"""GPU throughput: ``python -m rapidrl.benchmarks.gpu [--envs 4096,16384] [--steps N] [--cuda-graph] [--heavy]``.

For each env count, PPO on CartPole-v1 with a ``TorchVecEnv`` on the GPU (env, policy, rollout storage and
GAE on the device; scalars read every 50 updates: ``log_every_steps``) trains for a fixed number of env steps after a
warm-up; prints env steps per second (and the collect/update split) as a table and writes JSON.

``--heavy`` adds the heavy-network workloads with their networks on the GPU, rapidrl (fp32 and bf16) against
Stable-Baselines3 where it is installed, each run in its own process at 1 torch thread (the arithmetic is on
the GPU) through the CPU suites' own jobs: PPO and DQN on Atari at CleanRL's settings (``bench_pixels``) and
SAC on HalfCheetah-v5 at rl-zoo3's (``bench_mujoco``); the envs step on the CPU as in those suites.
Without a CUDA GPU it prints a message and exits 0.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path


def run(num_envs: int, steps: int, cuda_graph: bool) -> dict:
    import rapidrl as rr

    env = rr.make_vec("CartPole-v1", num_envs, seed=0, device="cuda", validate_actions=False)
    num_steps = 16
    batch = num_envs * num_steps
    model = rr.PPO(env, num_envs=num_envs, num_steps=num_steps, minibatch_size=batch // 4, update_epochs=4,
                   learning_rate=1e-3, device="cuda", env_device="cuda", log_every_steps=50 * batch,
                   cuda_graph=cuda_graph, torch_threads=None, seed=0)
    model.learn(2 * batch, progress_bar=False)  # warm-up: kernels, allocator, graph capture
    import torch

    torch.cuda.synchronize()
    t0 = time.perf_counter()
    model.learn(max(steps, batch), progress_bar=False)
    torch.cuda.synchronize()
    wall = time.perf_counter() - t0
    phases = {k[len("time/frac_"):]: round(v, 3) for k, v in model.metrics.items() if k.startswith("time/frac_")}
    return {"num_envs": num_envs, "steps": model.num_timesteps - 2 * batch, "wall_s": round(wall, 3),
            "sps": round((model.num_timesteps - 2 * batch) / wall), "cuda_graph": cuda_graph, "phases": phases}


def heavy_rows(quick: bool, device: str = "cuda", only=("ppo", "dqn", "sac")) -> list[dict]:
    """End-to-end SPS rows of PPO Atari, DQN Atari and SAC HalfCheetah (those named in ``only``) with the networks
    on ``device``."""
    import importlib.util

    from rapidrl.benchmarks import bench_mujoco, bench_pixels
    from rapidrl.benchmarks.isolated import interleaved, run_isolated, sps_rows

    libs = ["rapidrl", "rapidrl/bf16"] + (["sb3"] if importlib.util.find_spec("stable_baselines3") else [])
    rollout = bench_pixels.CLEANRL["num_envs"] * bench_pixels.CLEANRL["num_steps"]
    ppo_steps = (2 if quick else 8) * rollout
    starts, off_steps = (500, 500) if quick else (1_000, 2_000)
    workloads = {
        "ppo": (f"PPO ALE/Breakout-v5 on {device}: {ppo_steps} agent steps (CleanRL ppo_atari)",
                f"{bench_pixels.__name__}:job_ppo_atari", {"steps": ppo_steps}),
        "dqn": (f"DQN ALE/Breakout-v5 on {device}: {off_steps} learning steps after {starts} random "
                "(CleanRL dqn_atari)",
                f"{bench_pixels.__name__}:job_dqn_atari", {"learning_starts": starts, "steps": off_steps}),
        "sac": (f"SAC HalfCheetah-v5 on {device}: {off_steps} learning steps after {starts} random (rl-zoo3)",
                f"{bench_mujoco.__name__}:job_sac", {"learning_starts": starts, "steps": off_steps}),
    }
    if not set(only) <= set(workloads):
        raise ValueError(f"workloads must be among {sorted(workloads)}, got {list(only)}")
    rows = []
    for case, target, kwargs in (workloads[name] for name in only):
        jobs = {lib: (lambda seed, t, lib=lib, target=target, kwargs=kwargs: run_isolated(
            target, {"lib": lib, "seed": seed, "device": device, **kwargs}, torch_threads=t, timeout=600))
            for lib in libs}
        try:
            rows += sps_rows(case, interleaved(jobs, [0], [1], progress=lambda m: print("  ", m, flush=True)))
        except RuntimeError as e:  # one workload failing (a missing ROM, say) still reports the others
            print(f"{case}: failed: {e}", flush=True)
    return rows


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--envs", default="4096,16384,65536", help="comma-separated env counts")
    p.add_argument("--steps", type=int, default=5_000_000, help="timed env steps per env count")
    p.add_argument("--cuda-graph", action="store_true", help="replay the rollout as a CUDA graph")
    p.add_argument("--heavy", action="store_true", help="also PPO/DQN Atari and SAC HalfCheetah on the GPU")
    p.add_argument("--quick", action="store_true", help="shorter heavy runs")
    p.add_argument("--workloads", default="ppo,dqn,sac", help="heavy workloads to run, comma-separated")
    p.add_argument("--out", default="bench_results/gpu.json")
    args = p.parse_args(argv)
    import torch

    if not torch.cuda.is_available():
        print("benchmarks.gpu: no CUDA GPU available (torch.cuda.is_available() is False); nothing to measure.")
        return 0
    print(f"GPU: {torch.cuda.get_device_name()}", flush=True)
    print(f"{'envs':>8} {'SPS':>14} {'wall s':>8}  phases (cuda_graph={args.cuda_graph})", flush=True)
    rows = []
    for n in filter(None, args.envs.split(",")):
        rows.append(r := run(int(n), args.steps, args.cuda_graph))
        print(f"{r['num_envs']:>8} {r['sps']:>14,} {r['wall_s']:>8}  {r['phases']}", flush=True)
    heavy = heavy_rows(args.quick, only=args.workloads.split(",")) if args.heavy else []
    for r in heavy:
        print(" | ".join(f"{k}: {v}" for k, v in r.items() if v != ""), flush=True)
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"gpu": torch.cuda.get_device_name(), "rows": rows, "heavy": heavy}, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
