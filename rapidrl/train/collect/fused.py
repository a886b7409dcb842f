"""Fused collection: one compiled call collects a whole T x N rollout on an env written as Numba functions.

Per step, inside Numba: normalize observations, run the actor and critic MLPs reading the PyTorch
weights zero-copy (``param.detach().numpy()`` views, so optimizer steps are seen without copying), sample
actions exactly as ``ActorCritic.act`` does (categorical by inverse CDF; Gaussian with the
state-independent std, clip or tanh squash), step the env with its own compiled loop (``rapidrl.envs.core.kernels``),
write storage, value the final observations of truncated episodes, and collect
episode statistics. The per-step Python loop, the ~60-90 µs PyTorch policy call and the tensor
conversions disappear. On an env with action masks (its ``mask`` function) the discrete collector reads each step's
valid actions from the env's arena, samples among them (``rapidrl.kernels.distributions.apply_action_mask`` on the
logits, the twin of ``ActorCritic``'s masked distribution) and stores them in the rollout.

The env loop is ``rapidrl.envs.core.kernels.step_envs`` with the env's kernel key (``NumbaVecEnv.kernel_key``), a
compile-time constant: ``_collectors(key)`` binds it, so each env gets its own collector, cached on disk (functions
passed as arguments would defeat Numba's on-disk cache). Randomness comes from Numba's generator, seeded from the
algorithm's NumPy generator at every call, so a seed fixes the whole run.
"""

from __future__ import annotations

import functools
import math
from concurrent.futures import ThreadPoolExecutor
from typing import NamedTuple

import gymnasium as gym
import numba
import numpy as np
import torch

from rapidrl.envs.core import kernels as env_kernels
from rapidrl.envs.core.base import explain_empty_mask
from rapidrl.envs.core.kernels import step_env_rows, unpack
from rapidrl.kernels import distributions, mlp
from rapidrl.kernels.cache import check_stale_cache, invalidate_stale_cache
from rapidrl.kernels.distributions import (
    apply_action_mask,
    categorical_sample,
    gaussian_log_prob,
    log_sum_exp,
    tanh_log_jacobian,
)
from rapidrl.kernels.mlp import ACTIVATION_CODES
from rapidrl.kernels.mlp import forward as mlp_forward
from rapidrl.nn.numba_mlp import mlp_arrays
from rapidrl.train.timing import PhaseTimer


@numba.njit(cache=True)
def _normalize(obs, mean, std, clip, use_norm, out):
    """out = clip((obs - mean) / std, -clip, clip) in float64, as ObsNormalizer does; a copy without use_norm."""
    for n in range(obs.shape[0]):
        for j in range(obs.shape[1]):
            if use_norm:
                v = (np.float64(obs[n, j]) - mean[j]) / std[j]
                out[n, j] = min(max(v, -clip), clip)
            else:
                out[n, j] = obs[n, j]


@numba.njit(cache=True, nogil=True)
def _record_episodes(done, done_return, done_length, ep_r, ep_l, ep_count):
    for i in range(done.shape[0]):
        if done[i]:
            k = ep_count[0]
            ep_r[k] = done_return[i]
            ep_l[k] = done_length[i]
            ep_count[0] = k + 1


@numba.njit(cache=True, nogil=True)
def _final_values(obs_norm_scratch, final_obs, terminated, truncated, mean, std, clip, use_norm, cws, cbs, chs,
                  act, values_scratch, out_final_values_t):
    """Value of the true final observation where an episode was truncated (not terminated), else 0."""
    need = False
    for i in range(truncated.shape[0]):
        out_final_values_t[i] = 0.0
        if truncated[i] and not terminated[i]:
            need = True
    if need:
        _normalize(final_obs, mean, std, clip, use_norm, obs_norm_scratch)
        mlp_forward(obs_norm_scratch, cws, cbs, act, chs, values_scratch)
        for i in range(truncated.shape[0]):
            if truncated[i] and not terminated[i]:
                out_final_values_t[i] = values_scratch[i, 0]


