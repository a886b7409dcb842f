"""Where DQN Atari's time goes with the Q network on a GPU, rapidrl against SB3 (run on a lent GPU machine).

For each variant: SPS of the learning phase (as ``bench_pixels.job_dqn_atari``: a run of ``STARTS`` random steps
alone, then a fresh run of ``STARTS + STEPS``), then the same learning run under cProfile, top functions by
cumulative and by own time. Variants: rapidrl (its default CNN input: channels-last on the CPU, NCHW on CUDA, so
on a GPU the same as the next), rapidrl with NCHW input forced, rapidrl with cudnn.benchmark, SB3.

    python tools/gpu_profile_dqn.py [--variants rapidrl,rapidrl/nchw,sb3] [--steps 2000]
"""

from __future__ import annotations

import argparse
import cProfile
import io
import pstats
import time

import torch

from rapidrl.benchmarks import bench_pixels
from rapidrl.benchmarks.bench_offpolicy import train

STARTS = 1_000


def build(variant: str, seed: int, starts: int):
    lib = "sb3" if variant == "sb3" else "rapidrl"
    model = bench_pixels._dqn(lib, seed, starts, 1, "cuda")
    if variant == "rapidrl/nchw":
        for net in (model.q_net, model.q_target):
            for m in net.modules():
                if hasattr(m, "channels_last"):
                    m.channels_last = False
    return lib, model


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--variants", default="rapidrl,rapidrl/nchw,rapidrl/cudnn-benchmark,sb3")
    p.add_argument("--steps", type=int, default=2_000)
    p.add_argument("--top", type=int, default=18)
    args = p.parse_args()
    torch.set_num_threads(1)
    for variant in args.variants.split(","):
        torch.backends.cudnn.benchmark = variant == "rapidrl/cudnn-benchmark"
        lib, warm = build(variant, 99, 100)
        train(lib, warm, 300)  # warm-up: kernels, allocator
        lib, model = build(variant, 0, STARTS)
        t0 = time.perf_counter()
        train(lib, model, STARTS)
        random_wall = time.perf_counter() - t0
        lib, model = build(variant, 0, STARTS)
        t0 = time.perf_counter()
        train(lib, model, STARTS + args.steps)
        torch.cuda.synchronize()
        wall = time.perf_counter() - t0
        print(f"== {variant}: learning-phase SPS {args.steps / (wall - random_wall):.0f} "
              f"(random phase {random_wall:.2f} s, whole {wall:.2f} s)", flush=True)
        lib, model = build(variant, 0, STARTS)
        train(lib, model, STARTS)
        prof = cProfile.Profile()
        prof.enable()
        if lib == "sb3":  # continue from the random phase (rapidrl's learn always continues)
            model.learn(args.steps, reset_num_timesteps=False)
        else:
            model.learn(args.steps, progress_bar=False)
        torch.cuda.synchronize()
        prof.disable()
        for key in ("cumulative", "tottime"):
            out = io.StringIO()
            pstats.Stats(prof, stream=out).sort_stats(key).print_stats(args.top)
            print("\n".join(line[:160] for line in out.getvalue().splitlines()[6:]), flush=True)


if __name__ == "__main__":
    main()
