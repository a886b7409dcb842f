"""Replay-buffer suite: add, uniform sample, prioritized sample and priority update.

Observations: ``vec`` = float32 [4] (CartPole) and ``img`` = uint8 [84, 84, 4] (Atari frames).
Contenders: ``rapidrl`` (``rapidrl.ReplayBuffer`` / ``PrioritizedReplayBuffer``), ``rlox``
(``ReplayBuffer.push_batch`` / ``sample``; ``PrioritizedReplayBuffer``), ``sb3``
(``stable_baselines3.common.buffers.ReplayBuffer``, which returns torch tensors) and ``torchrl``
(``ReplayBuffer`` over ``LazyTensorStorage``, ``PrioritizedReplayBuffer``). Inputs are built in each
contender's native form before timing (flat float32 for rlox, TensorDicts for torchrl).

Buffers are filled (untimed) before sampling. Image buffers hold 10^4 transitions instead of 10^5:
10^5 frames are 2.8 GB per observation array (11 GB as rlox's float32), too much for a shared machine;
the cost of sampling images is the copy of the sampled frames, which does not depend on capacity.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator

import numpy as np

from rapidrl.benchmarks.harness import Case, Context

REPEATS = {"quick": 5, "full": 30}
OBS = {"vec": ((4,), np.float32), "img": ((84, 84, 4), np.uint8)}
CAPACITY = {"vec": 100_000, "img": 10_000}
FILL_CHUNK = 1000
ALPHA, BETA = 0.6, 0.4


class Batch:
    """Random transitions [B, ...] of one observation kind, in every contender's native form."""

    def __init__(self, kind: str, B: int, seed: int = 0):
        shape, dtype = OBS[kind]
        rng = np.random.default_rng(seed)
        self.B, self.shape, self.dtype = B, shape, dtype
        if dtype == np.uint8:
            self.obs = rng.integers(0, 256, (B, *shape), dtype=np.uint8)
            self.next_obs = rng.integers(0, 256, (B, *shape), dtype=np.uint8)
        else:
            self.obs = rng.standard_normal((B, *shape)).astype(dtype)
            self.next_obs = rng.standard_normal((B, *shape)).astype(dtype)
        self.actions = rng.integers(0, 2, B).astype(np.int64)  # [B]
        self.rewards = rng.standard_normal(B).astype(np.float32)
        self.terminated = rng.random(B) < 0.01
        self.truncated = np.zeros(B, dtype=bool)

    def rlox_args(self):
        """(obs, next_obs, actions, rewards, terminated, truncated) as rlox.push_batch wants them."""
        return (
            self.obs.reshape(-1).astype(np.float32),
            self.next_obs.reshape(-1).astype(np.float32),
            self.actions.astype(np.float32),
            self.rewards,
            self.terminated.astype(np.uint8),
            self.truncated.astype(np.uint8),
        )

    def sb3_args(self):
        """(obs, next_obs, action, reward, done, infos) for SB3's ReplayBuffer.add with n_envs = B."""
        return (self.obs, self.next_obs, self.actions[:, None], self.rewards,
                self.terminated | self.truncated, [{} for _ in range(self.B)])

    def tensordict(self):
        """A TensorDict [B] for torchrl's ``extend``."""
        import torch
        from tensordict import TensorDict

        return TensorDict(
            {
                "obs": torch.from_numpy(self.obs),
                "next_obs": torch.from_numpy(self.next_obs),
                "action": torch.from_numpy(self.actions),
                "reward": torch.from_numpy(self.rewards),
                "terminated": torch.from_numpy(self.terminated),
                "truncated": torch.from_numpy(self.truncated),
            },
            batch_size=[self.B],
        )


def _obs_dim(kind: str) -> int:
    return int(np.prod(OBS[kind][0]))


def _rapidrl_buffer(ctx: Context, kind: str, capacity: int):
    cls = ctx.rapidrl("ReplayBuffer")
    if cls is None:
        return None
    shape, dtype = OBS[kind]
    return cls(capacity, shape, action_shape=(), obs_dtype=dtype, action_dtype=np.int64, seed=0)


def _sb3_buffer(ctx: Context, kind: str, capacity: int, n_envs: int):
    if ctx.peer("sb3") is None:
        return None
    import gymnasium as gym
    from stable_baselines3.common.buffers import ReplayBuffer

    shape, dtype = OBS[kind]
    low, high = (0, 255) if dtype == np.uint8 else (-np.inf, np.inf)
    space = gym.spaces.Box(low, high, shape, dtype)
    return ReplayBuffer(capacity, space, gym.spaces.Discrete(2), device="cpu", n_envs=n_envs)


