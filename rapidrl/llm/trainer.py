"""GRPO post-training of a causal language model, and a DPO update step.

One GRPO iteration, top to bottom (``GRPOTrainer.step``):

1. repeat every prompt ``group_size`` times and sample completions from the policy;
2. score them with ``reward_fn(prompts, completions) -> rewards [B*G]``;
3. group-relative advantages on the CPU, ``rapidrl.kernels.llm_ops.group_advantages``
   (``(r - mean_group) / (std_group + eps)``, or Dr.GRPO's unscaled ``r - mean_group``);
4. log-probs of the sampled tokens under the sampling policy (``old``) and the reference;
5. ``inner_epochs`` passes of minibatch updates of ``grpo_loss`` (clipped ratio + KL penalty);
6. one log record: reward, KL, clip fraction, completion length, loss, grad norm, and the time of
   the iteration and of its phases (sampling; reward + advantages; log-probs + updates).

The policy is any ``nn.Module`` whose forward takes ``(tokens, attention_mask=, position_ids=)`` and
returns logits ``[B, T, V]`` or an object with ``.logits`` (Hugging Face causal LMs qualify;
``transformers`` is never imported). Dropout should be off (``model.eval()``) so that the old and new
log-probs of an unchanged policy agree.
"""

from __future__ import annotations

import copy
import os
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import torch
from torch import nn

from rapidrl.kernels.llm_ops import group_advantages
from rapidrl.kernels.validation import check_int, check_scalar
from rapidrl.llm.losses import AGGREGATIONS, KL_ESTIMATORS, dpo_loss, grpo_loss, sequence_logprobs
from rapidrl.llm.tiny import causal_logits, generate

GenerateFn = Callable[..., torch.Tensor]
RewardFn = Callable[[object, object], object]


@dataclass
class GRPOConfig:
    """Hyperparameters of ``GRPOTrainer``; every field is checked in ``__post_init__``."""

    group_size: int = 8
    """G, completions sampled per prompt (≥ 2: advantages are relative to the group)."""
    lr: float = 1e-5
    """Adam learning rate (used when the trainer builds the optimizer)."""
    clip_eps: float = 0.2
    """ε of the clipped ratio ``clip(ρ, 1-ε, 1+ε)``."""
    clip_eps_high: float | None = None
    """DAPO clip-higher upper ε (e.g. 0.28); ``None`` = ``clip_eps``."""
    kl_coef: float = 0.0
    """β, weight of the per-token KL penalty to the reference policy (0 = no penalty, no reference)."""
    kl_estimator: str = "k3"
    """KL estimator in the loss: "k1", "k2" or "k3" (Schulman)."""
    inner_epochs: int = 1
    """Passes of gradient updates over each batch of completions (μ in the GRPO paper)."""
    minibatch_size: int | None = None
    """Completions per gradient step; ``None`` = the whole batch (one step per epoch)."""
    pack: bool = False
    """Pack each micro-batch's prompt+completion sequences into rows (first-fit decreasing, block-diagonal
    attention, positions restarting per sequence) for the log-prob passes, so no compute goes to padding.
    Needs a model that accepts a [P, L, L] attention mask (``TinyCausalLM`` does); same log-probs otherwise."""
    micro_batch_size: int | None = None
    """Completions per forward/backward pass: a minibatch is split into micro-batches whose gradients are
    accumulated (weighted so the step equals the whole minibatch's); ``None`` = one pass per minibatch."""
    max_new_tokens: int = 16
    """Completion budget N; also Dr.GRPO's constant normaliser."""
    temperature: float = 1.0
    """Sampling temperature (> 0)."""
    scale: str = "std"
    """Advantages: "std" (GRPO, divide by the group std), "none" (Dr.GRPO: r - group mean) or "rloo" (RLOO,
    Ahmadian et al. 2024: r minus the mean of the other G-1 completions = G/(G-1) (r - group mean))."""
    aggregation: str = "sequence"
    """Token-to-batch reduction: "sequence" (GRPO), "token" (DAPO) or "dr_grpo"."""
    max_grad_norm: float | None = 1.0
    """Gradient-norm clip; ``None`` = no clipping (the norm is still logged)."""
    eos_token_id: int | None = None
    """Tokens after the first EOS are masked out (the EOS itself counts); ``None`` = fixed length."""
    pad_token_id: int = 0
    """Id used to left-pad prompts of unequal length and to blank tokens after EOS."""
    seed: int = 0
    """Seed of the sampling and minibatch-shuffling generator."""

    def __post_init__(self):
        check_int("group_size", self.group_size, low=2)
        check_scalar("lr", self.lr, low=0.0, low_open=True)
        check_scalar("clip_eps", self.clip_eps, low=0.0, high=1.0, low_open=True, high_open=True)
        if self.clip_eps_high is not None:
            check_scalar("clip_eps_high", self.clip_eps_high, low=0.0, low_open=True)
        check_scalar("kl_coef", self.kl_coef, low=0.0)
        if self.kl_estimator not in KL_ESTIMATORS:
            raise ValueError(f"kl_estimator must be one of {KL_ESTIMATORS}, got {self.kl_estimator!r}")
        check_int("inner_epochs", self.inner_epochs, low=1)
        if self.minibatch_size is not None:
            check_int("minibatch_size", self.minibatch_size, low=1)
        if self.micro_batch_size is not None:
            check_int("micro_batch_size", self.micro_batch_size, low=1)
        check_int("max_new_tokens", self.max_new_tokens, low=1)
        check_scalar("temperature", self.temperature, low=0.0, low_open=True)
        if self.scale not in ("std", "none", "rloo"):
            raise ValueError(f"scale must be 'std', 'none' or 'rloo', got {self.scale!r}")
        if self.aggregation not in AGGREGATIONS:
            raise ValueError(f"aggregation must be one of {AGGREGATIONS}, got {self.aggregation!r}")
        if self.max_grad_norm is not None:
            check_scalar("max_grad_norm", self.max_grad_norm, low=0.0, low_open=True)
        if self.eos_token_id is not None:
            check_int("eos_token_id", self.eos_token_id, low=0)
        check_int("pad_token_id", self.pad_token_id, low=0)
        check_int("seed", self.seed)


