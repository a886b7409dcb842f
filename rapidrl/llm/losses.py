"""Post-training losses for language models: GRPO (and its DAPO / Dr.GRPO variants), RLOO and DPO.

Pure functions on PyTorch tensors: no module state, no optimizer, no sampling. Shapes use
``B`` sequences (for GRPO: ``B = prompts * group_size`` completions), ``T`` completion tokens and
``V`` vocabulary entries. ``mask [B, T]`` marks real completion tokens (1/True) against padding
(0/False); every reduction honours it, so padded positions never reach the loss or the statistics.

Log-probabilities are natural logs of the probability of the *sampled* token:
``logp[b, t] = log π(y_bt | x_b, y_b<t)``. ``sequence_logprobs`` computes them from logits.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from rapidrl.kernels.validation import check_scalar

KL_ESTIMATORS = ("k1", "k2", "k3")
AGGREGATIONS = ("sequence", "token", "dr_grpo")
DPO_LOSS_TYPES = ("sigmoid", "ipo")


def _check_tensor(name: str, x, *, ndim: int, floating: bool = True) -> torch.Tensor:
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(x).__name__}")
    if x.ndim != ndim:
        raise ValueError(f"{name} must have {ndim} dimension(s), got shape {tuple(x.shape)}")
    if floating and not x.is_floating_point():
        raise TypeError(f"{name} must be a floating-point tensor, got {x.dtype}")
    if x.numel() == 0:
        raise ValueError(f"{name} must not be empty, got shape {tuple(x.shape)}")
    return x


def _check_same_shape(names: tuple[str, ...], tensors: tuple[torch.Tensor, ...]) -> None:
    for n, t in zip(names[1:], tensors[1:]):
        if t.shape != tensors[0].shape:
            raise ValueError(
                f"{n} has shape {tuple(t.shape)} but {names[0]} has {tuple(tensors[0].shape)}; they must match"
            )


def _check_mask(mask, logp: torch.Tensor, like: str = "logp") -> torch.Tensor:
    """A [B, T] bool/0-1 mask shaped like ``logp`` (named ``like``); returned in ``logp``'s dtype."""
    if not isinstance(mask, torch.Tensor):
        raise TypeError(f"mask must be a torch.Tensor, got {type(mask).__name__}")
    if mask.shape != logp.shape:
        raise ValueError(f"mask has shape {tuple(mask.shape)} but {like} has {tuple(logp.shape)}; they must match")
    if mask.is_complex():
        raise TypeError(f"mask must be bool or real, got {mask.dtype}")
    return mask.to(logp.dtype)


def _check_choice(name: str, value, choices: tuple[str, ...]) -> str:
    if value not in choices:
        raise ValueError(f"{name} must be one of {choices}, got {value!r}")
    return value


def kl_penalty(logp: torch.Tensor, ref_logp: torch.Tensor, estimator: str = "k3") -> torch.Tensor:
    """Per-token estimate of KL(π ‖ π_ref) from tokens sampled from π (Schulman, 2020).

    With the log-ratio ``d = ref_logp - logp = log(π_ref / π)`` at the sampled token:

    - ``k1 = -d``                 unbiased, high variance, can be negative;
    - ``k2 = d² / 2``             biased, low variance, ≥ 0;
    - ``k3 = exp(d) - 1 - d``     unbiased, low variance, ≥ 0 (the GRPO default).

    All three are 0 where ``logp == ref_logp`` and differentiable in ``logp``.

    Args:
        logp: [B, T] log-probs of the sampled tokens under the policy.
        ref_logp: [B, T] log-probs of the same tokens under the reference policy.
        estimator: "k1", "k2" or "k3".
    Returns:
        [B, T] per-token estimates (padding is not masked here; the caller masks).
    """
    _check_choice("estimator", estimator, KL_ESTIMATORS)
    d = ref_logp - logp  # [B, T]
    if estimator == "k1":
        return -d
    if estimator == "k2":
        return 0.5 * d * d
    return torch.expm1(d) - d


