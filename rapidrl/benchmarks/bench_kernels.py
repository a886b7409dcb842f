"""Kernel suite: GAE, GRPO group advantages, token KL (k3), sum-tree sampling.

Contenders per case: ``rapidrl`` (``rapidrl.kernels``), ``numpy`` (vectorized over envs, loop over
time), ``torch`` (the same loop in torch ops, or TRL-style torch code), ``rlox`` and ``torchrl`` where
they have the function. Every contender gets its inputs in its native layout, converted before timing
(rlox is env-major and flat, torchrl is ``[N, T, 1]``). Before timing, each contender's output is
compared with rapidrl's on the same data; a mismatch is written into the case notes.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np

from rapidrl.benchmarks.harness import Case, Context

REPEATS = {"quick": 5, "full": 30}
GAMMA, LAM = 0.99, 0.95


# ----------------------------------------------------------------------------------------------------
# plain implementations the peers would write


def gae_loop(xp, rewards, values, last_values, terminated, truncated, gamma, lam):
    """GAE over time-major [T, N] float arrays of the array module ``xp`` (NumPy, or torch: the loop a PyTorch
    codebase runs): loop over T, vectorized over N.

    ``terminated`` stops bootstrapping; ``truncated`` only cuts the trace. The benchmark data has no
    truncations, so every contender computes the same advantages.
    """
    T = rewards.shape[0]
    adv = xp.empty_like(rewards)  # [T, N]
    last = xp.zeros_like(last_values)  # [N]
    next_v = last_values
    not_term = 1.0 - terminated  # [T, N]
    not_done = not_term * (1.0 - truncated)
    for t in range(T - 1, -1, -1):
        delta = rewards[t] + gamma * next_v * not_term[t] - values[t]
        last = delta + gamma * lam * not_done[t] * last
        adv[t] = last
        next_v = values[t]
    return adv, adv + values


def gae_python(rewards, values, last_value, terminated, truncated, gamma, lam):
    """Single-trajectory GAE as a scalar Python loop over NumPy arrays [T]."""
    T = rewards.shape[0]
    adv = np.empty_like(rewards)
    last = 0.0
    next_v = last_value
    for t in range(T - 1, -1, -1):
        not_term = 0.0 if terminated[t] else 1.0
        not_done = 0.0 if (terminated[t] or truncated[t]) else 1.0
        delta = rewards[t] + gamma * next_v * not_term - values[t]
        last = delta + gamma * lam * not_done * last
        adv[t] = last
        next_v = values[t]
    return adv, adv + values


def group_adv_numpy(rewards, eps=1e-6):
    """GRPO advantages of rewards [G, K]: (r - mean) / (std + eps) per group (sample std, ddof=1)."""
    mean = rewards.mean(axis=1, keepdims=True)  # [G, 1]
    std = rewards.std(axis=1, ddof=1, keepdims=True)
    return (rewards - mean) / (std + eps)


def group_adv_trl(rewards, group_size, eps=1e-6):
    """TRL's GRPOTrainer code path on flat torch rewards [G*K] (torch's default sample std)."""
    grouped = rewards.view(-1, group_size)
    mean = grouped.mean(dim=1).repeat_interleave(group_size, dim=0)
    std = grouped.std(dim=1).repeat_interleave(group_size, dim=0)
    return (rewards - mean) / (std + eps)


def add_group_adv_peers(ctx: Context, case: Case, checks: dict, rew: np.ndarray, group_size: int) -> None:
    """The torch (TRL's code, compared) and rlox (not compared) contenders of a group-advantage case on the flat
    rewards ``rew`` [B*G], groups of ``group_size`` consecutive entries."""
    torch = ctx.peer("torch")
    if torch is not None:
        t = torch.from_numpy(rew.copy())
        case.contenders["torch"] = lambda: group_adv_trl(t, group_size)
        checks["torch"] = lambda: group_adv_trl(t, group_size).numpy()
        case.notes.append(f"torch: TRL GRPOTrainer's view/mean/std/repeat_interleave code on a {rew.dtype} tensor")
    rlox = ctx.peer("rlox")
    if rlox is not None:
        rew64 = rew.astype(np.float64)
        case.contenders["rlox"] = lambda: rlox.compute_batch_group_advantages(rew64, group_size)
        case.notes.append("rlox takes float64 input (converted before timing) and divides by the population std "
                          "(ddof=0), the others by the sample std; rlox not compared")


def token_kl_numpy(logp, ref_logp):
    """Schulman k3 per token: [B, T] -> [B, T], ``exp(d) - d - 1`` with ``d = ref_logp - logp``."""
    d = ref_logp - logp
    return np.exp(d) - d - 1.0


def token_kl_trl(logp, ref_logp):
    """TRL GRPOTrainer's per-token KL (k3) in torch: [B, T] -> [B, T]."""
    d = ref_logp - logp
    return d.exp() - d - 1.0


class NumpySumTree:
    """Array sum-tree (leaves at ``[P, 2P)``) with a batched descent vectorized over the samples."""

    def __init__(self, capacity: int):
        self.P = 1 << int(np.ceil(np.log2(capacity)))
        self.depth = int(np.log2(self.P))
        self.tree = np.zeros(2 * self.P)

    def set_all(self, prio: np.ndarray) -> None:
        """Set leaves ``[0, len(prio))`` and rebuild every level."""
        self.tree[self.P : self.P + prio.size] = prio
        lo = self.P
        while lo > 1:
            lo //= 2
            self.tree[lo : 2 * lo] = self.tree[2 * lo : 4 * lo : 2] + self.tree[2 * lo + 1 : 4 * lo : 2]

    def sample(self, u: np.ndarray) -> np.ndarray:
        """Leaf index for each ``u`` in [0, 1): prefix-sum search from the root."""
        value = u * self.tree[1]
        idx = np.ones(u.size, dtype=np.int64)
        for _ in range(self.depth):
            left = 2 * idx
            lv = self.tree[left]
            right = value >= lv
            value = value - lv * right
            idx = left + right
        return idx - self.P


# ----------------------------------------------------------------------------------------------------
# helpers


def _agree(case: Case, outputs: dict[str, np.ndarray], *, rtol: float, atol: float) -> None:
    """Note every contender whose output differs from rapidrl's (same data, converted layouts)."""
    ref = outputs.get("rapidrl")
    if ref is None:
        return
    for name, out in outputs.items():
        if name != "rapidrl" and not np.allclose(out, ref, rtol=rtol, atol=atol):
            err = float(np.max(np.abs(np.asarray(out, np.float64) - ref)))
            case.notes.append(f"{name} output differs from rapidrl (max abs diff {err:.3g})")


def _run_checks(case: Case, checks: dict[str, Callable[[], Any]], rtol: float, atol: float) -> None:
    """Run each contender's output converter once and compare with rapidrl; failures become notes."""
    outputs = {}
    for name, fn in checks.items():
        if name not in case.contenders:
            continue
        try:
            outputs[name] = np.asarray(fn(), dtype=np.float64)
        except Exception as exc:  # the timing loop will report the contender as failed
            case.notes.append(f"{name} check raised {type(exc).__name__}: {exc}")
    _agree(case, outputs, rtol=rtol, atol=atol)


def _episodes(rng, shape, p_term=0.01, p_trunc=0.0):
    """Random terminated/truncated flags (disjoint) of ``shape``."""
    term = rng.random(shape) < p_term
    trunc = (rng.random(shape) < p_trunc) & ~term
    return term, trunc


# ----------------------------------------------------------------------------------------------------
# cases


def _gae_case(ctx: Context, T: int, N: int, dtype) -> Case:
    k = ctx.rapidrl("kernels")
    rng = np.random.default_rng(0)
    dt = np.dtype(dtype)
    r = rng.standard_normal((T, N)).astype(dt)  # [T, N]
    v = rng.standard_normal((T, N)).astype(dt)
    lv = rng.standard_normal(N).astype(dt)  # [N]
    term, trunc = _episodes(rng, (T, N))  # [T, N] bool; no truncation so every peer agrees
    case = Case(
        f"gae/{dt.name}/{N}x{T}", {}, params={"T": T, "N": N, "dtype": dt.name, "layout": "rapidrl [T, N]"}
    )
    checks: dict[str, Callable[[], Any]] = {}
    if k is not None and hasattr(k, "gae"):
        plain = lambda: k.gae(r, v, lv, term, trunc, gamma=GAMMA, lam=LAM)  # noqa: E731
        if hasattr(k, "gae_into"):
            # the call an RL loop makes (RolloutBuffer.compute_advantages): outputs allocated once (untimed)
            oa, orr = np.empty_like(r), np.empty_like(r)
            into = lambda: k.gae_into(  # noqa: E731
                r, v, lv, term, trunc, gamma=GAMMA, lam=LAM, out_advantages=oa, out_returns=orr
            )
            case.contenders["rapidrl"] = into
            case.contenders["rapidrl/plain"] = plain
            checks["rapidrl"] = lambda: into()[0].copy()
            case.notes.append("rapidrl: kernels.gae_into on outputs allocated once; rapidrl/plain: kernels.gae")
        else:
            case.contenders["rapidrl"] = plain
            checks["rapidrl"] = lambda: plain()[0]
    tf, trf = term.astype(dt), trunc.astype(dt)
    case.contenders["numpy"] = lambda: gae_loop(np, r, v, lv, tf, trf, GAMMA, LAM)
    checks["numpy"] = lambda: gae_loop(np, r, v, lv, tf, trf, GAMMA, LAM)[0]
    torch = ctx.peer("torch")
    if torch is not None:
        tr, tv, tlv = torch.from_numpy(r), torch.from_numpy(v), torch.from_numpy(lv)
        ttf, ttrf = torch.from_numpy(tf), torch.from_numpy(trf)
        case.contenders["torch"] = lambda: gae_loop(torch, tr, tv, tlv, ttf, ttrf, GAMMA, LAM)
        checks["torch"] = lambda: gae_loop(torch, tr, tv, tlv, ttf, ttrf, GAMMA, LAM)[0].numpy()
    rlox = ctx.peer("rlox")
    if rlox is not None:
        # rlox: flat env-major [N*T], dones = terminated (no separate truncation)
        fn = rlox.compute_gae_batched_f32 if dt == np.float32 else rlox.compute_gae_batched
        er, ev = np.ascontiguousarray(r.T).ravel(), np.ascontiguousarray(v.T).ravel()
        ed = np.ascontiguousarray((term | trunc).T).ravel().astype(dt)
        elv = lv.copy()
        case.contenders["rlox"] = lambda: fn(er, ev, ed, elv, T, GAMMA, LAM)
        checks["rlox"] = lambda: fn(er, ev, ed, elv, T, GAMMA, LAM)[0].reshape(N, T).T
        case.notes.append(f"rlox: {fn.__name__} on env-major flat arrays (converted before timing)")
    if ctx.peer("torchrl") is not None:
        try:
            from torchrl.objectives.value.functional import generalized_advantage_estimate as tgae
        except ImportError as exc:
            ctx.skipped["torchrl"] = f"no generalized_advantage_estimate ({exc})"
        else:
            # torchrl: [N, T, 1] batch-major, next values precomputed
            nv = np.concatenate([v[1:], lv[None]], axis=0)  # [T, N]
            sv = torch.from_numpy(np.ascontiguousarray(v.T)[..., None])
            snv = torch.from_numpy(np.ascontiguousarray(nv.T)[..., None])
            sr = torch.from_numpy(np.ascontiguousarray(r.T)[..., None])
            sd = torch.from_numpy(np.ascontiguousarray((term | trunc).T)[..., None])
            st = torch.from_numpy(np.ascontiguousarray(term.T)[..., None])
            case.contenders["torchrl"] = lambda: tgae(GAMMA, LAM, sv, snv, sr, sd, st)
            checks["torchrl"] = lambda: tgae(GAMMA, LAM, sv, snv, sr, sd, st)[0][..., 0].numpy().T
    tol = 1e-3 if dt == np.float32 else 1e-9
    _run_checks(case, checks, rtol=tol, atol=tol)
    return case


def _gae_trajectory_case(ctx: Context, T: int) -> Case:
    k = ctx.rapidrl("kernels")
    rng = np.random.default_rng(1)
    r, v = rng.standard_normal(T), rng.standard_normal(T)  # [T] f64
    last = float(rng.standard_normal())
    term, trunc = _episodes(rng, T)
    case = Case(f"gae_trajectory/float64/{T}", {}, params={"T": T, "dtype": "float64"})
    checks: dict[str, Callable[[], Any]] = {}
    if k is not None and hasattr(k, "gae_trajectory"):
        case.contenders["rapidrl"] = lambda: k.gae_trajectory(r, v, last, term, trunc, gamma=GAMMA, lam=LAM)
        checks["rapidrl"] = lambda: k.gae_trajectory(r, v, last, term, trunc, gamma=GAMMA, lam=LAM)[0]
    case.contenders["numpy"] = lambda: gae_python(r, v, last, term, trunc, GAMMA, LAM)
    checks["numpy"] = lambda: gae_python(r, v, last, term, trunc, GAMMA, LAM)[0]
    case.notes.append("numpy: scalar Python loop over the NumPy arrays")
    rlox = ctx.peer("rlox")
    if rlox is not None:
        d = term | trunc
        case.contenders["rlox"] = lambda: rlox.compute_gae(r, v, d, last, GAMMA, LAM)
        checks["rlox"] = lambda: rlox.compute_gae(r, v, d, last, GAMMA, LAM)[0]
    _run_checks(case, checks, rtol=1e-9, atol=1e-9)
    return case


def _group_adv_case(ctx: Context, G: int, K: int) -> Case:
    k = ctx.rapidrl("kernels")
    rng = np.random.default_rng(2)
    rew = rng.standard_normal((G, K))  # [G, K] f64
    case = Case(f"group_advantages/{G}x{K}", {}, params={"groups": G, "group_size": K, "dtype": "float64"})
    checks: dict[str, Callable[[], Any]] = {}
    if k is not None and hasattr(k, "group_advantages"):
        case.contenders["rapidrl"] = lambda: k.group_advantages(rew)
        checks["rapidrl"] = lambda: np.reshape(k.group_advantages(rew), -1)
    case.contenders["numpy"] = lambda: group_adv_numpy(rew)
    checks["numpy"] = lambda: group_adv_numpy(rew).ravel()
    add_group_adv_peers(ctx, case, checks, rew.ravel(), K)
    _run_checks(case, checks, rtol=1e-4, atol=1e-4)
    return case


def _token_kl_case(ctx: Context, B: int, T: int) -> Case:
    k = ctx.rapidrl("kernels")
    rng = np.random.default_rng(3)
    logp = (-rng.random((B, T)) * 3).astype(np.float32)  # [B, T]
    ref = (logp + 0.1 * rng.standard_normal((B, T))).astype(np.float32)
    case = Case(f"token_kl_k3/float32/{B}x{T}", {}, params={"B": B, "T": T, "dtype": "float32"})
    checks: dict[str, Callable[[], Any]] = {}
    if k is not None and hasattr(k, "token_kl"):
        case.contenders["rapidrl"] = lambda: k.token_kl(logp, ref, estimator="k3")
        checks["rapidrl"] = lambda: k.token_kl(logp, ref, estimator="k3")
    case.contenders["numpy"] = lambda: token_kl_numpy(logp, ref)
    checks["numpy"] = lambda: token_kl_numpy(logp, ref)
    torch = ctx.peer("torch")
    if torch is not None:
        tl, tr = torch.from_numpy(logp), torch.from_numpy(ref)
        case.contenders["torch"] = lambda: token_kl_trl(tl, tr)
        checks["torch"] = lambda: token_kl_trl(tl, tr).numpy()
    rlox = ctx.peer("rlox")
    if rlox is not None:
        fl, fr = logp.ravel(), ref.ravel()
        case.contenders["rlox"] = lambda: rlox.compute_batch_token_kl_schulman_f32(fl, fr, T)
        case.notes.append(
            "rlox returns per-sequence sums [B] of k3 with the ratio the other way round "
            "(exp(logp - ref)); the others return per-token [B, T]; rlox not compared"
        )
    _run_checks(case, checks, rtol=1e-4, atol=1e-6)
    return case


def _sumtree_case(ctx: Context, capacity: int, batch: int) -> Case:
    k = ctx.rapidrl("kernels")
    rng = np.random.default_rng(4)
    prio = rng.random(capacity) + 1e-3  # [C]
    u = rng.random(batch)  # [B] in [0, 1)
    case = Case(
        f"sumtree_sample/{batch}@{capacity:.0e}", {}, params={"capacity": capacity, "batch": batch}
    )
    if k is not None and hasattr(k, "SumMinTree"):
        tree = k.SumMinTree(capacity)
        idx = np.arange(capacity, dtype=np.int64)
        case.setup["rapidrl"] = lambda: tree.set(idx, prio)
        case.contenders["rapidrl"] = lambda: tree.sample(u)
    ntree = NumpySumTree(capacity)
    case.setup["numpy"] = lambda: ntree.set_all(prio)
    case.contenders["numpy"] = lambda: ntree.sample(u)
    rlox = ctx.peer("rlox")
    if rlox is not None:
        buf = rlox.PrioritizedReplayBuffer(capacity, 1, 1)
        seeds = itertools.count()

        def fill():
            z = np.zeros(1, np.float32)
            for p in prio:
                buf.push(z, z, 0.0, False, False, z, float(p))

        case.setup["rlox"] = fill
        case.contenders["rlox"] = lambda: buf.sample(batch, next(seeds))
        case.notes.append(
            "rlox exposes no bare sum-tree: its PrioritizedReplayBuffer.sample (obs_dim 1) also gathers "
            "the transitions and computes IS weights"
        )
    return case


def cases(ctx: Context) -> Iterator[Case]:
    """All kernel cases; sizes follow PERFORMANCE.md (N envs x T steps)."""
    for N, T in ((8, 128), (64, 128), (256, 2048)):
        for dtype in (np.float32, np.float64):
            yield _gae_case(ctx, T, N, dtype)
    yield _gae_trajectory_case(ctx, 2048)
    for G, K in ((16, 4), (256, 16), (1024, 32)):
        yield _group_adv_case(ctx, G, K)
    for B, T in ((32, 2048), (1, 128), (1, 8192)):
        yield _token_kl_case(ctx, B, T)
    yield _sumtree_case(ctx, 1_000_000, 256)
