"""Fused epsilon-greedy collection for a Q network (PQN): one compiled call collects a whole T x N rollout on an env
written as Numba functions.

Per step, inside Numba: the Q network's forward (``rapidrl.kernels.mlp.forward_norm`` for PQN's LayerNorm MLP,
``forward`` without norms) on the observations, reading the PyTorch weights zero-copy; the epsilon-greedy action and
the greedy value of every env (``rapidrl.kernels.exploration.epsilon_greedy_row``: the same draws of the same
counter-based streams as the step collector's ``epsilon_greedy``, so the same Q values give the same actions; over the
valid actions only for an env with action masks, read from its arena: ``masked_epsilon_greedy_row``); the env's
compiled step (``rapidrl.envs.core.kernels``); storage; max_a Q of the final observation of every truncated episode
(over the valid actions of its final state); episode statistics. As ``rapidrl.train.collect.fused`` does for the
actor-critic policies, the env kernel's key is a compile-time constant bound by ``_collector(key)`` (one collector per
env, cached on disk).
"""

from __future__ import annotations

import functools

import numba
import numpy as np
from torch import nn

from rapidrl.envs.core import kernels as env_kernels
from rapidrl.envs.core.kernels import unpack
from rapidrl.kernels import distributions, exploration, mlp
from rapidrl.kernels.cache import check_stale_cache, invalidate_stale_cache
from rapidrl.kernels.distributions import masked_max
from rapidrl.kernels.exploration import epsilon_greedy_row, masked_epsilon_greedy_row
from rapidrl.kernels.mlp import ACTIVATION_CODES, forward, forward_norm
from rapidrl.nn.numba_mlp import mlp_arrays, norm_arrays
from rapidrl.train.collect import fused
from rapidrl.train.collect.fused import _record_episodes, empty_mask_error, fused_env_unavailable, step_and_store

__all__ = ["FusedQCollector", "fused_q_unavailable"]

_TWO = np.uint64(2)


@numba.njit(cache=True, nogil=True)
def _q_forward(x, ws, bs, gammas, betas, ln_eps, norm, act, hs, out):
    """Q values out[:R] [R, A] of x [R, O]: ``forward_norm`` (LayerNorm MLP) or ``forward``."""
    if norm:
        forward_norm(x, ws, bs, gammas, betas, ln_eps, act, hs, out)
    else:
        forward(x, ws, bs, act, hs, out)


@numba.njit(cache=True, nogil=True)
def collect_epsilon_greedy(env_code, arena, ws, bs, gammas, betas, ln_eps, norm, act, epsilon, keys, counters,
                           b_obs, b_actions, b_values, b_rewards, b_terminated, b_truncated, b_final_values,
                           hs, q, ep_r, ep_l, ep_count):
    """Collect T steps of N envs into the rollout arrays ``b_*`` [T, N, ...] acting epsilon-greedily on the Q network.

    env_code: the env's kernel key (a compile-time constant, bound by ``_collector``); arena: the env's arena.
    ws, bs (gammas, betas, ln_eps): the network's parameters (``norm``: with LayerNorms); act: hidden activation.
    keys, counters: [N] uint64 acting streams (counters advance by 2 per step). hs, q [N, A]: scratch.
    b_values[t] = max_a Q(obs[t]); b_final_values[t] = max_a Q(final obs) where truncated and not terminated, else 0
    (max over the valid actions of an env with action masks: its arena's ``action_mask``/``final_action_mask``).
    Returns -1, or ``t * N + i`` when env i's action mask after step t has no valid action (the rollout stops there).
    """
    env = unpack(env_code, arena)
    obs, terminated, truncated, final_obs = env.obs, env.terminated, env.truncated, env.final_obs
    n_steps, n_envs = b_values.shape
    masked = env.action_mask.shape[1] > 0
    for t in range(n_steps):
        b_obs[t] = obs
        _q_forward(b_obs[t], ws, bs, gammas, betas, ln_eps, norm, act, hs, q)
        for i in range(n_envs):
            if masked:
                a, m = masked_epsilon_greedy_row(q[i], env.action_mask[i], epsilon, keys[i], counters[i])
            else:
                a, m = epsilon_greedy_row(q[i], epsilon, keys[i], counters[i])
            counters[i] += _TWO
            b_actions[t, i] = a
            b_values[t, i] = m
        empty = step_and_store(env_code, env, b_actions[t], t, b_rewards, b_terminated, b_truncated)
        if empty >= 0:
            return t * n_envs + empty
        need = False
        for i in range(n_envs):
            b_final_values[t, i] = 0.0
            need = need or (truncated[i] and not terminated[i])
        if need:
            _q_forward(final_obs, ws, bs, gammas, betas, ln_eps, norm, act, hs, q)
            for i in range(n_envs):
                if truncated[i] and not terminated[i]:
                    if masked:
                        b_final_values[t, i] = masked_max(q[i], env.final_action_mask[i])[1]
                    else:
                        m = q[i, 0]
                        for k in range(1, q.shape[1]):
                            m = max(m, q[i, k])
                        b_final_values[t, i] = m
        _record_episodes(env.done, env.done_return, env.done_length, ep_r, ep_l, ep_count)
    return -1