def aggregate(values: torch.Tensor, mask: torch.Tensor, aggregation: str, max_len: int | None = None):
    """Reduce per-token values [B, T] to a scalar, counting only ``mask`` tokens.

    - ``"sequence"`` (GRPO): mean over each sequence's tokens, then mean over sequences,
      ``(1/B) Σ_b (Σ_t m_bt v_bt) / (Σ_t m_bt)``; a sequence without tokens contributes 0.
    - ``"token"`` (DAPO): every token weighs the same, ``Σ_bt m_bt v_bt / Σ_bt m_bt``.
    - ``"dr_grpo"`` (Dr.GRPO): a constant normaliser, ``Σ_bt m_bt v_bt / (B · max_len)``, so
      the weight of a token depends neither on its sequence's length nor on the batch's.

    ``max_len`` is the Dr.GRPO constant (the generation budget); it defaults to ``T``.
    """
    _check_choice("aggregation", aggregation, AGGREGATIONS)
    mask = mask.to(values.dtype)
    total = values * mask  # [B, T]
    if aggregation == "sequence":
        return (total.sum(dim=1) / mask.sum(dim=1).clamp(min=1.0)).mean()
    if aggregation == "token":
        return total.sum() / mask.sum().clamp(min=1.0)
    denom = values.shape[1] if max_len is None else max_len
    return total.sum() / (values.shape[0] * denom)