def _torchrl_buffer(ctx: Context, capacity: int, prioritized: bool = False):
    if ctx.peer("torchrl") is None:
        return None
    from torchrl.data import LazyTensorStorage, PrioritizedReplayBuffer, ReplayBuffer

    if prioritized:
        return PrioritizedReplayBuffer(alpha=ALPHA, beta=BETA, storage=LazyTensorStorage(capacity))
    return ReplayBuffer(storage=LazyTensorStorage(capacity))


def _add_case(ctx: Context, kind: str, B: int) -> Case:
    cap = CAPACITY[kind]
    b = Batch(kind, B)
    case = Case(f"add/{kind}/{B}", {}, params={"obs": kind, "batch": B, "capacity": cap},
                items_per_call=B, item_unit="transitions")
    rb = _rapidrl_buffer(ctx, kind, cap)
    if rb is not None:
        case.contenders["rapidrl"] = lambda: rb.add(b.obs, b.actions, b.rewards, b.next_obs, b.terminated,
                                                    b.truncated)
    rlox = ctx.peer("rlox")
    if rlox is not None:
        xb, xargs = rlox.ReplayBuffer(cap, _obs_dim(kind), 1), b.rlox_args()
        case.contenders["rlox"] = lambda: xb.push_batch(*xargs)
        if kind == "img":
            case.notes.append("rlox stores observations as float32 (4x the bytes of uint8 frames)")
    sb = _sb3_buffer(ctx, kind, cap, n_envs=B)
    if sb is not None:
        sargs = b.sb3_args()
        case.contenders["sb3"] = lambda: sb.add(*sargs)
    tb = _torchrl_buffer(ctx, cap)
    if tb is not None:
        td = b.tensordict()
        case.contenders["torchrl"] = lambda: tb.extend(td)
    return case


def _fill_chunks(kind: str, capacity: int) -> Iterator[Batch]:
    """``capacity`` transitions as batches of ``FILL_CHUNK``."""
    for i in range(0, capacity, FILL_CHUNK):
        yield Batch(kind, min(FILL_CHUNK, capacity - i), seed=1 + i)


def _sample_case(ctx: Context, kind: str, k: int) -> Case:
    cap = CAPACITY[kind]
    case = Case(f"sample/{kind}/{k}@{cap:.0e}", {}, params={"obs": kind, "batch": k, "capacity": cap},
                items_per_call=k, item_unit="transitions")
    rb = _rapidrl_buffer(ctx, kind, cap)
    if rb is not None:

        def fill_rapidrl():
            for c in _fill_chunks(kind, cap):
                rb.add(c.obs, c.actions, c.rewards, c.next_obs, c.terminated, c.truncated)

        case.setup["rapidrl"] = fill_rapidrl
        if hasattr(rb, "sampler"):  # the bound fast path, built once (untimed); sample() as rapidrl/plain
            sampler = rb.sampler(k, seed=0)
            case.contenders["rapidrl"] = sampler
            case.contenders["rapidrl/plain"] = lambda: rb.sample(k)
            case.contenders["rapidrl/torch"] = lambda: sampler(as_torch=True)
            case.notes.append("rapidrl: buffer.sampler(k) built once, called per batch; rapidrl/plain: sample(k)")
        else:
            case.contenders["rapidrl"] = lambda: rb.sample(k)
            case.contenders["rapidrl/torch"] = lambda: rb.sample(k, as_torch=True)
    rlox = ctx.peer("rlox")
    if rlox is not None:
        xb, seeds = rlox.ReplayBuffer(cap, _obs_dim(kind), 1), itertools.count()

        def fill_rlox():
            for c in _fill_chunks(kind, cap):
                xb.push_batch(*c.rlox_args())

        case.setup["rlox"] = fill_rlox
        case.contenders["rlox"] = lambda: xb.sample(k, next(seeds))
    sb = _sb3_buffer(ctx, kind, cap, n_envs=1)
    if sb is not None:

        def fill_sb3():
            # SB3 adds one vector-env step per call; write its storage directly (untimed) instead
            for i, c in enumerate(_fill_chunks(kind, cap)):
                sl = slice(i * FILL_CHUNK, i * FILL_CHUNK + c.B)
                sb.observations[sl, 0] = c.obs
                sb.next_observations[sl, 0] = c.next_obs
                sb.actions[sl, 0, 0] = c.actions
                sb.rewards[sl, 0] = c.rewards
                sb.dones[sl, 0] = c.terminated
            sb.full, sb.pos = True, 0

        case.setup["sb3"] = fill_sb3
        case.contenders["sb3"] = lambda: sb.sample(k)
        case.notes.append("sb3 returns torch tensors: compare it with rapidrl/torch (sample(as_torch=True))")
    tb = _torchrl_buffer(ctx, cap)
    if tb is not None:

        def fill_torchrl():
            for c in _fill_chunks(kind, cap):
                tb.extend(c.tensordict())

        case.setup["torchrl"] = fill_torchrl
        case.contenders["torchrl"] = lambda: tb.sample(k)
    return case


