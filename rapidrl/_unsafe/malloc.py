"""glibc's malloc thresholds, set through ctypes (``RuntimeConfig.keep_heap``).

Why: PyTorch frees an update's large temporaries after every step and glibc hands memory above its trim and mmap
thresholds back to the OS, so the next update faults the same pages in again; SAC's update (batch 256, 256x256)
measured ~2-3 ms faster with the thresholds at 1 GiB. The process then keeps its peak heap.

What it relies on: ``libc.so.6`` exporting ``mallopt`` with glibc's option numbers M_TRIM_THRESHOLD = -1 and
M_MMAP_THRESHOLD = -3 (stable glibc ABI).

Ownership, lifetime, aliasing: no memory is touched; the setting is process-wide and lasts for the process.

When it breaks: not glibc (macOS, Windows, musl): ``keep_heap_memory`` returns False and nothing changes (a
portable no-op, tested by ``tests/test_portability.py``). On glibc Linux a failing ``mallopt`` would only cost
speed, so ``tests/test_unsafe.py`` asserts that it returns True there: a change shows up as a failing test.
"""

from __future__ import annotations

import ctypes
import functools

__all__ = ["keep_heap_memory"]

M_TRIM_THRESHOLD, M_MMAP_THRESHOLD = -1, -3
THRESHOLD = 1 << 30


@functools.cache
def keep_heap_memory() -> bool:
    """Raise glibc's malloc trim and mmap thresholds to 1 GiB (once per process); False where not glibc."""
    try:
        libc = ctypes.CDLL("libc.so.6")
        return bool(libc.mallopt(M_TRIM_THRESHOLD, THRESHOLD) and libc.mallopt(M_MMAP_THRESHOLD, THRESHOLD))
    except (OSError, AttributeError):
        return False
