"""The files of a run directory and how to read them (standard library only: the monitor imports this).

A run directory ``runs/<algo>-<env>-<YYYYmmdd-HHMMSS>[-n]/`` holds the resolved ``config.toml``, ``metrics.csv``
(written by ``rapidrl.train.loggers.CSVLogger``), TensorBoard event files, ``monitor.bin`` (live metrics),
``checkpoints/``, ``model.pt``, ``summary.json`` and, for detached runs, ``train.log``.
"""

from __future__ import annotations

import csv
import io
import json
import math
import os
import shutil
from pathlib import Path

__all__ = ["CHECKPOINT_DIR", "CONFIG_FILE", "METRICS_CSV", "MODEL_FILE", "MONITOR_FILE", "SUMMARY_FILE", "TRAIN_LOG",
           "read_csv_metrics", "read_summary", "remove_stale_temp", "write_summary"]

CONFIG_FILE, SUMMARY_FILE, METRICS_CSV, MONITOR_FILE = "config.toml", "summary.json", "metrics.csv", "monitor.bin"
MODEL_FILE, CHECKPOINT_DIR, TRAIN_LOG = "model.pt", "checkpoints", "train.log"


def write_summary(run_dir: str | os.PathLike, summary: dict) -> None:
    """``summary.json`` of a run, written atomically (temp file + rename)."""
    path = Path(run_dir) / SUMMARY_FILE
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(summary, indent=2) + "\n")
    os.replace(tmp, path)


def remove_stale_temp(run_dir: str | os.PathLike) -> list[Path]:
    """Remove the temporary files (and replay-buffer directories) that killed writes left in ``run_dir`` and its
    ``checkpoints/``: every atomic write of a run goes to a name ending in ``.tmp`` and is renamed into place, so such
    a name is a write that never finished. Call it only while holding the run's writer lock
    (``rapidrl.runs.lock.RunLock``): then no live writer owns one. Returns what was removed."""
    removed = []
    for folder in (Path(run_dir), Path(run_dir) / CHECKPOINT_DIR):
        if not folder.is_dir():
            continue
        for path in sorted(folder.iterdir()):
            if not path.name.endswith(".tmp"):
                continue
            if path.is_dir() and not path.is_symlink():
                shutil.rmtree(path, ignore_errors=True)
            else:
                path.unlink(missing_ok=True)
            removed.append(path)
    return removed


def read_summary(run_dir: str | os.PathLike) -> dict | None:
    """The run's ``summary.json``, or None while the run has not ended."""
    path = Path(run_dir) / SUMMARY_FILE
    return json.loads(path.read_text()) if path.is_file() else None


def read_csv_metrics(path: str | os.PathLike) -> dict[str, list[float]]:
    """metrics.csv -> {column: values} (empty cells become NaN). A last line without its newline is one the run is
    writing now (the file of a live run): it is left out rather than read cut short."""
    with open(path, newline="") as f:
        text = f.read()
    if not text.endswith("\n"):
        text = text[:text.rfind("\n") + 1]
    rows = list(csv.DictReader(io.StringIO(text)))
    cols: dict[str, list[float]] = {}
    for row in rows:
        for k, v in row.items():
            try:
                cols.setdefault(k, []).append(float(v) if v not in (None, "") else math.nan)
            except ValueError:
                cols.setdefault(k, []).append(math.nan)
    return cols
