"""Per-phase wall-clock timing, always on: env step, policy forward, storage, advantages, update.

``with timer.phase("env"):`` costs two ``perf_counter_ns`` calls. ``report(steps)`` gives seconds per
phase, their share of the wall time and steps per second. ``state()`` / ``restore`` carry the clock across a
checkpoint, so that a resumed run's times continue where the interrupted part saved them.
"""

from __future__ import annotations

import time
from contextlib import contextmanager


class PhaseTimer:
    """Accumulates nanoseconds per named phase since construction or ``reset``."""

    def __init__(self):
        self.reset()

    def reset(self) -> None:
        self.ns: dict[str, int] = {}
        self.start_ns = time.perf_counter_ns()

    @contextmanager
    def phase(self, name: str):
        t0 = time.perf_counter_ns()
        try:
            yield
        finally:
            self.add(name, time.perf_counter_ns() - t0)

    def add(self, name: str, ns: int) -> None:
        self.ns[name] = self.ns.get(name, 0) + ns

    def elapsed(self) -> float:
        """Seconds since the timer started."""
        return (time.perf_counter_ns() - self.start_ns) / 1e9

    def state(self) -> dict:
        """The clock as a checkpoint stores it: {'elapsed_ns': int, 'ns': {phase: int}}."""
        return {"elapsed_ns": time.perf_counter_ns() - self.start_ns, "ns": dict(self.ns)}

    def restore(self, state: dict) -> None:
        """Continue from a ``state()`` (saved in another process): elapsed time and phase totals carry on."""
        self.ns = {str(k): int(v) for k, v in state["ns"].items()}
        self.start_ns = time.perf_counter_ns() - int(state["elapsed_ns"])

    def seconds(self) -> dict[str, float]:
        """Seconds per phase."""
        return {k: v / 1e9 for k, v in self.ns.items()}

    def report(self, steps: int) -> dict[str, float]:
        """{'sps', 'time/total', 'time/phase_<name>' seconds, 'time/frac_<name>' share of wall time}."""
        total = self.elapsed()
        out = {"sps": steps / total if total > 0 else 0.0, "time/total": total}
        for k, s in self.seconds().items():
            out[f"time/phase_{k}"] = s
            out[f"time/frac_{k}"] = s / total if total > 0 else 0.0
        return out
