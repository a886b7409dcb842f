"""LLM post-training: GRPO / DAPO / Dr.GRPO, RLOO and DPO losses, a GRPO trainer, sequence packing,
and a tiny causal transformer for tests and examples.

The NumPy side (rewards -> group advantages, KL statistics) uses ``rapidrl.kernels.llm_ops``; the
differentiable parts (ratios, clipping, KL penalty) are PyTorch ops in ``rapidrl.llm.losses``.
"""

from rapidrl.llm.losses import (
    aggregate,
    dpo_loss,
    grpo_loss,
    kl_penalty,
    rloo_loss,
    sequence_logprobs,
)
from rapidrl.llm.packing import PackedBatch, first_fit_decreasing, pack_sequences
from rapidrl.llm.tiny import TinyCausalLM, causal_logits, generate
from rapidrl.llm.trainer import (
    GRPOConfig,
    GRPOTrainer,
    completion_logprobs,
    completion_mask,
    dpo_step,
    response_logprobs,
)

__all__ = [
    "GRPOConfig",
    "GRPOTrainer",
    "PackedBatch",
    "TinyCausalLM",
    "aggregate",
    "causal_logits",
    "completion_logprobs",
    "completion_mask",
    "dpo_loss",
    "dpo_step",
    "first_fit_decreasing",
    "generate",
    "grpo_loss",
    "kl_penalty",
    "pack_sequences",
    "response_logprobs",
    "rloo_loss",
    "sequence_logprobs",
]
