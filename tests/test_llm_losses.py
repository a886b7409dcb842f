"""Tests of rapidrl.llm.losses: reference loops, analytic values, identities and bad inputs."""

from __future__ import annotations

import math

import pytest
import torch

from rapidrl.llm.losses import aggregate, dpo_loss, grpo_loss, kl_penalty, rloo_loss, sequence_logprobs

torch.set_num_threads(1)


def _batch(b=4, t=6, seed=0, dtype=torch.float64):
    """Random log-probs, advantages and a mask with ragged rows (row 0 full, row 1 length 1)."""
    g = torch.Generator().manual_seed(seed)
    logp = -torch.rand(b, t, generator=g, dtype=dtype) * 3
    old = logp + 0.4 * torch.randn(b, t, generator=g, dtype=dtype)  # ratios spread around 1
    ref = logp + 0.5 * torch.randn(b, t, generator=g, dtype=dtype)
    adv = torch.randn(b, generator=g, dtype=dtype)
    lengths = torch.tensor([t, 1] + [int(x) for x in torch.randint(1, t + 1, (b - 2,), generator=g)])
    mask = torch.arange(t)[None, :] < lengths[:, None]
    return logp, old, ref, adv, mask


def _ref_kl(lp: float, rl: float, estimator: str) -> float:
    d = rl - lp
    return {"k1": -d, "k2": 0.5 * d * d, "k3": math.exp(d) - 1 - d}[estimator]


def _ref_grpo(logp, old, ref, adv, mask, eps_lo, eps_hi, kl_coef, est, aggregation, max_len):
    """Plain loop over tokens with Python floats (the definition in the GRPO/DAPO/Dr.GRPO papers)."""
    b, t = logp.shape
    per_seq, total, count = [], 0.0, 0
    for i in range(b):
        s, n = 0.0, 0
        for j in range(t):
            if not mask[i, j]:
                continue
            r = math.exp(float(logp[i, j]) - float(old[i, j]))
            a = float(adv[i])
            term = max(-a * r, -a * min(max(r, 1 - eps_lo), 1 + eps_hi))
            if kl_coef:
                term += kl_coef * _ref_kl(float(logp[i, j]), float(ref[i, j]), est)
            s, n = s + term, n + 1
        per_seq.append(s / n if n else 0.0)
        total, count = total + s, count + n
    if aggregation == "sequence":
        return sum(per_seq) / b
    if aggregation == "token":
        return total / count
    return total / (b * max_len)


# ----------------------------------------------------------------------------------------------------
# KL estimators


@pytest.mark.parametrize("estimator", ["k1", "k2", "k3"])
def test_kl_penalty_matches_formula(estimator):
    logp, _, ref, _, _ = _batch()
    got = kl_penalty(logp, ref, estimator)
    want = torch.tensor([[_ref_kl(float(a), float(b), estimator) for a, b in zip(r1, r2)]
                         for r1, r2 in zip(logp, ref)], dtype=logp.dtype)
    torch.testing.assert_close(got, want)
    assert torch.all(kl_penalty(logp, logp, estimator) == 0)


@pytest.mark.parametrize("estimator", ["k1", "k3"])
def test_unbiased_estimators_average_to_exact_kl(estimator):
    # E_{x~p}[k(x)] over a categorical distribution, summed exactly, equals KL(p || q).
    g = torch.Generator().manual_seed(1)
    logp = torch.log_softmax(torch.randn(1, 7, generator=g, dtype=torch.float64), -1)
    logq = torch.log_softmax(torch.randn(1, 7, generator=g, dtype=torch.float64), -1)
    exact = (logp.exp() * (logp - logq)).sum()
    expected = (logp.exp() * kl_penalty(logp, logq, estimator)).sum()
    torch.testing.assert_close(expected, exact)


def test_k2_k3_nonnegative_and_k2_second_order():
    d = torch.linspace(-3, 3, 61, dtype=torch.float64)[None]
    zero = torch.zeros_like(d)
    assert torch.all(kl_penalty(zero, d, "k2") >= 0) and torch.all(kl_penalty(zero, d, "k3") >= 0)
    # Taylor: k3 = e^d - 1 - d = d²/2 + d³/6 + O(d⁴) = k2 + d³/6 + O(d⁴); |d| <= 3e-3, d⁴/24 < 4e-12
    small = 1e-3 * d
    torch.testing.assert_close(kl_penalty(zero, small, "k3") - kl_penalty(zero, small, "k2"), small**3 / 6,
                               atol=1e-11, rtol=0)


