"""A tiny causal transformer and a sampler for any causal LM, for tests, examples and benchmarks.

``TinyCausalLM`` is a small decoder in plain PyTorch (pre-LayerNorm blocks, learned positions,
``scaled_dot_product_attention``); nothing is downloaded. The docs' toy model has ~14k parameters.
``generate`` samples from any module whose forward takes ``(tokens, attention_mask=...,
position_ids=...)`` and returns logits ``[B, T, V]`` or an object with ``.logits`` (Hugging Face
causal LMs), so the GRPO trainer never imports ``transformers``.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from rapidrl.kernels.validation import check_int, check_scalar


class _Block(nn.Module):
    def __init__(self, d_model: int, n_heads: int):
        super().__init__()
        self.n_heads = n_heads
        self.ln1 = nn.LayerNorm(d_model)
        self.qkv = nn.Linear(d_model, 3 * d_model)
        self.proj = nn.Linear(d_model, d_model)
        self.ln2 = nn.LayerNorm(d_model)
        self.mlp = nn.Sequential(nn.Linear(d_model, 4 * d_model), nn.GELU(), nn.Linear(4 * d_model, d_model))

    def forward(self, x: torch.Tensor, allowed: torch.Tensor) -> torch.Tensor:
        b, t, d = x.shape
        q, k, v = self.qkv(self.ln1(x)).view(b, t, 3, self.n_heads, d // self.n_heads).unbind(2)
        # [B, H, T, D/H]; allowed: [B, 1, T, T] bool, True = query may attend to key
        y = F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2),
                                           attn_mask=allowed)
        x = x + self.proj(y.transpose(1, 2).reshape(b, t, d))
        return x + self.mlp(self.ln2(x))


class TinyCausalLM(nn.Module):
    """Decoder-only transformer: ``logits = head(blocks(embed(tokens) + pos(position_ids)))``.

    Args:
        vocab_size: V, number of token ids.
        d_model: width (a multiple of ``n_heads``).
        n_layers: number of transformer blocks.
        n_heads: attention heads per block.
        max_len: largest position id + 1.
    """

    def __init__(self, vocab_size: int, d_model: int = 64, n_layers: int = 2, n_heads: int = 4,
                 max_len: int = 128):
        super().__init__()
        check_int("vocab_size", vocab_size, low=1)
        check_int("d_model", d_model, low=1)
        check_int("n_layers", n_layers, low=1)
        check_int("n_heads", n_heads, low=1)
        check_int("max_len", max_len, low=1)
        if d_model % n_heads:
            raise ValueError(f"d_model ({d_model}) must be a multiple of n_heads ({n_heads})")
        self.vocab_size, self.max_len = vocab_size, max_len
        self.tok = nn.Embedding(vocab_size, d_model)
        self.pos = nn.Embedding(max_len, d_model)
        self.blocks = nn.ModuleList(_Block(d_model, n_heads) for _ in range(n_layers))
        self.ln_f = nn.LayerNorm(d_model)
        self.head = nn.Linear(d_model, vocab_size, bias=False)

    def forward(self, tokens: torch.Tensor, attention_mask: torch.Tensor | None = None,
                position_ids: torch.Tensor | None = None) -> torch.Tensor:
        """Logits of the next token at every position.

        Args:
            tokens: [B, T] integer ids.
            attention_mask: ``None`` (all tokens real), [B, T] 1/0 padding mask (Hugging Face
                convention: keys with 0 are ignored), or [B, T, T] bool, True where query ``i`` may
                attend to key ``j`` (e.g. block-diagonal masks of packed sequences). Causality is
                always added; every query also sees itself, so padded rows stay finite.
            position_ids: [B, T] positions; default ``0..T-1``, or ``cumsum(mask) - 1`` with a
                [B, T] padding mask (so left padding does not shift positions).
        Returns:
            [B, T, V] logits.
        """
        if tokens.ndim != 2:
            raise ValueError(f"tokens must have shape [B, T], got {tuple(tokens.shape)}")
        b, t = tokens.shape
        if t > self.max_len:
            raise ValueError(f"sequence length {t} exceeds max_len {self.max_len}")
        device = tokens.device
        eye = torch.eye(t, dtype=torch.bool, device=device)
        allowed = torch.ones(t, t, dtype=torch.bool, device=device).tril()[None].expand(b, t, t)  # [B, T, T]
        if attention_mask is not None:
            if attention_mask.shape == (b, t):
                keys = attention_mask.bool()
                allowed = allowed & keys[:, None, :]
                if position_ids is None:
                    position_ids = (attention_mask.long().cumsum(1) - 1).clamp(min=0)
            elif attention_mask.shape == (b, t, t):
                allowed = allowed & attention_mask.bool()
            else:
                raise ValueError(f"attention_mask must be [B, T] or [B, T, T], got {tuple(attention_mask.shape)}")
            allowed = allowed | eye
        if position_ids is None:
            position_ids = torch.arange(t, device=device)[None].expand(b, t)
        x = self.tok(tokens) + self.pos(position_ids)  # [B, T, D]
        mask4 = allowed[:, None]  # [B, 1, T, T]
        for block in self.blocks:
            x = block(x, mask4)
        return self.head(self.ln_f(x))  # [B, T, V]

    @torch.no_grad()
    def generate(self, prompts: torch.Tensor, max_new_tokens: int, temperature: float = 1.0,
                 generator: torch.Generator | None = None,
                 attention_mask: torch.Tensor | None = None) -> torch.Tensor:
        """Sample completions; see the module-level ``generate``."""
        return generate(self, prompts, max_new_tokens, temperature=temperature, generator=generator,
                        attention_mask=attention_mask)


def causal_logits(model: nn.Module, tokens: torch.Tensor, attention_mask: torch.Tensor | None = None,
                  position_ids: torch.Tensor | None = None) -> torch.Tensor:
    """Call ``model`` and return its logits [B, T, V], whether it returns a tensor or ``.logits``."""
    out = model(tokens, attention_mask=attention_mask, position_ids=position_ids)
    logits = getattr(out, "logits", out)
    if not isinstance(logits, torch.Tensor) or logits.ndim != 3 or logits.shape[:2] != tokens.shape:
        raise TypeError("model must return logits [B, T, V] (a tensor or an object with .logits)")
    return logits


@torch.no_grad()
def generate(model: nn.Module, prompts: torch.Tensor, max_new_tokens: int, *, temperature: float = 1.0,
             generator: torch.Generator | None = None,
             attention_mask: torch.Tensor | None = None) -> torch.Tensor:
    """Sample ``max_new_tokens`` tokens after each prompt from ``softmax(logits / temperature)``.

    Works for any causal LM (see ``causal_logits``). No KV cache: each step re-runs the full
    prefix, which is the fastest choice for the tiny models and short completions it is meant for.

    Args:
        model: causal LM.
        prompts: [B, P] integer ids, left-padded when lengths differ.
        max_new_tokens: N ≥ 1.
        temperature: > 0; 1 samples the model's distribution.
        generator: torch.Generator for reproducible sampling (on the model's device).
        attention_mask: [B, P] 1/0 prompt padding mask, or ``None`` when no prompt is padded.
    Returns:
        [B, N] sampled ids (the completion only). Stopping at an end-of-sequence token is the
        caller's business (mask everything after it).
    """
    n = check_int("max_new_tokens", max_new_tokens, low=1)
    temperature = check_scalar("temperature", temperature, low=0.0, low_open=True)
    if prompts.ndim != 2 or prompts.shape[1] == 0:
        raise ValueError(f"prompts must have shape [B, P] with P >= 1, got {tuple(prompts.shape)}")
    tokens = prompts
    mask = torch.ones_like(prompts) if attention_mask is None else attention_mask.to(prompts.dtype)
    ones = torch.ones_like(prompts[:, :1])
    for _ in range(n):
        position_ids = (mask.cumsum(1) - 1).clamp(min=0)
        logits = causal_logits(model, tokens, mask, position_ids)[:, -1].float()  # [B, V]
        probs = torch.softmax(logits / temperature, dim=-1)
        nxt = torch.multinomial(probs, 1, generator=generator)  # [B, 1]
        tokens = torch.cat([tokens, nxt.to(tokens.dtype)], dim=1)
        mask = torch.cat([mask, ones], dim=1)
    return tokens[:, prompts.shape[1]:]
