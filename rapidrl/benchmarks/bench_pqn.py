"""PQN on classic control against CleanRL's ``pqn.py``: wall-clock to CleanRL's published return, each run in its own
process.

The peer is CleanRL's single-file script, run as its authors run it (``python cleanrl/pqn.py --env-id ENV --seed S
--no-cuda``: its CPU defaults, 500k steps) from a CleanRL checkout with its own Python environment; rapidrl runs its
preset (``configs/pqn_cartpole.toml`` / ``pqn_acrobot.toml``: the same settings). Both are child processes of this
one and print a line per finished episode (CleanRL) or update (rapidrl); this process stamps every line with the
wall-clock since it started the child, so both clocks include interpreter start, imports and env creation alike.

Per run: the wall-clock to the first moment the mean of the last ``WINDOW`` finished training episodes reaches the
target (CleanRL's published return: CartPole-v1 495.13, Acrobot-v1 -95.63, ``docs/rl-algorithms/pqn.md``), the
whole run's wall-clock, that mean at the end, and the stamp of the first episode (start-up: interpreter, imports,
env creation, compilation from cache). The ratio the issue asks for is rapidrl's time to the target over
CleanRL's whole run (the published figure is CleanRL's return after 500k steps); CleanRL's own time to the target is
reported beside it. Contenders, seeds and torch thread counts (1 and all cores; CleanRL through OMP_NUM_THREADS) are
interleaved; each contender's best thread count is compared.

The CleanRL side needs two environment variables: ``RAPIDRL_CLEANRL_DIR`` (a checkout of
github.com/vwxyzjn/cleanrl, or any directory holding its ``cleanrl/pqn.py`` or ``pqn.py``) and
``RAPIDRL_CLEANRL_PYTHON`` (an interpreter with CleanRL's requirements: torch, gymnasium 0.29, tyro, tensorboard);
without them only rapidrl runs. ``python -m rapidrl.benchmarks.bench_pqn --env CartPole-v1 --seeds 0 1 2`` runs
one env; ``rapidrl bench pqn`` runs both.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import sys
import tempfile
from collections import deque
from collections.abc import Iterator
from pathlib import Path

from rapidrl.benchmarks.harness import Case, Context
from rapidrl.benchmarks.isolated import interleaved, stream_episodes

TARGETS = {"CartPole-v1": 495.13, "Acrobot-v1": -95.63}
"""CleanRL's published pqn.py returns at 500k steps (3 seeds, docs/rl-algorithms/pqn.md)."""
STEPS = 500_000
WINDOW = 20
"""Finished training episodes in the running mean (rapidrl's charts/episodic_return is the same window)."""
CURVE_PREFIX = "CURVE "
_CLEANRL_EPISODE = re.compile(r"global_step=(\d+), episodic_return=\[?(-?[\d.]+)")


def cases(ctx: Context) -> Iterator[Case]:
    return iter(())


def job_curve(env_id: str, steps: int, seed: int) -> dict:
    """rapidrl's run in a child process: the env's preset, a ``CURVE <steps> <returns...>`` line after every update
    with the episodes that ended in it (the parent stamps the lines), then the final mean of the last WINDOW."""
    import torch

    import rapidrl as rr
    from rapidrl.runs.config import preset_path, read_toml

    preset = read_toml(preset_path("pqn", env_id))["algo"]
    model = rr.PQN(env_id, seed=seed, **{**preset, "torch_threads": torch.get_num_threads()})
    seen = [0]

    def report(m) -> bool:
        new = m.num_episodes - seen[0]
        seen[0] = m.num_episodes
        returns = m.recent_returns(100)[-new:] if new else []  # (fewer than 100 episodes end in one update)
        print(CURVE_PREFIX + json.dumps([m.num_timesteps, returns]), flush=True)
        return True

    model.learn(steps, callback=report, progress_bar=False)
    return {"final": float(statistics.mean(model.recent_returns(WINDOW)))}


def _summary(events: list[tuple[float, int, float]], wall: float, target: float) -> dict:
    """Seconds and steps at which the mean of the last WINDOW returns first reaches ``target`` (None: never), the
    whole run's seconds, and the final mean."""
    window: deque = deque(maxlen=WINDOW)
    hit = None
    for sec, step, ret in events:
        window.append(ret)
        if hit is None and len(window) == WINDOW and statistics.mean(window) >= target:
            hit = (sec, step)
    return {"to_target_s": None if hit is None else hit[0], "to_target_steps": None if hit is None else hit[1],
            "wall_s": wall, "final": statistics.mean(window) if window else None, "episodes": len(events),
            "first_episode_s": events[0][0] if events else None}


def run_rapidrl(env_id: str, seed: int, threads: int, steps: int = STEPS) -> dict:
    def parse(line: str):
        if not line.startswith(CURVE_PREFIX):
            return []
        step, returns = json.loads(line[len(CURVE_PREFIX):])
        return [(step, r) for r in returns]

    cmd = [sys.executable, "-m", "rapidrl.benchmarks.isolated", "rapidrl.benchmarks.bench_pqn:job_curve",
           json.dumps({"env_id": env_id, "steps": steps, "seed": seed}), str(threads)]
    events, wall, _ = stream_episodes(cmd, dict(os.environ), None, parse)
    return _summary(events, wall, TARGETS[env_id])