def test_kl_estimator_name_checked():
    logp = torch.zeros(2, 3)
    with pytest.raises(ValueError, match="estimator"):
        kl_penalty(logp, logp, "k4")


# ----------------------------------------------------------------------------------------------------
# GRPO


@pytest.mark.parametrize("aggregation", ["sequence", "token", "dr_grpo"])
@pytest.mark.parametrize("estimator", ["k1", "k2", "k3"])
@pytest.mark.parametrize("eps_high", [None, 0.28])
def test_grpo_loss_matches_reference_loop(aggregation, estimator, eps_high):
    logp, old, ref, adv, mask = _batch(seed=2)
    loss, stats = grpo_loss(logp, old, adv, mask, clip_eps=0.2, clip_eps_high=eps_high, ref_logp=ref,
                            kl_coef=0.05, kl_estimator=estimator, aggregation=aggregation, max_len=9)
    want = _ref_grpo(logp, old, ref, adv, mask, 0.2, eps_high or 0.2, 0.05, estimator, aggregation, 9)
    assert float(loss) == pytest.approx(want, rel=1e-12, abs=1e-12)
    kl_tokens = [_ref_kl(float(logp[i, j]), float(ref[i, j]), estimator)
                 for i in range(4) for j in range(6) if mask[i, j]]
    assert float(stats["kl"]) == pytest.approx(sum(kl_tokens) / len(kl_tokens), rel=1e-12)


def test_grpo_gradient_matches_reference_gradient():
    # Gradient of the vectorised loss equals the gradient of the same maths written per token.
    logp, old, ref, adv, mask = _batch(seed=3)
    lp1 = logp.clone().requires_grad_(True)
    grpo_loss(lp1, old, adv, mask, ref_logp=ref, kl_coef=0.1, clip_eps_high=0.3)[0].backward()
    lp2 = logp.clone().requires_grad_(True)
    terms = []
    for i in range(4):
        row = []
        for j in range(6):
            if mask[i, j]:
                r = torch.exp(lp2[i, j] - old[i, j])
                term = torch.maximum(-adv[i] * r, -adv[i] * torch.clamp(r, 0.8, 1.3))
                d = ref[i, j] - lp2[i, j]
                row.append(term + 0.1 * (torch.exp(d) - 1 - d))
        terms.append(torch.stack(row).mean())
    torch.stack(terms).mean().backward()
    torch.testing.assert_close(lp1.grad, lp2.grad)


def test_grpo_ratio_one_gives_minus_mean_advantage():
    logp, _, _, adv, mask = _batch(seed=4)
    n = mask.sum(1).to(adv.dtype)
    seq, _ = grpo_loss(logp, logp, adv, mask, aggregation="sequence")
    tok, _ = grpo_loss(logp, logp, adv, mask, aggregation="token")
    dr, stats = grpo_loss(logp, logp, adv, mask, aggregation="dr_grpo")
    torch.testing.assert_close(seq, -adv.mean())
    torch.testing.assert_close(tok, -(adv * n).sum() / n.sum())
    torch.testing.assert_close(dr, -(adv * n).sum() / (4 * 6))
    assert float(stats["clip_fraction"]) == 0.0 and float(stats["ratio_mean"]) == pytest.approx(1.0)
    assert "kl" not in stats


def test_grpo_gradient_at_ratio_one_is_policy_gradient():
    # At ρ = 1, d loss / d logp_bt = -A_b / n_b / B for the "sequence" aggregation.
    logp, _, _, adv, mask = _batch(seed=5)
    lp = logp.clone().requires_grad_(True)
    grpo_loss(lp, logp, adv, mask)[0].backward()
    want = -(adv[:, None] / mask.sum(1, keepdim=True) / 4) * mask
    torch.testing.assert_close(lp.grad, want.to(lp.dtype))


