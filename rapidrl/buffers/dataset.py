"""Offline datasets in the Minari format: write them, read them back checked, and sample them with the replay sampler.

A dataset is a Minari dataset (the ``minari`` package, HDF5 storage, the ``offline`` extra): the directory
``<root>/<dataset id>/data/`` holds ``metadata.json`` and ``main_data.hdf5``, where ``<root>`` is
``$MINARI_DATASETS_PATH`` (default ``~/.minari/datasets``) and the id is ``namespace/name-vN``. An episode of T
steps holds observations [T + 1, *obs_shape] (the last one the true final observation), actions [T, ...], rewards,
terminations and truncations [T]. rapidrl writes through ``minari``'s storage, so ``minari.load_dataset(id)`` reads
what rapidrl writes, and rapidrl reads any Minari dataset with Box observations and Box (1-D) or Discrete actions.

Reference scores live in the metadata under Minari's names, ``ref_min_score`` (a random policy's mean return) and
``ref_max_score`` (an expert's), so ``minari.get_normalized_score`` agrees with ``normalized_score`` (D4RL's score,
x100). rapidrl's own record (the env id and kwargs it was collected on, the source) is the ``rapidrl`` key.

Reading streams: episodes are read a chunk at a time and appended to a ``ReplayBuffer`` (in memory, or in
memory-mapped files with ``storage="mmap"`` for a dataset larger than the RAM), which the algorithms sample with the
replay sampler. Every episode is checked on the way in and on the way out; a bad one is a ``DatasetError`` naming
the dataset, the episode and the problem (spaces that do not match the env, NaN or inf values, an empty episode, a
truncated or corrupt file), and nothing is written: a dataset is written beside its final directory and renamed
into place only when every episode passed.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
import weakref
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np

from rapidrl.buffers.persist import read_buffer_dir
from rapidrl.buffers.replay import ReplayBuffer
from rapidrl.envs.core.base import current_action_masks

__all__ = ["DatasetError", "Episode", "OfflineDataset", "check_episode", "collect_episodes", "dataset_dir",
           "iter_episodes", "load_dataset", "normalized_score", "policy_return", "read_header", "replay_episodes",
           "write_dataset"]

ROOT_VARIABLE = "MINARI_DATASETS_PATH"
_METADATA, _MAIN_FILE = "metadata.json", "main_data.hdf5"


class DatasetError(ValueError):
    """A dataset that cannot be written or read: the message is one line naming the dataset and the problem."""


def _minari():
    try:
        import minari
        import minari.dataset.minari_storage  # the storage classes used below
    except ImportError:
        raise ImportError("offline datasets need the minari package: pip install 'rapidrl[offline]'") from None
    return minari


# -- episodes ----------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Episode:
    """One episode of T steps, as Minari stores it."""

    observations: np.ndarray  # [T + 1, *obs_shape]: the last is the true final observation
    actions: np.ndarray  # [T, *action_shape]
    rewards: np.ndarray  # [T] float
    terminations: np.ndarray  # [T] bool
    truncations: np.ndarray  # [T] bool

    def __len__(self) -> int:
        return len(self.rewards)


def _action_shape(space: gym.Space) -> tuple[int, ...]:
    return () if isinstance(space, gym.spaces.Discrete) else tuple(space.shape)


def check_episode(episode: Episode, index: int, observation_space: gym.Space, action_space: gym.Space,
                  name: str) -> None:
    """DatasetError unless ``episode`` (number ``index`` of dataset ``name``) has at least one step, the shapes of the
    spaces, finite observations, actions and rewards, Discrete actions in range, and no episode end before its last
    step."""
    where = f"{name}: episode {index}"
    T = len(episode.rewards)
    if T == 0:
        raise DatasetError(f"{where} is empty (0 steps)")
    want = {"observations": (T + 1, *observation_space.shape), "actions": (T, *_action_shape(action_space)),
            "rewards": (T,), "terminations": (T,), "truncations": (T,)}
    for key, shape in want.items():
        got = np.shape(getattr(episode, key))
        if got != shape:
            raise DatasetError(f"{where}: {key} have shape {got}, expected {shape} (from the dataset's spaces and "
                               f"its {T} rewards)")
    for key in ("observations", "actions", "rewards"):
        x = np.asarray(getattr(episode, key))
        if x.dtype.kind == "f":
            bad = ~np.isfinite(x.reshape(len(x), -1)).all(1)
            if bad.any():
                step = int(np.argmax(bad))
                kind = "NaN" if np.isnan(x[step]).any() else "an infinite value"
                raise DatasetError(f"{where} has {kind} in {key} at step {step}")
    if isinstance(action_space, gym.spaces.Discrete):
        a = np.asarray(episode.actions)
        if a.dtype.kind not in "iu" and not (a.dtype.kind == "f" and np.all(a == np.round(a))):
            raise DatasetError(f"{where}: Discrete actions must be integers, got dtype {a.dtype}")
        out = (a < action_space.start) | (a >= action_space.start + action_space.n)
        if out.any():
            step = int(np.argmax(out))
            raise DatasetError(f"{where}: action {a[step]} at step {step} is outside {action_space}")
    ended = np.asarray(episode.terminations, bool)[:-1] | np.asarray(episode.truncations, bool)[:-1]
    if ended.any():
        raise DatasetError(f"{where} ends at step {int(np.argmax(ended))} but holds {T} steps")


# -- where datasets live -----------------------------------------------------------------------------------------
def _root(root: str | os.PathLike | None) -> Path:
    if root is not None:
        return Path(root)
    env = os.environ.get(ROOT_VARIABLE)
    return Path(env) if env else Path.home() / ".minari" / "datasets"


def _check_id(dataset_id: str) -> None:
    from minari.dataset.minari_dataset import parse_dataset_id

    try:
        parse_dataset_id(dataset_id)
    except (ValueError, TypeError):
        raise DatasetError(f"dataset id {dataset_id!r} is not of the form namespace/name-vN (e.g. "
                           "rapidrl/hopper/medium-v0)") from None


def dataset_dir(source: str | os.PathLike, root: str | os.PathLike | None = None) -> Path:
    """The ``data/`` directory of a dataset: ``source`` is a dataset id (under ``root``, default
    ``$MINARI_DATASETS_PATH`` or ``~/.minari/datasets``), or a path to the dataset's directory or its ``data/``."""
    path = Path(source)
    if path.is_dir() and (path / _METADATA).is_file():
        return path
    if path.is_dir() and (path / "data").is_dir():
        return path / "data"
    return _root(root) / str(source) / "data"


