"""Checkpoints: the model file format, and resumable checkpoints of a run.

The file format (``Algorithm.save``/``load``): one ``torch.save`` of a dict of tensors and plain Python values only
(``check_plain`` refuses anything else at write time, so ``torch.load(weights_only=True)`` reads every file back
without running code: ``load_checkpoint``), written atomically (``atomic_torch_save``: temp file + fsync + rename).
``FORMAT_VERSION`` is the layout's version; the env's state (``env_state``) is what a resumed run needs of it.

Resumable checkpoints of a run (``Checkpointer``): periodic + final, keep-last-k, never half-written, never
non-finite. Files are ``checkpoints/step_<000000012345>.pt`` (plus ``<file>.buffer/``, the replay buffer of
off-policy algorithms, so that their resume is exact too) written with ``Algorithm.save(..., training_state=True)``,
so every file in the directory always loads. A checkpoint is only written when the latest losses and every
parameter are finite: after a non-finite loss the newest checkpoint is the last good one.
"""

from __future__ import annotations

import errno
import os
import pickle
import re
import shutil
import tempfile
from collections import OrderedDict
from pathlib import Path
from typing import Any

import torch

from rapidrl.envs import VecEnvBase
from rapidrl.train.callbacks import Callback
from rapidrl.train.finite import training_is_finite

FORMAT_VERSION = 1
"""The layout of a model file (``Algorithm.save``); ``load_checkpoint`` reads this version only."""
_NAME = re.compile(r"^step_(\d+)\.pt$")


def checkpoint_path(directory: str | os.PathLike, step: int) -> Path:
    return Path(directory) / f"step_{step:012d}.pt"


def list_checkpoints(directory: str | os.PathLike) -> list[tuple[int, Path]]:
    """(step, path) of the checkpoints in ``directory``, oldest first (temp files are ignored)."""
    d = Path(directory)
    if not d.is_dir():
        return []
    found = [(int(m.group(1)), p) for p in d.iterdir() if (m := _NAME.match(p.name))]
    return sorted(found)


def latest_checkpoint(directory: str | os.PathLike, *, with_buffer: bool = False) -> Path | None:
    """The newest checkpoint in ``directory``; with_buffer: the newest whose replay buffer was saved too (else the
    newest). None when there is none."""
    found = list_checkpoints(directory)
    if with_buffer:
        found = [(step, p) for step, p in found if buffer_dir(p).is_dir()] or found
    return found[-1][1] if found else None


def resume_checkpoint(directory: str | os.PathLike, algo_class) -> tuple[int, Path] | None:
    """(step, path) of the checkpoint a resumed run of ``algo_class`` continues from: the newest, or for an
    algorithm with a replay buffer the newest whose buffer was saved too (so that its resume is exact)."""
    found = resume_candidates(directory, algo_class)
    return found[0] if found else None


def resume_candidates(directory: str | os.PathLike, algo_class) -> list[tuple[int, Path]]:
    """(step, path) of the checkpoints a resumed run of ``algo_class`` may continue from, in the order to try them:
    newest first (for an algorithm with a replay buffer, those whose buffer was saved too come first). A resume
    takes the first that loads (``ModelFileError`` from the others: a corrupt or foreign file)."""
    found = list_checkpoints(directory)[::-1]
    if algo_class.has_replay_buffer:
        found = [c for c in found if buffer_dir(c[1]).is_dir()] + [c for c in found if not buffer_dir(c[1]).is_dir()]
    return found


def buffer_dir(checkpoint: Path) -> Path:
    """Where an off-policy checkpoint's replay buffer lives (``rapidrl.algos.offpolicy.buffer_path``)."""
    return checkpoint.with_name(checkpoint.name + ".buffer")


