"""The offline datasets' sources, small enough for git, and the command that rebuilds every dataset from them.

    python -m tools.results datasets                 # rebuild every dataset under datasets/ and check its hash
    python -m tools.results datasets hopper          # one task
    python -m tools.dataset_sources record hopper --run RUN --medium-step 120000 --ref-max 3429.8

D4RL's locomotion datasets come from one SAC run per task (``tools/d4rl_datasets.py``): "medium" is 1M steps of the
stochastic policy of the checkpoint at about a third of the expert's return, "medium-replay" the replay buffer up
to that checkpoint. Neither dataset (tens to hundreds of MB) nor the run (its replay buffer) fits in git, and
rebuilding the run by hand took hours. What does fit is its recipe and its medium policy:

- ``<task>-run.toml``: the SAC run's config (``rapidrl train --config``: seed, env version, every hyperparameter, one
  torch thread, float32);
- ``<task>.toml``: the medium step, the reference scores, the medium dataset's size, where and when it was made,
  and per CPU (the golden runs' key: torch's CPU capability, vendor, BLAS-relevant features, torch version) the
  SHA-256 of the medium policy and of each dataset;
- ``<task>-medium-policy.pt``: the run's policy at the medium step (the actor and its observation statistics, not
  the critics, optimizer or replay: ~300 KB for SAC's 256x256 actor).

The rebuild re-runs the recorded SAC seed to the medium step (``rapidrl train`` in a scratch directory; one torch
thread, float32: bitwise the same run on the same class of CPU), checks that its policy is the committed one (where
this CPU has a recorded hash), writes medium-replay from its replay buffer and medium from the *committed* policy
(so the medium data come from the same policy on every CPU), and compares the datasets' hashes with the ones
recorded for this CPU. On another class of CPU the float32 kernels differ in their last bits and SAC's run drifts from
the recorded one: its policy and medium-replay are then the same recipe, not the same bytes (nor the same quality),
and ``--record`` adds that CPU's hashes beside the others, as the golden runs do. Measured 2026-12-07 on an AMD EPYC
(AVX2) against the Intel Xeon (AVX-512) the sources were made on: medium came out bitwise the same for both tasks
(the committed policy, acting through the compiled MLP forward, and MuJoCo agree there), but not on an AMD EPYC Zen 4
(AVX-512, HalfCheetah, the same day: its own medium hash; why is not known: on that Zen 4, ATen's kernels at AVX2,
MKL and oneDNN at AVX2, NumPy's AVX-512 dispatch off, SciPy's OpenBLAS on its Haswell kernels and Numba's code for
a Haswell each left the medium hash as it was, 2026-12-07 evening); the re-run policies differed
(Hopper's reached a deterministic 3,060.8 at step 130,000 against 1,299.0, HalfCheetah's 3,715.7 at 60,000 against
4,002.4), so medium-replay differed (mean episode return 305.9 against 269.7; 1,392.9 against 1,243.3).

Tasks run as parallel processes (one core each: two on a 2-core machine): Hopper's 130,000 SAC steps are the longest
part. Both tasks took 26 minutes on that 2-core EPYC (Hopper 1,549 s, HalfCheetah 754 s, side by side).
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import tomllib

SOURCES = Path(__file__).resolve().parent
REPO = SOURCES.parent.parent
POLICY_STATE = ("actor", "obs_normalizer")
"""The entries of a model's state that act: the rest (critics, targets, temperature, optimizers) only learn."""
HASHED_FIELDS = ("observations", "actions", "rewards", "terminations", "truncations")


def cpu_key() -> str:
    """The golden runs' recording key of this CPU (``tests/test_golden.py``: kernels differ between these keys)."""
    from tools.cpu_key import capability

    return capability()


def tensors_digest(state: dict) -> str:
    """SHA-256 of a state dict's tensors: the golden runs' fingerprint (names, dtypes, shapes, bytes)."""
    from tools.cpu_key import fingerprint

    return fingerprint(state)["sha256"]


