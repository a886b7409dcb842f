"""Metric sinks for ``Algorithm.loggers``: CSV, TensorBoard, Weights & Biases (optional), plain text.

Each has ``log(metrics: dict[str, float], step: int)`` (called after every update) and ``close()``.
CSV and TensorBoard take ``resume_step``: records after it (written by a run that was killed after its
last checkpoint) are dropped, so a resumed run's logs read as one uninterrupted run.
"""

from __future__ import annotations

import csv
import math
import os
import re
import sys
import time
from pathlib import Path
from typing import TextIO


class CSVLogger:
    """One row per update in ``path``; the header grows when new keys appear (the file is rewritten then)."""

    def __init__(self, path: str | os.PathLike, resume_step: int | None = None):
        self.path = Path(path)
        self.columns: list[str] = []
        rows: list[dict[str, str]] = []
        if resume_step is not None and self.path.is_file():
            with open(self.path, newline="") as f:
                reader = csv.DictReader(f)
                self.columns = list(reader.fieldnames or [])
                rows = [r for r in reader if _step_of(r) <= resume_step]
        self._file = None
        self._rewrite(rows)

    def _rewrite(self, rows: list[dict[str, str]]) -> None:
        if self._file is not None:
            self._file.close()
        tmp = self.path.with_name(self.path.name + ".tmp")
        with open(tmp, "w", newline="") as f:
            w = csv.DictWriter(f, self.columns)
            if self.columns:
                w.writeheader()
            w.writerows(rows)
        os.replace(tmp, self.path)
        self._file = open(self.path, "a", newline="")
        self._writer = csv.DictWriter(self._file, self.columns)

    def log(self, metrics: dict[str, float], step: int) -> None:
        row = {"global_step": step, **metrics}
        new = [k for k in row if k not in self.columns]
        if new:
            self._file.close()
            with open(self.path, newline="") as f:
                old = list(csv.DictReader(f)) if self.columns else []
            if "global_step" in new:
                new.remove("global_step")
                self.columns.insert(0, "global_step")
            self.columns += new
            self._rewrite(old)
        self._writer.writerow(row)
        self._file.flush()

    def close(self) -> None:
        self._file.close()


def _step_of(row: dict[str, str]) -> float:
    try:
        return float(row.get("global_step") or "nan")
    except ValueError:
        return math.nan


def _wait_past_event_files(log_dir: Path) -> None:
    """Wait until the clock's second is past every event file's in ``log_dir``.

    TensorBoard reads a directory's event files in name order, and a name is
    ``events.out.tfevents.<unix second>.<host>.<pid>.<counter>``: a resumed writer opened in the same second
    as the one before it can sort first (counter 10 before 9), and then the purge and the re-logged steps
    are read before the steps they replace. At most about a second, and only on resume."""
    seconds = [int(m.group(1)) for f in log_dir.glob("events.out.tfevents.*")
               if (m := re.match(r"events\.out\.tfevents\.(\d+)\.", f.name))]
    while seconds and time.time() < max(seconds) + 1:
        time.sleep(0.02)


class TensorBoardLogger:
    """Scalars into TensorBoard event files in ``log_dir`` (``tensorboard --logdir runs``)."""

    def __init__(self, log_dir: str | os.PathLike, resume_step: int | None = None):
        from torch.utils.tensorboard import SummaryWriter

        purge = None if resume_step is None else resume_step + 1
        if purge is not None:
            _wait_past_event_files(Path(log_dir))
        self.writer = SummaryWriter(log_dir=str(log_dir), purge_step=purge, flush_secs=10)

    def log(self, metrics: dict[str, float], step: int) -> None:
        for k, v in metrics.items():
            if k != "global_step" and isinstance(v, (int, float)):
                self.writer.add_scalar(k, v, step)

    def close(self) -> None:
        self.writer.close()


def wandb_available() -> bool:
    """True when the optional ``wandb`` package is importable."""
    try:
        import wandb  # noqa: F401
    except ImportError:
        return False
    return True


class WandbLogger:
    """Weights & Biases in offline mode (``wandb sync <run_dir>/wandb`` uploads later). Needs ``pip install wandb``."""

    def __init__(self, run_dir: str | os.PathLike, name: str, config: dict, resume: bool = False):
        import wandb

        self.run = wandb.init(project="rapidrl", name=name, dir=str(run_dir), config=config, mode="offline",
                              id=name.replace("/", "_"), resume="allow" if resume else None)

    def log(self, metrics: dict[str, float], step: int) -> None:
        self.run.log(dict(metrics), step=step)

    def close(self) -> None:
        self.run.finish()


class MLflowLogger:
    """MLflow tracking into a sqlite store inside the run directory (``mlflow ui --backend-store-uri
    sqlite:///RUN_DIR/mlflow.db`` shows it; MLflow 3 no longer writes plain file stores); set
    ``MLFLOW_TRACKING_URI`` to log to a server instead. Needs ``pip install mlflow-skinny sqlalchemy alembic``
    (the ``track`` extra) or ``mlflow``. The run's config is logged as parameters."""

    def __init__(self, run_dir: str | os.PathLike, name: str, config: dict, resume: bool = False):
        from mlflow.tracking import MlflowClient

        uri = os.environ.get("MLFLOW_TRACKING_URI") or f"sqlite:///{Path(run_dir).resolve() / 'mlflow.db'}"
        self.client = MlflowClient(tracking_uri=uri)
        exp = self.client.get_experiment_by_name("rapidrl")
        exp_id = exp.experiment_id if exp is not None else self.client.create_experiment("rapidrl")
        found = self.client.search_runs([exp_id], f"tags.`mlflow.runName` = '{name}'") if resume else []
        if found:
            self.run_id = found[0].info.run_id
        else:
            self.run_id = self.client.create_run(exp_id, run_name=name).info.run_id
            params = {f"{section}.{k}": str(v)[:500] for section, values in config.items()
                      for k, v in (values.items() if isinstance(values, dict) else [("value", values)])}
            for key, value in params.items():
                self.client.log_param(self.run_id, key, value)

    def log(self, metrics: dict[str, float], step: int) -> None:
        from mlflow.entities import Metric

        now = int(time.time() * 1000)
        batch = [Metric(k, float(v), now, int(step)) for k, v in metrics.items()
                 if isinstance(v, (int, float)) and math.isfinite(v)]
        if batch:
            self.client.log_batch(self.run_id, metrics=batch)

    def close(self) -> None:
        self.client.set_terminated(self.run_id)


class TextLogger:
    """One progress line every ``every_s`` seconds (headless runs: train.log)."""

    def __init__(self, total_steps: int, stream: TextIO | None = None, every_s: float = 5.0):
        self.total, self.stream, self.every_s = total_steps, stream or sys.stdout, every_s
        self._last = -math.inf

    def log(self, metrics: dict[str, float], step: int) -> None:
        now = time.monotonic()
        if now - self._last < self.every_s and step < self.total:
            return
        self._last = now
        ret = metrics.get("charts/episodic_return")
        ret_s = "-" if ret is None else f"{ret:.1f}"
        print(f"step {step:,}/{self.total:,}  SPS {metrics.get('charts/SPS', math.nan):,.0f}  return {ret_s}",
              file=self.stream, flush=True)

    def close(self) -> None:
        pass
