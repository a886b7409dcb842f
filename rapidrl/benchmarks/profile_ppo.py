"""Where one iteration of PPO's throughput setting goes: ``python -m rapidrl.benchmarks.profile_ppo [--repeats R]``.

The setting is ``configs/variants/ppo_cartpole_throughput.toml`` (1024 CartPole envs x 16 steps, one epoch of
minibatches of 512, separate 64x64 tanh actor and critic MLPs, the fused collector and the compiled update). Each
part of an iteration is timed alone, as the median of ``repeats`` calls after a warm-up, on the model's own arrays
and under the process settings ``learn`` holds (``harness.as_in_learn``):

- the iteration: collection, GAE and the update as ``learn`` runs them (``_rollout`` and ``_train``);
- collection: the fused collector's one compiled call, split into env stepping (the same envs stepped ``T`` times
  with fixed actions through ``VecEnv.step``), the acting forward (the actor and critic MLPs on ``N`` observations,
  ``T`` times, ``MLPForward``: the collector's kernel) and the rest of the call (sampling, storage, episode sums);
  with ``collect_threads`` 2 the call, in two threads, is one part, and its pieces are given in one thread's time
  (the rest: the call's time on both threads less the pieces);
- GAE (``_advantages``);
- the update: its forward (the two MLPs on every minibatch, every epoch), Adam (the compiled step on every
  parameter, once per minibatch) and the rest of the compiled epoch (the loss, its gradient and the backward);
- the rest: the iteration less its parts timed alone (Python between them, and what running them in sequence costs:
  caches the other parts evicted, hand-offs between Numba's and PyTorch's thread pools).

Each part is set against its FLOP count and the lower bound that count implies at this CPU's measured matrix-product
rate in one thread: float32 (``torch.mm`` of 1024 x 1024, the practical peak) and, where the CPU has native bf16
(AMX or AVX512-BF16), bfloat16. The bound assumes every FLOP at that rate, which 64-wide layers do not reach; the
gap between a part's time and its bound is what a faster kernel could win, at most.
"""

from __future__ import annotations

import argparse
import statistics
import time

import numpy as np
import torch

from rapidrl.benchmarks.bench_train import THROUGHPUT_PRESET


def _median_seconds(fn, repeats: int) -> float:
    fn()  # warm-up (compilation, buffers)
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def matmul_rate(dtype: torch.dtype, rows: int = 1024, inner: int = 1024, cols: int = 1024, repeats: int = 5
                ) -> float:
    """FLOP/s of a [rows, inner] x [inner, cols] matrix product in ``dtype`` on the CPU (``torch.mm``, oneDNN: AMX
    tiles for bfloat16 where the CPU has them), in the current torch threads."""
    a, b = torch.randn(rows, inner).to(dtype), torch.randn(inner, cols).to(dtype)
    return 2 * rows * inner * cols / _median_seconds(lambda: torch.mm(a, b), repeats)


def mlp_macs(sizes: list[int]) -> int:
    """Multiply-adds of one sample through Linear layers of ``sizes`` (input, hidden..., output)."""
    return sum(a * b for a, b in zip(sizes[:-1], sizes[1:]))


def layer_sizes(seq) -> list[int]:
    linears = [m for m in seq if isinstance(m, torch.nn.Linear)]
    return [linears[0].in_features, *(m.out_features for m in linears)]