# -- the header --------------------------------------------------------------------------------------------------
@dataclass
class DatasetHeader:
    """What ``metadata.json`` says about a dataset (read without touching its episodes)."""

    dataset_id: str
    path: Path  # the data/ directory
    observation_space: gym.Space
    action_space: gym.Space
    total_steps: int
    total_episodes: int
    env_id: str | None
    env_kwargs: dict = field(default_factory=dict)
    ref_min_score: float | None = None
    ref_max_score: float | None = None
    metadata: dict = field(default_factory=dict)


def _env_id_of(metadata: dict) -> str | None:
    own = metadata.get("rapidrl", {}).get("env_id")
    if own:
        return own
    for key in ("eval_env_spec", "env_spec"):  # a dataset written elsewhere: the id of its Gymnasium spec
        spec = metadata.get(key)
        if isinstance(spec, str):
            try:
                return json.loads(spec).get("id")
            except json.JSONDecodeError:
                continue
    return None


def read_header(source: str | os.PathLike, root: str | os.PathLike | None = None) -> DatasetHeader:
    """The header of dataset ``source`` (an id or a path, see ``dataset_dir``); DatasetError when there is none or
    its metadata cannot be read."""
    from minari.serialization import deserialize_space

    _minari()
    path = dataset_dir(source, root)
    meta_file = path / _METADATA
    if not meta_file.is_file():
        build = ""
        if str(source).startswith("rapidrl/"):  # a preset's dataset: the D4RL recipe on a trained run builds it
            task = str(source).split("/")[1]
            build = (f"; build it from a trained off-policy run with the D4RL recipe of docs/offline.md (in a source "
                     f"checkout: python -m tools.d4rl_datasets {task} --run RUN_DIR)")
        raise DatasetError(f"no dataset {str(source)!r}: nothing at {path} (datasets are found under "
                           f"${ROOT_VARIABLE}, now {_root(root)}){build}; or write one from a run's policy: "
                           "rapidrl collect RUN_DIR --steps N --dataset-id ID")
    try:
        metadata = json.loads(meta_file.read_text())
        obs_space = deserialize_space(metadata["observation_space"])
        act_space = deserialize_space(metadata["action_space"])
        header = DatasetHeader(
            dataset_id=str(metadata.get("dataset_id", source)), path=path, observation_space=obs_space,
            action_space=act_space, total_steps=int(metadata["total_steps"]),
            total_episodes=int(metadata["total_episodes"]), env_id=_env_id_of(metadata),
            env_kwargs=dict(metadata.get("rapidrl", {}).get("env_kwargs", {})),
            ref_min_score=metadata.get("ref_min_score"), ref_max_score=metadata.get("ref_max_score"),
            metadata=metadata)
    except (json.JSONDecodeError, KeyError, TypeError, ValueError, NotImplementedError) as e:
        raise DatasetError(f"{source}: unreadable {meta_file} ({type(e).__name__}: {e})"[:400]) from None
    if metadata.get("data_format") not in ("hdf5", "arrow"):
        raise DatasetError(f"{source}: unknown data_format {metadata.get('data_format')!r} in {meta_file}")
    return header


