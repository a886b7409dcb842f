"""Network outputs back in full precision after a bfloat16 autocast region (``precision="bf16"``), and output layers
that compute in float32 inside one."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

__all__ = ["Float32Linear", "float32_region", "full_precision"]

_LOW = (torch.bfloat16, torch.float16)


def full_precision(x: torch.Tensor) -> torch.Tensor:
    """``x`` as float32 when autocast computed it in bf16/fp16; otherwise unchanged (float32 stays float32 without a
    copy, a float64 network keeps float64). Heads call it so that losses and distribution maths run in float32."""
    return x.float() if x.dtype in _LOW else x


def float32_region(x: torch.Tensor):
    """A context that turns off the autocast active on ``x``'s device type (a no-op context where none is)."""
    return torch.autocast(x.device.type, enabled=False)


class Float32Linear(nn.Linear):
    """``nn.Linear`` whose product runs in float32 even under bf16 autocast (its parameters stay float32; the input is
    cast up). For a value head whose outputs are compared with each other, not only differentiated: bf16 keeps 8
    significant bits, so a value near 100 comes out rounded to a multiple of 0.5, and the difference of two such
    values (IQL's advantage Q - V, exponentiated into weights) is mostly rounding. The hidden layers keep bf16; this
    layer is one row of products per output, cheap in float32. Same parameters and state dict as ``nn.Linear``."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not torch.is_autocast_enabled(x.device.type):
            return super().forward(x)
        with float32_region(x):
            return F.linear(x.float(), self.weight, self.bias)