def _prioritized_case(ctx: Context, op: str, cap: int, k: int = 256) -> Case:
    """``op`` = "sample" (draw k with IS weights) or "update" (set k priorities)."""
    kind = "vec"
    case = Case(f"per_{op}/{k}@{cap:.0e}", {}, params={"op": op, "batch": k, "capacity": cap, "obs": kind,
                                                       "alpha": ALPHA, "beta": BETA},
                items_per_call=k, item_unit="transitions")
    rng = np.random.default_rng(5)
    prio = rng.random(cap) + 1e-3  # [cap] initial priorities
    new_prio = rng.random(k) + 1e-3  # [k]
    idx = rng.choice(cap, k, replace=False)  # [k] int64
    cls = ctx.rapidrl("PrioritizedReplayBuffer")
    if cls is not None:
        per = cls(cap, OBS[kind][0], alpha=ALPHA, beta=BETA, seed=0, action_dtype=np.int64)

        def fill_rapidrl():
            for c in _fill_chunks(kind, cap):
                per.add(c.obs, c.actions, c.rewards, c.next_obs, c.terminated, c.truncated)
            per.update_priorities(np.arange(cap), prio)

        case.setup["rapidrl"] = fill_rapidrl
        if op == "sample" and hasattr(per, "sampler"):  # the bound fast path; sample() as rapidrl/plain
            case.contenders["rapidrl"] = per.sampler(k, seed=0)
            case.contenders["rapidrl/plain"] = lambda: per.sample(k)
            case.notes.append("rapidrl: buffer.sampler(k) built once, called per batch; rapidrl/plain: sample(k)")
        else:
            case.contenders["rapidrl"] = (lambda: per.sample(k)) if op == "sample" else (
                lambda: per.update_priorities(idx, new_prio))
    rlox = ctx.peer("rlox")
    if rlox is not None:
        xp = rlox.PrioritizedReplayBuffer(cap, _obs_dim(kind), 1, ALPHA, BETA)
        seeds, uidx = itertools.count(), idx.astype(np.uint64)

        def fill_rlox():
            z = np.zeros(_obs_dim(kind), np.float32)
            a = np.zeros(1, np.float32)
            for p in prio:  # rlox has no batched push for this buffer
                xp.push(z, a, 0.0, False, False, z, float(p))

        case.setup["rlox"] = fill_rlox
        case.contenders["rlox"] = (lambda: xp.sample(k, next(seeds))) if op == "sample" else (
            lambda: xp.update_priorities(uidx, new_prio))
    if ctx.peer("torchrl") is not None:
        import torch

        try:
            _torchrl_buffer(ctx, 8, prioritized=True).extend(Batch(kind, 8).tensordict())
        except RuntimeError as exc:
            case.notes.append(f"torchrl PrioritizedReplayBuffer unusable here: {exc}")
        else:
            tp = _torchrl_buffer(ctx, cap, prioritized=True)
            tidx, tprio = torch.from_numpy(idx), torch.from_numpy(new_prio)

            def fill_torchrl():
                for c in _fill_chunks(kind, cap):
                    tp.extend(c.tensordict())
                tp.update_priority(torch.arange(cap), torch.from_numpy(prio))

            case.setup["torchrl"] = fill_torchrl
            case.contenders["torchrl"] = (lambda: tp.sample(k)) if op == "sample" else (
                lambda: tp.update_priority(tidx, tprio))
    return case


def cases(ctx: Context) -> Iterator[Case]:
    """Add, sample, then prioritized sample/update; one case's buffers are alive at a time."""
    for kind in OBS:
        for B in (1, 8, 256):
            yield _add_case(ctx, kind, B)
        for k in (256, 1024):
            yield _sample_case(ctx, kind, k)
    for cap in (100_000, 1_000_000):
        for op in ("sample", "update"):
            yield _prioritized_case(ctx, op, cap)