@numba.njit(cache=True, nogil=True)
def _observe(t, lo, hi, obs, mean, std, clip, use_norm, aws, abs_, ahs, cws, cbs, chs, act, raw_obs, b_obs, head,
             values):
    """The policy's input and outputs at step t for envs lo..hi-1: their raw observations (rows of obs [N, O]) into
    raw_obs[t], normalized into b_obs[t]; the actor MLP's outputs into head [hi - lo, A] and the critic's into
    values [hi - lo, 1]."""
    raw_obs[t, lo:hi] = obs[lo:hi]
    x = b_obs[t, lo:hi]
    _normalize(obs[lo:hi], mean, std, clip, use_norm, x)
    mlp_forward(x, aws, abs_, act, ahs, head)
    mlp_forward(x, cws, cbs, act, chs, values)


@numba.njit(cache=True, nogil=True)
def step_and_store(env_code, env, actions, t, b_rewards, b_terminated, b_truncated, lo=0, hi=-1):
    """Step envs lo..hi-1 (hi = -1: to the last; ``step_env_rows``; env: the arena's ``ArenaViews``, ``unpack``) with
    ``actions`` [N] or [N, A] (every env's row) and store step t's rewards and episode-end flags (the fused
    collectors', PQN's included). Returns the first env whose new action mask has no valid action, or -1 (the
    collector then stops and its caller refuses it: ``empty_mask_error``)."""
    if hi < 0:
        hi = env.elapsed.shape[0]
    empty = step_env_rows(env_code, lo, hi, env.state, actions, env.params, env.elapsed, env.rng_key,
                          env.rng_counter, env.next_step_mode, env.needs_reset, env.obs, env.rewards, env.terminated,
                          env.truncated, env.final_obs, env.ep_return, env.ep_length, env.done_return,
                          env.done_length, env.done, env.action_mask, env.final_action_mask)
    b_rewards[t, lo:hi] = env.rewards[lo:hi]
    b_terminated[t, lo:hi] = env.terminated[lo:hi]
    b_truncated[t, lo:hi] = env.truncated[lo:hi]
    return empty


def empty_mask_error(env, stopped: int, what: str):
    """The ``ActionMaskError`` of a fused rollout that ``stopped`` (``t * N + i``: env i at rollout step t) at a mask
    without a valid action, naming the env, the step of its episode and of the rollout."""
    t, i = divmod(int(stopped), env.num_envs)
    e = explain_empty_mask(i, 1, int(env.arrays.elapsed[i]), "step")
    return type(e)(i, f"{what} rollout step {t}: {e}")


@numba.njit(cache=True, nogil=True)
def _finish_step(t, lo, hi, env, mean, std, clip, use_norm, cws, cbs, chs, act, scratch_obs, values, b_final_values,
                 ep_r, ep_l, ep_count):
    """After step t, for envs lo..hi-1: the values of the final observations of truncated episodes into
    b_final_values[t], and the episodes that ended into the episode statistics."""
    _final_values(scratch_obs, env.final_obs[lo:hi], env.terminated[lo:hi], env.truncated[lo:hi], mean, std, clip,
                  use_norm, cws, cbs, chs, act, values, b_final_values[t, lo:hi])
    _record_episodes(env.done[lo:hi], env.done_return[lo:hi], env.done_length[lo:hi], ep_r, ep_l, ep_count)


