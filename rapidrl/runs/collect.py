"""Models and datasets from a run: the model of a run directory or model file (``rapidrl eval``), and a Minari dataset
written from it (``rapidrl collect``: its policy, or its replay buffer)."""

from __future__ import annotations

import sys
from pathlib import Path

from rapidrl.runs.config import load_run_config
from rapidrl.runs.errors import RunError
from rapidrl.runs.layout import CHECKPOINT_DIR, CONFIG_FILE, MODEL_FILE

__all__ = ["collect_dataset", "load_run_model", "run_dir_of"]


def load_run_model(target: Path):
    """(model, path, seed) from a run directory (model.pt, else its newest checkpoint; a file that does not load is
    skipped, saying so, for the next newest) or a .pt file."""
    from rapidrl.algos.registry import algorithms
    from rapidrl.train.checkpoint import ModelFileError, list_checkpoints, load_checkpoint

    env_kwargs, seed = {}, 0
    if target.is_dir():
        config = load_run_config(target)
        env_kwargs, seed = config.env_kwargs, config.run.seed or 0
        candidates = [target / MODEL_FILE] if (target / MODEL_FILE).is_file() else []
        candidates += [p for _, p in reversed(list_checkpoints(target / CHECKPOINT_DIR))]
        if not candidates:
            raise RunError(f"{target} has no {MODEL_FILE} and no checkpoint yet")
    elif target.is_file():
        candidates = [target]
    else:
        raise RunError(f"no run directory or model file at {target}")
    skipped = []
    for path in candidates:
        try:
            payload = load_checkpoint(path)
            break
        except (ModelFileError, FileNotFoundError) as e:  # FileNotFoundError: pruned by a live run while listed
            if len(candidates) == 1:
                raise
            skipped.append(str(e))
            print(f"warning: skipped {path}: {e}", file=sys.stderr)
    else:
        raise RunError(f"none of the {len(candidates)} model files of {target} loads ({'; '.join(skipped)})")
    algo = payload["algo"]
    known = algorithms()
    if algo not in known:
        raise RunError(f"{path} holds a {algo!r} model; this rapidrl knows {', '.join(known)}")
    model = known[algo].load(path)
    if target.is_dir():  # the run's config; a model file brings its own (saved with it)
        model.env_kwargs = dict(env_kwargs)
    return model, path, seed


def run_dir_of(target: Path) -> Path | None:
    """The run directory ``target`` is or lies in (RUN, RUN/model.pt, RUN/checkpoints/step_N.pt), or None."""
    for candidate in (target, target.parent, target.parent.parent):
        if candidate.is_dir() and (candidate / CONFIG_FILE).is_file():
            return candidate
    return None


