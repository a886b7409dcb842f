"""GPU-resident PPO throughput: ``python -m rapidrl.benchmarks.gpu [--envs 4096,16384] [--steps N] [--cuda-graph]``.

For each env count, PPO on CartPole-v1 with a ``TorchVecEnv`` on the GPU (env, policy, rollout storage and
GAE on the device; scalars read every ``log_every`` updates) trains for a fixed number of env steps after a
warm-up; prints env steps per second (and the collect/update split) as a table and writes JSON. Without a
CUDA GPU it prints a message and exits 0. Not yet run on GPU hardware.
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
                   learning_rate=1e-3, device="cuda", env_device="cuda", log_every=50, cuda_graph=cuda_graph,
                   torch_threads=None, seed=0)
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


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--envs", default="4096,16384,65536", help="comma-separated env counts")
    p.add_argument("--steps", type=int, default=5_000_000, help="timed env steps per env count")
    p.add_argument("--cuda-graph", action="store_true", help="replay the rollout as a CUDA graph")
    p.add_argument("--out", default="bench_results/gpu.json")
    args = p.parse_args(argv)
    import torch

    if not torch.cuda.is_available():
        print("benchmarks.gpu: no CUDA GPU available (torch.cuda.is_available() is False); nothing to measure.")
        return 0
    rows = [run(int(n), args.steps, args.cuda_graph) for n in args.envs.split(",")]
    print(f"GPU: {torch.cuda.get_device_name()}")
    print(f"{'envs':>8} {'SPS':>14} {'wall s':>8}  phases")
    for r in rows:
        print(f"{r['num_envs']:>8} {r['sps']:>14,} {r['wall_s']:>8}  {r['phases']}")
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"gpu": torch.cuda.get_device_name(), "rows": rows}, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
