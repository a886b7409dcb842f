"""The recording key of a CPU for results that are bitwise per CPU: the golden runs (``tests/test_golden.py``) and
the rebuilt offline datasets (``tools/dataset_sources``)."""

from __future__ import annotations

from pathlib import Path

import torch

# CPU features that change which float32 kernels torch's BLAS (MKL / oneDNN) runs, beyond torch's capability string:
# an Intel Xeon with AMX and an AMD Zen 4 both report "AVX512" and give different last bits (measured 2026-12-06:
# every PPO/A2C/IMPALA run's hash differed at unchanged code).
_KERNEL_FEATURES = ("avx512_bf16", "amx_tile")


def _cpu_vendor_and_features() -> tuple[str, list[str]]:
    """("Intel" | "AMD" | "" , the ``_KERNEL_FEATURES`` this CPU has), read from /proc/cpuinfo (Linux; else empty)."""
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return "", []
    vendor = {"GenuineIntel": "Intel", "AuthenticAMD": "AMD"}.get(
        next((ln.split(":", 1)[1].strip() for ln in text.splitlines() if ln.startswith("vendor_id")), ""), "")
    flags = set(next((ln.split(":", 1)[1].split() for ln in text.splitlines() if ln.startswith("flags")), []))
    return vendor, [f for f in _KERNEL_FEATURES if f in flags]


def capability() -> str:
    """The recording key of this CPU: torch's CPU capability, the vendor and the BLAS-relevant features, torch's
    version, e.g. ``"AVX512 AMD avx512_bf16 torch 2.13.0"``."""
    vendor, features = _cpu_vendor_and_features()
    parts = [torch.backends.cpu.get_cpu_capability(), vendor, *features, "torch", torch.__version__.split("+")[0]]
    return " ".join(p for p in parts if p)
