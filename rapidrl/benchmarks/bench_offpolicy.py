"""Off-policy benchmarks: SAC and DQN updates and end-to-end training against rlox and Stable-Baselines3.

Cases (timed by the harness, interleaved): one gradient update of SAC (batch 256, 256x256 actor and twin
critics) and of DQN (batch 64, 256x256), each library on its own filled replay buffer. The SAC floor is
~4 ms per update on this machine (0.6 GFLOP at ~150 GFLOP/s, PERFORMANCE.md).

Extras (end to end): SAC Pendulum-v1, 1 env, 5k steps, 1 update per step; DQN CartPole-v1, 50k steps, the
rl-zoo hyperparameters. Every library gets the same hyperparameters and runs in its own fresh process
(``rapidrl.benchmarks.isolated``) at 1 torch thread and at all cores, libraries interleaved; each one's best
thread count is compared. A warm-up run (timed apart) precedes the measured one in the same process. Each
trained policy is evaluated on 10 Gymnasium episodes with its own ``predict``. ``--precision bf16`` adds rapidrl
with ``precision="bf16"`` as the contender ``rapidrl/bf16``.

Update cases: every library at the same torch thread count, rapidrl's default for the algorithm (SAC: all
cores; DQN: 1), in one process (micro-benchmark).

    python -m rapidrl.benchmarks.bench_offpolicy [--quick] [--against rlox,sb3]
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable, Iterator

import numpy as np
import torch

from rapidrl._system import usable_cpu_count
from rapidrl.benchmarks.episodes import gym_returns
from rapidrl.benchmarks.harness import Case, Context, as_in_learn, rapidrl_precision

REPEATS = {"quick": 5, "full": 20}
THREADS = {"sac": usable_cpu_count(), "dqn": 1}  # rapidrl's defaults (torch_threads 0 and 1)
SAC_FLOOR_MS = 4.0

SAC_HP = dict(learning_rate=1e-3, batch_size=256, buffer_size=100_000, learning_starts=100, gamma=0.99, tau=0.005)
DQN_HP = dict(learning_rate=2.3e-3, batch_size=64, buffer_size=100_000, learning_starts=1_000, gamma=0.99,
              target_update_interval=10, train_freq=256, gradient_steps=128, exploration_fraction=0.16,
              exploration_final_eps=0.04)


# -- the three libraries, same hyperparameters ----------------------------------------------------------
def rapidrl_sac(seed: int = 0, **over):
    from rapidrl.algos.sac import SAC

    return SAC("Pendulum-v1", seed=seed, hidden=(256, 256), **{**SAC_HP, **over})


def sb3_sac(seed: int = 0, **over):
    from stable_baselines3 import SAC

    hp = {**SAC_HP, **over}
    return SAC("MlpPolicy", "Pendulum-v1", seed=seed, device="cpu", policy_kwargs=dict(net_arch=[256, 256]),
               **{k: hp[k] for k in ("learning_rate", "batch_size", "buffer_size", "learning_starts", "gamma", "tau")})


def rlox_sac(seed: int = 0, **over):
    from rlox.algorithms.sac import SAC

    hp = {**SAC_HP, **over}
    return SAC("Pendulum-v1", seed=seed, hidden=256,
               **{k: hp[k] for k in ("learning_rate", "batch_size", "buffer_size", "learning_starts", "gamma", "tau")})


def rapidrl_dqn(seed: int = 0, **over):
    from rapidrl.algos.dqn import DQN

    return DQN("CartPole-v1", seed=seed, hidden=(256, 256), **{**DQN_HP, **over})


def sb3_dqn(seed: int = 0, **over):
    from stable_baselines3 import DQN

    return DQN("MlpPolicy", "CartPole-v1", seed=seed, device="cpu", policy_kwargs=dict(net_arch=[256, 256]),
               **{**DQN_HP, **over})


def rlox_dqn(seed: int = 0, **over):
    from rlox.algorithms.dqn import DQN

    hp = {**DQN_HP, **over}
    hp["target_update_freq"] = hp.pop("target_update_interval")
    return DQN("CartPole-v1", seed=seed, hidden=256, **hp)


def builder(algo: str, lib: str) -> Callable:
    """The model constructor of contender ``lib`` ("rapidrl/bf16": rapidrl with precision="bf16")."""
    precision = rapidrl_precision(lib)
    if precision is None:
        return BUILDERS[algo][lib]
    return lambda **kw: BUILDERS[algo]["rapidrl"](precision=precision, **kw)


def train(lib: str, model, steps: int) -> None:
    if rapidrl_precision(lib) is not None:
        model.learn(steps, progress_bar=False)
    elif lib == "sb3":
        model.learn(steps)
    else:
        model.train(steps)


def gym_eval(lib: str, model, env_id: str, episodes: int = 10, seed: int = 1_000) -> float:
    """Mean return of ``episodes`` Gymnasium episodes with the library's own deterministic ``predict``."""
    if lib == "sb3":
        def act(obs):
            return model.predict(obs, deterministic=True)[0]
    else:
        def act(obs):
            return model.predict(obs, deterministic=True)
    return float(np.mean(gym_returns(act, env_id, episodes, seed)))


BUILDERS = {"sac": {"rapidrl": rapidrl_sac, "sb3": sb3_sac, "rlox": rlox_sac},
            "dqn": {"rapidrl": rapidrl_dqn, "sb3": sb3_dqn, "rlox": rlox_dqn}}


def _libs(ctx: Context) -> list[str]:
    return ["rapidrl"] + [p for p in ("rlox", "sb3") if ctx.peer(p) is not None]