def dataset_digest(dataset_id: str, root: str | os.PathLike | None = None) -> str:
    """SHA-256 over every episode's arrays (``HASHED_FIELDS``, as stored: dtype, shape, bytes), in order."""
    from rapidrl.buffers.dataset import iter_episodes

    digest = hashlib.sha256()
    for episode in iter_episodes(dataset_id, root=root):
        for field in HASHED_FIELDS:
            a = np.ascontiguousarray(getattr(episode, field))
            digest.update(f"{field}:{a.dtype}:{a.shape}".encode())
            digest.update(a.tobytes())
    return digest.hexdigest()


def policy_payload(checkpoint: str | os.PathLike) -> dict:
    """A saved model's payload reduced to its acting state (``POLICY_STATE``), without the training state."""
    from rapidrl.train.checkpoint import load_checkpoint

    payload = load_checkpoint(checkpoint)
    payload.pop("training", None)
    payload["state"] = {k: v for k, v in payload["state"].items() if k in POLICY_STATE}
    if "actor" not in payload["state"]:
        raise SystemExit(f"{checkpoint}: a {payload['algo']!r} model has no 'actor' to keep")
    return payload


def model_from_policy(policy: str | os.PathLike, out: str | os.PathLike) -> Path:
    """Write a loadable model file at ``out`` from a policy file: the saved actor (and observation statistics),
    the other state that of a fresh model of the same config (it never acts). ``rapidrl collect`` reads it."""
    from rapidrl.algos.registry import get_algorithm
    from rapidrl.train.checkpoint import atomic_torch_save, load_checkpoint
    from rapidrl.train.config import config_from_dict

    payload = load_checkpoint(policy)
    cls = get_algorithm(payload["algo"])
    fresh = cls(payload["env_id"], config_from_dict(cls.config_class, dict(payload["config"])),
                env_kwargs=payload.get("env_kwargs", {}))
    payload["state"] = {**fresh._state(), **payload["state"]}
    atomic_torch_save(payload, Path(out))
    return Path(out)


def source_tasks(sources: Path = SOURCES) -> list[str]:
    """The tasks with a source in ``sources`` (``<task>.toml``, not the runs' ``<task>-run.toml``)."""
    return sorted(p.stem for p in sources.glob("*.toml") if not p.stem.endswith("-run"))


def load_source(task: str, sources: Path = SOURCES) -> dict:
    path = sources / f"{task}.toml"
    if not path.is_file():
        known = source_tasks(sources)
        raise SystemExit(f"no dataset source {path.name} (known: {', '.join(known) or 'none'})")
    return tomllib.loads(path.read_text())


def write_source(task: str, source: dict, sources: Path = SOURCES) -> Path:
    """``<task>.toml`` (``tomli_w``, as rapidrl writes its configs), under a comment saying what writes it."""
    import tomli_w

    path = sources / f"{task}.toml"
    path.write_text(f"# The source of rapidrl/{task}/*-v0 (tools/dataset_sources/__init__.py). Written by `python -m "
                    "tools.dataset_sources record`; `--record` adds a CPU's hashes.\n" + tomli_w.dumps(source))
    return path


