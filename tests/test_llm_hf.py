"""GRPO on real Hugging Face ``transformers`` causal LMs (randomly initialised from configs: nothing is
downloaded), key/value-cached generation, and the trainer's RLOO, gradient accumulation, LoRA, loggers and
exact save/load resume."""

from __future__ import annotations

import functools
import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # never reach a hub: every model here is built from a config

import numpy as np
import pytest
import torch
from llm_models import VOCAB, hf_model

from rapidrl.kernels.llm_ops import group_advantages
from rapidrl.llm.tiny import TinyCausalLM, generate, supports_kv_cache
from rapidrl.llm.trainer import GRPOConfig, GRPOTrainer, completion_advantages
from rapidrl.runs.layout import read_csv_metrics
from rapidrl.train.loggers import CSVLogger

ARCHS = ["llama", "qwen2", "gpt2"]


def _prompts():
    prompts = torch.randint(1, VOCAB, (4, 5), generator=torch.Generator().manual_seed(1))
    mask = torch.ones_like(prompts)
    mask[0, :2] = 0  # a left-padded prompt
    prompts[0, :2] = 0
    return prompts, mask


@pytest.mark.parametrize("arch", [*ARCHS, "tiny"])
def test_cached_generation_draws_the_same_tokens_as_full_prefix_generation(arch):
    model = TinyCausalLM(VOCAB, d_model=32, max_len=64).eval() if arch == "tiny" else hf_model(arch)
    assert supports_kv_cache(model)
    prompts, mask = _prompts()
    draws = {}
    for cached in (True, False):
        gen = torch.Generator().manual_seed(7)
        draws[cached] = generate(model, prompts, 12, generator=gen, attention_mask=mask, use_cache=cached)
    assert draws[True].shape == (4, 12)
    torch.testing.assert_close(draws[True], draws[False], rtol=0, atol=0)


def test_tiny_model_cache_gives_the_logits_of_the_full_forward():
    torch.manual_seed(0)
    model = TinyCausalLM(VOCAB, d_model=32, max_len=64).eval()
    prompts, mask = _prompts()
    nxt = torch.randint(1, VOCAB, (4, 3))
    full_mask = torch.cat([mask, torch.ones_like(nxt)], 1)
    full = model(torch.cat([prompts, nxt], 1), attention_mask=full_mask)[:, -3:]
    first = model(prompts, attention_mask=mask, use_cache=True)
    rest = model(nxt, attention_mask=full_mask, past_key_values=first.past_key_values, use_cache=True)
    torch.testing.assert_close(rest.logits, full, rtol=1e-5, atol=1e-5)
    with pytest.raises(ValueError, match="attention_mask"):
        model(nxt, attention_mask=mask, past_key_values=first.past_key_values)


def test_cached_generation_feeds_one_token_per_step():
    model = hf_model("llama")
    lengths = []
    original = model.forward

    def counting(*args, **kwargs):
        ids = args[0] if args else kwargs["input_ids"]
        lengths.append(ids.shape[1])
        return original(*args, **kwargs)

    model.forward = functools.wraps(original)(counting)  # keeps the signature that announces the cache
    generate(model, torch.randint(1, VOCAB, (2, 6)), 5)
    assert lengths == [6, 1, 1, 1, 1]  # the prompt once, then one new token per step


def _digit_reward(prompts, completions):
    """1 when the first completion token equals the prompt's last token."""
    prompts = torch.as_tensor(np.asarray(prompts))
    return (completions[:, 0] == prompts[:, -1]).float()


@pytest.mark.parametrize("arch", ARCHS)
def test_grpo_trains_a_transformers_model(arch):
    model = hf_model(arch)
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    trainer = GRPOTrainer(model, _digit_reward, config=GRPOConfig(group_size=4, max_new_tokens=3, lr=1e-3,
                                                                   kl_coef=0.05, inner_epochs=2, minibatch_size=8))
    records = trainer.train(torch.randint(1, VOCAB, (4, 3), generator=torch.Generator().manual_seed(0)), 2)
    assert len(records) == 2 and all(np.isfinite(r["losses/loss"]) for r in records)
    assert any(not torch.equal(before[n], p) for n, p in model.named_parameters())


