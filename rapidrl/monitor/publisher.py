"""Trainer side of the monitor: a logger that publishes every update into the metrics file.

Add it to ``algo.loggers``; it costs a few microseconds per update (NumPy stores into the mapping, no
system call), see docs/monitoring.md for the measurement.
"""

from __future__ import annotations

import os

from rapidrl.monitor.metrics_file import MetricsWriter


class MonitorPublisher:
    """``log(metrics, step)`` writes the metrics, the episode count and new episode returns."""

    def __init__(self, algo, path: str | os.PathLike, *, run_name: str, total_steps: int):
        self.algo = algo
        self.writer = MetricsWriter(path, run_name=run_name, total_steps=total_steps)
        self._episodes_seen = algo.num_episodes
        self.writer.update({"global_step": float(algo.num_timesteps), "episodes": float(algo.num_episodes)})

    def log(self, metrics: dict[str, float], step: int) -> None:
        algo = self.algo
        with self.writer.writing():
            self.writer.update(metrics)
            self.writer.update({"episodes": float(algo.num_episodes), "updates": float(algo.num_updates)})
            new = algo.num_episodes - self._episodes_seen
            if new > 0:
                self.writer.push_returns(algo.recent_returns(min(new, self.writer.ring_size)))
                self._episodes_seen = algo.num_episodes

    def close(self, status: str = "finished") -> None:
        """Mark the run ``status`` ("finished", "failed", "stopped") and unmap."""
        self.writer.set_status(status)
        self.writer.close()
