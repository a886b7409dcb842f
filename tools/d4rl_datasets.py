"""The D4RL recipe on rapidrl's tasks: rebuild the medium, medium-replay, expert and medium-expert datasets from run
directories (docs/offline.md).

    python -m tools.d4rl_datasets hopper --run runs/offline/sac-hopper-seed0 --ref-max 3429.8
    python -m tools.d4rl_datasets hopper --run RUN --expert-run EXPERT_RUN   # + expert, medium-expert

D4RL (Fu et al. 2020) built its locomotion datasets from one SAC run per task: "medium" is 1M steps of the stochastic
policy of a checkpoint at about a third of the expert's return, "medium-replay" the replay buffer up to that
checkpoint, "expert" 1M steps of the final policy, "medium-expert" the two together. Here the run is a rapidrl
off-policy run whose checkpoints kept their replay buffers (``--set run.checkpoint_every=... --set
run.checkpoint_keep=100``); the medium checkpoint is the one whose deterministic return (``--eval-episodes``) is
closest to random + (expert - random) / 3, or ``--medium-step``. Each dataset is written by ``rapidrl collect`` as
``rapidrl/<task>/<kind>-v0`` with the reference scores ``ref_min_score`` (uniform-random actions, measured) and
``ref_max_score`` (``--ref-max``, e.g. the SAC results row's return, else the expert run's deterministic return).
Datasets that exist are kept (Minari datasets are immutable; ``--force`` deletes and rebuilds them). The datasets stay
out of git (``/datasets/`` is ignored: ``MINARI_DATASETS_PATH=datasets``). A recipe of this repository, on the public
API and the ``rapidrl`` command (``rapidrl collect``), not part of the package.
"""

from __future__ import annotations

import argparse
import shutil
import sys
from itertools import chain
from pathlib import Path

import numpy as np

TASKS = {"hopper": "Hopper-v5", "halfcheetah": "HalfCheetah-v5", "walker2d": "Walker2d-v5", "pendulum": "Pendulum-v1",
         "cartpole": "CartPole-v1"}


def load_model(target: Path):
    """The model of a run directory (its final ``model.pt``, else its newest checkpoint) or of a model file."""
    from rapidrl.algos.registry import get_algorithm
    from rapidrl.runs.layout import CHECKPOINT_DIR, MODEL_FILE
    from rapidrl.train.checkpoint import list_checkpoints, load_checkpoint

    path = target
    if target.is_dir():
        found = [target / MODEL_FILE] if (target / MODEL_FILE).is_file() else \
            [p for _, p in list_checkpoints(target / CHECKPOINT_DIR)][-1:]
        if not found:
            raise SystemExit(f"{target} has no {MODEL_FILE} and no checkpoint")
        path = found[0]
    return get_algorithm(load_checkpoint(path)["algo"]).load(path)


def medium_checkpoint(run: Path, target: float, episodes: int, step: int | None) -> tuple[int, Path, float]:
    """(step, path, deterministic return) of the checkpoint of ``run`` with a saved replay buffer whose return is
    closest to ``target`` (or the one at ``step``)."""
    from rapidrl.algos.registry import get_algorithm
    from rapidrl.train.checkpoint import buffer_dir, list_checkpoints, load_checkpoint

    found = [(s, p) for s, p in list_checkpoints(run / "checkpoints") if buffer_dir(p).is_dir()]
    if step is not None:
        found = [(s, p) for s, p in found if s == step]
    if not found:
        raise SystemExit(f"no checkpoint with a replay buffer in {run / 'checkpoints'}"
                         + (f" at step {step}" if step is not None else ""))
    best = None
    for s, p in found:
        model = get_algorithm(load_checkpoint(p)["algo"]).load(p)
        mean = model.evaluate(episodes)[0]
        print(f"  checkpoint step {s:,}: deterministic return {mean:.1f}", flush=True)
        if best is None or abs(mean - target) < abs(best[2] - target):
            best = (s, p, mean)
    return best


