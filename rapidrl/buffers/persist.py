"""Replay buffers on disk: one directory per buffer, ``header.json`` plus one ``.npy`` file per array. No pickle.

Shared by ``ReplayBuffer`` (and ``PrioritizedReplayBuffer``) and ``FrameReplayBuffer``. A directory is written
beside its final path and renamed over it, so a reader never sees a half-written buffer; arrays are read back
memory-mapped, so a buffer larger than RAM streams from the files into its storage.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import numpy as np

__all__ = ["BUFFER_FORMAT", "read_buffer_dir", "storage_array", "write_buffer_dir"]

BUFFER_FORMAT = 1
_HEADER = "header.json"


def write_buffer_dir(path: str | os.PathLike, header: dict, arrays: dict[str, np.ndarray]) -> Path:
    """Write ``header`` (JSON-able; ``format`` is added) and ``arrays`` to directory ``path`` atomically."""
    path = Path(path)
    tmp = path.with_name(path.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    for name, arr in arrays.items():
        np.save(tmp / f"{name}.npy", arr, allow_pickle=False)
    (tmp / _HEADER).write_text(json.dumps({"format": BUFFER_FORMAT, **header}))
    if path.exists():
        shutil.rmtree(path)
    os.replace(tmp, path)
    return path


def read_buffer_dir(source: str | os.PathLike) -> tuple[dict, dict[str, np.ndarray]]:
    """(header, arrays) of a directory written by ``write_buffer_dir``; arrays are read-only memory maps.

    Clear errors for a missing directory, a foreign one or another format version."""
    source = Path(source)
    if not (source / _HEADER).is_file():
        raise FileNotFoundError(f"no saved replay buffer at {source} (no {_HEADER})")
    header = json.loads((source / _HEADER).read_text())
    if header.get("format") != BUFFER_FORMAT:
        raise ValueError(f"{source}: unknown replay buffer format {header.get('format')!r}")
    arrays = {p.stem: np.load(p, mmap_mode="r", allow_pickle=False) for p in source.glob("*.npy")}
    return header, arrays


def storage_array(storage: str, path: Path | None, name: str, shape: tuple, dtype) -> np.ndarray:
    """A zero-filled array of a buffer's storage: in memory, or (``storage="mmap"``) the ``.npy`` file
    ``path/name.npy``, created or overwritten (as a plain ndarray view of the map, which the file outlives)."""
    if storage == "mmap":
        return np.lib.format.open_memmap(path / f"{name}.npy", mode="w+", dtype=dtype, shape=shape).view(np.ndarray)
    return np.zeros(shape, dtype=dtype)