def check_spaces(header: DatasetHeader, observation_space: gym.Space, action_space: gym.Space,
                 env_name: str = "the env") -> None:
    """DatasetError unless the dataset's spaces have the env's types, shapes and (actions) bounds or sizes."""
    for what, mine, env in (("observation", header.observation_space, observation_space),
                            ("action", header.action_space, action_space)):
        same = type(mine) is type(env) and getattr(mine, "shape", None) == getattr(env, "shape", None)
        if same and isinstance(env, gym.spaces.Discrete):
            same = (mine.n, mine.start) == (env.n, env.start)
        if same and isinstance(env, gym.spaces.Box) and what == "action":
            same = np.allclose(mine.low, env.low) and np.allclose(mine.high, env.high)
        if not same:
            raise DatasetError(f"{header.dataset_id}: its {what} space {mine} does not match {env_name}'s {env}")


def _check_supported(header: DatasetHeader) -> None:
    obs, act = header.observation_space, header.action_space
    if not isinstance(obs, gym.spaces.Box):
        raise DatasetError(f"{header.dataset_id}: observation space {obs} is not a Box (rapidrl's offline "
                           "algorithms take flat or image Box observations)")
    if not (isinstance(act, gym.spaces.Discrete) or (isinstance(act, gym.spaces.Box) and len(act.shape) == 1)):
        raise DatasetError(f"{header.dataset_id}: action space {act} is neither Discrete nor a 1-D Box")


# -- reading -----------------------------------------------------------------------------------------------------
def _as_episode(raw: dict, observation_space: gym.Space, action_space: gym.Space) -> Episode:
    obs = np.asarray(raw["observations"])
    if obs.dtype != observation_space.dtype and obs.dtype.kind == "f":
        obs = obs.astype(observation_space.dtype, copy=False)
    actions = np.asarray(raw["actions"])
    if isinstance(action_space, gym.spaces.Discrete) and actions.dtype.kind in "iuf":
        actions = actions.reshape(len(actions))
    return Episode(obs, actions, np.asarray(raw["rewards"]), np.asarray(raw["terminations"], bool),
                   np.asarray(raw["truncations"], bool))


