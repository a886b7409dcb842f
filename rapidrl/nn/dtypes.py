"""Network outputs back in full precision after a bfloat16 autocast region (``precision="bf16"``)."""

from __future__ import annotations

import torch

__all__ = ["full_precision"]

_LOW = (torch.bfloat16, torch.float16)


def full_precision(x: torch.Tensor) -> torch.Tensor:
    """``x`` as float32 when autocast computed it in bf16/fp16; otherwise unchanged (float32 stays float32 without a
    copy, a float64 network keeps float64). Heads call it so that losses and distribution maths run in float32."""
    return x.float() if x.dtype in _LOW else x