class Checkpointer(Callback):
    """Save a resumable checkpoint every ``every`` steps and at the end; keep the newest ``keep`` periodic ones.

    ``last_good`` is the newest checkpoint written (None before the first).
    """

    def __init__(self, directory: str | os.PathLike, every: int, keep: int = 3):
        if every <= 0 or keep < 0:
            raise ValueError(f"every must be > 0 and keep >= 0, got every={every}, keep={keep}")
        self.directory, self.every, self.keep = Path(directory), int(every), int(keep)
        self.last_good: Path | None = latest_checkpoint(self.directory)
        self.skipped_non_finite: int | None = None
        self._next = 0

    def on_training_start(self, algo) -> None:
        self.directory.mkdir(parents=True, exist_ok=True)
        self._next = (algo.num_timesteps // self.every + 1) * self.every

    def on_update_logged(self, algo) -> None:
        # After the loggers: a run killed right after this save has every metrics row up to its step.
        if algo.num_timesteps >= self._next:
            self._next = (algo.num_timesteps // self.every + 1) * self.every
            self.save(algo)

    def on_training_end(self, algo) -> None:
        if self.last_good is None or not self.last_good.name.endswith(f"{algo.num_timesteps:012d}.pt"):
            self.save(algo)

    def save(self, algo) -> Path | None:
        """Write a checkpoint now (skipped, returning None, if anything is non-finite); prune old ones."""
        if not training_is_finite(algo):
            self.skipped_non_finite = algo.num_timesteps
            return None
        extra = {"include_buffer": True} if algo.has_replay_buffer else {}
        path = algo.save(checkpoint_path(self.directory, algo.num_timesteps), training_state=True, **extra)
        self.last_good = path
        self._prune()
        return path

    def _prune(self) -> None:
        found = list_checkpoints(self.directory)
        for _, path in found[: max(0, len(found) - max(self.keep, 1))]:
            path.unlink(missing_ok=True)
            shutil.rmtree(buffer_dir(path), ignore_errors=True)


# -- the file format --------------------------------------------------------------------------
def env_state(env) -> dict[str, Any]:
    """What fixes the env's future exactly (``VecEnvBase.state_dict``: the built-in families' arenas), or {} for
    envs that cannot be captured, which a resumed run resets."""
    state = env.state_dict() if isinstance(env, VecEnvBase) else None
    return {} if state is None else state


def set_env_state(env, state: dict[str, Any]) -> bool:
    """Inverse of ``env_state``, in place; False (nothing restored) for an empty state."""
    if not state:
        return False
    env.load_state_dict(state)
    return True


_PLAIN_SCALARS = (bool, int, float, str, bytes, type(None), torch.dtype, torch.device, torch.Size)


def check_plain(obj, where: str = "checkpoint") -> None:
    """Raise TypeError unless ``obj`` is made of tensors and plain Python values only (dicts and OrderedDicts with
    str or int keys, lists, tuples, bool, int, float, str, bytes, None, torch dtypes, devices and sizes): what
    ``torch.load(weights_only=True)`` reads back.

    A NumPy scalar or array, a dataclass or any other object would make the file unreadable (PyTorch refuses
    to unpickle it without running code), so it is refused here, at write time, naming where it sits."""
    if isinstance(obj, torch.Tensor) or type(obj) in _PLAIN_SCALARS:
        return
    if type(obj) in (dict, OrderedDict):
        for key, value in obj.items():
            if type(key) not in (str, int):
                raise TypeError(f"{where} has a key of type {type(key).__name__} ({key!r}); a checkpoint's dict "
                                "keys must be str or int")
            check_plain(value, f"{where}.{key}")
        return
    if type(obj) in (list, tuple):
        for i, value in enumerate(obj):
            check_plain(value, f"{where}[{i}]")
        return
    kind = f"{type(obj).__module__}.{type(obj).__qualname__}"
    raise TypeError(f"{where} is a {kind}; a checkpoint holds tensors and plain Python values only (convert NumPy "
                    "arrays with torch.from_numpy and NumPy scalars with float()/int())")


def atomic_torch_save(obj, path: Path) -> None:
    """torch.save to a temp file in the same directory, fsync, then rename over ``path``. A write that fails leaves
    nothing behind and raises an OSError naming ``path`` (a full disk: ENOSPC, which torch's own writer reports as a
    RuntimeError)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            torch.save(obj, f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException as e:
        full = isinstance(e, RuntimeError) and _nearly_full(path.parent)  # before the temp file is freed
        if os.path.exists(tmp):
            os.unlink(tmp)
        if full:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(path)) from e
        if isinstance(e, OSError) and e.filename is None:
            raise OSError(e.errno, e.strerror, str(path)) from e
        raise


def _nearly_full(directory: Path) -> bool:
    """Whether the file system of ``directory`` has under 1 MiB left for this user (a failed write's cause)."""
    try:
        return shutil.disk_usage(directory).free < 2**20
    except OSError:
        return False


class ModelFileError(ValueError):
    """A file that is not a readable rapidrl model file (corrupt, cut short, foreign, another format version)."""


def load_checkpoint(path: str | os.PathLike) -> dict:
    """torch.load with weights_only=True (no code runs); clear errors for missing (FileNotFoundError) and corrupt or
    foreign files (``ModelFileError``)."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"no model file at {path}")
    try:
        payload = torch.load(path, map_location="cpu", weights_only=True)
    except FileNotFoundError:  # removed between the check and the read (e.g. pruned by keep-last-N): still missing
        raise FileNotFoundError(f"no model file at {path}") from None
    except Exception as e:  # torch raises many types for corrupt/foreign files
        # PyTorch's advice for objects other than tensors (weights_only=False) would run the file's code: not repeated
        if isinstance(e, pickle.UnpicklingError) and "Unsupported global" in str(e):
            raise ModelFileError(f"{path} is not a rapidrl model file: it holds objects other than tensors and plain "
                                 "Python values, which are not loaded (loading them would run the file's code)"
                                 ) from None
        detail = "" if "weights_only" in str(e) else f": {(str(e).splitlines() or [''])[0][:200]}"
        raise ModelFileError(f"{path} is not a readable rapidrl model file ({type(e).__name__}{detail})") from None
    if not isinstance(payload, dict) or payload.get("format") != "rapidrl":
        raise ModelFileError(f"{path} is not a rapidrl model file (a torch file, but not one rapidrl saved)")
    if payload.get("version") != FORMAT_VERSION:
        raise ModelFileError(f"{path} has format version {payload.get('version')}, this rapidrl reads "
                             f"{FORMAT_VERSION}")
    return payload