def collect_dataset(target: Path, *, steps: int | None = None, from_replay: bool = False, stochastic: bool = False,
                    noise: float = 0.0, epsilon: float = 0.0, num_envs: int = 1, seed: int | None = None,
                    dataset_id: str | None = None, ref_episodes: int = 10, ref_min: float | None = None,
                    ref_max: float | None = None, expert: str | None = None, root: str | None = None) -> Path:
    """Write a Minari dataset from the model of ``target`` (a run directory, its model or a checkpoint): ``steps``
    env steps of its policy (deterministic unless ``stochastic``; Gaussian ``noise`` times the half-range on Box
    actions, ``epsilon``-random Discrete ones), or its run's saved replay buffer (``from_replay``). The reference
    scores are a random policy's and the deterministic return of ``expert`` (default: the collecting policy) over
    ``ref_episodes`` episodes, unless given. Returns the dataset's directory (``rapidrl.buffers.dataset``)."""
    import numpy as np

    from rapidrl.algos.offpolicy import uniform_valid
    from rapidrl.buffers.dataset import collect_episodes, policy_return, replay_episodes, write_dataset
    from rapidrl.envs import make_vec
    from rapidrl.runs.config import env_slug
    from rapidrl.train.checkpoint import buffer_dir, latest_checkpoint

    model, path, run_seed = load_run_model(target)
    seed = seed if seed is not None else run_seed
    env_id, kwargs = model.env_id, dict(model.env_kwargs)
    discrete = hasattr(model.action_space, "n")
    if (discrete and noise) or (not discrete and epsilon):
        raise RunError(f"{'--noise is for Box' if discrete else '--epsilon is for Discrete'} actions; "
                       f"{env_id} has {model.action_space}")
    rng = np.random.default_rng(seed)
    space = model.action_space

    policy = model.episode_actor(num_envs, not stochastic)  # evaluation's acting: a recurrent policy keeps its state

    def random_actions(n: int, action_masks=None) -> np.ndarray:
        """Uniform actions (among the valid ones of an env with action masks)."""
        if action_masks is not None:
            return uniform_valid(action_masks, rng.random(n))
        return np.stack([space.sample() for _ in range(n)])

    def act(obs, starts, action_masks=None):
        actions = policy(obs, starts) if action_masks is None else policy(obs, starts, action_masks)
        if noise:
            half = (space.high - space.low) / 2
            actions = np.clip(actions + rng.normal(0.0, noise, actions.shape) * half, space.low, space.high)
        if epsilon:
            explore = rng.random(len(actions)) < epsilon
            actions = np.where(explore, random_actions(len(actions), action_masks), actions)
        return actions.astype(space.dtype, copy=False)

    if from_replay:
        source = path if path.suffix == ".pt" and buffer_dir(path).is_dir() else None
        if source is None and target.is_dir():
            source = latest_checkpoint(target / CHECKPOINT_DIR, with_buffer=True)
        if source is None or not buffer_dir(source).is_dir():
            raise RunError(f"no saved replay buffer for {target} (a checkpoint's .buffer directory; off-policy runs "
                           "save one with each checkpoint)")
        print(f"replay buffer: {buffer_dir(source)}")
        _, episodes = replay_episodes(buffer_dir(source))
        kind, origin = "replay", {"kind": "replay", "buffer": str(buffer_dir(source))}
    else:
        env = make_vec(env_id, num_envs, seed=seed, flatten_observations=True, **kwargs)
        episodes = collect_episodes(env, act, steps, seed=seed, with_starts=True)
        kind = "policy"
        origin = {"kind": "policy", "model": str(path), "steps": steps, "stochastic": stochastic,
                  "noise": noise, "epsilon": epsilon, "seed": seed}
    dataset_id = dataset_id or f"rapidrl/{env_slug(env_id)}/{model.name}-{kind}-{model.num_timesteps}-v0"
    ref_env = make_vec(env_id, ref_episodes, seed=seed + 1, flatten_observations=True, **kwargs)
    if ref_min is None:
        ref_min = float(policy_return(ref_env, lambda o, action_masks=None: random_actions(len(o), action_masks),
                                      seed + 1).mean())
    if ref_max is None:
        reference = load_run_model(Path(expert))[0] if expert else model
        ref_max = float(policy_return(ref_env, reference.episode_actor(ref_episodes, True), seed + 1,
                                      with_starts=True).mean())
        print(f"ref_max_score {ref_max:.2f}: the deterministic return of "
              f"{expert or 'the collecting policy'} over {ref_episodes} episodes")
    data = write_dataset(dataset_id, episodes, model.observation_space, model.action_space, env_id=env_id,
                         env_kwargs=kwargs, ref_min_score=ref_min, ref_max_score=ref_max,
                         algorithm_name=model.name, source=origin, root=root)
    from rapidrl.buffers.dataset import read_header

    header = read_header(data)
    mean = header.metadata["rapidrl"]["mean_return"]
    print(f"wrote {dataset_id}: {header.total_episodes:,} episodes, {header.total_steps:,} steps, mean episode return "
          f"{mean:.2f} (reference scores {ref_min:.2f} random, {ref_max:.2f} expert) to {data}")
    return data