def profile(settings: dict | None = None, repeats: int = 20, seed: int = 0) -> dict:
    """Seconds per iteration of each part, FLOPs and the lower bounds (see the module docstring). ``settings``
    override the preset's algorithm settings (a test runs a small one)."""
    import rapidrl as rr
    from rapidrl.benchmarks.harness import as_in_learn
    from rapidrl.envs import make_vec
    from rapidrl.kernels.ppo_update import _adam
    from rapidrl.nn.numba_mlp import MLPForward
    from rapidrl.runs.config import PRESETS_DIR, read_toml
    from rapidrl.train.precision import cpu_native_bf16

    algo = {**read_toml(PRESETS_DIR / THROUGHPUT_PRESET)["algo"], **(settings or {})}
    model = rr.PPO("CartPole-v1", seed=seed, **algo)
    c = model.config
    steps = c.num_envs * c.num_steps
    model.learn(2 * steps, progress_bar=False)  # compiles the collector, GAE and the update; sets up the buffers
    if model.paths["collection"].value != "fused" or model.gradient_backend != "handwritten":
        raise RuntimeError(f"the profile expects fused collection and the compiled update, got "
                           f"{model.paths['collection'].value} and {model.gradient_backend}")
    policy = model.policy

    def iteration():
        model._rollout()
        model._train()

    def timed(fn) -> float:  # under the process settings learn holds (torch threads, denormal flushing)
        return _median_seconds(as_in_learn(model, fn), repeats)

    seconds = {"iteration": timed(iteration), "collect": timed(model._collect), "gae": timed(model._advantages),
               "update": timed(model._train)}

    env = make_vec("CartPole-v1", c.num_envs, seed=seed)
    env.reset(seed=seed)
    actions = np.random.default_rng(seed).integers(0, 2, c.num_envs)

    def env_steps():
        for _ in range(c.num_steps):
            env.step(actions)

    seconds["env"] = timed(env_steps)
    actor, critic = MLPForward(policy.actor, policy.activation), MLPForward(policy.critic, policy.activation)
    obs = np.random.default_rng(seed).standard_normal((c.num_envs, actor.in_dim)).astype(np.float32)

    def acting():
        for _ in range(c.num_steps):
            actor(obs)
            critic(obs)

    seconds["acting_forward"] = timed(acting)
    minibatches = c.update_epochs * (steps // c.minibatch_size)
    batch = np.random.default_rng(seed).standard_normal((c.minibatch_size, actor.in_dim)).astype(np.float32)

    def update_forward():
        for _ in range(minibatches):
            actor(batch)
            critic(batch)

    seconds["update_forward"] = timed(update_forward)
    params = tuple(p.detach().clone().view(-1).numpy() for p in policy.parameters())  # tuples, as the epoch has them
    grads = tuple(np.full_like(p, 1e-3) for p in params)
    ms, vs = tuple(np.zeros_like(p) for p in params), tuple(np.zeros_like(p) for p in params)
    counts = tuple(np.ones(1, np.float32) for _ in params)

    def adam():
        for _ in range(minibatches):
            _adam(params, grads, ms, vs, counts, 1e-3, 0.9, 0.999, 1e-8)

    seconds["adam"] = timed(adam)
    env.close()

    forward_macs = mlp_macs(layer_sizes(policy.actor)) + mlp_macs(layer_sizes(policy.critic))  # per sample
    flops = {"acting_forward": 2 * forward_macs * steps,
             "update_forward": 2 * forward_macs * steps * c.update_epochs,
             "update_backward": 4 * forward_macs * steps * c.update_epochs,  # d input and d weights: 2x the forward
             "adam": 0}
    dtypes = {"float32": torch.float32, **({"bfloat16": torch.bfloat16} if cpu_native_bf16() else {})}
    rates = {name: matmul_rate(dtype) for name, dtype in dtypes.items()}
    hidden = layer_sizes(policy.actor)[1]  # the update's hidden layer product: [minibatch, H] x [H, H]
    layer_rates = {name: matmul_rate(dtype, c.minibatch_size, hidden, hidden, repeats=50)
                   for name, dtype in dtypes.items()}
    return {"seconds": seconds, "flops": flops, "rates": rates, "layer_rates": layer_rates, "hidden": hidden,
            "steps": steps, "minibatches": minibatches,
            "settings": {k: getattr(c, k) for k in ("num_envs", "num_steps", "minibatch_size", "update_epochs",
                                                     "update_threads", "collect_threads")},
            "numba_threads": _numba_threads(), "torch_threads": c.torch_threads,
            "matmul_threads": torch.get_num_threads()}


def _numba_threads() -> int:
    import numba

    return numba.get_num_threads()


def rows(result: dict) -> list[tuple[str, float, float, str]]:
    """(part, µs per iteration, share of the iteration, FLOPs and lower bounds) in the table's order."""
    s, flops, rates = result["seconds"], result["flops"], result["rates"]
    collect_rest = s["collect"] * result["settings"].get("collect_threads", 1) - s["env"] - s["acting_forward"]
    backward = s["update"] - s["update_forward"] - s["adam"]
    between = s["iteration"] - s["collect"] - s["gae"] - s["update"]

    def bound(name: str) -> str:
        f = flops.get(name)
        if not f:
            return ""
        return f"{f / 1e6:.0f} MFLOP; " + ", ".join(f"{1e6 * f / r:,.0f} µs at {d}" for d, r in rates.items())

    if result["settings"].get("update_threads", 1) == 2:  # the halves overlap: the forward is not a part of its own
        flops = {**flops, "update_forward": flops["update_forward"] + flops["update_backward"]}
        update = [("update: forward, loss, gradient, backward (actor and critic halves in two threads)",
                   s["update"] - s["adam"], bound("update_forward"))]
    else:
        update = [("update: forward", s["update_forward"], bound("update_forward")),
                  ("update: loss, gradient, backward", backward, bound("update_backward"))]
    threads = result["settings"].get("collect_threads", 1)
    if threads == 1:
        collection = [("env stepping", s["env"], ""),
                      ("acting forward (actor + critic)", s["acting_forward"], bound("acting_forward")),
                      ("sampling, storage, episode sums (rest of the collector call)", collect_rest, "")]
    else:  # the parts were timed in one thread: the collector's call is one part (its threads overlap them)
        collection = [(f"collection in {threads} threads (env stepping {1e6 * s['env']:,.0f} µs, acting forward "
                       f"{1e6 * s['acting_forward']:,.0f} µs, the rest {1e6 * collect_rest:,.0f} µs, each timed in "
                       "one thread)", s["collect"], bound("acting_forward"))]
    parts = [*collection,
             ("GAE", s["gae"], ""),
             *update,
             ("update: Adam", s["adam"], ""),
             ("the rest: Python between the parts, caches and thread hand-offs in sequence", between, "")]
    total = s["iteration"]
    return [(name, 1e6 * t, t / total, note) for name, t, note in parts]


def table(result: dict) -> str:
    s = result["seconds"]
    lines = ["| part | µs per iteration | share | FLOPs; lower bound at the measured matmul rate |",
             "|---|---:|---:|---|"]
    lines += [f"| {name} | {us:,.0f} | {share:.1%} | {note} |" for name, us, share, note in rows(result)]
    total_flops = sum(result["flops"].values())
    bounds = ", ".join(f"{result['steps'] / (total_flops / r):,.0f} SPS at {d} ({r / 1e9:.0f} GFLOP/s)"
                       for d, r in result["rates"].items())
    lines.append(f"| **iteration** ({result['steps']:,} env steps) | **{1e6 * s['iteration']:,.0f}** | 100% | "
                 f"{total_flops / 1e6:.0f} MFLOP; {result['steps'] / s['iteration']:,.0f} SPS measured; bound "
                 f"{bounds} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--repeats", type=int, default=20)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--torch-threads", type=int, default=1, help="the throughput benchmark's (rapidrl bench train)")
    p.add_argument("--update-threads", type=int, choices=(1, 2), default=None,
                   help="the compiled epoch's threads (default: the preset's)")
    p.add_argument("--collect-threads", type=int, choices=(1, 2), default=None,
                   help="the fused collector's threads (default: the preset's)")
    args = p.parse_args(argv)
    settings = {"torch_threads": args.torch_threads}
    if args.update_threads is not None:
        settings["update_threads"] = args.update_threads
    if args.collect_threads is not None:
        settings["collect_threads"] = args.collect_threads
    result = profile(settings, repeats=args.repeats, seed=args.seed)
    print(f"settings {result['settings']}; the model's torch threads {result['torch_threads']}, numba threads "
          f"{result['numba_threads']}; {result['minibatches']} minibatches per update; matmul rates in "
          f"{result['matmul_threads']} torch threads")
    print(table(result))
    h, mb = result["hidden"], result["settings"]["minibatch_size"]
    print(f"torch.mm at the update's layer shape [{mb}, {h}] x [{h}, {h}]: " + ", ".join(
        f"{d} {r / 1e9:.0f} GFLOP/s" for d, r in result["layer_rates"].items()))


if __name__ == "__main__":
    main()