def test_rloo_advantages_are_leave_one_out_baselines():
    rewards = np.array([1.0, 0.0, 0.5, 2.0, 3.0, 3.0, 1.0, 0.0], np.float32)
    g = 4
    expect = [r - np.mean(np.delete(grp, i)) for grp in rewards.reshape(-1, g) for i, r in enumerate(grp)]
    np.testing.assert_allclose(completion_advantages(rewards, g, "rloo"), expect, rtol=1e-6)
    np.testing.assert_allclose(completion_advantages(rewards, g, "none"), group_advantages(rewards, g, scale="none"))
    model = TinyCausalLM(VOCAB, d_model=16, max_len=32).eval()
    trainer = GRPOTrainer(model, lambda p, c: rewards, config=GRPOConfig(group_size=g, max_new_tokens=2,
                                                                         scale="rloo"))
    assert np.isfinite(trainer.step(torch.randint(1, VOCAB, (2, 3)))["losses/loss"])


@pytest.mark.parametrize("aggregation", ["sequence", "token", "dr_grpo"])
def test_accumulated_micro_batches_equal_one_whole_minibatch(aggregation):
    prompts = torch.randint(1, VOCAB, (3, 4), generator=torch.Generator().manual_seed(3))
    params = {}
    for micro in (None, 5):  # 12 completions: one pass, or micro-batches of 5, 5 and 2
        model = hf_model("llama", seed=2)
        cfg = GRPOConfig(group_size=4, max_new_tokens=4, eos_token_id=3, aggregation=aggregation,
                         micro_batch_size=micro, inner_epochs=2, kl_coef=0.1)
        # plain SGD: the parameter change is the gradient itself (Adam would magnify rounding in tiny gradients)
        trainer = GRPOTrainer(model, lambda p, c: torch.arange(len(c), dtype=torch.float32) % 3, config=cfg,
                              optimizer=torch.optim.SGD(model.parameters(), lr=0.1))
        trainer.step(prompts)
        params[micro] = [p.detach().clone() for p in model.parameters()]
    for a, b in zip(params[None], params[5]):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-6)


def _trainer(seed=0):
    model = hf_model("qwen2", seed=seed)
    return GRPOTrainer(model, _digit_reward, config=GRPOConfig(group_size=4, max_new_tokens=3, lr=1e-3,
                                                               kl_coef=0.05, inner_epochs=2, minibatch_size=8))


def test_save_load_resumes_exactly(tmp_path):
    prompts = torch.randint(1, VOCAB, (4, 3), generator=torch.Generator().manual_seed(0))
    straight = _trainer()
    straight.train(prompts, 4)
    first = _trainer()
    first.train(prompts, 2)
    first.save(tmp_path / "grpo.pt")
    resumed = _trainer(seed=123)  # other initial weights: everything must come from the file
    resumed.load(tmp_path / "grpo.pt")
    resumed.train(prompts, 2)
    for a, b in zip(straight.policy.parameters(), resumed.policy.parameters()):
        torch.testing.assert_close(a, b, rtol=0, atol=0)
    assert [r["charts/reward"] for r in straight.history] == [r["charts/reward"] for r in resumed.history]
    other = GRPOTrainer(hf_model("qwen2"), _digit_reward, config=GRPOConfig(group_size=4, max_new_tokens=5))
    with pytest.raises(ValueError, match="different GRPOConfig"):
        other.load(tmp_path / "grpo.pt")
    (tmp_path / "junk.pt").write_bytes(b"not a checkpoint")
    with pytest.raises(Exception, match=r"(?i)pickle|checkpoint|load"):
        _trainer().load(tmp_path / "junk.pt")


def test_lora_adapters_train_alone_and_alone_are_saved(tmp_path):
    from peft import LoraConfig, get_peft_model

    model = get_peft_model(hf_model("llama"), LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"],
                                                         lora_dropout=0.0, init_lora_weights=False))
    base = {n: p.detach().clone() for n, p in model.named_parameters() if not p.requires_grad}
    adapters = {n: p.detach().clone() for n, p in model.named_parameters() if p.requires_grad}
    assert adapters and all("lora" in n for n in adapters)
    trainer = GRPOTrainer(model, _digit_reward, config=GRPOConfig(group_size=4, max_new_tokens=3, lr=1e-2))
    trainer.train(torch.randint(1, VOCAB, (4, 3)), 2)
    for n, p in model.named_parameters():
        if n in base:
            assert torch.equal(p, base[n]), f"frozen {n} changed"
    assert any(not torch.equal(p, adapters[n]) for n, p in model.named_parameters() if n in adapters)
    trainer.save(tmp_path / "lora.pt")
    saved = torch.load(tmp_path / "lora.pt", weights_only=True)["policy"]
    assert set(saved) == set(adapters)


