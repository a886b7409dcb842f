"""Results recorded bitwise per CPU, the golden runs (``tests/test_golden.py``) and the rebuilt offline datasets'
policies (``tools/dataset_sources``): the CPU's recording key and the fingerprint of a state's tensors."""

from __future__ import annotations

import hashlib
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


def _tensors(obj, prefix: str = "") -> list[tuple[str, torch.Tensor]]:
    """(path, tensor) of every tensor in ``obj`` in a fixed order (dict keys sorted)."""
    if isinstance(obj, torch.Tensor):
        return [(prefix, obj)]
    if isinstance(obj, dict):
        return [t for k in sorted(obj, key=str) for t in _tensors(obj[k], f"{prefix}.{k}")]
    if isinstance(obj, (list, tuple)):
        return [t for i, v in enumerate(obj) for t in _tensors(v, f"{prefix}[{i}]")]
    return []


def fingerprint(state: dict) -> dict:
    """SHA-256 over every tensor's path, dtype, shape and bytes; per tensor its float64 sum and sum of squares."""
    digest = hashlib.sha256()
    sums = {}
    for path, t in _tensors(state):
        t = t.detach().cpu().contiguous()
        digest.update(f"{path}|{t.dtype}|{tuple(t.shape)}|".encode())
        digest.update(t.reshape(-1).view(torch.uint8).numpy().tobytes() if t.numel() else b"")
        if t.is_floating_point():
            x = t.double()
            sums[path] = [float(x.sum()), float(x.square().sum())]
    return {"sha256": digest.hexdigest(), "sums": sums}
