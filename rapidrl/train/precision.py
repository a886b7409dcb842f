"""The ``precision`` path setting: float32 or bfloat16 arithmetic for an algorithm's networks.

``precision`` is ``"fp32"`` (the default), ``"bf16"`` or ``"auto"``, resolved once at construction beside
``gradient_backend`` and ``collection`` (``rapidrl.train.paths``): printed, kept in ``model.paths["precision"]``
and written to the run's ``config.toml`` and ``summary.json``.

What ``"bf16"`` runs: the networks' matmuls and convolutions under ``torch.autocast(<the model's device type>,
bfloat16)``, in the update (forward and backward) and in the training rollout's acting; the distribution maths
and the losses in float32 (the networks' heads return float32). Parameters, gradients, Adam's moments, rollout
and replay storage stay float32 (autocast keeps float32 master weights), so checkpoints, ``predict``,
``evaluate`` and export are those of a float32 model. It needs the "torch" gradient backend: the compiled (Numba)
backends are float32 only. An explicit ``"bf16"`` runs on any CPU (where the CPU has no native bfloat16,
PyTorch emulates it, ~11x slower than float32: a RuntimeWarning says so, ``EMULATED_BF16_SLOWDOWN``) and on CUDA
devices that support it.

``"auto"`` takes bf16 only where all of these hold, else fp32 (``PathChoice.reason`` says which failed):
the device is a CPU with native bfloat16 (AVX512-BF16 or AMX, ``cpu_native_bf16``; on a CUDA device "auto" keeps
fp32, measured faster there end to end: ``CUDA_AUTO_FP32``); the update runs on the "torch" backend (where the
handwritten float32 backend applies it is the faster path, and stays); the algorithm has bf16 learning tests that
match its float32 thresholds (``Algorithm.bf16_learning_tested``) and needs no more than bf16's precision
(``Algorithm.auto_keeps_fp32``: IQL); and the networks are large enough for bf16 to
be faster (``heavy_networks``: any CNN; an MLP with a layer of 256+ units at update batches of 128+ rows; measured with
``rapidrl/benchmarks/bench_precision.py``). SAC's 256x256 update measured faster in bf16 on the torch backend than
on its compiled float32 one, so there "auto" for both settings gives torch + bf16
(``HandwrittenBackend.gives_way_to_bf16``).
"""

from __future__ import annotations

import contextlib
import functools
import warnings

import torch

from rapidrl._system import cpu_flags
from rapidrl._unsafe.torch_private import cpu_bf16_support
from rapidrl.train.config import PRECISIONS
from rapidrl.train.paths import PathChoice, choose

__all__ = ["PRECISIONS", "autocast", "cpu_native_bf16", "heavy_networks", "native_bf16", "resolve_precision"]

CUDA_AUTO_FP32 = ("on CUDA, bf16 measured slower end to end for rapidrl's networks (H200: PPO Atari 0.90x, DQN Atari "
                  "0.92x of fp32; python -m rapidrl.benchmarks.gpu --heavy); precision='bf16' still selects it")
"""Why "auto" keeps float32 on a CUDA device: there the update is a small part of the run (14% for PPO Atari on an
H200) and autocast's casts cost more than the bf16 arithmetic saves at RL batch sizes."""
EMULATED_BF16_SLOWDOWN = ("this CPU has no native bfloat16 (AVX512-BF16 or AMX): PyTorch emulates precision='bf16', "
                          "measured ~11x float32's time for a 64-256-256 MLP update on an AVX2 CPU; "
                          "precision='auto' or 'fp32' runs float32 here")
"""The warning of an explicit ``precision="bf16"`` on a CPU without native bfloat16: it runs, slowly."""
HEAVY_MLP_WIDTH = 256
"""An MLP layer at least this wide counts as heavy for ``"auto"`` (at update batches of ``HEAVY_MLP_BATCH``+)."""
HEAVY_MLP_BATCH = 128
"""Update batch from which a wide MLP counts as heavy: bf16 measured slower at 64 rows, faster at 256."""


@functools.cache
def cpu_native_bf16() -> bool:
    """True when this CPU computes bfloat16 natively (AVX512-BF16 or AMX-BF16): torch's cpuinfo where it has the
    query, else the flags Linux lists; False where neither can tell (never raises, on any OS)."""
    known = cpu_bf16_support()
    if known is not None:
        return known
    return bool({"avx512_bf16", "amx_bf16"} & cpu_flags())