def iter_episodes(source: str | os.PathLike | DatasetHeader, chunk: int = 256,
                  root: str | os.PathLike | None = None) -> Iterator[Episode]:
    """The episodes of a dataset in order, read ``chunk`` at a time and each checked (``check_episode``)."""
    header = source if isinstance(source, DatasetHeader) else read_header(source, root)
    _check_supported(header)
    minari = _minari()
    name = header.dataset_id
    try:
        storage = minari.MinariDataset(header.path).storage
    except (OSError, ValueError, KeyError, AssertionError) as e:
        raise DatasetError(f"{name}: cannot open {header.path} ({type(e).__name__}: {e})"[:400]) from None
    total = header.total_episodes
    for start in range(0, total, chunk):
        indices = range(start, min(total, start + chunk))
        try:
            raws = list(storage.get_episodes(indices))
        except (OSError, KeyError, ValueError, AssertionError) as e:  # h5py: "truncated file: eof = ..."
            raise DatasetError(f"{name}: cannot read episodes {indices.start}-{indices.stop - 1} from "
                               f"{header.path / _MAIN_FILE} (truncated or corrupt file? {type(e).__name__}: "
                               f"{str(e).splitlines()[0] if str(e) else ''})"[:400]) from None
        for k, raw in zip(indices, raws):
            episode = _as_episode(raw, header.observation_space, header.action_space)
            check_episode(episode, k, header.observation_space, header.action_space, name)
            yield episode


def normalized_score(returns, ref_min_score: float, ref_max_score: float) -> np.ndarray:
    """D4RL's normalised score: 100 (return - random) / (expert - random), for one return or an array of them."""
    if ref_max_score == ref_min_score:
        raise ValueError(f"reference scores are equal ({ref_min_score}): the score is undefined")
    return 100.0 * (np.asarray(returns, np.float64) - ref_min_score) / (ref_max_score - ref_min_score)


class OfflineDataset:
    """A dataset loaded for training: its header and its transitions in a ``ReplayBuffer`` (``buffer``: n_step 1,
    ``discounts = gamma (1 - terminated)``), plus the statistics the algorithms use.

    ``obs_mean``/``obs_std`` [*obs_shape] (float64, over the transitions' observations), ``episode_returns`` and
    ``episode_lengths`` [E], ``ref_min_score``/``ref_max_score`` (None when the dataset has none).
    """

    def __init__(self, header: DatasetHeader, buffer: ReplayBuffer, obs_mean: np.ndarray, obs_std: np.ndarray,
                 episode_returns: np.ndarray, episode_lengths: np.ndarray):
        self.header, self.buffer = header, buffer
        self.obs_mean, self.obs_std = obs_mean, obs_std
        self.episode_returns, self.episode_lengths = episode_returns, episode_lengths

    dataset_id = property(lambda self: self.header.dataset_id)
    env_id = property(lambda self: self.header.env_id)
    observation_space = property(lambda self: self.header.observation_space)
    action_space = property(lambda self: self.header.action_space)
    ref_min_score = property(lambda self: self.header.ref_min_score)
    ref_max_score = property(lambda self: self.header.ref_max_score)

    def __len__(self) -> int:
        return len(self.buffer)

    def normalized_score(self, returns) -> np.ndarray:
        """``normalized_score`` with this dataset's reference scores (DatasetError when it has none)."""
        if self.ref_min_score is None or self.ref_max_score is None:
            raise DatasetError(f"{self.dataset_id} has no reference scores (ref_min_score, ref_max_score)")
        return normalized_score(returns, self.ref_min_score, self.ref_max_score)

    def __repr__(self) -> str:
        return (f"OfflineDataset({self.dataset_id!r}, env {self.env_id}, {len(self):,} transitions, "
                f"{len(self.episode_returns):,} episodes)")


_CACHE: dict[tuple, OfflineDataset] = {}


def _file_key(path: Path) -> tuple:
    out = []
    for name in (_METADATA, _MAIN_FILE):
        try:
            st = (path / name).stat()
            out += [st.st_mtime_ns, st.st_size]
        except FileNotFoundError:
            out += [None, None]
    return tuple(out)


