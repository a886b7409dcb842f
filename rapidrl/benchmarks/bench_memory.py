"""Recurrent SAC and TD3 against skrl's ``SAC_RNN`` and ``TD3_RNN`` on PendulumNoVel, each in its own process, at
skrl's example settings (``rapidrl.benchmarks.peer_skrl_rnn``): an LSTM of 400 units straight on the observation for
the actor and the critics, heads of 400 and 300, sequences of 20 steps without burn-in, batch 100 sequences, gamma
0.98, learning from step 100, replay 15,000 (TD3: 20,000), one update per env step. rapidrl's side is
``RecurrentSAC`` or ``RecurrentTD3`` with those sizes (its critics share one encoder; SAC's head is its own squashed
Gaussian; skrl's SAC policy has a state-independent log std, and each of skrl's critics and targets, and TD3's target
policy, has its own LSTM).

Per run: env steps per second over the steps from 200 on (each with one update), after 200 warm-up steps timed
apart. No learning is compared here (one update costs about a second at these sizes here, so 15,000 steps are hours);
docs/r2d2.md has rapidrl's learning at its preset's smaller sizes.

    python -m rapidrl.benchmarks.bench_memory --algo td3 --steps 400 --seeds 0 1 --threads 1

``--update-cost PRESET ...`` times instead one update of rapidrl's recurrent learners at their presets' settings in
this process (``update_cost``: the median over ``--repeats`` updates on fresh batches, after the warm-up's replay
and 3 updates), e.g. ``--update-cost r2d2_cartpolenovel recurrent_sac_pendulumnovel recurrent_td3_pendulumnovel``.

skrl runs in ``RAPIDRL_SB3_PYTHON``'s interpreter (``peers.sb3_python``: the peers' venv, where skrl is installed),
rapidrl in this one; seeds and contenders interleaved.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

from rapidrl.benchmarks.peer_skrl_rnn import HIDDEN, REPLAY, SEQUENCE
from rapidrl.benchmarks.peers import sb3_python

WARMUP = 200
_SHARED = dict(hidden=(), recurrent_size=HIDDEN, head_hidden=(400, 300), sequence_length=SEQUENCE, burn_in=0,
               batch_size=100, gamma=0.98, learning_starts=100, log_every_steps=1_000)
PEER_SETTINGS = {"sac": dict(_SHARED, buffer_size=REPLAY["sac"]),
                 "td3": dict(_SHARED, buffer_size=REPLAY["td3"], exploration_noise=0.1, target_policy_noise=0.2,
                             target_noise_clip=0.5, policy_delay=2, learning_rate=1e-3, tau=0.005)}
"""skrl's example settings as RecurrentSAC's and RecurrentTD3's fields."""
ALGORITHMS = {"sac": "RecurrentSAC", "td3": "RecurrentTD3"}


def job_rapidrl(steps: int, seed: int, threads: int, algo: str = "sac") -> dict:
    """rapidrl's run in this process: SPS over the steps from ``WARMUP`` on."""
    import torch

    import rapidrl as rr

    torch.set_num_threads(threads)
    model = getattr(rr, ALGORITHMS[algo])("PendulumNoVel-v1", seed=seed, **PEER_SETTINGS[algo])
    marks: dict[str, float] = {}

    def mark(m) -> bool:
        if m.num_timesteps >= WARMUP and "timed_from" not in marks:
            marks["timed_from"], marks["from_step"] = time.perf_counter(), m.num_timesteps
        return True

    t0 = time.perf_counter()
    model.learn(steps, callback=mark, progress_bar=False)
    t2 = time.perf_counter()
    timed = steps - int(marks["from_step"])
    return {"lib": "rapidrl", "warmup_s": round(marks["timed_from"] - t0, 2), "timed_steps": timed,
            "timed_s": round(t2 - marks["timed_from"], 2), "sps": round(timed / (t2 - marks["timed_from"]), 2)}


