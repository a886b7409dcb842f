"""glibc's malloc thresholds, set through ctypes (``RuntimeConfig.keep_heap``).

Why: PyTorch frees an update's large temporaries after every step and glibc hands memory above its trim and mmap
thresholds back to the OS, so the next update faults the same pages in again; SAC's update (batch 256, 256x256)
measured ~2-3 ms faster with the thresholds at 1 GiB. The process then keeps its peak heap.

What it relies on: ``libc.so.6`` exporting ``mallopt`` with glibc's option numbers M_TRIM_THRESHOLD = -1 and
M_MMAP_THRESHOLD = -3 (stable glibc ABI).

Ownership, lifetime, aliasing: no memory is touched; the setting is process-wide. rapidrl sets it for the duration of
``Algorithm.learn`` (``rapidrl.train.runtime.process_settings``) and afterwards sets glibc's default thresholds back
(``release_heap_memory``). glibc has no call that reads the thresholds or turns its dynamic mmap threshold back on once
a threshold was set, so after a ``learn`` with ``keep_heap`` the thresholds are glibc's defaults, fixed.

When it breaks: not glibc (macOS, Windows, musl): both functions return False and nothing changes (a portable no-op,
tested by ``tests/test_portability.py``). On glibc Linux a failing ``mallopt`` would only cost speed, so
``tests/test_unsafe.py`` asserts that it returns True there: a change shows up as a failing test.
"""

from __future__ import annotations

import ctypes

__all__ = ["keep_heap_memory", "release_heap_memory"]

M_TRIM_THRESHOLD, M_MMAP_THRESHOLD = -1, -3
THRESHOLD = 1 << 30
DEFAULT_THRESHOLD = 128 * 1024
"""glibc's default trim and mmap thresholds (``DEFAULT_TRIM_THRESHOLD``, ``DEFAULT_MMAP_THRESHOLD_MIN``)."""


def _set_thresholds(threshold: int) -> bool:
    try:
        libc = ctypes.CDLL("libc.so.6")
        return bool(libc.mallopt(M_TRIM_THRESHOLD, threshold) and libc.mallopt(M_MMAP_THRESHOLD, threshold))
    except (OSError, AttributeError):
        return False


def keep_heap_memory() -> bool:
    """Raise glibc's malloc trim and mmap thresholds to 1 GiB; False where not glibc."""
    return _set_thresholds(THRESHOLD)


def release_heap_memory() -> bool:
    """Set glibc's default thresholds (128 KiB) back: freed memory above them returns to the OS again; False where
    not glibc."""
    return _set_thresholds(DEFAULT_THRESHOLD)