def native_bf16(device: torch.device) -> str | None:
    """None when ``device`` computes bfloat16 natively, else why not (phrased for a ``PathChoice`` reason)."""
    if device.type == "cpu":
        return None if cpu_native_bf16() else "this CPU has no native bfloat16 (AVX512-BF16 or AMX)"
    if device.type == "cuda":
        return None if torch.cuda.is_bf16_supported(including_emulation=False) else \
            "this CUDA device has no native bfloat16"
    return f"bfloat16 autocast is supported on 'cpu' and 'cuda' devices, not {device.type!r}"


def autocast(device: torch.device, precision: str):
    """The arithmetic context of ``precision`` on ``device``: bfloat16 autocast for "bf16", nothing for "fp32"."""
    if precision != "bf16":
        return contextlib.nullcontext()
    # CUDA: no cast cache, so a rollout captured as a CUDA graph (cuda_graph=True) never holds a cached bf16 copy
    # of weights that later optimizer steps change (PyTorch's advice for autocast under graph capture)
    return torch.autocast(device.type, dtype=torch.bfloat16, cache_enabled=device.type != "cuda")


def resolve_precision(requested: str, *, device: torch.device, backend_autocasts: bool, tested: bool,
                      heavy: str | None, unsupported: str | None = None, keeps_fp32: str | None = None) -> PathChoice:
    """``paths["precision"]`` from the config's ``precision`` (``rapidrl.train.paths.choose``).

    backend_autocasts: the resolved gradient backend runs the networks under autocast (torch, and a handwritten backend
    that compiles only a loss on the networks' float32 outputs, as TQC's; other handwritten backends run float32 only).
    tested: the algorithm's bf16 learning tests match its float32 thresholds. heavy: None when the networks are large
    enough for bf16 to pay, else why not. unsupported: why bf16 cannot run with these settings at all (a recurrent
    policy), else None. keeps_fp32: why "auto" keeps float32 for this algorithm (``auto_keeps_fp32``), else None.
    Explicit "bf16" is refused only where it cannot run; "auto" takes it only where every condition holds.
    """
    auto = requested == "auto"

    def bf16() -> str | None:
        if unsupported is not None:
            return unsupported
        if not backend_autocasts:
            return "the handwritten gradient backend runs in float32 (precision='bf16' needs gradient_backend='torch')"
        if device.type == "cuda":
            if auto:
                return CUDA_AUTO_FP32
            why = native_bf16(device)
            if why is not None:
                return why + " (use precision='fp32')"
        elif device.type != "cpu":
            return native_bf16(device)
        elif not auto and native_bf16(device) is not None:
            warnings.warn(EMULATED_BF16_SLOWDOWN, RuntimeWarning, stacklevel=2)
        if auto:
            why = (native_bf16(device) or (None if tested else "no bf16 learning test of this algorithm yet")
                   or keeps_fp32 or heavy)
            if why is not None:
                return why
        return None

    return choose("precision", requested, {"bf16": bf16, "fp32": lambda: None})


def heavy_networks(modules, batch: int) -> str | None:
    """None when ``modules`` are heavy enough for bf16 to be faster at update batches of ``batch`` rows, else why
    not. Measured (``rapidrl bench precision``, one thread, bf16 vs fp32 on the torch backend): every CNN (Nature
    CNN b256 1.7x, b32 1.6x; MinAtar CNN b512 1.7x, b64 1.4x); MLPs with a layer of ``HEAVY_MLP_WIDTH`` units or
    more at batch 256 (PPO 1.2x, SAC 1.6x) but not at batch 64 (PPO 256x256: 0.8x), hence ``HEAVY_MLP_BATCH``;
    64x64 MLPs never (0.7x)."""
    wide = False
    for module in modules:
        for m in module.modules():
            if isinstance(m, torch.nn.Conv2d):
                return None
            if isinstance(m, torch.nn.Linear) and m.out_features >= HEAVY_MLP_WIDTH:
                wide = True
            weights = getattr(m, "weights", None)  # rapidrl.nn.qnets.CriticEnsemble: [n, in, out] per layer
            if isinstance(weights, torch.nn.ParameterList) and any(w.shape[-1] >= HEAVY_MLP_WIDTH for w in weights):
                wide = True
    if wide and batch >= HEAVY_MLP_BATCH:
        return None
    if wide:
        return (f"MLP updates of {batch} rows: bf16 measured no faster below {HEAVY_MLP_BATCH} "
                "(precision='bf16' to use it anyway)")
    return (f"small networks (no CNN, no layer of {HEAVY_MLP_WIDTH}+ units): bf16 measured no faster "
            "(precision='bf16' to use it anyway)")