def test_records_reach_the_rl_loggers(tmp_path):
    logger = CSVLogger(tmp_path / "metrics.csv")
    model = TinyCausalLM(VOCAB, d_model=16, max_len=32).eval()
    trainer = GRPOTrainer(model, lambda p, c: torch.rand(len(c)), loggers=[logger],
                          config=GRPOConfig(group_size=4, max_new_tokens=3, kl_coef=0.1))
    trainer.train(torch.randint(1, VOCAB, (2, 3)), 3)
    logger.close()
    logged = read_csv_metrics(tmp_path / "metrics.csv")
    assert logged["global_step"] == [0.0, 1.0, 2.0]
    for key in ("charts/reward", "charts/reward_std", "losses/kl", "losses/clipfrac", "charts/completion_length"):
        assert logged[key] == pytest.approx([r[key] for r in trainer.history]), key


def test_trainer_refuses_a_policy_without_trainable_parameters():
    model = TinyCausalLM(VOCAB, d_model=16).requires_grad_(False)
    with pytest.raises(ValueError, match="no trainable parameters"):
        GRPOTrainer(model, lambda p, c: torch.zeros(len(c)))
    with pytest.raises(ValueError, match="rloo"):
        GRPOConfig(scale="leave-one-out")
    with pytest.raises(ValueError, match="micro_batch_size"):
        GRPOConfig(micro_batch_size=0)


def test_docs_transformers_script_runs_and_learns(tmp_path, monkeypatch):
    """The Hugging Face script of docs/llm.md runs as written (in a temporary directory) and learns."""
    import re
    from pathlib import Path

    text = (Path(__file__).parents[1] / "docs" / "llm.md").read_text()
    code = next(c for c in re.findall(r"```python\n(.*?)```", text, re.S) if "LlamaForCausalLM" in c)
    monkeypatch.chdir(tmp_path)
    namespace: dict = {}
    exec(compile(code, "docs/llm.md", "exec"), namespace)
    history = namespace["history"]
    assert history[0]["charts/reward"] < 0.3 and history[-1]["charts/reward"] >= 0.7
    assert (tmp_path / "grpo_llama.pt").is_file() and namespace["trainer"].iteration == 50


def test_bench_grpo_step_job_runs():
    from rapidrl.benchmarks.bench_llm import job_grpo_step

    out = job_grpo_step("rapidrl", steps=1, warmup=0)
    assert out["step_ms"] > 0 and "generate" in out["phases"]
    with pytest.raises(ValueError, match="unknown contender"):
        job_grpo_step("nobody", steps=1)


def test_packed_update_equals_the_padded_update():
    """Packing the prompt+completion sequences into rows gives the same log-probs, so the same update."""
    from rapidrl.llm.trainer import completion_logprobs, completion_mask, packed_completion_logprobs

    torch.manual_seed(0)
    model = TinyCausalLM(VOCAB, d_model=32, max_len=64).eval()
    prompts, pmask = _prompts()
    completions = torch.randint(1, VOCAB, (4, 6), generator=torch.Generator().manual_seed(2))
    completions[1, 2] = 3  # an EOS: the rest of row 1 is masked out
    mask = completion_mask(completions, eos_token_id=3)
    a = completion_logprobs(model, prompts, pmask, completions, mask)
    b = packed_completion_logprobs(model, prompts, pmask, completions, mask)
    torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-5)
    params = {}
    for pack in (False, True):
        torch.manual_seed(5)
        model = TinyCausalLM(VOCAB, d_model=32, max_len=64).eval()
        cfg = GRPOConfig(group_size=4, max_new_tokens=5, eos_token_id=3, pack=pack, inner_epochs=2, kl_coef=0.1)
        trainer = GRPOTrainer(model, lambda p, c: torch.arange(len(c), dtype=torch.float32) % 2, config=cfg,
                              optimizer=torch.optim.SGD(model.parameters(), lr=0.1))
        trainer.step(torch.randint(1, VOCAB, (3, 4), generator=torch.Generator().manual_seed(9)))
        params[pack] = [p.detach().clone() for p in model.parameters()]
    for x, y in zip(params[False], params[True]):
        torch.testing.assert_close(x, y, rtol=1e-4, atol=1e-6)