def record(task: str, run: Path, medium_step: int, ref_max: float, medium_steps: int, sources: Path = SOURCES) -> int:
    """Commit-ready source of ``task`` from a finished SAC run directory: its config's ``train`` arguments, the
    policy at ``medium_step`` and its hash on this CPU."""
    from rapidrl.train.checkpoint import atomic_torch_save, list_checkpoints
    from tools.results import _git_commit as git_commit

    found = dict(list_checkpoints(run / "checkpoints"))
    if medium_step not in found:
        raise SystemExit(f"{run} has no checkpoint at step {medium_step:,} (has {sorted(found)})")
    payload = policy_payload(found[medium_step])
    if payload["config"]["precision"] == "auto":
        raise SystemExit("the source run must state its precision (fp32 rebuilds bitwise; 'auto' depends on the CPU)")
    text = (run / "config.toml").read_text()
    run_config = sources / f"{task}-run.toml"  # the run's config, less the paths it resolved (outputs, not inputs)
    run_config.write_text(text[:text.index("[paths") if "[paths" in text else len(text)].rstrip() + "\n")
    policy_file = sources / f"{task}-medium-policy.pt"
    atomic_torch_save(payload, policy_file)
    size = policy_file.stat().st_size
    print(f"{policy_file}: {size / 1024:.0f} KiB")
    if size > 2 * 1024 * 1024:
        raise SystemExit(f"{policy_file} is over 2 MiB: not for git")
    source = {
        "task": task, "env": payload["env_id"].split(":")[-1], "run_config": run_config.name,
        "medium_step": medium_step, "ref_max": ref_max, "medium_steps": medium_steps, "policy": policy_file.name,
        "made": {"date": time.strftime("%Y-%m-%d"), "commit": git_commit(), "cpu": cpu_key(),
                 "run": str(run)},
        "hashes": {cpu_key(): {"policy": tensors_digest(payload["state"])}},
    }
    print(f"wrote {write_source(task, source, sources)}")
    return 0


def rebuild(task: str, root: str | None, work: Path, record_hashes: bool, sources: Path = SOURCES) -> int:
    """Re-run the source SAC run to the medium step, check its policy, write medium-replay (its replay) and medium
    (the committed policy) with ``tools.d4rl_datasets``, and compare the hashes with this CPU's recorded ones."""
    from rapidrl.train.checkpoint import list_checkpoints, load_checkpoint
    from tools import d4rl_datasets

    source = load_source(task, sources)
    key = cpu_key()
    recorded = source.get("hashes", {}).get(key, {})
    step = int(source["medium_step"])
    run = work / f"sac-{task}"
    t0 = time.time()
    ckpt = dict(list_checkpoints(run / "checkpoints")).get(step) if (run / "checkpoints").is_dir() else None
    if ckpt is None:
        argv = [sys.executable, "-m", "rapidrl", "train", "--config", str(sources / source["run_config"]),
                "--timesteps", str(step), "--run-dir", str(run), "--headless",
                "--set", f"run.checkpoint_every={step}", "--set", "run.checkpoint_keep=1"]
        print(f"{task}: {' '.join(argv[3:])}", flush=True)
        if subprocess.run(argv, cwd=REPO).returncode != 0:
            return 1
        ckpt = dict(list_checkpoints(run / "checkpoints"))[step]
    print(f"{task}: SAC to step {step:,} in {time.time() - t0:.0f} s", flush=True)
    got = {"policy": tensors_digest(policy_payload(ckpt)["state"])}
    committed = tensors_digest(load_checkpoint(sources / source["policy"])["state"])
    print(f"{task}: the re-run's medium policy {'equals' if got['policy'] == committed else 'differs from'} the "
          f"committed one ({'same' if key == source['made']['cpu'] else 'another'} class of CPU: {key})", flush=True)
    with tempfile.TemporaryDirectory() as tmp:
        medium_model = model_from_policy(sources / source["policy"], Path(tmp) / "medium-policy.pt")
        argv = [task, "--run", str(run), "--medium-step", str(step), "--ref-max", str(source["ref_max"]),
                "--medium-steps", str(source["medium_steps"]), "--medium-model", str(medium_model), "--force"]
        if d4rl_datasets.main(argv + (["--root", root] if root else [])) != 0:
            return 1
    for kind in ("medium-replay", "medium"):
        got[f"{kind}-v0"] = dataset_digest(f"rapidrl/{task}/{kind}-v0", root)
    same = True
    for name, digest in got.items():
        want = recorded.get(name)
        verdict = "no hash recorded for this CPU" if want is None else "same" if want == digest else "DIFFERENT"
        same &= want is None or want == digest
        print(f"{task}: {name} sha256 {digest[:16]}... {verdict}", flush=True)
    if record_hashes:
        source.setdefault("hashes", {})[key] = {**recorded, **got}
        write_source(task, source, sources)
        print(f"{task}: recorded this CPU's hashes in {task}.toml", flush=True)
    print(f"{task}: done in {time.time() - t0:.0f} s", flush=True)
    return 0 if same or record_hashes else 2


