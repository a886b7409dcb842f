"""Schedules of a ``learn`` call, as pure functions of its progress (``Algorithm.progress_remaining()``: 1 at the
start of the call, 0 at its end)."""

from __future__ import annotations

__all__ = ["linear_decay"]


def linear_decay(initial: float, final: float, fraction: float, progress_remaining: float) -> float:
    """``initial`` falling linearly to ``final`` over the first ``fraction`` (> 0) of the call, then ``final``:
    DQN's and PQN's epsilon-greedy exploration rate."""
    done = min(1.0, (1.0 - progress_remaining) / fraction)
    return initial + done * (final - initial)