def cleanrl_command() -> tuple[list[str], str] | None:
    """(interpreter + script, working directory) of CleanRL's pqn.py from the environment, or None."""
    root, python = os.environ.get("RAPIDRL_CLEANRL_DIR"), os.environ.get("RAPIDRL_CLEANRL_PYTHON")
    if not root or not python:
        return None
    for script in (Path(root) / "cleanrl" / "pqn.py", Path(root) / "pqn.py"):
        if script.is_file():
            return [python, str(script)], str(script.parent)
    raise FileNotFoundError(f"RAPIDRL_CLEANRL_DIR={root} holds neither cleanrl/pqn.py nor pqn.py")


def run_cleanrl(env_id: str, seed: int, threads: int, steps: int = STEPS) -> dict:
    found = cleanrl_command()
    if found is None:
        raise RuntimeError("set RAPIDRL_CLEANRL_DIR and RAPIDRL_CLEANRL_PYTHON to run CleanRL's pqn.py")
    (python, script), _ = found
    with tempfile.TemporaryDirectory() as runs:  # its tensorboard files
        cmd = [python, script, "--env-id", env_id, "--seed", str(seed), "--no-cuda", "--total-timesteps", str(steps)]
        env = {**os.environ, "OMP_NUM_THREADS": str(threads), "MKL_NUM_THREADS": str(threads)}

        def parse(line: str):
            m = _CLEANRL_EPISODE.search(line)
            return [(int(m.group(1)), float(m.group(2)))] if m else []

        events, wall, _ = stream_episodes(cmd, env, runs, parse)
    return _summary(events, wall, TARGETS[env_id])


def compare(env_id: str, seeds: list[int], threads: list[int], steps: int = STEPS, progress=print) -> dict:
    """Every contender x seed x thread count, interleaved (contender order rotated by seed); returns
    {contender: {threads: [summary per seed]}}."""
    contenders = {"rapidrl": run_rapidrl}
    if cleanrl_command() is not None:
        contenders["cleanrl"] = run_cleanrl
    else:
        progress("CleanRL skipped: set RAPIDRL_CLEANRL_DIR and RAPIDRL_CLEANRL_PYTHON")

    def job(name: str):
        def run(seed: int, t: int) -> dict:
            result = contenders[name](env_id, seed, t, steps)
            progress(f"{env_id} {name} seed {seed} threads {t}: {json.dumps(result)}")
            return result
        return run

    return interleaved({name: job(name) for name in contenders}, seeds, threads)


def _median(runs: list[dict], key: str) -> float | None:
    values = [r[key] for r in runs]
    return None if any(v is None for v in values) else statistics.median(values)


def rows(env_id: str, results: dict, steps: int = STEPS) -> list[dict]:
    """Report rows: per contender and thread count the median seconds to the target and of the whole run; the ratio
    rapidrl (best thread count, time to target) / CleanRL (best thread count, whole run)."""
    best = {name: min(by_t, key=lambda t: _median(by_t[t], "wall_s")) for name, by_t in results.items()}
    ratio = ""
    if "cleanrl" in results:
        r_hit = _median(results["rapidrl"][best["rapidrl"]], "to_target_s")
        c_wall = _median(results["cleanrl"][best["cleanrl"]], "wall_s")
        ratio = "not reached" if r_hit is None else f"{r_hit / c_wall:.3f}"
    out = []
    for name, by_t in results.items():
        for t, runs in sorted(by_t.items()):
            fmt = lambda v: "never" if v is None else f"{v:.1f}"  # noqa: E731
            out.append({
                "case": f"PQN {env_id}, {steps:,} steps, target {TARGETS[env_id]} (mean of {WINDOW} episodes)",
                "contender": name, "threads": f"{t}{' (best)' if t == best[name] else ''}",
                "to target s (per seed)": " / ".join(fmt(r["to_target_s"]) for r in runs),
                "steps to target": " / ".join("never" if r["to_target_steps"] is None else f"{r['to_target_steps']:,}"
                                              for r in runs),
                "whole run s (per seed)": " / ".join(f"{r['wall_s']:.1f}" for r in runs),
                "first episode s": " / ".join(fmt(r["first_episode_s"]) for r in runs),
                "final mean return": " / ".join(f"{r['final']:.1f}" for r in runs),
                "rapidrl to target / CleanRL run (best vs best)":
                    ratio if name == "rapidrl" and t == best[name] else "",
            })
    return out


def extras(ctx: Context):
    """Both envs, 3 seeds (quick: CartPole, one seed, 100k steps)."""
    from rapidrl.benchmarks.isolated import thread_counts

    envs, seeds = (["CartPole-v1"], [0]) if ctx.quick else (list(TARGETS), [0, 1, 2])
    steps = 100_000 if ctx.quick else STEPS
    out = []
    for env_id in envs:
        out += rows(env_id, compare(env_id, seeds, thread_counts(), steps), steps)
    return "PQN against CleanRL's pqn.py (each run in its own process; wall-clock stamped by the parent)", out


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--env", default="CartPole-v1", choices=sorted(TARGETS))
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    p.add_argument("--threads", type=int, nargs="+", default=None, help="torch threads to try (default: 1 and all)")
    p.add_argument("--steps", type=int, default=STEPS)
    p.add_argument("--out", default=None, help="write the results as JSON here")
    args = p.parse_args(argv)
    from rapidrl.benchmarks.isolated import thread_counts

    results = compare(args.env, args.seeds, args.threads or thread_counts(), args.steps)
    for row in rows(args.env, results, args.steps):
        print(json.dumps(row))
    if args.out:
        Path(args.out).write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