def rebuild_all(tasks: list[str], root: str | None, work: str | None, record_hashes: bool, jobs: int,
                sources: Path = SOURCES) -> int:
    """``rebuild`` each task in its own process, ``jobs`` at a time; 0 when every hash matched."""
    tasks = tasks or source_tasks(sources)
    work_dir = Path(work or tempfile.mkdtemp(prefix="rapidrl-datasets-"))
    pending, running, codes = list(tasks), {}, {}
    t0 = time.time()
    while pending or running:
        while pending and len(running) < jobs:
            task = pending.pop(0)
            argv = [sys.executable, "-m", "tools.dataset_sources", "rebuild", task, "--work", str(work_dir)]
            argv += (["--root", root] if root else []) + (["--record"] if record_hashes else [])
            argv += ["--sources", str(sources)]
            running[task] = subprocess.Popen(argv, cwd=REPO)
        for task, proc in list(running.items()):
            if proc.poll() is not None:
                codes[task] = proc.returncode
                del running[task]
        time.sleep(1.0)
    for task in tasks:
        print(f"{task}: {'ok' if codes[task] == 0 else 'hash differs' if codes[task] == 2 else 'FAILED'}")
    worst = max(codes.values(), default=0)
    if worst == 0 and work is None:
        shutil.rmtree(work_dir, ignore_errors=True)
    print(f"datasets rebuilt in {time.time() - t0:.0f} s" + (f" (the SAC re-runs are in {work_dir})" if worst or work
                                                             else ""))
    return worst


def main(argv: list[str] | None = None) -> int:
    import argparse

    p = argparse.ArgumentParser(prog="python -m tools.dataset_sources", description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="command", required=True)
    r = sub.add_parser("rebuild", help="rebuild datasets from their committed sources")
    r.add_argument("tasks", nargs="*", help="tasks (default: every source)")
    r.add_argument("--root", help="datasets directory (default $MINARI_DATASETS_PATH or ~/.minari/datasets)")
    r.add_argument("--work", help="scratch directory of the SAC re-runs (default: a new temporary one)")
    r.add_argument("--record", action="store_true", help="record this CPU's hashes in the sources")
    r.add_argument("--sources", type=Path, default=SOURCES, help="directory of the sources (default: this one)")
    r.add_argument("--jobs", type=int, default=max(1, min(2, os.cpu_count() or 1)), help="tasks at a time")
    s = sub.add_parser("record", help="write a task's source from a finished SAC run directory")
    s.add_argument("task")
    s.add_argument("--run", required=True, type=Path)
    s.add_argument("--medium-step", required=True, type=int)
    s.add_argument("--ref-max", required=True, type=float)
    s.add_argument("--medium-steps", type=int, default=1_000_000)
    s.add_argument("--sources", type=Path, default=SOURCES, help="directory of the sources (default: this one)")
    args = p.parse_args(argv)
    args.sources = args.sources.resolve()  # the processes below run from the repository root
    if getattr(args, "root", None):
        args.root = str(Path(args.root).resolve())
    if getattr(args, "work", None):
        args.work = str(Path(args.work).resolve())
    if args.command == "record":
        return record(args.task, args.run, args.medium_step, args.ref_max, args.medium_steps, args.sources)
    if len(args.tasks) == 1 and args.work:
        return rebuild(args.tasks[0], args.root, Path(args.work), args.record, args.sources)
    return rebuild_all(args.tasks, args.root, args.work, args.record, args.jobs, args.sources)
