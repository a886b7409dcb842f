"""The player's moves of the MinAtar games that move in both axes (Asterix, Seaquest)."""

from __future__ import annotations

import numba


@numba.njit(cache=True, inline="always")
def moved(a, x, y, y_min):
    """(x, y) after action ``a``: 1 left, 3 right (columns 0-9), 2 up, 4 down (rows ``y_min``-8); others stay."""
    if a == 1:
        x = max(0, x - 1)
    elif a == 3:
        x = min(9, x + 1)
    elif a == 2:
        y = max(y_min, y - 1)
    elif a == 4:
        y = min(8, y + 1)
    return x, y
