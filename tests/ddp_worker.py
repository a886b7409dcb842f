"""Worker script for tests/test_ddp.py: PPO on CartPole-v1 with several learners under torchrun.

    python -m torch.distributed.run --standalone --nproc_per_node 2 tests/ddp_worker.py --out result.json
    python tests/ddp_worker.py --single --out single.json      # one plain process, for timing comparison

Every rank trains, then the ranks compare their parameters and first observations (all_gather) and
exercise ``DistributedContext`` directly (broadcast, gradient averaging, metric reduction). Rank 0 writes
a JSON file with the outcome of each check, the per-update episodic returns and timings; the test asserts
on it, so a failing check shows up as a named test failure rather than a crashed process.
"""

from __future__ import annotations

import argparse
import json
import time

import torch
import torch.distributed as dist

import rapidrl

MINIBATCHES_PER_UPDATE = 4 * (64 * 4 // 128)  # update_epochs * rollout / minibatch_size


def flat_params(model) -> torch.Tensor:
    return torch.cat([p.detach().reshape(-1) for p in model.policy.parameters()])


def gather(t: torch.Tensor, world_size: int) -> list[torch.Tensor]:
    out = [torch.empty_like(t) for _ in range(world_size)]
    dist.all_gather(out, t)
    return out


def time_all_reduce(ctx) -> dict:
    """Wrap ``ctx.all_reduce_grads`` to count its calls and their total time."""
    stats = {"calls": 0, "seconds": 0.0}
    inner = ctx.all_reduce_grads

    def timed(params):
        t0 = time.perf_counter()
        inner(params)
        stats["seconds"] += time.perf_counter() - t0
        stats["calls"] += 1

    ctx.all_reduce_grads = timed
    return stats


def context_checks(model) -> dict[str, bool]:
    """Exercise broadcast, gradient averaging, metric reduction and all_reduce_mean on two or more ranks."""
    ctx, rank, world = model.dist, model.dist.rank, model.dist.world_size
    out = {}
    params = list(model.policy.parameters())
    reference = flat_params(model)
    if rank == 1:
        with torch.no_grad():
            for p in params:
                p.add_(1.0)
    differed = not all(torch.equal(t, reference) for t in gather(flat_params(model), world))
    ctx.setup(model)  # broadcast from rank 0 again
    out["broadcast_restores_rank0"] = differed and all(torch.equal(t, reference) for t in gather(flat_params(model),
                                                                                                 world))
    expected = sum(range(1, world + 1)) / world
    for p in params:  # fresh tensors, as autograd leaves them: the copy-in path
        p.grad = torch.full_like(p, float(rank + 1))
    ctx.all_reduce_grads(params)
    copy_path = all(torch.all(p.grad == expected) for p in params)
    for p in params:  # the same (view) tensors written in place, as the closed-form backward does
        p.grad.fill_(float(rank + 1))
    ctx.all_reduce_grads(params)
    view_path = all(torch.all(p.grad == expected) for p in params)
    out["grads_averaged"] = copy_path and view_path
    metrics = {"a": float(2 * rank + 1), "global_step": 10 * (rank + 1), "name": "x"}
    if rank == 0:
        metrics["only_rank0"] = 5.0
    ctx.reduce_metrics(metrics)
    out["metrics_reduced"] = (metrics["a"] == float(world) and metrics["global_step"] == 5 * world * (world + 1)
                              and isinstance(metrics["global_step"], int) and metrics["only_rank0"] == 5.0
                              and metrics["name"] == "x")
    out["all_reduce_mean"] = ctx.all_reduce_mean(float(rank)) == (world - 1) / 2
    return {k: bool(v) for k, v in gather_all_true(out, world).items()}


def gather_all_true(checks: dict[str, bool], world: int) -> dict[str, bool]:
    """Each check holds on every rank."""
    t = torch.tensor([float(v) for v in checks.values()])
    return {k: bool(torch.stack(gather(t, world))[:, j].all()) for j, k in enumerate(checks)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--out", required=True)
    parser.add_argument("--timesteps", type=int, default=5120, help="env steps per rank")
    parser.add_argument("--single", action="store_true", help="one plain process (distributed=False)")
    args = parser.parse_args()

    model = rapidrl.PPO("CartPole-v1", num_envs=4, num_steps=64, minibatch_size=128, seed=0,
                        distributed=not args.single)
    world = 1 if model.dist is None else model.dist.world_size
    reduce_stats = None if model.dist is None else time_all_reduce(model.dist)
    initial = flat_params(model)
    first_obs = []

    def keep_first_obs(algo) -> bool:
        if not first_obs:
            first_obs.append(torch.as_tensor(algo.buffer.obs[0]).clone().float())
        return True

    t0 = time.perf_counter()
    model.learn(args.timesteps, callback=keep_first_obs, progress_bar=False)
    wall = time.perf_counter() - t0
    seconds = model.timer.seconds()
    result = {
        "world_size": world,
        "num_updates": model.num_updates,
        "steps_per_rank": model.num_timesteps,
        "global_step": model.history[-1]["global_step"],
        "returns": [h.get("charts/episodic_return") for h in model.history],
        "learn_seconds": wall,
        "update_ms_per_minibatch": 1e3 * seconds["update"] / (model.num_updates * MINIBATCHES_PER_UPDATE),
        "collect_ms_per_update": 1e3 * seconds.get("collect", 0.0) / model.num_updates,
        "params_changed": not torch.equal(flat_params(model), initial),
    }
    if model.dist is not None:
        result["all_reduce_ms_per_call"] = 1e3 * reduce_stats["seconds"] / reduce_stats["calls"]
        result["all_reduce_calls"] = reduce_stats["calls"]
        params = gather(flat_params(model), world)
        result["params_equal"] = all(torch.equal(params[0], p) for p in params[1:])
        obs = gather(first_obs[0], world)
        result["first_obs_differ"] = all(not torch.equal(obs[0], o) for o in obs[1:])
        result["checks"] = context_checks(model)
        model.dist.barrier()
    if model.dist is None or model.dist.is_main:
        with open(args.out, "w") as f:
            json.dump(result, f, indent=1)
    if model.dist is not None:
        model.dist.close()


if __name__ == "__main__":
    main()
