"""A tiny causal transformer and a sampler for any causal LM, for tests, examples and benchmarks.

``TinyCausalLM`` is a small decoder in plain PyTorch (pre-LayerNorm blocks, learned positions,
``scaled_dot_product_attention``); nothing is downloaded. The docs' toy model has ~14k parameters.
``generate`` samples from any module whose forward takes ``(tokens, attention_mask=...,
position_ids=...)`` and returns logits ``[B, T, V]`` or an object with ``.logits`` (Hugging Face
causal LMs), so the GRPO trainer never imports ``transformers``. Models whose forward also takes
``past_key_values=`` and ``use_cache=`` (Hugging Face causal LMs, and ``TinyCausalLM``) are sampled with
their key/value cache: one forward over the prompt, then one token per step.
"""

from __future__ import annotations

import inspect
from typing import NamedTuple

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

    def forward(self, x: torch.Tensor, allowed: torch.Tensor, past: tuple[torch.Tensor, torch.Tensor] | None = None
                ) -> tuple[torch.Tensor, tuple[torch.Tensor, torch.Tensor]]:
        """x [B, t, D] (the new positions); allowed [B, 1, t, T_past + t] bool, True = query may attend to key;
        past: cached (keys, values) [B, H, T_past, D/H]. Returns the new x and the keys/values of all T."""
        b, t, d = x.shape
        q, k, v = (z.transpose(1, 2) for z in self.qkv(self.ln1(x)).view(b, t, 3, self.n_heads,
                                                                           d // self.n_heads).unbind(2))
        if past is not None:  # [B, H, T_past + t, D/H]
            k, v = torch.cat([past[0], k], dim=2), torch.cat([past[1], v], dim=2)
        y = F.scaled_dot_product_attention(q, k, v, attn_mask=allowed)
        x = x + self.proj(y.transpose(1, 2).reshape(b, t, d))
        return x + self.mlp(self.ln2(x)), (k, v)


class CausalLMOutput(NamedTuple):
    """What ``TinyCausalLM`` returns with ``use_cache=True`` (the attribute names of Hugging Face's output)."""

    logits: torch.Tensor  # [B, t, V]
    past_key_values: tuple  # per block: (keys, values) [B, H, T, D/H]


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
                position_ids: torch.Tensor | None = None, past_key_values: tuple | None = None,
                use_cache: bool = False) -> torch.Tensor | CausalLMOutput:
        """Logits of the next token at every (new) position.

        Args:
            tokens: [B, t] integer ids (with ``past_key_values``: only the positions after the cached T_past).
            attention_mask: ``None`` (all tokens real), [B, T_past + t] 1/0 padding mask (Hugging Face
                convention: keys with 0 are ignored), or, without a cache, [B, t, t] bool, True where query ``i``
                may attend to key ``j`` (e.g. block-diagonal masks of packed sequences). Causality is always
                added; every query also sees itself, so padded rows stay finite.
            position_ids: [B, t] positions; default ``T_past..T_past+t-1``, or ``cumsum(mask) - 1`` with a
                padding mask (so left padding does not shift positions).
            past_key_values: the cache returned by an earlier call with ``use_cache=True``.
            use_cache: also return the keys/values of all positions (``CausalLMOutput``).
        Returns:
            [B, t, V] logits, or ``CausalLMOutput(logits, past_key_values)`` with ``use_cache``.
        """
        if tokens.ndim != 2:
            raise ValueError(f"tokens must have shape [B, T], got {tuple(tokens.shape)}")
        b, t = tokens.shape
        past_len = 0 if past_key_values is None else past_key_values[0][0].shape[2]
        total = past_len + t
        if total > self.max_len:
            raise ValueError(f"sequence length {total} exceeds max_len {self.max_len}")
        device = tokens.device
        q_pos = torch.arange(past_len, total, device=device)  # absolute index of each query
        k_pos = torch.arange(total, device=device)
        is_self = k_pos[None, :] == q_pos[:, None]  # [t, T]
        allowed = (k_pos[None, :] <= q_pos[:, None])[None].expand(b, t, total)  # [B, t, T] causal
        if attention_mask is not None:
            if attention_mask.shape == (b, total):
                allowed = allowed & attention_mask.bool()[:, None, :]
                if position_ids is None:
                    position_ids = (attention_mask.long().cumsum(1) - 1).clamp(min=0)[:, past_len:]
            elif attention_mask.shape == (b, t, t) and past_len == 0:
                allowed = allowed & attention_mask.bool()
            else:
                raise ValueError(f"attention_mask must be [B, T] (T = cached + new positions) or, without a cache, "
                                 f"[B, T, T]; got {tuple(attention_mask.shape)}")
            allowed = allowed | is_self
        if position_ids is None:
            position_ids = q_pos[None].expand(b, t)
        x = self.tok(tokens) + self.pos(position_ids)  # [B, t, D]
        mask4 = allowed[:, None]  # [B, 1, t, T]
        cache = []
        for i, block in enumerate(self.blocks):
            x, kv = block(x, mask4, None if past_key_values is None else past_key_values[i])
            cache.append(kv)
        logits = self.head(self.ln_f(x))  # [B, t, V]
        return CausalLMOutput(logits, tuple(cache)) if use_cache else logits

    @torch.no_grad()
    def generate(self, prompts: torch.Tensor, max_new_tokens: int, temperature: float = 1.0,
                 generator: torch.Generator | None = None, attention_mask: torch.Tensor | None = None,
                 use_cache: bool | None = None) -> torch.Tensor:
        """Sample completions; see the module-level ``generate``."""
        return generate(self, prompts, max_new_tokens, temperature=temperature, generator=generator,
                        attention_mask=attention_mask, use_cache=use_cache)


def causal_logits(model: nn.Module, tokens: torch.Tensor, attention_mask: torch.Tensor | None = None,
                  position_ids: torch.Tensor | None = None) -> torch.Tensor:
    """Call ``model`` and return its logits [B, T, V], whether it returns a tensor or ``.logits``."""
    out = model(tokens, attention_mask=attention_mask, position_ids=position_ids)
    logits = getattr(out, "logits", out)
    if not isinstance(logits, torch.Tensor) or logits.ndim != 3 or logits.shape[:2] != tokens.shape:
        raise TypeError("model must return logits [B, T, V] (a tensor or an object with .logits)")
    return logits


def _cache_argument(model: nn.Module) -> str | None:
    """The keyword ``model.forward`` takes its key/value cache by (``past_key_values``; ``cache`` in
    transformers >= 5), or None when it has no cache (or no ``use_cache`` switch)."""
    try:
        params = inspect.signature(model.forward).parameters
    except (TypeError, ValueError):
        return None
    if "use_cache" not in params:
        return None
    return next((name for name in ("past_key_values", "cache") if name in params), None)


def supports_kv_cache(model: nn.Module) -> bool:
    """True if ``model.forward`` takes a key/value cache and ``use_cache`` (Hugging Face causal LMs,
    ``TinyCausalLM``)."""
    return _cache_argument(model) is not None


def _returned_cache(out):
    cache = getattr(out, "past_key_values", None)
    return cache if cache is not None else getattr(out, "cache", None)


@torch.no_grad()
def generate(model: nn.Module, prompts: torch.Tensor, max_new_tokens: int, *, temperature: float = 1.0,
             generator: torch.Generator | None = None, attention_mask: torch.Tensor | None = None,
             use_cache: bool | None = None) -> torch.Tensor:
    """Sample ``max_new_tokens`` tokens after each prompt from ``softmax(logits / temperature)``.

    Works for any causal LM (see ``causal_logits``). With a key/value cache (``use_cache``; by default
    whenever ``supports_kv_cache(model)``) the prompt is encoded once and each step feeds one token; without,
    each step re-runs the full prefix. Both draw the same tokens from the same ``generator`` (the
    distributions agree to float rounding; tests compare them).

    Args:
        model: causal LM.
        prompts: [B, P] integer ids, left-padded when lengths differ.
        max_new_tokens: N ≥ 1.
        temperature: > 0; 1 samples the model's distribution.
        generator: torch.Generator for reproducible sampling (on the model's device).
        attention_mask: [B, P] 1/0 prompt padding mask, or ``None`` when no prompt is padded.
        use_cache: ``None`` = use the model's cache if it has one; ``False`` = never.
    Returns:
        [B, N] sampled ids (the completion only). Stopping at an end-of-sequence token is the
        caller's business (mask everything after it).
    """
    n = check_int("max_new_tokens", max_new_tokens, low=1)
    temperature = check_scalar("temperature", temperature, low=0.0, low_open=True)
    if prompts.ndim != 2 or prompts.shape[1] == 0:
        raise ValueError(f"prompts must have shape [B, P] with P >= 1, got {tuple(prompts.shape)}")
    if use_cache is None:
        use_cache = supports_kv_cache(model)
    elif use_cache and not supports_kv_cache(model):
        raise ValueError("use_cache=True needs a model whose forward takes past_key_values and use_cache")
    mask = torch.ones_like(prompts) if attention_mask is None else attention_mask.to(prompts.dtype)
    ones = torch.ones_like(prompts[:, :1])
    position_ids = (mask.cumsum(1) - 1).clamp(min=0)  # [B, P]
    out = []
    if use_cache:
        cache_arg = _cache_argument(model)
        step = model(prompts, attention_mask=mask, position_ids=position_ids, use_cache=True)
        for i in range(n):
            logits = step.logits[:, -1].float()  # [B, V]
            nxt = torch.multinomial(torch.softmax(logits / temperature, dim=-1), 1, generator=generator)  # [B, 1]
            out.append(nxt)
            if i == n - 1:
                break
            mask = torch.cat([mask, ones], dim=1)
            position_ids = position_ids[:, -1:] + 1
            step = model(nxt.to(prompts.dtype), attention_mask=mask, position_ids=position_ids,
                         use_cache=True, **{cache_arg: _returned_cache(step)})
        return torch.cat(out, dim=1).to(prompts.dtype)
    tokens = prompts
    for _ in range(n):
        position_ids = (mask.cumsum(1) - 1).clamp(min=0)
        logits = causal_logits(model, tokens, mask, position_ids)[:, -1].float()  # [B, V]
        probs = torch.softmax(logits / temperature, dim=-1)
        nxt = torch.multinomial(probs, 1, generator=generator)  # [B, 1]
        tokens = torch.cat([tokens, nxt.to(tokens.dtype)], dim=1)
        mask = torch.cat([mask, ones], dim=1)
    return tokens[:, prompts.shape[1]:]