def test_clip_fraction_and_zero_gradient_at_known_ratios():
    ratios = torch.tensor([[0.5, 0.9, 1.1, 1.5], [0.5, 0.9, 1.1, 1.5]], dtype=torch.float64)
    adv = torch.tensor([1.0, -1.0], dtype=torch.float64)
    old = torch.full_like(ratios, -1.0)
    logp = (old + ratios.log()).requires_grad_(True)
    mask = torch.ones_like(ratios, dtype=torch.bool)
    loss, stats = grpo_loss(logp, old, adv, mask, clip_eps=0.2)
    # clipped (zero-gradient) tokens: ratio 1.5 with A > 0 and ratio 0.5 with A < 0 -> 2 of 8
    assert float(stats["clip_fraction"]) == pytest.approx(2 / 8)
    assert float(stats["ratio_mean"]) == pytest.approx(1.0)
    # loss by hand: A=+1 row: -(0.5 + 0.9 + 1.1 + 1.2)/4; A=-1 row: (0.8 + 0.9 + 1.1 + 1.5)/4
    assert loss.item() == pytest.approx(((-3.7) / 4 + 4.3 / 4) / 2)
    loss.backward()
    zero = logp.grad == 0
    assert zero.tolist() == [[False, False, False, True], [True, False, False, False]]


def test_dapo_clip_higher_widens_only_upper_bound():
    old = torch.zeros(1, 2, dtype=torch.float64)
    logp = torch.log(torch.tensor([[1.25, 0.75]], dtype=torch.float64))
    mask = torch.ones(1, 2)
    pos = torch.tensor([1.0], dtype=torch.float64)
    neg = torch.tensor([-1.0], dtype=torch.float64)
    assert float(grpo_loss(logp, old, pos, mask, clip_eps=0.2)[1]["clip_fraction"]) == 0.5
    assert float(grpo_loss(logp, old, pos, mask, clip_eps=0.2, clip_eps_high=0.28)[1]["clip_fraction"]) == 0
    # the lower bound stays at 1 - clip_eps: ratio 0.75 < 0.8 with A < 0 is still clipped
    assert float(grpo_loss(logp, old, neg, mask, clip_eps=0.2, clip_eps_high=0.28)[1]["clip_fraction"]) == 0.5


def test_padding_values_never_matter():
    logp, old, ref, adv, mask = _batch(seed=6)
    base, base_stats = grpo_loss(logp, old, adv, mask, ref_logp=ref, kl_coef=0.1)
    junk = ~mask
    lp2, old2, ref2 = logp.clone(), old.clone(), ref.clone()
    lp2[junk], old2[junk], ref2[junk] = 50.0, -math.inf, -1e4
    loss, stats = grpo_loss(lp2, old2, adv, mask, ref_logp=ref2, kl_coef=0.1)
    assert float(loss) == float(base)
    for k in base_stats:
        assert float(stats[k]) == float(base_stats[k])


def test_empty_row_contributes_zero():
    logp = torch.zeros(2, 3)
    mask = torch.tensor([[1, 1, 1], [0, 0, 0]])
    adv = torch.tensor([2.0, 5.0])
    loss, _ = grpo_loss(logp, logp, adv, mask)
    assert float(loss) == pytest.approx(-1.0)  # (-2 + 0) / 2
    assert float(aggregate(torch.ones(2, 3), mask, "token")) == 1.0


def test_grpo_float32_stays_float32():
    logp, old, ref, adv, mask = (x.float() if x.is_floating_point() else x for x in _batch(seed=7))
    loss, stats = grpo_loss(logp, old, adv, mask, ref_logp=ref, kl_coef=0.1)
    assert loss.dtype == torch.float32 and stats["kl"].dtype == torch.float32