def load_dataset(source: str | os.PathLike | OfflineDataset, *, gamma: float = 0.99, storage: str = "memory",
                 observation_space: gym.Space | None = None, action_space: gym.Space | None = None,
                 env_name: str = "the env", root: str | os.PathLike | None = None, chunk: int = 256,
                 seed: int | None = 0) -> OfflineDataset:
    """Read dataset ``source`` (an id or path: ``dataset_dir``) into a replay buffer, checking every episode.

    storage: "memory", or "mmap" (the transitions in ``.npy`` files in a new temporary directory, removed with the
    dataset: for datasets larger than the RAM; episodes are read ``chunk`` at a time, so memory use stays small).
    observation_space, action_space: the env's, which the dataset's must match (``check_spaces``).
    An ``OfflineDataset`` is returned as it is after the space check. The last dataset read with the same settings
    is reused while its files are unchanged (building a model twice, as ``rapidrl train`` does, reads it once).
    """
    if isinstance(source, OfflineDataset):
        dataset = source
    else:
        if storage not in ("memory", "mmap"):
            raise ValueError(f"storage must be 'memory' or 'mmap', got {storage!r}")
        header = read_header(source, root)
        key = (str(header.path.resolve()), _file_key(header.path), float(gamma), storage)
        dataset = _CACHE.get(key)
        if dataset is None:
            _check_supported(header)
            if observation_space is not None:  # before reading a single episode
                check_spaces(header, observation_space, action_space, env_name)
            dataset = _read(header, gamma, storage, chunk, seed)
            _CACHE.clear()
            _CACHE[key] = dataset
    if observation_space is not None:
        check_spaces(dataset.header, observation_space, action_space, env_name)
    return dataset


def _read(header: DatasetHeader, gamma: float, storage: str, chunk: int, seed: int | None) -> OfflineDataset:
    name = header.dataset_id
    if header.total_steps <= 0 or header.total_episodes <= 0:
        raise DatasetError(f"{name} holds no steps ({header.total_episodes} episodes, {header.total_steps} steps)")
    obs_space, act_space = header.observation_space, header.action_space
    discrete = isinstance(act_space, gym.spaces.Discrete)
    obs_dtype = np.uint8 if obs_space.dtype == np.uint8 else np.float32
    path = None
    if storage == "mmap":
        path = Path(tempfile.mkdtemp(prefix="rapidrl-dataset-"))
    try:
        buffer = ReplayBuffer(header.total_steps, obs_space.shape, _action_shape(act_space), obs_dtype=obs_dtype,
                              action_dtype=np.int64 if discrete else np.float32, seed=seed, gamma=gamma,
                              storage=storage, path=path)
        if path is not None:
            weakref.finalize(buffer, shutil.rmtree, path, True)
        flat = int(np.prod(obs_space.shape))
        total, sq = np.zeros(flat), np.zeros(flat)
        returns, lengths = [], []
        rows = 0
        pending: list[Episode] = []

        def flush() -> None:
            nonlocal rows
            if not pending:
                return
            n = sum(len(e) for e in pending)
            if rows + n > header.total_steps:
                raise DatasetError(f"{name}: the episodes hold more than the {header.total_steps} steps its metadata "
                                   "says")
            obs = np.concatenate([e.observations[:-1] for e in pending])
            next_obs = np.concatenate([e.observations[1:] for e in pending])
            actions = np.concatenate([e.actions for e in pending])
            truncated = np.concatenate([e.truncations for e in pending])
            terminated = np.concatenate([e.terminations for e in pending])
            ends = np.cumsum([len(e) for e in pending]) - 1
            truncated[ends] |= ~terminated[ends]  # an episode ending with neither flag bootstraps (as truncated)
            buffer.add(obs.astype(obs_dtype, copy=False), actions.astype(buffer.action_dtype, copy=False),
                       np.concatenate([e.rewards for e in pending]).astype(np.float32), next_obs.astype(obs_dtype),
                       terminated, truncated)
            flat_obs = obs.reshape(n, -1).astype(np.float64)
            total[:] += flat_obs.sum(0)
            sq[:] += np.square(flat_obs).sum(0)
            rows += n
            pending.clear()

        for episode in iter_episodes(header, chunk):
            pending.append(episode)
            returns.append(float(np.sum(episode.rewards, dtype=np.float64)))
            lengths.append(len(episode))
            if len(pending) >= chunk:
                flush()
        flush()
        if rows != header.total_steps:
            raise DatasetError(f"{name}: its metadata says {header.total_steps} steps, the episodes hold {rows} "
                               "(truncated or corrupt file?)")
    except BaseException:
        if path is not None:
            shutil.rmtree(path, ignore_errors=True)
        raise
    mean = total / rows
    std = np.sqrt(np.maximum(sq / rows - np.square(mean), 0.0))
    return OfflineDataset(header, buffer, mean.reshape(obs_space.shape), std.reshape(obs_space.shape),
                          np.asarray(returns), np.asarray(lengths, np.int64))


