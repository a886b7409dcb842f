"""Facts about the machine that differ between operating systems, asked in one place (standard library only).

Every default path of rapidrl runs on Linux, macOS and Windows: an OS-specific call lives here behind a portable
fallback, and ``tests/test_portability.py`` runs the defaults with the Linux-only calls removed.
"""

from __future__ import annotations

import os
import platform

__all__ = ["cpu_flags", "cpu_model", "usable_cpu_count"]


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