def _masked_mean(values: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    return (values * mask).sum() / mask.sum().clamp(min=1.0)


def grpo_loss(
    logp: torch.Tensor,
    old_logp: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    *,
    clip_eps: float = 0.2,
    clip_eps_high: float | None = None,
    ref_logp: torch.Tensor | None = None,
    kl_coef: float = 0.0,
    kl_estimator: str = "k3",
    aggregation: str = "sequence",
    max_len: int | None = None,
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """Clipped policy-gradient loss of GRPO (Shao et al., 2024) with DAPO and Dr.GRPO options.

    Per token, with ratio ``ρ = exp(logp - old_logp)`` and the sequence's advantage ``A_b``:

        ℓ_bt = max(-A_b ρ_bt, -A_b clip(ρ_bt, 1 - ε_low, 1 + ε_high)) + β · KL_bt

    where ``KL_bt = kl_penalty(logp, ref_logp, kl_estimator)``; the loss is ``aggregate(ℓ, mask,
    aggregation)``. With ``ρ = 1`` and no KL, the "sequence" loss is ``-mean(A)``.

    Args:
        logp: [B, T] current log-probs of the sampled tokens (carries the gradient).
        old_logp: [B, T] log-probs under the policy that sampled them (no gradient needed).
        advantages: [B] one advantage per completion (e.g. ``group_advantages``).
        mask: [B, T] 1/True for completion tokens, 0/False for padding.
        clip_eps: ε_low, lower clip ``1 - ε_low``; also the upper one unless ``clip_eps_high`` is set.
        clip_eps_high: ε_high of DAPO's clip-higher (e.g. 0.28); ``None`` means ``clip_eps``.
        ref_logp: [B, T] log-probs under the reference policy; needed when ``kl_coef > 0``.
        kl_coef: β, weight of the per-token KL penalty.
        kl_estimator: "k1", "k2" or "k3" (see ``kl_penalty``).
        aggregation: "sequence" (GRPO), "token" (DAPO) or "dr_grpo" (see ``aggregate``).
        max_len: Dr.GRPO's constant normaliser; defaults to ``T``.
    Returns:
        ``(loss, stats)``; ``stats`` holds detached scalars over mask tokens: ``clip_fraction``
        (tokens whose clipped term is active, so their gradient is zero), ``ratio_mean`` and,
        when ``ref_logp`` is given, ``kl`` (mean per-token estimate).
    """
    _check_tensor("logp", logp, ndim=2)
    _check_tensor("old_logp", old_logp, ndim=2)
    _check_same_shape(("logp", "old_logp"), (logp, old_logp))
    m = _check_mask(mask, logp)
    _check_tensor("advantages", advantages, ndim=1)
    if advantages.shape[0] != logp.shape[0]:
        raise ValueError(f"advantages has shape {tuple(advantages.shape)} but logp has {logp.shape[0]} rows")
    eps_low = check_scalar("clip_eps", clip_eps, low=0.0, high=1.0, low_open=True, high_open=True)
    eps_high = eps_low if clip_eps_high is None else check_scalar(
        "clip_eps_high", clip_eps_high, low=0.0, low_open=True)
    kl_coef = check_scalar("kl_coef", kl_coef, low=0.0)
    _check_choice("aggregation", aggregation, AGGREGATIONS)
    _check_choice("kl_estimator", kl_estimator, KL_ESTIMATORS)
    if ref_logp is not None:
        _check_tensor("ref_logp", ref_logp, ndim=2)
        _check_same_shape(("logp", "ref_logp"), (logp, ref_logp))
    elif kl_coef > 0:
        raise ValueError("ref_logp is required when kl_coef > 0")

    valid = m > 0
    log_ratio = torch.where(valid, logp - old_logp, torch.zeros_like(logp))  # [B, T], 0 on padding
    ratio = torch.exp(log_ratio)
    adv = advantages.to(logp.dtype)[:, None]  # [B, 1]
    unclipped = -adv * ratio
    clipped = -adv * torch.clamp(ratio, 1.0 - eps_low, 1.0 + eps_high)
    per_token = torch.maximum(unclipped, clipped)  # [B, T]

    stats: dict[str, torch.Tensor] = {}
    if ref_logp is not None:
        ref = torch.where(valid, ref_logp, logp.detach())  # padding: KL term exactly 0
        kl = kl_penalty(logp, ref, kl_estimator)  # [B, T]
        if kl_coef > 0:
            per_token = per_token + kl_coef * kl
        stats["kl"] = _masked_mean(kl.detach(), m)
    loss = aggregate(per_token, m, aggregation, max_len)

    with torch.no_grad():
        is_clipped = ((ratio < 1.0 - eps_low) & (adv < 0)) | ((ratio > 1.0 + eps_high) & (adv > 0))
        stats["clip_fraction"] = _masked_mean(is_clipped.to(logp.dtype), m)
        stats["ratio_mean"] = _masked_mean(ratio, m)
    return loss, stats


def rloo_loss(
    logp: torch.Tensor, advantages: torch.Tensor, mask: torch.Tensor
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """REINFORCE with a leave-one-out baseline (RLOO; Ahmadian et al., 2024).

    The whole completion is one action: with ``A_b = r_b - mean_{j≠b in b's group} r_j``
    (``rapidrl.kernels.llm_ops.rloo_advantages``), the loss is

        L = -(1/B) Σ_b A_b · Σ_t m_bt logp_bt.

    A KL penalty, when wanted, is folded into the rewards before the advantages
    (``r_b - β · sequence_kl``), as in the paper, so it does not appear here.

    Args:
        logp: [B, T] log-probs of the sampled tokens (carries the gradient).
        advantages: [B] leave-one-out advantages.
        mask: [B, T] 1/True for completion tokens.
    Returns:
        ``(loss, stats)`` with ``stats["seq_logp_mean"]``, the mean sequence log-prob (detached).
    """
    _check_tensor("logp", logp, ndim=2)
    m = _check_mask(mask, logp)
    _check_tensor("advantages", advantages, ndim=1)
    if advantages.shape[0] != logp.shape[0]:
        raise ValueError(f"advantages has shape {tuple(advantages.shape)} but logp has {logp.shape[0]} rows")
    seq_logp = (logp * m).sum(dim=1)  # [B]
    loss = -(advantages.to(logp.dtype) * seq_logp).mean()
    return loss, {"seq_logp_mean": seq_logp.detach().mean()}


def dpo_loss(
    policy_chosen_logp: torch.Tensor,
    policy_rejected_logp: torch.Tensor,
    ref_chosen_logp: torch.Tensor,
    ref_rejected_logp: torch.Tensor,
    *,
    beta: float = 0.1,
    loss_type: str = "sigmoid",
    label_smoothing: float = 0.0,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Direct Preference Optimization loss (Rafailov et al., 2023) and its IPO variant.

    Inputs are sequence log-probs (sum over the response tokens). With the margin

        h = (logπ(y_w) - logπ_ref(y_w)) - (logπ(y_l) - logπ_ref(y_l)),

    - ``"sigmoid"`` (DPO, with conservative label smoothing ε):
      ``L = -(1-ε) log σ(β h) - ε log σ(-β h)``; at ``h = 0`` it is ``log 2``;
    - ``"ipo"`` (Azar et al., 2023): ``L = (h - 1/(2β))²``.

    The loss is the mean over the batch.

    Args:
        policy_chosen_logp, policy_rejected_logp: [B] policy log-probs of the preferred
            and dispreferred responses (carry the gradient).
        ref_chosen_logp, ref_rejected_logp: [B] the same under the frozen reference.
        beta: β > 0, the inverse temperature (IPO: the regularisation strength).
        loss_type: "sigmoid" or "ipo".
        label_smoothing: ε in [0, 0.5), probability that a label is flipped ("sigmoid" only).
    Returns:
        ``(loss, chosen_rewards [B], rejected_rewards [B])``: the implicit rewards
        ``β (logπ - logπ_ref)`` of each response, detached.
    """
    names = ("policy_chosen_logp", "policy_rejected_logp", "ref_chosen_logp", "ref_rejected_logp")
    tensors = (policy_chosen_logp, policy_rejected_logp, ref_chosen_logp, ref_rejected_logp)
    for n, t in zip(names, tensors):
        _check_tensor(n, t, ndim=1)
    _check_same_shape(names, tensors)
    beta = check_scalar("beta", beta, low=0.0, low_open=True)
    _check_choice("loss_type", loss_type, DPO_LOSS_TYPES)
    label_smoothing = check_scalar("label_smoothing", label_smoothing, low=0.0, high=0.5, high_open=True)
    if loss_type == "ipo" and label_smoothing != 0.0:
        raise ValueError("label_smoothing applies to loss_type='sigmoid' only")

    chosen_logratio = policy_chosen_logp - ref_chosen_logp  # [B]
    rejected_logratio = policy_rejected_logp - ref_rejected_logp  # [B]
    h = chosen_logratio - rejected_logratio  # [B]
    if loss_type == "sigmoid":
        losses = -(1.0 - label_smoothing) * F.logsigmoid(beta * h) - label_smoothing * F.logsigmoid(-beta * h)
    else:
        losses = (h - 1.0 / (2.0 * beta)) ** 2
    return losses.mean(), beta * chosen_logratio.detach(), beta * rejected_logratio.detach()


def sequence_logprobs(
    logits: torch.Tensor, tokens: torch.Tensor, mask: torch.Tensor | None = None
) -> torch.Tensor:
    """Log-probability of each token under its logits: ``log softmax(logits[b, t])[tokens[b, t]]``.

    Computed as ``logits[b, t, y] - logsumexp(logits[b, t])`` one sequence at a time, so the only
    temporaries are [T, V] in the logits' dtype (no [B, T, V] log-softmax or float64 copy; the
    approach of TRL's ``selective_log_softmax``). Half-precision logits, for which logsumexp is
    inaccurate, go through a per-sequence float32 ``log_softmax`` and give float32 results.
    The caller aligns positions: for a causal LM, pass ``logits[:, :-1]`` and ``tokens[:, 1:]``.

    Args:
        logits: [B, T, V] floating-point scores.
        tokens: [B, T] integer token ids in ``[0, V)`` wherever ``mask`` is set.
        mask: optional [B, T] bool/0-1; masked-out positions may hold any id and get log-prob 0.
    Returns:
        [B, T] log-probs, in the logits' dtype (float32 for float16/bfloat16 logits).
    """
    _check_tensor("logits", logits, ndim=3)
    _check_tensor("tokens", tokens, ndim=2, floating=False)
    if tokens.is_floating_point() or tokens.dtype == torch.bool or tokens.is_complex():
        raise TypeError(f"tokens must be an integer tensor, got {tokens.dtype}")
    if tokens.shape != logits.shape[:2]:
        raise ValueError(f"tokens has shape {tuple(tokens.shape)} but logits has {tuple(logits.shape)}")
    valid = None
    if mask is not None:
        valid = _check_mask(mask, tokens.to(logits.dtype), "tokens") > 0
        tokens = torch.where(valid, tokens, torch.zeros_like(tokens))
    vocab = logits.shape[-1]
    if bool(((tokens < 0) | (tokens >= vocab)).any()):
        raise ValueError(f"tokens must lie in [0, {vocab}) at unmasked positions")
    index = tokens.long().unsqueeze(-1)  # [B, T, 1]
    if logits.dtype in (torch.float32, torch.float64):
        picked = logits.gather(-1, index).squeeze(-1)  # [B, T]
        logp = picked - torch.stack([torch.logsumexp(row, dim=-1) for row in logits])  # [B, T]
    else:
        logp = torch.stack([torch.log_softmax(row.float(), dim=-1).gather(-1, idx).squeeze(-1)
                            for row, idx in zip(logits, index)])  # [B, T] float32
    if valid is not None:
        logp = torch.where(valid, logp, torch.zeros_like(logp))
    return logp