# -- writing -----------------------------------------------------------------------------------------------------
def _gym_spec_json(env_id: str | None) -> str | None:
    """The Gymnasium spec of ``env_id`` as Minari stores it (so ``recover_environment`` works), or None for ids
    Gymnasium does not know (rapidrl's own envs)."""
    if not env_id:
        return None
    try:
        return gym.spec(env_id).to_json()
    except Exception:  # not registered, or kwargs that do not serialise
        return None


def write_dataset(dataset_id: str, episodes: Iterable[Episode], observation_space: gym.Space,
                  action_space: gym.Space, *, env_id: str | None = None, env_kwargs: dict | None = None,
                  ref_min_score: float | None = None, ref_max_score: float | None = None,
                  algorithm_name: str | None = None, description: str | None = None, source: dict | None = None,
                  root: str | os.PathLike | None = None, chunk: int = 64) -> Path:
    """Write ``episodes`` as Minari dataset ``dataset_id`` under ``root``; returns its ``data/`` directory.

    Every episode is checked (``check_episode``) before its chunk is written; the dataset is written beside its final
    directory and renamed into place at the end, so on any error nothing is left behind. An existing dataset with
    the id is an error (Minari's rule: datasets are immutable; delete it or bump the version).
    """
    minari = _minari()
    from minari.data_collector.episode_buffer import EpisodeBuffer
    from minari.dataset.minari_storage import MinariStorage

    _check_id(dataset_id)
    base = _root(root).absolute()  # minari joins a relative data path onto itself (MINARI_DATASETS_PATH=datasets)
    final = base / dataset_id
    if final.exists():
        raise DatasetError(f"{dataset_id}: a dataset already exists at {final}; delete it or choose another id")
    _check_supported(DatasetHeader(dataset_id, final, observation_space, action_space, 0, 0, env_id))
    base.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{final.name}.", dir=base))
    created: list[Path] = []
    try:
        spec = _gym_spec_json(env_id)
        storage = MinariStorage.new(tmp / "data", observation_space=observation_space, action_space=action_space,
                                    data_format="hdf5", jpeg_encoding=False)
        steps, count, returns = 0, 0, []
        pending: list[Episode] = []

        def flush() -> None:
            storage.update_episodes([EpisodeBuffer(observations=e.observations, actions=e.actions,
                                                   rewards=np.asarray(e.rewards, np.float64),
                                                   terminations=np.asarray(e.terminations, bool),
                                                   truncations=np.asarray(e.truncations, bool)) for e in pending])
            pending.clear()

        for episode in episodes:
            check_episode(episode, count, observation_space, action_space, dataset_id)
            pending.append(episode)
            steps += len(episode)
            count += 1
            returns.append(float(np.sum(episode.rewards, dtype=np.float64)))
            if len(pending) >= chunk:
                flush()
        if count == 0:
            raise DatasetError(f"{dataset_id}: no episodes to write")
        flush()
        metadata: dict[str, Any] = {
            "dataset_id": dataset_id, "minari_version": minari.__version__,
            "rapidrl": {"env_id": env_id, "env_kwargs": dict(env_kwargs or {}), "source": dict(source or {}),
                        "mean_return": float(np.mean(returns))},
        }
        if spec is not None:  # written by hand: MinariStorage.new would build the env to read its spaces
            metadata["env_spec"] = spec
        for key, value in (("ref_min_score", ref_min_score), ("ref_max_score", ref_max_score),
                           ("algorithm_name", algorithm_name), ("description", description)):
            if value is not None:
                metadata[key] = float(value) if key.startswith("ref_") else str(value)
        storage.update_metadata(metadata)
        for parent in reversed(final.relative_to(base).parents[:-1]):  # namespace directories, remembered
            if not (base / parent).exists():
                (base / parent).mkdir()
                created.append(base / parent)
        os.replace(tmp, final)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        for d in reversed(created):
            if d.is_dir() and not any(d.iterdir()):
                d.rmdir()
        raise
    return final / "data"