def completion_advantages(rewards: np.ndarray, group_size: int, scale: str) -> np.ndarray:
    """[M] advantages of rewards [M] whose consecutive runs of ``group_size`` are one prompt's completions.

    scale "std" (GRPO): (r - mean_g) / (std_g + eps); "none" (Dr.GRPO): r - mean_g; "rloo" (RLOO): r minus
    the mean of the group's other G-1 rewards, which is G/(G-1) (r - mean_g).
    """
    if scale == "rloo":
        adv = group_advantages(rewards, group_size=group_size, scale="none")
        adv *= np.float32(group_size / (group_size - 1))
        return adv
    return group_advantages(rewards, group_size=group_size, scale=scale)


def completion_mask(completions: torch.Tensor, eos_token_id: int | None) -> torch.Tensor:
    """[B, N] bool: True up to and including the first ``eos_token_id`` of each row (all True if None)."""
    if eos_token_id is None:
        return torch.ones_like(completions, dtype=torch.bool)
    is_eos = (completions == eos_token_id).long()  # [B, N]
    eos_before = is_eos.cumsum(1) - is_eos  # EOS tokens strictly before t
    return eos_before == 0


def completion_logprobs(model: nn.Module, prompts: torch.Tensor, prompt_mask: torch.Tensor,
                        completions: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """[B, N] log-probs of ``completions`` [B, N] after left-padded ``prompts`` [B, P] (0 where ``mask`` is off)."""
    tokens = torch.cat([prompts, completions], dim=1)  # [B, P+N]
    attn = torch.cat([prompt_mask.to(prompts.dtype), torch.ones_like(completions)], dim=1)  # [B, P+N]
    position_ids = (attn.cumsum(1) - 1).clamp(min=0)
    p = prompts.shape[1]
    logits = causal_logits(model, tokens, attn, position_ids)[:, p - 1:-1]  # [B, N, V] predicts completions
    return sequence_logprobs(logits, completions, mask)


def packed_completion_logprobs(model: nn.Module, prompts: torch.Tensor, prompt_mask: torch.Tensor,
                               completions: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """``completion_logprobs`` with the sequences packed into rows (``rapidrl.llm.packing``): each sequence is
    its real prompt tokens (padding dropped) and its completion up to the last masked-in token. [B, N]."""
    from rapidrl.llm.packing import pack_sequences

    b, n = completions.shape
    prompt_len = prompt_mask.sum(1)  # [B]
    comp_len = mask.sum(1)  # [B] (mask is a prefix: up to and including the first EOS)
    seqs = [torch.cat([prompts[i, prompts.shape[1] - int(prompt_len[i]):], completions[i, :int(comp_len[i])]])
            for i in range(b)]
    packed = pack_sequences(seqs, max_len=prompts.shape[1] + n)
    dev = prompts.device
    logits = causal_logits(model, packed.tokens.to(dev), packed.attention_mask().to(dev),
                           packed.position_ids.to(dev))  # [R, L, V]
    j = torch.arange(n, device=dev)  # [N]
    col = (packed.start.to(dev) + prompt_len - 1)[:, None] + j[None, :]  # [B, N]: logits predicting token j
    col = torch.where(mask.bool(), col, torch.zeros_like(col))
    gathered = logits[packed.row.to(dev)[:, None], col]  # [B, N, V]
    return sequence_logprobs(gathered, completions, mask)


class GRPOTrainer:
    """Group Relative Policy Optimization (Shao et al., 2024) for a causal LM.

    Args:
        policy: the model being trained (see the module docstring for the interface).
        reward_fn: ``reward_fn(prompts, completions) -> [B*G]`` rewards (array, tensor or list).
            ``prompts`` holds each prompt repeated G times in a row, in the type it was given
            (a [B*G, P] tensor, or a list); ``completions`` is a [B*G, N] int64 tensor with tokens
            after the first EOS set to ``pad_token_id``, or, when ``tokenizer`` is set, a list of
            decoded strings (the text before the first EOS).
        ref_policy: frozen reference for the KL penalty; defaults to a deep copy of the initial
            policy when ``config.kl_coef > 0``. When given with ``kl_coef = 0`` the KL is logged only.
        tokenizer: optional object with ``encode(str) -> list[int]`` and ``decode(list[int]) -> str``
            (a Hugging Face tokenizer works); then prompts may be strings and rewards see text.
        generate_fn: ``generate_fn(policy, prompts [B, P], max_new_tokens, *, temperature,
            generator, attention_mask) -> [B, N]``; default ``rapidrl.llm.tiny.generate``.
        config: ``GRPOConfig``.
        optimizer: defaults to Adam over the policy's trainable parameters (``requires_grad``: with LoRA
            adapters from ``peft`` only the adapters train), ``lr=config.lr``.
        callback: called with each log record after every iteration.
        loggers: metric sinks of ``rapidrl.train.loggers`` (CSV, TensorBoard, W&B, text): each gets
            ``log(record, step=iteration)`` after every iteration; the trainer does not close them.
    """

    def __init__(self, policy: nn.Module, reward_fn: RewardFn, *, ref_policy: nn.Module | None = None,
                 tokenizer=None, generate_fn: GenerateFn | None = None, config: GRPOConfig | None = None,
                 optimizer: torch.optim.Optimizer | None = None,
                 callback: Callable[[dict], None] | None = None, loggers: list | None = None):
        if not isinstance(policy, nn.Module):
            raise TypeError(f"policy must be a torch.nn.Module, got {type(policy).__name__}")
        if not callable(reward_fn):
            raise TypeError("reward_fn must be callable")
        self.config = config if config is not None else GRPOConfig()
        self.policy = policy
        self.reward_fn = reward_fn
        self.tokenizer = tokenizer
        self.generate_fn = generate_fn if generate_fn is not None else generate
        if ref_policy is None and self.config.kl_coef > 0:
            ref_policy = copy.deepcopy(policy)
        if ref_policy is not None:
            ref_policy.requires_grad_(False)
        self.ref_policy = ref_policy
        trainable = [p for p in policy.parameters() if p.requires_grad]
        if optimizer is None and not trainable:
            raise ValueError("policy has no trainable parameters (requires_grad is off everywhere)")
        self.optimizer = optimizer if optimizer is not None else torch.optim.Adam(trainable, lr=self.config.lr)
        self.callback = callback
        self.loggers = list(loggers or [])
        self.device = next(policy.parameters()).device
        self.generator = torch.Generator(device=self.device).manual_seed(self.config.seed)
        self.iteration = 0
        self.history: list[dict] = []

    # ------------------------------------------------------------------------------------------------
    # prompts and rewards

    def _encode_prompts(self, prompts) -> tuple[torch.Tensor, torch.Tensor]:
        """Prompts -> left-padded ids [B, P] and padding mask [B, P] on the policy's device."""
        if isinstance(prompts, torch.Tensor):
            if prompts.ndim != 2 or prompts.is_floating_point() or 0 in prompts.shape:
                raise ValueError(f"a prompt tensor must be non-empty integer [B, P], got {prompts.dtype} "
                                 f"{tuple(prompts.shape)}")
            ids = prompts.to(self.device, torch.long)
            return ids, torch.ones_like(ids)
        if not isinstance(prompts, (list, tuple)) or len(prompts) == 0:
            raise ValueError("prompts must be a non-empty [B, P] tensor or list")
        if isinstance(prompts[0], str):
            if self.tokenizer is None:
                raise TypeError("string prompts need a tokenizer")
            prompts = [self.tokenizer.encode(p) for p in prompts]
        seqs = [torch.as_tensor(p, dtype=torch.long) for p in prompts]
        if any(s.ndim != 1 or s.numel() == 0 for s in seqs):
            raise ValueError("every prompt must be a non-empty 1-D sequence of ids")
        width = max(s.numel() for s in seqs)
        ids = torch.full((len(seqs), width), self.config.pad_token_id, dtype=torch.long)
        mask = torch.zeros((len(seqs), width), dtype=torch.long)
        for i, s in enumerate(seqs):
            ids[i, width - s.numel():] = s
            mask[i, width - s.numel():] = 1
        return ids.to(self.device), mask.to(self.device)

    def _rewards(self, prompts, completions: torch.Tensor, mask: torch.Tensor) -> np.ndarray:
        """Call ``reward_fn`` on the repeated prompts; float32 rewards [B*G] (finiteness: the kernel checks)."""
        g = self.config.group_size
        if isinstance(prompts, torch.Tensor):
            rep_prompts = prompts.repeat_interleave(g, dim=0)
        else:
            rep_prompts = [p for p in prompts for _ in range(g)]
        shown = torch.where(mask, completions, torch.full_like(completions, self.config.pad_token_id))
        if self.tokenizer is not None:  # text up to, not including, the first EOS
            keep = mask if self.config.eos_token_id is None else mask & (completions != self.config.eos_token_id)
            shown = [self.tokenizer.decode(row[k].tolist()) for row, k in zip(completions.cpu(), keep.cpu())]
        rewards = self.reward_fn(rep_prompts, shown)
        if isinstance(rewards, torch.Tensor):
            rewards = rewards.detach().cpu().numpy()
        rewards = np.ascontiguousarray(rewards, dtype=np.float32)
        if rewards.shape != (completions.shape[0],):
            raise ValueError(f"reward_fn must return {completions.shape[0]} rewards (one per completion), "
                             f"got shape {rewards.shape}")
        return rewards

    # ------------------------------------------------------------------------------------------------
    # one iteration

    def step(self, prompts) -> dict:
        """Sample, score and update once on ``prompts`` (B prompts); return the log record."""
        cfg = self.config
        t0 = time.perf_counter()
        prompt_ids, prompt_mask = self._encode_prompts(prompts)
        prompt_ids = prompt_ids.repeat_interleave(cfg.group_size, dim=0)  # [M, P], M = B*G
        prompt_mask = prompt_mask.repeat_interleave(cfg.group_size, dim=0)  # [M, P]

        # 1. sample
        with torch.no_grad():
            completions = self.generate_fn(self.policy, prompt_ids, cfg.max_new_tokens,
                                           temperature=cfg.temperature, generator=self.generator,
                                           attention_mask=prompt_mask)  # [M, N]
        mask = completion_mask(completions, cfg.eos_token_id)  # [M, N]

        t_generated = time.perf_counter()

        # 2-3. rewards -> group advantages (NumPy kernel, zero-copy into torch)
        rewards = self._rewards(prompts, completions, mask)  # [M]
        adv = completion_advantages(rewards, cfg.group_size, cfg.scale)  # [M]
        advantages = torch.from_numpy(adv).to(self.device)

        t_scored = time.perf_counter()

        # 4. log-probs of the sampling policy and of the reference (no gradient)
        m = prompt_ids.shape[0]
        mb = m if cfg.minibatch_size is None else min(cfg.minibatch_size, m)
        reuse_old = cfg.inner_epochs == 1 and mb == m  # single update: old = current, detached
        logprobs_fn = packed_completion_logprobs if cfg.pack else completion_logprobs
        with torch.no_grad():
            old_logp = None if reuse_old else logprobs_fn(
                self.policy, prompt_ids, prompt_mask, completions, mask)
            ref_logp = None if self.ref_policy is None else logprobs_fn(
                self.ref_policy, prompt_ids, prompt_mask, completions, mask)

        # 5. clipped updates
        params = [p for group in self.optimizer.param_groups for p in group["params"]]
        sums = {"loss": 0.0, "clip_fraction": 0.0, "ratio_mean": 0.0, "kl": 0.0, "grad_norm": 0.0}
        updates = 0
        for _ in range(cfg.inner_epochs):
            order = torch.randperm(m, generator=self.generator, device=self.device)
            for start in range(0, m, mb):
                idx = order[start:start + mb]
                micro = len(idx) if cfg.micro_batch_size is None else min(cfg.micro_batch_size, len(idx))
                tokens_in_mb = mask[idx].sum().clamp(min=1)
                self.optimizer.zero_grad(set_to_none=False)  # in place, the one rule (rapidrl.train.ddp)
                step_loss, step_stats = 0.0, dict.fromkeys(("clip_fraction", "ratio_mean", "kl"), 0.0)
                for u in range(0, len(idx), micro):
                    sub = idx[u:u + micro]
                    # weight of this micro-batch in the minibatch's loss: its share of the tokens ("token"
                    # aggregation) or of the sequences, so the accumulated gradient is the minibatch's
                    weight = (mask[sub].sum() / tokens_in_mb if cfg.aggregation == "token"
                              else torch.tensor(len(sub) / len(idx)))
                    logp = logprobs_fn(self.policy, prompt_ids[sub], prompt_mask[sub],
                                       completions[sub], mask[sub])  # [micro, N]
                    old = logp.detach() if reuse_old else old_logp[sub]
                    loss, stats = grpo_loss(
                        logp, old, advantages[sub], mask[sub], clip_eps=cfg.clip_eps,
                        clip_eps_high=cfg.clip_eps_high,
                        ref_logp=None if ref_logp is None else ref_logp[sub], kl_coef=cfg.kl_coef,
                        kl_estimator=cfg.kl_estimator, aggregation=cfg.aggregation, max_len=cfg.max_new_tokens)
                    if not torch.isfinite(loss):
                        raise FloatingPointError(f"non-finite GRPO loss at iteration {self.iteration}")
                    (loss * weight).backward()
                    step_loss += float(loss.detach()) * float(weight)
                    for k in step_stats:
                        step_stats[k] += float(stats.get(k, float("nan"))) * float(weight)
                norm = torch.nn.utils.clip_grad_norm_(
                    params, cfg.max_grad_norm if cfg.max_grad_norm is not None else float("inf"))
                self.optimizer.step()
                sums["loss"] += step_loss
                sums["grad_norm"] += float(norm)
                for k, v in step_stats.items():
                    sums[k] += v
                updates += 1

        # 6. log
        record = {
            "iteration": self.iteration,
            "charts/reward": float(rewards.mean()),
            "charts/reward_std": float(rewards.std()),
            "charts/completion_length": float(mask.sum(dim=1).float().mean()),
            "losses/loss": sums["loss"] / updates,
            "losses/kl": sums["kl"] / updates,
            "losses/clipfrac": sums["clip_fraction"] / updates,
            "losses/ratio_mean": sums["ratio_mean"] / updates,
            "losses/grad_norm": sums["grad_norm"] / updates,
            "time/generate_s": t_generated - t0,
            "time/reward_s": t_scored - t_generated,
            "time/update_s": time.perf_counter() - t_scored,
            "time/iteration_s": time.perf_counter() - t0,
        }
        self.history.append(record)
        for logger in self.loggers:
            logger.log({k: v for k, v in record.items() if k != "iteration"}, step=self.iteration)
        self.iteration += 1
        if self.callback is not None:
            self.callback(record)
        return record

    # ------------------------------------------------------------------------------------------------
    # persistence

    def state_dict(self) -> dict:
        """Everything an exact resume needs: the trained weights (only the trainable ones when some are
        frozen, e.g. LoRA adapters), the reference policy's weights (when there is one), optimizer state,
        sampling generator, iteration, history and config."""
        frozen = any(not p.requires_grad for p in self.policy.parameters())
        weights = ({n: p.detach().clone() for n, p in self.policy.named_parameters() if p.requires_grad}
                   if frozen else self.policy.state_dict())
        ref = None if self.ref_policy is None else self.ref_policy.state_dict()
        return {"format": "rapidrl-grpo", "version": 1, "policy": weights, "trainable_only": frozen, "ref_policy": ref,
                "optimizer": self.optimizer.state_dict(), "generator": self.generator.get_state(),
                "iteration": self.iteration, "history": [dict(r) for r in self.history],
                "config": asdict(self.config)}

    def save(self, path) -> None:
        """Write ``state_dict()`` atomically to ``path`` (temp file + rename)."""
        path = Path(path)
        tmp = path.with_name(path.name + ".tmp")
        torch.save(self.state_dict(), tmp)
        os.replace(tmp, path)

    def load(self, path) -> None:
        """Restore a ``save``d state into this trainer (built with the same policy architecture and config):
        training then continues exactly as if it had not stopped. Loads with ``weights_only=True``."""
        state = torch.load(path, map_location=self.device, weights_only=True)
        if not isinstance(state, dict) or state.get("format") != "rapidrl-grpo":
            raise ValueError(f"{path}: not a GRPOTrainer checkpoint")
        if state["config"] != asdict(self.config):
            diff = sorted(k for k in state["config"] if state["config"][k] != asdict(self.config).get(k))
            raise ValueError(f"{path}: saved with a different GRPOConfig (fields {diff})")
        if state["trainable_only"]:
            missing = {n for n, p in self.policy.named_parameters() if p.requires_grad} - set(state["policy"])
            if missing:
                raise ValueError(f"{path}: no saved weights for trainable parameters {sorted(missing)[:5]}")
            self.policy.load_state_dict(state["policy"], strict=False)
        else:
            self.policy.load_state_dict(state["policy"])
        if (state["ref_policy"] is None) != (self.ref_policy is None):
            raise ValueError(f"{path}: the checkpoint {'has no' if state['ref_policy'] is None else 'has a'} "
                             "reference policy and this trainer does not match")
        if self.ref_policy is not None:
            self.ref_policy.load_state_dict(state["ref_policy"])
        self.optimizer.load_state_dict(state["optimizer"])
        self.generator.set_state(state["generator"])
        self.iteration = state["iteration"]
        self.history = list(state["history"])

    def train(self, prompts, iterations: int) -> list[dict]:
        """Run ``iterations`` steps. ``prompts`` is a fixed batch, or ``prompts(iteration) -> batch``.

        Returns the log records of these iterations (also appended to ``self.history``).
        """
        iterations = check_int("iterations", iterations, low=1)
        records = []
        for _ in range(iterations):
            batch = prompts(self.iteration) if callable(prompts) else prompts
            records.append(self.step(batch))
        return records


def response_logprobs(model: nn.Module, tokens: torch.Tensor, response_mask: torch.Tensor) -> torch.Tensor:
    """[B] sum of log-probs of the response tokens of right-padded ``tokens`` [B, T].

    ``response_mask`` [B, T] marks the tokens to score (the response, not the prompt or padding);
    position 0 cannot be scored (nothing predicts it).
    """
    logits = causal_logits(model, tokens)[:, :-1]  # [B, T-1, V] predicts tokens[:, 1:]
    target_mask = response_mask[:, 1:]
    return sequence_logprobs(logits, tokens[:, 1:], target_mask).sum(dim=1)


def _pad_right(x: torch.Tensor, width: int) -> torch.Tensor:
    return torch.nn.functional.pad(x, (0, width - x.shape[1]))


def dpo_step(policy: nn.Module, ref_policy: nn.Module, optimizer: torch.optim.Optimizer,
             chosen: torch.Tensor, chosen_mask: torch.Tensor, rejected: torch.Tensor,
             rejected_mask: torch.Tensor, *, beta: float = 0.1, loss_type: str = "sigmoid",
             label_smoothing: float = 0.0, max_grad_norm: float | None = 1.0) -> dict:
    """One DPO update on a batch of preference pairs (chosen and rejected in one forward).

    Args:
        policy: trained causal LM; ``ref_policy``: frozen reference (no gradient is taken).
        optimizer: optimizer of ``policy``.
        chosen, rejected: [B, Tc], [B, Tr] right-padded prompt+response ids.
        chosen_mask, rejected_mask: same shapes, 1 on response tokens.
        beta, loss_type, label_smoothing: see ``dpo_loss``.
        max_grad_norm: gradient-norm clip, ``None`` for none.
    Returns:
        ``{"loss", "chosen_reward", "rejected_reward", "margin", "accuracy"}`` (batch means;
        accuracy = fraction of pairs whose implicit reward prefers the chosen response).
    """
    if chosen.shape != chosen_mask.shape or rejected.shape != rejected_mask.shape:
        raise ValueError("chosen/rejected and their masks must have equal shapes")
    if chosen.shape[0] != rejected.shape[0]:
        raise ValueError(f"chosen has {chosen.shape[0]} pairs but rejected has {rejected.shape[0]}")
    b = chosen.shape[0]
    width = max(chosen.shape[1], rejected.shape[1])
    tokens = torch.cat([_pad_right(chosen, width), _pad_right(rejected, width)])  # [2B, T]
    masks = torch.cat([_pad_right(chosen_mask, width), _pad_right(rejected_mask, width)])  # [2B, T]
    with torch.no_grad():
        ref = response_logprobs(ref_policy, tokens, masks)  # [2B]
    logp = response_logprobs(policy, tokens, masks)  # [2B]
    loss, chosen_r, rejected_r = dpo_loss(logp[:b], logp[b:], ref[:b], ref[b:], beta=beta,
                                          loss_type=loss_type, label_smoothing=label_smoothing)
    if not torch.isfinite(loss):
        raise FloatingPointError("non-finite DPO loss")
    optimizer.zero_grad(set_to_none=False)  # in place, the one rule (rapidrl.train.ddp)
    loss.backward()
    if max_grad_norm is not None:
        torch.nn.utils.clip_grad_norm_(policy.parameters(), max_grad_norm)
    optimizer.step()
    return {"loss": loss.item(), "chosen_reward": float(chosen_r.mean()),
            "rejected_reward": float(rejected_r.mean()), "margin": float((chosen_r - rejected_r).mean()),
            "accuracy": float((chosen_r > rejected_r).float().mean())}
