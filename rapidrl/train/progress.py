"""Live progress for ``learn`` (a rich progress bar with SPS, recent episodic return and ETA) and ``evaluate``."""

from __future__ import annotations

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn


def _format_return(mean_return: float | None) -> str:
    return "-" if mean_return is None else f"{mean_return:.1f}"


class _Bar:
    """One rich task bar as a context manager; disabled (``columns`` None) -> no output, updates are no-ops."""

    def __init__(self, total: int, description: str, columns: tuple | None, refresh_per_second: int,
                 console: Console | None, **fields: str):
        self._progress = None
        if columns is not None:
            self._progress = Progress(TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(),
                                      *columns, console=console, refresh_per_second=refresh_per_second)
            self._task = self._progress.add_task(description, total=total, **fields)

    def __enter__(self):
        if self._progress is not None:
            self._progress.start()
        return self

    def __exit__(self, *exc):
        if self._progress is not None:
            self._progress.stop()
        return False

    def _set(self, completed: int, **fields: str) -> None:
        if self._progress is not None:
            self._progress.update(self._task, completed=completed, **fields)


class TrainingProgress(_Bar):
    """Context manager; ``update(steps, sps, mean_return)`` refreshes the bar. Disabled -> no output."""

    def __init__(self, total: int, description: str, enabled: bool = True, console: Console | None = None):
        self.enabled = enabled
        columns = (TextColumn("{task.fields[sps]:>9} SPS"), TextColumn("return {task.fields[ret]:>8}"),
                   TimeElapsedColumn(), TextColumn("ETA"), TimeRemainingColumn())
        super().__init__(total, description, columns if enabled else None, 8, console, sps="-", ret="-")

    def update(self, steps: int, sps: float, mean_return: float | None) -> None:
        self._set(steps, sps=f"{sps:,.0f}", ret=_format_return(mean_return))


class EvaluationProgress(_Bar):
    """Context manager for ``evaluate``: episodes finished of ``total``, env steps taken (per env: all run in
    parallel), mean return of the finished ones. ``update(done, steps, mean_return)``. Disabled -> no output."""

    def __init__(self, total: int, description: str, enabled: bool = True, console: Console | None = None):
        columns = (TextColumn("episodes, {task.fields[steps]:>8} steps"), TextColumn("return {task.fields[ret]:>8}"),
                   TimeElapsedColumn())
        super().__init__(total, description, columns if enabled else None, 4, console, steps="0", ret="-")

    def update(self, done: int, steps: int, mean_return: float | None) -> None:
        self._set(done, steps=f"{steps:,}", ret=_format_return(mean_return))
