"""Numeric kernels: pure, allocation-free Numba functions behind validated NumPy-facing wrappers.

Imports only numpy and numba; nothing is compiled or written at import (each kernel compiles on first call and
is cached on disk; a wheel's shipped kernels are installed when the first model is built:
``rapidrl.kernels.cache.install_shipped_cache``). Layout is time-major ``[T, N]``; see ``advantages`` for the
episode-end rules.
"""

from __future__ import annotations

from rapidrl.kernels.advantages import (
    discounted_returns,
    gae,
    gae_into,
    gae_trajectory,
    lambda_returns,
    n_step_returns,
    vtrace,
)
from rapidrl.kernels.llm_ops import group_advantages, rloo_advantages, sequence_kl, token_kl
from rapidrl.kernels.sumtree import SumMinTree

__all__ = [
    "SumMinTree",
    "discounted_returns",
    "gae",
    "gae_into",
    "gae_trajectory",
    "group_advantages",
    "lambda_returns",
    "n_step_returns",
    "rloo_advantages",
    "sequence_kl",
    "token_kl",
    "vtrace",
]
