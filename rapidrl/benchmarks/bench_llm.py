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
  ``TinyCausalLM`` on the repeat-the-digit task of the docs; rapidrl only.

Extras: one GRPO step of the same random-init ``transformers`` Llama and batch with rapidrl's trainer and with
TRL's ``GRPOTrainer`` (when TRL is installed), each in its own process at 1 thread and at all cores.

Every contender's output is compared with rapidrl's before timing; mismatches become case notes.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np

from rapidrl.benchmarks.bench_kernels import add_group_adv_peers, group_adv_numpy
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
    add_group_adv_peers(ctx, case, checks, rew, G)
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


# -- one GRPO step against TRL's GRPOTrainer, each library in its own process ---------------------------
STEP = dict(prompts=2, group=8, new_tokens=4, lr=1e-3)
"""The setting of the end-to-end comparison: 2 prompts x 8 completions of 4 tokens, no KL, one update."""
_VOCAB = {"<pad>": 0, "<eos>": 1, **{str(d): 2 + d for d in range(10)}, **{c: 12 + i for i, c in enumerate("abcd")}}


def _tiny_llama(seed: int):
    """The same random-init Llama for both libraries (16-token vocabulary, 2 layers of width 32)."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(seed)
    return LlamaForCausalLM(LlamaConfig(vocab_size=len(_VOCAB), hidden_size=32, intermediate_size=64,
                                        num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                                        max_position_embeddings=64, pad_token_id=0, eos_token_id=1,
                                        bos_token_id=1)).eval()


def _prompt_texts(n: int) -> list[str]:
    return [f"{'abcd'[i % 4]} {'abcd'[(i + 1) % 4]} {i % 10}" for i in range(n)]


def job_grpo_step(lib: str, steps: int = 20, warmup: int = 3) -> dict:
    """Median wall time of one GRPO step (sample, reward, advantages, log-probs, loss, update) after ``warmup``
    untimed steps, in a fresh process (``rapidrl.benchmarks.isolated``). rapidrl also reports its phases."""
    import os
    import statistics
    import time

    import torch

    os.environ["HF_HUB_OFFLINE"] = "1"
    s = STEP
    texts = _prompt_texts(64)
    if lib == "rapidrl":
        from rapidrl.llm.trainer import GRPOConfig, GRPOTrainer

        ids = torch.tensor([[_VOCAB[t] for t in p.split()] for p in texts])  # [64, 3]

        def reward(prompts, completions):
            return (completions[:, 0] == prompts[:, -1]).float()

        trainer = GRPOTrainer(_tiny_llama(0), reward, config=GRPOConfig(
            group_size=s["group"], max_new_tokens=s["new_tokens"], lr=s["lr"], kl_coef=0.0, seed=0))
        times, phases = [], []
        for k in range(warmup + steps):
            batch = ids[(k * s["prompts"]) % 64:(k * s["prompts"]) % 64 + s["prompts"]]
            t0 = time.perf_counter()
            rec = trainer.step(batch)
            if k >= warmup:
                times.append(time.perf_counter() - t0)
                phases.append((rec["time/generate_s"], rec["time/reward_s"], rec["time/update_s"]))
        med = [statistics.median(p[i] for p in phases) * 1e3 for i in range(3)]
        return {"step_ms": statistics.median(times) * 1e3,
                "phases": f"generate {med[0]:.1f} ms, reward+advantages {med[1]:.2f} ms, "
                          f"log-probs+loss+update {med[2]:.1f} ms"}
    if lib != "trl":
        raise ValueError(f"unknown contender {lib!r}")
    from datasets import Dataset
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast, TrainerCallback
    from trl import GRPOConfig as TRLConfig
    from trl import GRPOTrainer as TRLTrainer

    tk = Tokenizer(models.WordLevel(_VOCAB, unk_token="<pad>"))
    tk.pre_tokenizer = pre_tokenizers.Whitespace()
    tok = PreTrainedTokenizerFast(tokenizer_object=tk, pad_token="<pad>", eos_token="<eos>")
    tok.padding_side = "left"

    def reward(completions, prompts=None, **_):
        return [float(c.strip()[:1] == p.strip()[-1]) for c, p in zip(completions, prompts)]

    class StepTimes(TrainerCallback):
        def __init__(self):
            self.times, self._t0 = [], 0.0

        def on_step_begin(self, *args, **kwargs):
            self._t0 = time.perf_counter()

        def on_step_end(self, *args, **kwargs):
            self.times.append(time.perf_counter() - self._t0)

    timer = StepTimes()
    import tempfile

    args = TRLConfig(output_dir=tempfile.mkdtemp(prefix="trl_bench_"), per_device_train_batch_size=s["prompts"] *
                     s["group"], num_generations=s["group"], max_completion_length=s["new_tokens"],
                     learning_rate=s["lr"], beta=0.0, logging_steps=10_000, report_to="none", use_cpu=True,
                     max_steps=warmup + steps, save_strategy="no", disable_tqdm=True, seed=0)
    trainer = TRLTrainer(model=_tiny_llama(0), reward_funcs=reward, args=args,
                         train_dataset=Dataset.from_dict({"prompt": texts}), processing_class=tok,
                         callbacks=[timer])
    trainer.train()
    return {"step_ms": statistics.median(timer.times[warmup:]) * 1e3, "phases": "(TRL logs no phase times)"}


def extras(ctx: Context):
    """One GRPO step, rapidrl vs TRL, each in its own process at 1 thread and all cores (best vs best)."""
    from rapidrl.benchmarks.isolated import interleaved, run_isolated, thread_counts

    libs = ["rapidrl"] + (["trl"] if ctx.peer("trl") is not None else [])
    if len(libs) == 1:
        ctx.skipped.setdefault("trl", "not installed (pip install trl)")
    steps = 5 if ctx.quick else 20
    jobs = {lib: (lambda seed, t, lib=lib: run_isolated(f"{__name__}:job_grpo_step", {"lib": lib, "steps": steps},
                                                          torch_threads=t)) for lib in libs}
    results = interleaved(jobs, [0], thread_counts())
    best = {lib: min(r[0]["step_ms"] for r in by_t.values()) for lib, by_t in results.items()}
    rows = []
    for lib, by_t in results.items():
        for t, (r,) in sorted(by_t.items()):
            rows.append({"case": f"GRPO step, tiny Llama, {STEP['prompts']} prompts x {STEP['group']} x "
                                 f"{STEP['new_tokens']} tokens", "contender": lib, "torch threads": t,
                         "step ms (median)": f"{r['step_ms']:.1f}",
                         "rapidrl speedup (best vs best)": (f"{best[lib] / best['rapidrl']:.2f}x"
                                                            if r["step_ms"] == best[lib] else ""),
                         "breakdown": r["phases"]})
    return "One GRPO step against TRL's GRPOTrainer (each library in its own process)", rows
