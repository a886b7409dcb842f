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
from pathlib import Path

__all__ = ["CHECKPOINT_DIR", "CONFIG_FILE", "METRICS_CSV", "MODEL_FILE", "MONITOR_FILE", "SUMMARY_FILE", "TRAIN_LOG",
           "read_csv_metrics", "read_summary", "write_summary"]

CONFIG_FILE, SUMMARY_FILE, METRICS_CSV, MONITOR_FILE = "config.toml", "summary.json", "metrics.csv", "monitor.bin"
MODEL_FILE, CHECKPOINT_DIR, TRAIN_LOG = "model.pt", "checkpoints", "train.log"


def write_summary(run_dir: str | os.PathLike, summary: dict) -> None:
    """``summary.json`` of a run, written atomically (temp file + rename)."""
    path = Path(run_dir) / SUMMARY_FILE
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(summary, indent=2) + "\n")
    os.replace(tmp, path)


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