@pytest.mark.parametrize(
    ("kwargs", "err", "match"),
    [
        ({"mask": torch.ones(4, 5)}, ValueError, "mask"),
        ({"old_logp": torch.zeros(4, 5)}, ValueError, "old_logp"),
        ({"advantages": torch.zeros(3)}, ValueError, "advantages"),
        ({"advantages": torch.zeros(4, 1)}, ValueError, "advantages"),
        ({"logp": torch.zeros(4, 6, dtype=torch.long)}, TypeError, "logp"),
        ({"logp": torch.zeros(4)}, ValueError, "logp"),
        ({"logp": torch.zeros(0, 6), "old_logp": torch.zeros(0, 6), "mask": torch.ones(0, 6),
          "advantages": torch.zeros(0)}, ValueError, "empty"),
        ({"mask": [[1] * 6] * 4}, TypeError, "mask"),
        ({"kl_coef": 0.1}, ValueError, "ref_logp"),
        ({"ref_logp": torch.zeros(4, 5)}, ValueError, "ref_logp"),
        ({"clip_eps": 0.0}, ValueError, "clip_eps"),
        ({"clip_eps": 1.5}, ValueError, "clip_eps"),
        ({"clip_eps_high": -0.1}, ValueError, "clip_eps_high"),
        ({"kl_coef": -1.0, "ref_logp": torch.zeros(4, 6)}, ValueError, "kl_coef"),
        ({"kl_coef": math.nan, "ref_logp": torch.zeros(4, 6)}, ValueError, "kl_coef"),
        ({"aggregation": "mean"}, ValueError, "aggregation"),
        ({"kl_estimator": "k5"}, ValueError, "kl_estimator"),
    ],
)
def test_grpo_bad_inputs(kwargs, err, match):
    args = {"logp": torch.zeros(4, 6), "old_logp": torch.zeros(4, 6), "advantages": torch.zeros(4),
            "mask": torch.ones(4, 6)}
    args.update(kwargs)
    with pytest.raises(err, match=match):
        grpo_loss(args.pop("logp"), args.pop("old_logp"), args.pop("advantages"), args.pop("mask"), **args)


# ----------------------------------------------------------------------------------------------------
# RLOO


def test_rloo_loss_matches_reference_loop_and_gradient():
    logp, _, _, adv, mask = _batch(seed=8)
    lp = logp.clone().requires_grad_(True)
    loss, stats = rloo_loss(lp, adv, mask)
    want = -sum(float(adv[i]) * sum(float(logp[i, j]) for j in range(6) if mask[i, j]) for i in range(4)) / 4
    assert loss.item() == pytest.approx(want, rel=1e-12)
    loss.backward()
    torch.testing.assert_close(lp.grad, (-adv[:, None] / 4 * mask).to(lp.dtype))
    assert float(stats["seq_logp_mean"]) == pytest.approx(float((logp * mask).sum() / 4))


def test_rloo_bad_inputs():
    with pytest.raises(ValueError, match="advantages"):
        rloo_loss(torch.zeros(4, 3), torch.zeros(5), torch.ones(4, 3))
    with pytest.raises(ValueError, match="mask"):
        rloo_loss(torch.zeros(4, 3), torch.zeros(4), torch.ones(4, 2))


# ----------------------------------------------------------------------------------------------------
# DPO


def test_dpo_zero_margin_is_log2_and_ipo_is_quarter_beta_squared():
    z = torch.full((5,), -3.0, dtype=torch.float64)
    loss, cr, rr = dpo_loss(z, z - 1, z + 2, z + 1, beta=0.1)  # h = (-2) - (-2) = 0
    assert float(loss) == pytest.approx(math.log(2))
    torch.testing.assert_close(cr, torch.full_like(z, -0.2))
    torch.testing.assert_close(rr, torch.full_like(z, -0.2))
    ipo, _, _ = dpo_loss(z, z, z, z, beta=0.25, loss_type="ipo")
    assert float(ipo) == pytest.approx(1 / (4 * 0.25**2))  # (0 - 1/(2β))²


def test_dpo_matches_formulas():
    g = torch.Generator().manual_seed(9)
    pc, pr, rc, rr = (-5 * torch.rand(6, generator=g, dtype=torch.float64) for _ in range(4))
    h = (pc - rc) - (pr - rr)
    beta, eps = 0.3, 0.1
    sig = lambda x: 1 / (1 + math.exp(-x))  # noqa: E731
    want = sum(-(1 - eps) * math.log(sig(beta * float(x))) - eps * math.log(sig(-beta * float(x)))
               for x in h) / 6
    loss, cr, rj = dpo_loss(pc, pr, rc, rr, beta=beta, label_smoothing=eps)
    assert float(loss) == pytest.approx(want, rel=1e-12)
    torch.testing.assert_close(cr - rj, beta * h)
    ipo, _, _ = dpo_loss(pc, pr, rc, rr, beta=beta, loss_type="ipo")
    assert float(ipo) == pytest.approx(sum((float(x) - 1 / (2 * beta)) ** 2 for x in h) / 6, rel=1e-12)


