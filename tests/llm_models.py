"""Tiny randomly initialised Hugging Face causal LMs for the LLM tests (built from configs: nothing is
downloaded)."""

from __future__ import annotations

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # never reach a hub

import torch
from transformers import GPT2Config, GPT2LMHeadModel, LlamaConfig, LlamaForCausalLM, Qwen2Config, Qwen2ForCausalLM

VOCAB = 16


def hf_model(arch: str, seed: int = 0) -> torch.nn.Module:
    """A tiny random-init causal LM of one of three families (Llama, Qwen2, GPT-2 style)."""
    torch.manual_seed(seed)
    if arch == "llama":
        model = LlamaForCausalLM(LlamaConfig(vocab_size=VOCAB, hidden_size=32, intermediate_size=64,
                                             num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                                             max_position_embeddings=64))
    elif arch == "qwen2":
        model = Qwen2ForCausalLM(Qwen2Config(vocab_size=VOCAB, hidden_size=32, intermediate_size=64,
                                             num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                                             max_position_embeddings=64))
    else:
        model = GPT2LMHeadModel(GPT2Config(vocab_size=VOCAB, n_embd=32, n_layer=2, n_head=4, n_positions=64,
                                           resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0))
    return model.eval()


