"""Live progress for ``learn`` (a rich progress bar with SPS, recent episodic return and ETA) and ``evaluate``."""

from __future__ import annotations

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn


class TrainingProgress:
    """Context manager; ``update(steps, sps, mean_return)`` refreshes the bar. Disabled -> no output."""

    def __init__(self, total: int, description: str, enabled: bool = True, console: Console | None = None):
        self.enabled = enabled
        self._progress = None
        if enabled:
            self._progress = Progress(
                TextColumn("[bold]{task.description}"),
                BarColumn(),
                MofNCompleteColumn(),
                TextColumn("{task.fields[sps]:>9} SPS"),
                TextColumn("return {task.fields[ret]:>8}"),
                TimeElapsedColumn(),
                TextColumn("ETA"),
                TimeRemainingColumn(),
                console=console,
                refresh_per_second=8,
            )
            self._task = self._progress.add_task(description, total=total, sps="-", ret="-")

    def __enter__(self):
        if self._progress is not None:
            self._progress.start()
        return self

    def __exit__(self, *exc):
        if self._progress is not None:
            self._progress.stop()
        return False

    def update(self, steps: int, sps: float, mean_return: float | None) -> None:
        if self._progress is None:
            return
        ret = "-" if mean_return is None else f"{mean_return:.1f}"
        self._progress.update(self._task, completed=steps, sps=f"{sps:,.0f}", ret=ret)


class EvaluationProgress:
    """Context manager for ``evaluate``: episodes finished of ``total``, env steps taken (per env: all run in
    parallel), mean return of the finished ones. ``update(done, steps, mean_return)``. Disabled -> no output."""

    def __init__(self, total: int, description: str, enabled: bool = True, console: Console | None = None):
        self._progress = None
        if enabled:
            self._progress = Progress(
                TextColumn("[bold]{task.description}"),
                BarColumn(),
                MofNCompleteColumn(),
                TextColumn("episodes, {task.fields[steps]:>8} steps"),
                TextColumn("return {task.fields[ret]:>8}"),
                TimeElapsedColumn(),
                console=console,
                refresh_per_second=4,
            )
            self._task = self._progress.add_task(description, total=total, steps="0", ret="-")

    def __enter__(self):
        if self._progress is not None:
            self._progress.start()
        return self

    def __exit__(self, *exc):
        if self._progress is not None:
            self._progress.stop()
        return False

    def update(self, done: int, steps: int, mean_return: float | None) -> None:
        if self._progress is None:
            return
        ret = "-" if mean_return is None else f"{mean_return:.1f}"
        self._progress.update(self._task, completed=done, steps=f"{steps:,}", ret=ret)