@numba.njit(cache=True, nogil=True)
def collect_discrete(env_code, arena, lo, hi, aws, abs_, ahs, cws, cbs, chs, act, mean, std, clip, use_norm, seed,
                     b_obs, b_actions, b_log_probs, b_values, b_rewards, b_terminated, b_truncated,
                     b_final_values, raw_obs, b_action_masks, logits, values, scratch_obs, ep_r, ep_l, ep_count):
    """Collect T steps of envs lo..hi-1 (discrete actions) into their columns of the rollout arrays ``b_*``
    [T, N, ...]. Returns -1, or ``t * N + i`` when env i's action mask after step t has no valid action (the rollout
    stops there). Calls on disjoint env ranges may run at once in threads (``FusedCollector``'s ``threads``).

    env_code: the env's kernel key (a compile-time constant, bound by ``_collectors``).
    arena: the env's arena (``rapidrl.envs.core.kernels.unpack``: state, params, counters, RNG, outputs).
    b_action_masks [T, N, M]: the valid actions each step acted among, for an env with action masks (M > 0: the
    arena's ``action_mask``; M = 0: no masks, nothing written).
    logits [hi - lo, A], values [hi - lo, 1], scratch_obs [hi - lo, O] and the hidden scratch ``ahs``/``chs`` are
    this range's scratch; ep_r, ep_l [T * (hi - lo)] and ep_count [1] its episode statistics.
    """
    np.random.seed(seed)  # noqa: NPY002 (Numba's per-thread generator)
    env = unpack(env_code, arena)
    n_steps, n_envs = b_values.shape
    masked = env.action_mask.shape[1] > 0
    for t in range(n_steps):
        _observe(t, lo, hi, env.obs, mean, std, clip, use_norm, aws, abs_, ahs, cws, cbs, chs, act, raw_obs, b_obs,
                 logits, values)
        if masked:
            b_action_masks[t, lo:hi] = env.action_mask[lo:hi]
        for k in range(hi - lo):
            i = lo + k
            if masked:
                apply_action_mask(logits[k], env.action_mask[i])
            lse = log_sum_exp(logits[k])
            a = categorical_sample(logits[k], lse, np.random.random())  # noqa: NPY002
            b_actions[t, i] = a
            b_log_probs[t, i] = logits[k, a] - lse
            b_values[t, i] = values[k, 0]
        empty = step_and_store(env_code, env, b_actions[t], t, b_rewards, b_terminated, b_truncated, lo, hi)
        if empty >= 0:
            return t * n_envs + empty
        _finish_step(t, lo, hi, env, mean, std, clip, use_norm, cws, cbs, chs, act, scratch_obs, values,
                     b_final_values, ep_r, ep_l, ep_count)
    return -1


@numba.njit(cache=True, nogil=True)
def collect_continuous(env_code, arena, lo, hi, aws, abs_, ahs, cws, cbs, chs, act, mean, std, clip, use_norm, seed,
                       log_std, low, high, tanh_squash, env_actions,
                       b_obs, b_actions, b_log_probs, b_values, b_rewards, b_terminated, b_truncated,
                       b_final_values, raw_obs, means, values, scratch_obs, ep_r, ep_l, ep_count):
    """As ``collect_discrete`` for Box actions: raw Gaussian samples stored in b_actions [T, N, A], env actions
    (clipped, or tanh-scaled to [low, high]) in ``env_actions`` [N, A] (rows lo..hi-1 written)."""
    np.random.seed(seed)  # noqa: NPY002 (Numba's per-thread generator)
    env = unpack(env_code, arena)
    n_steps = b_values.shape[0]
    n_dims = means.shape[1]
    for t in range(n_steps):
        _observe(t, lo, hi, env.obs, mean, std, clip, use_norm, aws, abs_, ahs, cws, cbs, chs, act, raw_obs, b_obs,
                 means, values)
        for k in range(hi - lo):
            i = lo + k
            logp = 0.0
            for d in range(n_dims):
                sd = math.exp(np.float64(log_std[d]))
                z = np.random.standard_normal()  # noqa: NPY002
                raw = np.float32(means[k, d] + sd * z)
                b_actions[t, i, d] = raw
                r = np.float64(raw)
                logp += gaussian_log_prob(r, means[k, d], np.float64(log_std[d]))
                if tanh_squash:
                    half = (np.float64(high[d]) - low[d]) / 2.0
                    logp -= tanh_log_jacobian(r, half)
                    env_actions[i, d] = low[d] + (math.tanh(r) + 1.0) * half
                else:
                    env_actions[i, d] = min(max(raw, low[d]), high[d])
            b_log_probs[t, i] = logp
            b_values[t, i] = values[k, 0]
        step_and_store(env_code, env, env_actions, t, b_rewards, b_terminated, b_truncated, lo, hi)
        _finish_step(t, lo, hi, env, mean, std, clip, use_norm, cws, cbs, chs, act, scratch_obs, values,
                     b_final_values, ep_r, ep_l, ep_count)


