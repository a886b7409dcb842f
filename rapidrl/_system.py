"""Facts about the machine that differ between operating systems, asked in one place (standard library only).

Every default path of rapidrl runs on Linux, macOS and Windows: an OS-specific call lives here behind a portable
fallback, and ``tests/test_portability.py`` runs the defaults with the Linux-only calls removed.
"""

from __future__ import annotations

import os
import platform
import sys

__all__ = ["cpu_flags", "cpu_model", "try_lock_file", "unlock_file", "usable_cpu_count"]


def usable_cpu_count() -> int:
    """CPUs this process may run on: its affinity mask where the OS has one (Linux; ``os.process_cpu_count``
    from Python 3.13), else every CPU of the machine (macOS, Windows on Python < 3.13). At least 1."""
    process_cpu_count = getattr(os, "process_cpu_count", None)
    if process_cpu_count is not None:
        return process_cpu_count() or 1
    getaffinity = getattr(os, "sched_getaffinity", None)
    if getaffinity is not None:
        return len(getaffinity(0)) or 1
    return os.cpu_count() or 1


def cpu_model() -> str:
    """The CPU's model name (``/proc/cpuinfo`` on Linux), else what ``platform`` knows (for benchmark reports)."""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def cpu_flags() -> frozenset[str]:
    """The CPU's feature flags as Linux lists them (``/proc/cpuinfo``: ``avx512_bf16``, ``amx_bf16``, ...); an
    empty set where the OS has no such file (macOS, Windows): callers treat that as "unknown"."""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("flags"):
                    return frozenset(line.split(":", 1)[1].split())
    except OSError:
        pass
    return frozenset()


if sys.platform == "win32":  # pragma: no cover - exercised on Windows only
    import msvcrt

    def try_lock_file(fd: int) -> bool:
        """Take an exclusive lock on the open file ``fd`` without waiting (``msvcrt.locking`` on its first byte);
        False when another process holds it. The OS drops it when the holding process ends (``rapidrl.runs.lock``)."""
        try:
            msvcrt.locking(fd, msvcrt.LK_NBLCK, 1)
            return True
        except OSError:
            return False

    def unlock_file(fd: int) -> None:
        """Release ``try_lock_file``'s lock on ``fd``."""
        os.lseek(fd, 0, os.SEEK_SET)
        msvcrt.locking(fd, msvcrt.LK_UNLCK, 1)
else:
    import fcntl

    def try_lock_file(fd: int) -> bool:
        """Take an exclusive lock on the open file ``fd`` without waiting (``flock``); False when another process
        holds it. The kernel drops it when the holding process ends, however it ends (``rapidrl.runs.lock``)."""
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return True
        except BlockingIOError:
            return False

    def unlock_file(fd: int) -> None:
        """Release ``try_lock_file``'s lock on ``fd``."""
        fcntl.flock(fd, fcntl.LOCK_UN)