# The collector inlines the env core's step loop (through the fused collectors' step_and_store), the MLP and the
# epsilon-greedy choice: recompile it whenever their source changes (an env's own functions are covered by its
# kernel key).
invalidate_stale_cache(collect_epsilon_greedy, [m.__file__ for m in (env_kernels, env_kernels._bookkeeping,
                                                                      env_kernels._arena, env_kernels.rng, exploration,
                                                                      distributions, mlp, mlp.activations, fused)])


@functools.cache
def _collector(key: str):
    """``collect_epsilon_greedy`` bound to env kernel ``key`` (arguments spelled out, as
    ``rapidrl.train.collect.fused``)."""
    check_stale_cache(collect_epsilon_greedy)  # before these closures' own cache files are first read

    @numba.njit(cache=True, nogil=True)
    def collect(arena, ws, bs, gammas, betas, ln_eps, norm, act, epsilon, keys, counters, b_obs, b_actions, b_values,
                b_rewards, b_terminated, b_truncated, b_final_values, hs, q, ep_r, ep_l, ep_count):
        return collect_epsilon_greedy(key, arena, ws, bs, gammas, betas, ln_eps, norm, act, epsilon, keys, counters,
                                      b_obs, b_actions, b_values, b_rewards, b_terminated, b_truncated,
                                      b_final_values, hs, q, ep_r, ep_l, ep_count)

    return collect


def fused_q_unavailable(env, q_net, device) -> str | None:
    """None when ``FusedQCollector`` can run ``q_net`` (a ``QNetwork``) on ``env``, else what to change: the env
    conditions of ``rapidrl.train.collect.fused`` and a plain MLP Q network (with or without LayerNorms) on the CPU."""
    why = fused_env_unavailable(env, device)
    if why is not None:
        return why
    if q_net.has_encoder:
        return "needs an MLP Q network (image observations use a CNN encoder)"
    if q_net.dueling:
        return "needs a plain MLP Q network (dueling=False)"
    return None


class FusedQCollector:
    """Collects epsilon-greedy rollouts of a ``QNetwork`` on ``env`` into a ``RolloutBuffer``, one compiled call each.

    It reads the network's weights zero-copy (it always acts with the current parameters) and draws from the acting
    streams ``keys``/``counters`` [N] uint64 (advanced in place), the same streams as PQN's step collection.
    """

    def __init__(self, env, q_net, num_steps: int, keys: np.ndarray, counters: np.ndarray):
        n = env.num_envs
        self.env, self.keys, self.counters = env, keys, counters
        self._collect = _collector(env.kernel_key)
        seq = q_net.net
        self.norm = any(isinstance(m, nn.LayerNorm) for m in seq)
        if self.norm:
            self.ws, self.bs, self.gammas, self.betas, self.ln_eps = norm_arrays(seq)
        else:
            self.ws, self.bs = mlp_arrays(seq)
            self.gammas = tuple(np.ones(w.shape[0], np.float32) for w in self.ws[:-1])  # typed, unused
            self.betas = tuple(np.zeros(w.shape[0], np.float32) for w in self.ws[:-1])
            self.ln_eps = 0.0
        if any(w.dtype != np.float32 for w in self.ws):
            raise TypeError("FusedQCollector needs float32 CPU parameters")
        self.act = ACTIVATION_CODES["relu"]  # QNetwork's MLPs (rapidrl.nn.qnets)
        self.hs = tuple(np.zeros((n, w.shape[0]), np.float32) for w in self.ws[:-1])
        self.q = np.zeros((n, self.ws[-1].shape[0]), np.float32)
        self.ep_r = np.zeros(num_steps * n, np.float32)
        self.ep_l = np.zeros(num_steps * n, np.int32)
        self.ep_count = np.zeros(1, np.int64)

    def collect(self, buffer, obs: np.ndarray, epsilon: float) -> tuple[np.ndarray, np.ndarray]:
        """Fill ``buffer`` (obs, actions, values = max_a Q, rewards, flags, final values) from ``obs`` [N, O], updated
        in place to the observations after the last step (an env with masks: the valid actions are its arena's,
        ``env.action_masks()``). Returns (returns, lengths) of the episodes that ended."""
        buffer.reset()
        self.ep_count[0] = 0
        np.copyto(self.env.arrays.obs, obs)
        stopped = self._collect(self.env.arena, self.ws, self.bs, self.gammas, self.betas, self.ln_eps, self.norm,
                                self.act, float(epsilon), self.keys, self.counters, buffer.obs, buffer.actions,
                                buffer.values, buffer.rewards, buffer.terminated, buffer.truncated, buffer.final_values,
                                self.hs, self.q, self.ep_r, self.ep_l, self.ep_count)
        if stopped >= 0:
            raise empty_mask_error(self.env, stopped, "PQN's fused collector's")
        buffer.mark_full()
        np.copyto(obs, self.env.arrays.obs)
        k = int(self.ep_count[0])
        return self.ep_r[:k], self.ep_l[:k]
