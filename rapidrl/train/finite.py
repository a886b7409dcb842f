"""Is training still finite? The checks the driver, the checkpointer and the saving callbacks share.

Imports nothing else of rapidrl, so ``algorithm``, ``callbacks`` and ``checkpoint`` can all use it without an
import circle.
"""

from __future__ import annotations

import math

import torch


def non_finite_loss(metrics: dict) -> str | None:
    """The first ``losses/*`` metric that is NaN or inf, or None."""
    return next((k for k, v in metrics.items()
                 if k.startswith("losses/") and isinstance(v, float) and not math.isfinite(v)), None)


def all_finite(obj) -> bool:
    """Every floating-point tensor inside ``obj`` (nested dicts, lists, tuples) is finite."""
    if isinstance(obj, torch.Tensor):
        return not obj.is_floating_point() or bool(torch.isfinite(obj).all())
    if isinstance(obj, dict):
        return all(all_finite(v) for v in obj.values())
    if isinstance(obj, (list, tuple)):
        return all(all_finite(v) for v in obj)
    return True


def training_is_finite(algo) -> bool:
    """Latest ``losses/*`` metrics and all saved tensors (weights, optimizer moments) of ``algo`` are finite."""
    return non_finite_loss(algo.metrics) is None and all_finite(algo._state())