# -- update cases ---------------------------------------------------------------------------------------
def _update_fn(lib: str, algo: str) -> Callable[[], None]:
    """A filled model and a zero-argument call doing one gradient update (at the algorithm's thread count)."""
    fn = _update_call(lib, algo)
    threads = THREADS[algo]

    def update() -> None:
        if torch.get_num_threads() != threads:
            torch.set_num_threads(threads)
        fn()

    return update


def _update_call(lib: str, algo: str) -> Callable[[], None]:
    fill = 1_000
    if algo == "sac":
        model = BUILDERS[algo][lib](learning_starts=fill)
    else:
        model = BUILDERS[algo][lib](learning_starts=fill, train_freq=1, gradient_steps=1)
    train(lib, model, fill)  # random actions only: fills the buffer
    if lib == "rapidrl":
        return as_in_learn(model, model._train_step)
    if lib == "sb3":
        batch = model.batch_size
        return lambda: model.train(gradient_steps=1, batch_size=batch)
    return (lambda: model._update(fill)) if algo == "sac" else (lambda: model._update(fill, 10 * fill))


def cases(ctx: Context) -> Iterator[Case]:
    torch.set_num_threads(1)
    for algo, label in (("sac", "sac/update/b256-256x256x2"), ("dqn", "dqn/update/b64-256x256")):
        contenders = {lib: _update_fn(lib, algo) for lib in _libs(ctx)}
        yield Case(label, contenders, params={"algo": algo}, items_per_call=1, item_unit="updates")


# -- end-to-end runs ------------------------------------------------------------------------------------
E2E = {"sac": ("Pendulum-v1", 1_000, 5_000, 300), "dqn": ("CartPole-v1", 10_000, 50_000, 2_000)}
"""algo -> (env id, quick steps, full steps, warm-up steps)."""


def job_train(lib: str, algo: str, steps: int, seed: int) -> dict:
    """One library's whole run in a fresh process (``isolated.run_isolated`` sets the torch threads first).
    rapidrl keeps the child's thread count (``torch_threads=None``). Returns {"sps", "warmup_s", "eval"}."""
    over = {"torch_threads": None} if rapidrl_precision(lib) is not None else {}
    env_id, _, _, warm = E2E[algo]
    t0 = time.perf_counter()
    train(lib, builder(algo, lib)(seed=99, **over, **({"learning_starts": 100} if algo == "dqn" else {})), warm)
    warmup = time.perf_counter() - t0
    model = builder(algo, lib)(seed=seed, **over)
    t0 = time.perf_counter()
    train(lib, model, steps)
    wall = time.perf_counter() - t0
    return {"sps": steps / wall, "wall_s": wall, "warmup_s": warmup, "eval": gym_eval(lib, model, env_id)}


def extras(ctx: Context) -> tuple[str, list[dict]]:
    """End-to-end training: SPS and evaluation return per library, each in its own process, at its best threads."""
    from rapidrl.benchmarks.isolated import best_by_threads, interleaved, run_isolated, thread_counts

    rows = []
    for algo, (env_id, quick_steps, full_steps, _) in E2E.items():
        steps = quick_steps if ctx.quick else full_steps
        libs = ctx.rapidrl_contenders() + _libs(ctx)[1:]  # --precision bf16: rapidrl/bf16 as well
        jobs = {lib: (lambda seed, t, kw={"lib": lib, "algo": algo, "steps": steps}: run_isolated(
            f"{__name__}:job_train", {**kw, "seed": seed}, torch_threads=t)) for lib in libs}
        results = interleaved(jobs, [0], thread_counts())
        _, base = best_by_threads(results["rapidrl"])
        for lib, by_threads in results.items():
            best_t, best = best_by_threads(by_threads)
            for t, (r,) in sorted(by_threads.items()):
                rows.append({"run": f"{algo} {env_id} {steps} steps", "library": lib,
                             "torch threads": f"{t}{' (best)' if t == best_t else ''}", "wall_s": round(r["wall_s"], 1),
                             "warm-up s": round(r["warmup_s"], 1), "SPS": round(r["sps"], 1),
                             "eval_return": round(r["eval"], 1),
                             "rapidrl_speedup": round(base / best, 2) if t == best_t else ""})
    model = rapidrl_sac(learning_starts=1_000)
    train("rapidrl", model, 1_000)
    torch.set_num_threads(THREADS["sac"])
    timings = []
    step = as_in_learn(model, model._train_step)
    for _ in range(5 if ctx.quick else 20):
        t0 = time.perf_counter()
        for _ in range(10):
            step()
        timings.append((time.perf_counter() - t0) / 10 * 1e3)
    update_ms = float(np.median(timings))
    rows.append({"run": "sac update, batch 256, 256x256", "library": "rapidrl", "torch threads": THREADS["sac"],
                 "wall_s": None, "warm-up s": None, "SPS": None, "eval_return": None,
                 "rapidrl_speedup": f"{update_ms:.2f} ms/update = {update_ms / SAC_FLOOR_MS:.1f}x the 4 ms floor"})
    return "End-to-end off-policy training (each library in its own process, at its best torch threads)", rows


def main(argv: list[str] | None = None) -> int:
    """``python -m rapidrl.benchmarks.bench_offpolicy [options]``: the same as ``rapidrl bench offpolicy [options]``."""
    from rapidrl.benchmarks.run import main as run_main  # the suite is in run.SUITES

    return run_main(["offpolicy", *(sys.argv[1:] if argv is None else argv)])


if __name__ == "__main__":
    sys.exit(main())