# The collectors inline the core's step loop: recompile them whenever its source changes (an env's own functions
# are covered by its kernel key, which hashes their source).
invalidate_stale_cache(collect_discrete, [m.__file__ for m in (env_kernels, env_kernels._bookkeeping,
                                                                env_kernels._arena, env_kernels.rng, distributions,
                                                                mlp, mlp.activations)])


@functools.cache
def _collectors(key: str) -> tuple:
    """(collect_discrete, collect_continuous) bound to env kernel ``key``: one compiled collector per env. (The
    arguments are spelled out: Numba passes the key on as a compile-time constant only through explicit arguments.)"""
    check_stale_cache(collect_discrete)  # before these closures' own cache files are first read

    @numba.njit(cache=True, nogil=True)
    def discrete(arena, lo, hi, aws, abs_, ahs, cws, cbs, chs, act, mean, std, clip, use_norm, seed, b_obs,
                 b_actions, b_log_probs, b_values, b_rewards, b_terminated, b_truncated, b_final_values, raw_obs,
                 b_action_masks, logits, values, scratch_obs, ep_r, ep_l, ep_count):
        return collect_discrete(key, arena, lo, hi, aws, abs_, ahs, cws, cbs, chs, act, mean, std, clip, use_norm, seed,
                                b_obs, b_actions, b_log_probs, b_values, b_rewards, b_terminated, b_truncated,
                                b_final_values, raw_obs, b_action_masks, logits, values, scratch_obs, ep_r, ep_l,
                                ep_count)

    @numba.njit(cache=True, nogil=True)
    def continuous(arena, lo, hi, aws, abs_, ahs, cws, cbs, chs, act, mean, std, clip, use_norm, seed, log_std,
                   low, high, tanh_squash, env_actions, b_obs, b_actions, b_log_probs, b_values, b_rewards,
                   b_terminated, b_truncated, b_final_values, raw_obs, means, values, scratch_obs, ep_r, ep_l,
                   ep_count):
        collect_continuous(key, arena, lo, hi, aws, abs_, ahs, cws, cbs, chs, act, mean, std, clip, use_norm, seed,
                           log_std, low, high, tanh_squash, env_actions, b_obs, b_actions, b_log_probs, b_values,
                           b_rewards, b_terminated, b_truncated, b_final_values, raw_obs, means, values, scratch_obs,
                           ep_r, ep_l, ep_count)

    return discrete, continuous


def fused_unavailable(env, policy, device) -> str | None:
    """None when ``FusedCollector`` can run ``policy`` on ``env``, else what to change: it needs an env written as
    Numba functions (``rapidrl.envs.NumbaVecEnv``, single-agent, flat float32 observations, SAME_STEP autoreset)
    and separate feed-forward MLPs on the CPU."""
    why = fused_env_unavailable(env, device)
    if why is not None:
        return why
    if getattr(policy, "recurrent", False):
        return "needs a feed-forward policy (recurrent='none')"
    if policy.shared or policy.encoder_kind != "mlp":
        return "needs separate actor and critic MLPs (shared=False, encoder='mlp')"
    if getattr(policy, "multi", False):
        return "covers Discrete and Box actions (MultiDiscrete/MultiBinary collect with collection='step')"
    return None


def fused_env_unavailable(env, device) -> str | None:
    """None when a fused collector (this module's, PQN's ``rapidrl.train.collect.fused_q``) can step ``env`` inside its
    compiled loop with networks on ``device``, else what to change (``fused_unavailable``'s env and device part)."""
    from rapidrl.envs import NumbaVecEnv

    if not isinstance(env, NumbaVecEnv):
        return f"needs an env written as Numba functions (rapidrl.envs.NumbaVecEnv), got {type(env).__name__}"
    if env.debug:  # a bounds error inside the fused rollout could not say where it is; NumbaVecEnv.step does
        return "needs an env without debug=True (the bounds-checked mode steps through the env, naming a bad index)"
    obs = env.single_observation_space
    if env.agents != 1 or len(obs.shape) != 1 or obs.dtype != np.float32:
        return "needs a single-agent env with flat float32 observations"
    if env.autoreset_mode != gym.vector.AutoresetMode.SAME_STEP:
        return "needs the env's autoreset_mode='same_step'"
    if torch_device_type(device) != "cpu":
        return "needs device='cpu'"
    return None