def test_dpo_gradient_raises_chosen_and_lowers_rejected():
    pc = torch.zeros(3, requires_grad=True)
    pr = torch.zeros(3, requires_grad=True)
    loss, _, _ = dpo_loss(pc, pr, torch.zeros(3), torch.zeros(3), beta=0.5)
    loss.backward()
    # d/dpc of -log σ(β h) at h=0 is -β/2 per pair, divided by B
    torch.testing.assert_close(pc.grad, torch.full((3,), -0.5 / 2 / 3))
    torch.testing.assert_close(pr.grad, torch.full((3,), 0.5 / 2 / 3))


def test_dpo_bad_inputs():
    a = torch.zeros(3)
    with pytest.raises(ValueError, match="ref_rejected_logp"):
        dpo_loss(a, a, a, torch.zeros(4))
    with pytest.raises(ValueError, match="beta"):
        dpo_loss(a, a, a, a, beta=0.0)
    with pytest.raises(ValueError, match="loss_type"):
        dpo_loss(a, a, a, a, loss_type="hinge2")
    with pytest.raises(ValueError, match="label_smoothing"):
        dpo_loss(a, a, a, a, label_smoothing=0.5)
    with pytest.raises(ValueError, match="label_smoothing"):
        dpo_loss(a, a, a, a, loss_type="ipo", label_smoothing=0.1)
    with pytest.raises(ValueError, match="dimension"):
        dpo_loss(a[None], a[None], a[None], a[None])


# ----------------------------------------------------------------------------------------------------
# sequence_logprobs


def test_sequence_logprobs_matches_log_softmax_gather():
    g = torch.Generator().manual_seed(10)
    logits = 4 * torch.randn(3, 5, 11, generator=g)
    tokens = torch.randint(0, 11, (3, 5), generator=g)
    got = sequence_logprobs(logits, tokens)
    want = torch.log_softmax(logits.double(), -1).gather(-1, tokens[..., None]).squeeze(-1)
    assert got.dtype == torch.float32
    torch.testing.assert_close(got.double(), want, atol=1e-5, rtol=1e-5)


def test_sequence_logprobs_mask_allows_any_id_at_padding():
    logits = torch.randn(2, 3, 4)
    tokens = torch.tensor([[1, 2, -100], [3, 99, 99]])
    mask = torch.tensor([[1, 1, 0], [1, 0, 0]], dtype=torch.bool)
    got = sequence_logprobs(logits, tokens, mask)
    assert got[0, 2] == 0 and got[1, 1] == 0 and got[1, 2] == 0
    torch.testing.assert_close(got[0, :2], sequence_logprobs(logits[:1, :2], tokens[:1, :2])[0])


def test_sequence_logprobs_bad_inputs():
    logits = torch.randn(2, 3, 4)
    with pytest.raises(ValueError, match="tokens must lie"):
        sequence_logprobs(logits, torch.tensor([[0, 1, 4], [0, 0, 0]]))
    with pytest.raises(ValueError, match="tokens has shape"):
        sequence_logprobs(logits, torch.zeros(2, 4, dtype=torch.long))
    with pytest.raises(TypeError, match="tokens"):
        sequence_logprobs(logits, torch.zeros(2, 3))
    with pytest.raises(ValueError, match="mask"):
        sequence_logprobs(logits, torch.zeros(2, 3, dtype=torch.long), torch.ones(2, 2))
    with pytest.raises(ValueError, match="logits"):
        sequence_logprobs(logits[0], torch.zeros(2, 3, dtype=torch.long))


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_sequence_logprobs_half_precision_goes_through_float32(dtype):
    g = torch.Generator().manual_seed(11)
    logits = (4 * torch.randn(2, 3, 50, generator=g)).to(dtype)
    tokens = torch.randint(0, 50, (2, 3), generator=g)
    got = sequence_logprobs(logits, tokens)
    want = torch.log_softmax(logits.double(), -1).gather(-1, tokens[..., None]).squeeze(-1)
    assert got.dtype == torch.float32
    torch.testing.assert_close(got.double(), want, atol=1e-5, rtol=1e-5)