# -- sources of episodes -----------------------------------------------------------------------------------------
def collect_episodes(env, act: Callable[..., np.ndarray], steps: int, seed: int | None = 0, *,
                     with_starts: bool = False) -> Iterator[Episode]:
    """Episodes of ``act`` (observations [N, ...] -> actions [N, ...]) in the vector env ``env`` (N envs, autoreset
    with ``info["final_obs"]``), until ``steps`` transitions are taken (rounded up to a multiple of N). Episodes still
    running then end as truncated, as D4RL's timeouts. Yields each episode when it ends. with_starts: ``act(obs,
    starts)`` with starts [N] bool marking the observations that begin an episode (a recurrent policy resets its
    state there: ``Algorithm.episode_actor``). On an env with action masks ``act`` also gets ``action_masks=`` [N, M]
    bool, the valid actions of each observation (``env.action_masks()``, as evaluation gives them)."""
    n = env.num_envs
    obs, _ = env.reset(seed=seed)
    obs = np.array(obs)
    starts = np.ones(n, bool)
    columns: list[dict[str, list]] = [dict(o=[obs[e]], a=[], r=[], d=[], t=[]) for e in range(n)]

    def finish(col: dict, truncate: bool) -> Episode:
        trunc = np.asarray(col["t"], bool)
        if truncate:
            trunc[-1] = True
        return Episode(np.stack(col["o"]), np.stack(col["a"]), np.asarray(col["r"], np.float64),
                       np.asarray(col["d"], bool), trunc)

    taken = 0
    while taken < steps:
        actions = np.asarray(_act(env, act, obs, starts, with_starts))
        next_obs, rewards, terminated, truncated, info = env.step(actions)
        next_obs = np.array(next_obs)
        starts = np.asarray(terminated) | np.asarray(truncated)
        finals = info.get("_final_obs")
        taken += n
        for e in range(n):
            col = columns[e]
            col["a"].append(actions[e])
            col["r"].append(float(rewards[e]))
            col["d"].append(bool(terminated[e]))
            col["t"].append(bool(truncated[e]))
            if terminated[e] or truncated[e]:
                col["o"].append(np.array(info["final_obs"][e]) if finals is not None and finals[e] else next_obs[e])
                yield finish(col, False)
                columns[e] = dict(o=[next_obs[e]], a=[], r=[], d=[], t=[])
            else:
                col["o"].append(next_obs[e])
        obs = next_obs
    for col in columns:
        if col["r"]:
            yield finish(col, True)