def main(argv: list[str] | None = None) -> int:
    from rapidrl import cli
    from rapidrl.buffers.dataset import (
        dataset_dir,
        iter_episodes,
        policy_return,
        read_header,
        write_dataset,
    )
    from rapidrl.envs import make_vec

    p = argparse.ArgumentParser(prog="python -m tools.d4rl_datasets", description=__doc__.split("\n\n")[0])
    p.add_argument("task", choices=sorted(TASKS))
    p.add_argument("--run", required=True, help="the run directory of the medium checkpoint and its replay buffer")
    p.add_argument("--expert-run", help="a run (or .pt) of the expert: adds expert-v0 and medium-expert-v0")
    p.add_argument("--ref-max", type=float, help="expert return for normalisation (default: the expert run's)")
    p.add_argument("--medium-step", type=int, help="the medium checkpoint's step (default: closest to 1/3)")
    p.add_argument("--medium-steps", type=int, default=1_000_000, help="transitions of medium-v0 (D4RL: 1M)")
    p.add_argument("--medium-model", help="the model file medium-v0 is collected with (default: the medium "
                   "checkpoint; tools/dataset_sources passes its committed policy)")
    p.add_argument("--expert-steps", type=int, default=1_000_000, help="transitions of expert-v0 (D4RL: 1M)")
    p.add_argument("--eval-episodes", type=int, default=10)
    p.add_argument("--root", help="datasets directory (default $MINARI_DATASETS_PATH or ~/.minari/datasets)")
    p.add_argument("--force", action="store_true", help="delete and rebuild datasets that exist")
    args = p.parse_args(argv)
    env_id, run = TASKS[args.task], Path(args.run)
    root = ["--root", args.root] if args.root else []

    env = make_vec(env_id, args.eval_episodes, seed=1, flatten_observations=True)
    space = env.single_action_space
    space.seed(0)
    ref_min = float(policy_return(env, lambda o: np.stack([space.sample() for _ in o]), seed=1).mean())
    ref_max = args.ref_max
    if ref_max is None:
        if not args.expert_run:
            raise SystemExit("give --ref-max (the expert's return) or --expert-run")
        expert = load_model(Path(args.expert_run))
        ref_max = expert.evaluate(args.eval_episodes)[0]
    print(f"{args.task}: reference scores {ref_min:.1f} (uniform-random actions) and {ref_max:.1f} (expert)")
    target = ref_min + (ref_max - ref_min) / 3
    print(f"medium checkpoint: deterministic return closest to {target:.1f}")
    step, ckpt, mean = medium_checkpoint(run, target, args.eval_episodes, args.medium_step)
    score = 100 * (mean - ref_min) / (ref_max - ref_min)
    print(f"medium checkpoint: step {step:,} ({mean:.1f}, normalised {score:.1f})")

    def fresh(kind: str) -> str | None:
        """The id of ``kind``, or None when it exists and is kept."""
        dataset_id = f"rapidrl/{args.task}/{kind}-v0"
        where = dataset_dir(dataset_id, args.root).parent
        if where.exists():
            if not args.force:
                print(f"{dataset_id}: exists at {where}, kept (--force rebuilds it)")
                return None
            shutil.rmtree(where)
        return dataset_id

    refs = ["--ref-min", str(ref_min), "--ref-max", str(ref_max), *root]
    built = []
    medium_model = args.medium_model or str(ckpt)
    for kind, model, extra in (("medium-replay", str(ckpt), ["--from-replay"]),
                               ("medium", medium_model, ["--steps", str(args.medium_steps), "--stochastic"])):
        dataset_id = fresh(kind)
        if dataset_id is not None:
            if cli.main(["collect", model, *extra, "--dataset-id", dataset_id, *refs]) != 0:
                return 1
            built.append(dataset_id)
    if args.expert_run:
        dataset_id = fresh("expert")
        if dataset_id is not None:
            if cli.main(["collect", args.expert_run, "--steps", str(args.expert_steps), "--stochastic",
                         "--dataset-id", dataset_id, *refs]) != 0:
                return 1
            built.append(dataset_id)
        dataset_id = fresh("medium-expert")
        if dataset_id is not None:
            medium, expert_h = (read_header(f"rapidrl/{args.task}/{k}-v0", args.root) for k in ("medium", "expert"))
            write_dataset(dataset_id, chain(iter_episodes(medium), iter_episodes(expert_h)),
                          medium.observation_space, medium.action_space, env_id=env_id, ref_min_score=ref_min,
                          ref_max_score=ref_max, algorithm_name="sac",
                          source={"kind": "medium-expert", "of": [medium.dataset_id, expert_h.dataset_id]},
                          root=args.root)
            built.append(dataset_id)
    print(f"built: {', '.join(built) or 'nothing (all kept)'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
