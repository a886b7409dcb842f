"""LLM post-training suite: the GRPO trainer's numeric path, its torch losses, and one GRPO step.

Cases (contenders: ``rapidrl``, ``numpy``, ``torch`` = TRL-style PyTorch code, ``rlox``):

- ``llm/group_advantages/f32/BxG``: rewards as a reward function hands them over (flat float32
  [B*G] on the CPU) to advantages as a torch tensor, the trainer's path. rapidrl runs the Numba kernel
  and wraps the result with ``torch.from_numpy``; TRL does view/mean/std/repeat_interleave on a
  tensor. rlox only takes float64, so it gets a float64 copy made before timing.
- ``llm/sequence_kl_k3/f32/BxT``: per-sequence sums of Schulman's k3 [B, T] -> [B], which is what
  rlox's ``compute_batch_token_kl_schulman_f32`` returns (its log-ratio has the opposite sign, so it
  gets ``(ref, logp)`` to compute the same numbers). Per-token KL [B, T] is in the kernels suite.
- ``llm/grpo_loss/f32/BxT``: forward + backward of the clipped GRPO loss with a k3 KL penalty;
  rapidrl's ``grpo_loss`` (with its argument checks) against the same maths as TRL writes it.
- ``llm/sequence_logprobs/BxTxV``: per-token log-probs from logits; rapidrl's gather - logsumexp
  against ``log_softmax(logits).gather`` (which materializes a second [B, T, V] tensor).
- ``llm/grpo_step/tiny/...``: one full ``GRPOTrainer.step`` (sample, reward, advantages, update) of a
  ``TinyCausalLM`` on the repeat-the-digit task of the docs; rapidrl only (no peer has a trainer).

Every contender's output is compared with rapidrl's before timing; mismatches become case notes.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np

from rapidrl.benchmarks.bench_kernels import group_adv_numpy, group_adv_trl
from rapidrl.benchmarks.harness import Case, Context

REPEATS = {"quick": 5, "full": 30}


def _llm(module: str = "rapidrl.llm"):
    """``rapidrl.llm`` (or a submodule), or None while it cannot be imported."""
    try:
        return importlib.import_module(module)
    except ImportError:
        return None


def _agree(case: Case, checks: dict[str, Callable[[], Any]], *, rtol: float, atol: float) -> None:
    """Run each contender's check once and note every output that differs from rapidrl's."""
    outputs = {}
    for name, fn in checks.items():
        if name in case.contenders:
            try:
                outputs[name] = np.asarray(fn(), dtype=np.float64)
            except Exception as exc:  # the timing loop reports the contender as failed
                case.notes.append(f"{name} check raised {type(exc).__name__}: {exc}")
    ref = outputs.get("rapidrl")
    for name, out in outputs.items():
        if ref is not None and name != "rapidrl" and not np.allclose(out, ref, rtol=rtol, atol=atol):
            err = float(np.max(np.abs(out - ref)))
            case.notes.append(f"{name} output differs from rapidrl (max abs diff {err:.3g})")


def _group_adv_case(ctx: Context, B: int, G: int) -> Case:
    rng = np.random.default_rng(0)
    rew = rng.random(B * G).astype(np.float32)  # [B*G] e.g. fraction-correct rewards
    case = Case(f"llm/group_advantages/f32/{B}x{G}", {}, params={"prompts": B, "group_size": G},
                items_per_call=B * G, item_unit="rewards")
    checks: dict[str, Callable[[], Any]] = {}
    torch = ctx.peer("torch")
    k = ctx.rapidrl("kernels")
    if k is not None and hasattr(k, "group_advantages") and torch is not None:
        case.contenders["rapidrl"] = lambda: torch.from_numpy(k.group_advantages(rew, G))
        checks["rapidrl"] = lambda: k.group_advantages(rew, G)
    if ctx.peer("numpy") is not None:
        case.contenders["numpy"] = lambda: group_adv_numpy(rew.reshape(B, G)).reshape(-1)
        checks["numpy"] = lambda: group_adv_numpy(rew.reshape(B, G)).reshape(-1)
    if torch is not None:
        t = torch.from_numpy(rew.copy())
        case.contenders["torch"] = lambda: group_adv_trl(t, G)
        checks["torch"] = lambda: group_adv_trl(t, G).numpy()
        case.notes.append("torch: TRL GRPOTrainer's view/mean/std/repeat_interleave code on a float32 tensor")
    rlox = ctx.peer("rlox")
    if rlox is not None:
        rew64 = rew.astype(np.float64)
        case.contenders["rlox"] = lambda: rlox.compute_batch_group_advantages(rew64, G)
        case.notes.append("rlox needs float64 input (converted before timing) and divides by the "
                          "population std (ddof=0), the others by the sample std; rlox not compared")
    _agree(case, checks, rtol=1e-4, atol=1e-5)
    return case


def _sequence_kl_case(ctx: Context, B: int, T: int) -> Case:
    rng = np.random.default_rng(1)
    logp = (-rng.random((B, T)) * 3).astype(np.float32)  # [B, T]
    ref = (logp + 0.1 * rng.standard_normal((B, T))).astype(np.float32)
    case = Case(f"llm/sequence_kl_k3/f32/{B}x{T}", {}, params={"B": B, "T": T},
                items_per_call=B * T, item_unit="tokens")
    checks: dict[str, Callable[[], Any]] = {}
    k = ctx.rapidrl("kernels")
    if k is not None and hasattr(k, "sequence_kl"):
        case.contenders["rapidrl"] = lambda: k.sequence_kl(logp, ref, estimator="k3", reduction="sum")
        checks["rapidrl"] = case.contenders["rapidrl"]

    def numpy_kl():
        d = ref - logp
        return (np.exp(d) - d - 1.0).sum(axis=1)

    if ctx.peer("numpy") is not None:
        case.contenders["numpy"] = numpy_kl
        checks["numpy"] = numpy_kl
    torch = ctx.peer("torch")
    if torch is not None:
        tl, tr = torch.from_numpy(logp), torch.from_numpy(ref)

        def trl_kl():
            d = tr - tl
            return (torch.exp(d) - d - 1).sum(dim=1)

        case.contenders["torch"] = trl_kl
        checks["torch"] = lambda: trl_kl().numpy()
    rlox = ctx.peer("rlox")
    if rlox is not None:
        fl, fr = logp.ravel(), ref.ravel()
        case.contenders["rlox"] = lambda: rlox.compute_batch_token_kl_schulman_f32(fr, fl, T)
        checks["rlox"] = case.contenders["rlox"]
        case.notes.append("rlox gets (ref, logp): its k3 uses exp(logp - ref), the opposite log-ratio")
    _agree(case, checks, rtol=1e-4, atol=1e-3)
    return case


def _grpo_loss_case(ctx: Context, B: int, T: int) -> Case | None:
    torch = ctx.peer("torch")
    losses = _llm("rapidrl.llm.losses")
    if torch is None:
        return None
    g = torch.Generator().manual_seed(2)
    logp0 = -3 * torch.rand(B, T, generator=g)
    old = logp0 + 0.1 * torch.randn(B, T, generator=g)
    ref = logp0 + 0.1 * torch.randn(B, T, generator=g)
    adv = torch.randn(B, generator=g)
    lengths = torch.randint(T // 2, T + 1, (B,), generator=g)
    mask = torch.arange(T)[None] < lengths[:, None]  # [B, T] bool
    logp = logp0.clone().requires_grad_(True)
    case = Case(f"llm/grpo_loss/f32/{B}x{T}", {}, params={"B": B, "T": T, "kl_coef": 0.04},
                items_per_call=B * T, item_unit="tokens")

    def rapidrl_step():
        logp.grad = None
        loss, _ = losses.grpo_loss(logp, old, adv, mask, ref_logp=ref, kl_coef=0.04)
        loss.backward()
        return loss

    def trl_step():  # TRL GRPOTrainer._compute_loss, loss_type="grpo", with its logged statistics
        logp.grad = None
        d = ref - logp
        per_token_kl = torch.exp(d) - d - 1
        coef_1 = torch.exp(logp - old)
        coef_2 = torch.clamp(coef_1, 1 - 0.2, 1 + 0.2)
        per_token_loss = -torch.min(coef_1 * adv[:, None], coef_2 * adv[:, None]) + 0.04 * per_token_kl
        m = mask.float()
        loss = ((per_token_loss * m).sum(-1) / m.sum(-1).clamp(min=1.0)).mean()
        loss.backward()
        with torch.no_grad():  # the statistics TRL logs (rapidrl's stats dict)
            clipped = ((coef_1 < 0.8) & (adv[:, None] < 0)) | ((coef_1 > 1.2) & (adv[:, None] > 0))
            _ = [(x * m).sum() / m.sum() for x in (clipped.float(), per_token_kl, coef_1)]
        return loss

    if losses is not None:
        case.contenders["rapidrl"] = rapidrl_step
    case.contenders["torch"] = trl_step
    _agree(case, {n: (lambda f=f: f().item()) for n, f in case.contenders.items()}, rtol=1e-5, atol=1e-6)
    return case


def _logprobs_case(ctx: Context, B: int, T: int, V: int) -> Case | None:
    torch = ctx.peer("torch")
    losses = _llm("rapidrl.llm.losses")
    if torch is None:
        return None
    g = torch.Generator().manual_seed(3)
    logits = torch.randn(B, T, V, generator=g)
    tokens = torch.randint(0, V, (B, T), generator=g)
    case = Case(f"llm/sequence_logprobs/{B}x{T}x{V}", {}, params={"B": B, "T": T, "V": V},
                items_per_call=B * T, item_unit="tokens")
    if losses is not None:
        case.contenders["rapidrl"] = lambda: losses.sequence_logprobs(logits, tokens)
    case.contenders["torch"] = lambda: torch.log_softmax(logits, -1).gather(-1, tokens[..., None]).squeeze(-1)
    case.notes.append("torch: log_softmax + gather (TRL's fallback), one extra [B, T, V] tensor per call")
    _agree(case, {n: (lambda f=f: f().numpy()) for n, f in case.contenders.items()}, rtol=1e-4, atol=1e-4)
    return case


def _grpo_step_case(ctx: Context, prompts: int, group: int, new_tokens: int, epochs: int) -> Case | None:
    torch = ctx.peer("torch")
    llm = _llm()
    if torch is None or llm is None:
        return None
    vocab = 10
    torch.manual_seed(0)
    model = llm.TinyCausalLM(vocab, d_model=32, n_layers=1, n_heads=2, max_len=1 + new_tokens)
    config = llm.GRPOConfig(group_size=group, lr=3e-3, max_new_tokens=new_tokens, kl_coef=0.01,
                            inner_epochs=epochs, minibatch_size=None if epochs == 1 else prompts * group // 2)
    trainer = llm.GRPOTrainer(model, lambda p, c: (c == p[:, :1]).float().mean(1), config=config)
    gen = torch.Generator().manual_seed(1)
    case = Case(f"llm/grpo_step/tiny/{prompts}x{group}x{new_tokens}/epochs{epochs}", {},
                params={"prompts": prompts, "group_size": group, "max_new_tokens": new_tokens,
                        "inner_epochs": epochs, "d_model": 32, "n_layers": 1, "vocab": vocab},
                items_per_call=prompts * group * new_tokens, item_unit="tokens")
    case.contenders["rapidrl"] = lambda: trainer.step(torch.randint(0, vocab, (prompts, 1), generator=gen))
    case.notes.append("one GRPOTrainer.step: sampling without KV cache, reward, kernel advantages, "
                      "reference forward, clipped update(s); no peer trainer is installed")
    return case


def cases(ctx: Context) -> Iterator[Case]:
    """All LLM cases; kernel sizes follow PERFORMANCE.md and the rlox benchmark pages."""
    for B, G in ((16, 4), (256, 16), (1024, 32)):
        yield _group_adv_case(ctx, B, G)
    for B, T in ((1, 128), (1, 8192), (32, 2048)):
        yield _sequence_kl_case(ctx, B, T)
    builders = [lambda: _grpo_loss_case(ctx, 32, 2048), lambda: _logprobs_case(ctx, 2, 256, 32768)]
    if not ctx.quick:
        builders.append(lambda: _grpo_loss_case(ctx, 256, 128))
    builders += [lambda: _grpo_step_case(ctx, 16, 8, 4, 1), lambda: _grpo_step_case(ctx, 16, 8, 16, 2)]
    for build in builders:  # built one at a time: only one case's tensors are alive
        case = build()
        if case is not None:
            yield case