def replay_episodes(buffer_dir: str | os.PathLike) -> tuple[dict, Iterator[Episode]]:
    """(the buffer's configuration, its episodes oldest first) of a replay buffer saved by ``ReplayBuffer.save``
    (``model.save(..., include_buffer=True)``, a checkpoint's ``.buffer`` directory): D4RL's "replay" datasets.

    Rows interleave the envs of a vector env (row r is env r % num_envs); each env's rows are cut into episodes at
    their termination or truncation; the newest, unfinished ones end as truncated, and the oldest may start
    mid-episode when the buffer has wrapped. DatasetError when the rows of an episode do not chain (a row's
    next_obs is not the next row's obs).
    """
    buffer_dir = Path(buffer_dir)
    try:
        header, arrays = read_buffer_dir(buffer_dir)
    except (FileNotFoundError, ValueError, json.JSONDecodeError) as e:
        raise DatasetError(f"{buffer_dir}: not a saved replay buffer ({e})") from None
    if header.get("class") not in ("ReplayBuffer", "PrioritizedReplayBuffer"):
        raise DatasetError(f"{buffer_dir} holds a {header.get('class')}; datasets are made from ReplayBuffer and "
                           "PrioritizedReplayBuffer (a FrameReplayBuffer stores stacked frames once)")
    config, state = header["config"], header["state"]
    size, pos, capacity, n = int(state["size"]), int(state["pos"]), int(config["capacity"]), int(config["num_envs"])
    wrapped = size == capacity and pos != 0
    if wrapped and capacity % n:
        raise DatasetError(f"{buffer_dir}: a wrapped buffer of capacity {capacity} with {n} envs (not a multiple) "
                           "does not say which env wrote which row")
    order = (np.arange(size) + (pos if wrapped else 0)) % capacity  # oldest first
    fields = {k: arrays[k] for k in ("obs", "actions", "rewards", "next_obs", "terminated", "truncated")}

    def episodes() -> Iterator[Episode]:
        for e in range(n):
            rows = order[(order % n) == e] if n > 1 else order
            if not len(rows):
                continue
            ends = np.flatnonzero(fields["terminated"][rows] | fields["truncated"][rows])
            starts = np.concatenate([[0], ends + 1])
            stops = np.concatenate([ends + 1, [len(rows)]])
            for a, b in zip(starts, stops):
                if a == b:
                    continue
                r = rows[a:b]
                obs, next_obs = np.asarray(fields["obs"][r]), np.asarray(fields["next_obs"][r])
                if len(r) > 1 and not np.array_equal(obs[1:], next_obs[:-1]):
                    bad = int(np.argmax(~(obs[1:] == next_obs[:-1]).reshape(len(r) - 1, -1).all(1)))
                    raise DatasetError(f"{buffer_dir}: env {e}'s rows {r[bad]} and {r[bad + 1]} do not chain (next_obs "
                                       "of one is not the obs of the next)")
                truncations = np.asarray(fields["truncated"][r], bool).copy()
                terminations = np.asarray(fields["terminated"][r], bool)
                truncations[-1] |= not terminations[-1]
                yield Episode(np.concatenate([obs, next_obs[-1:]]), np.asarray(fields["actions"][r]),
                              np.asarray(fields["rewards"][r], np.float64), terminations, truncations)

    return config, episodes()


def _act(env, act: Callable[..., np.ndarray], obs: np.ndarray, starts: np.ndarray, with_starts: bool):
    """``act``'s actions for obs [N, ...]: with the episode starts when ``with_starts``, and with ``action_masks=`` on
    an env that has them."""
    args = (obs, starts) if with_starts else (obs,)
    masks = current_action_masks(env)
    return act(*args) if masks is None else act(*args, action_masks=masks)


def policy_return(env, act: Callable[..., np.ndarray], seed: int | None = 0, *, with_starts: bool = False
                  ) -> np.ndarray:
    """The return of the first episode of each of the vector env's N envs under ``act`` [N]: a reference score
    (``ref_min_score`` with uniform-random actions, ``ref_max_score`` with an expert). with_starts: ``act(obs,
    starts)``, and the action masks, as ``collect_episodes``."""
    obs, _ = env.reset(seed=seed)
    n = env.num_envs
    returns, finished, starts = np.zeros(n), np.zeros(n, bool), np.ones(n, bool)
    while not finished.all():
        obs = np.asarray(obs)
        obs, rewards, terminated, truncated, _ = env.step(np.asarray(_act(env, act, obs, starts, with_starts)))
        returns += np.where(finished, 0.0, rewards)
        starts = np.asarray(terminated) | np.asarray(truncated)
        finished |= starts
    return returns
