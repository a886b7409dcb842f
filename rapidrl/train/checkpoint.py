"""Resumable checkpoints of a run: periodic + final, keep-last-k, never half-written, never non-finite.

Files are ``checkpoints/step_<000000012345>.pt`` (plus ``<file>.buffer/``, the replay buffer of off-policy
algorithms, so that their resume is exact too) written with ``Algorithm.save(..., training_state=True)``
(temp file + fsync + rename, so every file in the directory always loads). A checkpoint is only written
when the latest losses and every parameter are finite: after a non-finite loss the newest checkpoint is
the last good one.
"""

from __future__ import annotations

import os
import re
import shutil
from pathlib import Path

from rapidrl.train.callbacks import Callback
from rapidrl.train.finite import training_is_finite

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
    path = latest_checkpoint(directory, with_buffer=algo_class.has_replay_buffer)
    return None if path is None else (int(_NAME.match(path.name).group(1)), path)


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