def torch_device_type(device) -> str:
    return getattr(device, "type", str(device).split(":")[0])


class RangeScratch(NamedTuple):
    """One env range's rows of a fused collector's scratch (``FusedCollector``) and its part of the episode
    statistics."""

    ahs: tuple
    chs: tuple
    head: np.ndarray
    values: np.ndarray
    obs: np.ndarray
    ep_r: np.ndarray
    ep_l: np.ndarray
    ep_count: np.ndarray


def env_ranges(num_envs: int, threads: int) -> list[tuple[int, int]]:
    """``threads`` contiguous ranges (lo, hi) of near-equal size covering envs 0..num_envs-1 (the first ones larger
    by one where they do not divide evenly)."""
    size, extra = divmod(num_envs, threads)
    bounds = [0]
    for c in range(threads):
        bounds.append(bounds[-1] + size + (c < extra))
    return list(zip(bounds[:-1], bounds[1:]))


def range_seeds(seed: int, threads: int) -> list[int]:
    """The Numba generator's seed for each env range of a rollout seeded ``seed``: ``seed`` itself for one range (the
    single-threaded collector's stream), else ``threads`` seeds drawn from ``np.random.SeedSequence(seed)``."""
    if threads == 1:
        return [int(seed)]
    return [int(s) for s in np.random.SeedSequence(int(seed)).generate_state(threads)]