def update_cost(preset: str, repeats: int = 40, threads: int = 1) -> dict:
    """Milliseconds of one update (``_update_step`` on a freshly sampled batch: the median of ``repeats``) of the
    recurrent off-policy preset ``preset`` (R2D2, recurrent SAC or TD3), after its warm-up's replay and 3 updates."""
    import warnings

    import numpy as np

    from rapidrl.algos.registry import get_algorithm
    from rapidrl.runs.config import PRESETS_DIR, read_toml

    data = read_toml(PRESETS_DIR / f"{preset}.toml")
    settings = {**data.get("algo", {}), "torch_threads": threads}
    model = get_algorithm(data["run"]["algo"])(data["run"]["env"], seed=0, **settings)
    if not getattr(model, "recurrent", False) or not hasattr(model, "_update_step"):
        raise ValueError(f"{preset} is not a recurrent off-policy preset (R2D2, recurrent SAC or TD3)")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the short run ends right after the warm-up
        model.learn(model.config.learning_starts + 2 * model.config.num_envs, progress_bar=False)
    for _ in range(3):
        model._update_step(model._sample_batch())
    times = []
    for _ in range(repeats):
        batch = model._sample_batch()
        t0 = time.perf_counter()
        model._update_step(batch)
        times.append(time.perf_counter() - t0)
    return {"preset": preset, "ms_per_update": round(float(np.median(times)) * 1e3, 2), "repeats": repeats,
            "threads": threads}


def run(lib: str, steps: int, seed: int, threads: int, algo: str = "sac") -> dict:
    """One contender in a fresh process; its JSON line."""
    if lib == "rapidrl":
        cmd = [sys.executable, "-m", "rapidrl.benchmarks.bench_memory", "--child", "--algo", algo, "--steps",
               str(steps), "--seeds", str(seed), "--threads", str(threads)]
    else:
        python = sb3_python()
        if python is None:
            return {"lib": lib, "skipped": "no peers' interpreter (RAPIDRL_SB3_PYTHON) with skrl"}
        cmd = [python, "-m", "rapidrl.benchmarks.peer_skrl_rnn", "--algo", algo, "--steps", str(steps), "--seed",
               str(seed), "--threads", str(threads)]
    env = {**os.environ, "OMP_NUM_THREADS": str(threads), "MKL_NUM_THREADS": str(threads)}
    out = subprocess.run(cmd, capture_output=True, text=True, env=env, check=False)
    lines = [ln for ln in out.stdout.splitlines() if ln.startswith("{")]
    if out.returncode or not lines:
        return {"lib": lib, "failed": (out.stderr or out.stdout)[-2000:]}
    return json.loads(lines[-1])


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--algo", choices=sorted(ALGORITHMS), default="sac", help="recurrent SAC or TD3")
    p.add_argument("--steps", type=int, default=400, help=f"env steps per run (the first {WARMUP} are the warm-up)")
    p.add_argument("--seeds", type=int, nargs="+", default=[0])
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--update-cost", nargs="+", metavar="PRESET", help="time one update of these recurrent presets")
    p.add_argument("--repeats", type=int, default=40, help="updates timed per preset (--update-cost)")
    a = p.parse_args(argv)
    if a.update_cost:
        import rapidrl

        print(f"rapidrl from {rapidrl.__file__}", flush=True)
        for preset in a.update_cost:
            print(json.dumps(update_cost(preset, a.repeats, a.threads)), flush=True)
        return
    if a.steps <= WARMUP:
        p.error(f"--steps must be above the {WARMUP} warm-up steps")
    if a.child:
        print(json.dumps(job_rapidrl(a.steps, a.seeds[0], a.threads, a.algo)), flush=True)
        return
    results: dict[str, list[dict]] = {"rapidrl": [], "skrl": []}
    for seed in a.seeds:
        for lib in ("rapidrl", "skrl"):
            r = run(lib, a.steps, seed, a.threads, a.algo)
            results[lib].append(r)
            print(json.dumps({"seed": seed, **r}), flush=True)
    sps = {lib: [r["sps"] for r in rs if "sps" in r] for lib, rs in results.items()}
    if sps["rapidrl"] and sps["skrl"]:
        ratio = statistics.median(sps["rapidrl"]) / statistics.median(sps["skrl"])
        print(f"{ALGORITHMS[a.algo]} PendulumNoVel at skrl's example settings, {a.threads} thread(s): rapidrl "
              f"{statistics.median(sps['rapidrl']):.2f} SPS, skrl {statistics.median(sps['skrl']):.2f} SPS: "
              f"{ratio:.2f}x (medians over seeds {a.seeds})")


if __name__ == "__main__":
    main()