class FusedCollector:
    """Collects rollouts of ``policy`` on ``env`` into a RolloutBuffer with one compiled call each.

    It holds zero-copy views of the policy's weights, so it always acts with the current parameters of
    ``policy`` (give it a separate copy of the policy to act with a published snapshot instead, as an
    asynchronous collector does). The kernels release the GIL (``nogil``), so a collector can run in a
    thread while PyTorch trains in another.

    ``threads`` > 1 splits the envs into that many contiguous ranges (``env_ranges``), each collected by one compiled
    call in its own thread (this one and ``threads - 1`` workers) with its own scratch and its own random stream
    (``range_seeds``): the same rollout for a given seed and thread count on every run, a different one from another
    thread count (the actions are drawn from other streams; the envs' own randomness is per env and unchanged).
    """

    seeded = True
    """Every rollout takes a seed (Numba's generator is reseeded with it): the learner draws one per rollout."""

    def __init__(self, env, policy, num_steps: int, timer: PhaseTimer | None = None, threads: int = 1):
        n, obs_dim = env.num_envs, policy.obs_dim
        if isinstance(threads, bool) or not isinstance(threads, int) or not 1 <= threads <= n:
            raise ValueError(f"threads must be an int in [1, num_envs={n}], got {threads!r}")
        self.env, self.policy = env, policy
        self.timer = timer if timer is not None else PhaseTimer()
        self.discrete = policy.discrete
        self._collect_discrete, self._collect_continuous = _collectors(env.kernel_key)
        self.arena = env.arena
        self.aws, self.abs = mlp_arrays(policy.actor)
        self.cws, self.cbs = mlp_arrays(policy.critic)
        self.act = ACTIVATION_CODES[policy.activation]
        self.ranges = env_ranges(n, threads)
        ahs = tuple(np.zeros((n, h), np.float32) for h in policy.hidden)
        chs = tuple(np.zeros((n, h), np.float32) for h in policy.hidden)
        head = np.zeros((n, policy.action_dim), np.float32)
        values = np.zeros((n, 1), np.float32)
        scratch_obs = np.zeros((n, obs_dim), np.float32)
        ep_r, ep_l = np.zeros(num_steps * n, np.float32), np.zeros(num_steps * n, np.int32)
        self.ep_count = np.zeros(threads, np.int64)
        self._scratch = [
            RangeScratch(tuple(h[lo:hi] for h in ahs), tuple(h[lo:hi] for h in chs), head[lo:hi], values[lo:hi],
                         scratch_obs[lo:hi], ep_r[num_steps * lo:num_steps * hi], ep_l[num_steps * lo:num_steps * hi],
                         self.ep_count[c:c + 1])
            for c, (lo, hi) in enumerate(self.ranges)]
        self._workers = None if threads == 1 else ThreadPoolExecutor(threads - 1,
                                                                       thread_name_prefix="rapidrl-collect")
        if not self.discrete:
            self.log_std = policy.log_std.detach().numpy()
            self.low = policy.action_low.numpy().astype(np.float32)
            self.high = policy.action_high.numpy().astype(np.float32)
            self.env_actions = np.zeros((n, policy.action_dim), np.float32)
        self._no_stats = (np.zeros(obs_dim), np.ones(obs_dim))

    def collect(self, buffer, obs: np.ndarray, raw_obs: np.ndarray, obs_normalizer, seed: int
                ) -> tuple[np.ndarray, np.ndarray]:
        """Fill ``buffer`` (a full rollout, advantages not computed) starting from ``obs`` [N, O] (timed as the phase
        "collect").

        On return ``obs`` holds the observations after the last step and ``raw_obs`` [T, N, O] the
        un-normalized observations of every step. Returns (returns, lengths) of the episodes that ended.
        """
        with self.timer.phase("collect"):
            return self._collect(buffer, obs, raw_obs, obs_normalizer, seed)

    def value(self, obs: torch.Tensor) -> torch.Tensor:
        """Values [N] of the observations after the rollout (its bootstrap): the policy's critic."""
        return self.policy.value(obs)

    def close(self) -> None:
        """Stop the worker threads of ``threads`` > 1 (the collector cannot collect afterwards)."""
        if self._workers is not None:
            self._workers.shutdown()
            self._workers = None

    def _collect(self, buffer, obs: np.ndarray, raw_obs: np.ndarray, obs_normalizer, seed: int
                 ) -> tuple[np.ndarray, np.ndarray]:
        buffer.reset()
        norm = obs_normalizer
        if norm is not None:
            mean, std, clip = norm.rms.mean, np.sqrt(norm.rms.var + norm.eps), norm.clip
        else:
            (mean, std), clip = self._no_stats, 0.0
        self.ep_count[:] = 0
        np.copyto(self.env.arrays.obs, obs)
        weights = (self.aws, self.abs)
        storage = (buffer.obs, buffer.actions, buffer.log_probs, buffer.values, buffer.rewards, buffer.terminated,
                   buffer.truncated, buffer.final_values, raw_obs)
        if self.discrete and buffer.action_mask_size != self.env.action_mask_size:
            raise ValueError(f"the rollout stores action masks of width {buffer.action_mask_size}, the env's are "
                             f"{self.env.action_mask_size} wide")

        def run(c: int, seed_c: int):
            (lo, hi), sc = self.ranges[c], self._scratch[c]
            common = (self.arena, lo, hi, *weights, sc.ahs, self.cws, self.cbs, sc.chs, self.act, mean, std, clip,
                      norm is not None, seed_c)
            if self.discrete:
                return self._collect_discrete(*common, *storage, buffer.action_masks, sc.head, sc.values, sc.obs,
                                              sc.ep_r, sc.ep_l, sc.ep_count)
            self._collect_continuous(*common, self.log_std, self.low, self.high, self.policy.squash == "tanh",
                                     self.env_actions, *storage, sc.head, sc.values, sc.obs, sc.ep_r, sc.ep_l,
                                     sc.ep_count)
            return -1

        threads = len(self.ranges)
        if threads > 1 and self._workers is None:
            raise RuntimeError("this collector was closed")
        seeds = range_seeds(seed, threads)
        others = [self._workers.submit(run, c, seeds[c]) for c in range(1, threads)]
        try:
            first = run(0, seeds[0])
        finally:  # never leave a worker writing after an error here
            rest = [f.result() for f in others]
        stopped = [s for s in (first, *rest) if s >= 0]
        if stopped:
            raise empty_mask_error(self.env, min(stopped), "the fused collector's")
        buffer.mark_full()
        np.copyto(obs, self.env.arrays.obs)
        ended = [(sc.ep_r[:k], sc.ep_l[:k]) for sc, k in zip(self._scratch, self.ep_count.tolist(), strict=True)]
        return np.concatenate([r for r, _ in ended]), np.concatenate([n for _, n in ended])
