"""Plain Python reference implementations of every kernel, used only by the tests.

Each follows the definition in the fast kernel's docstring as literally as possible: scalar loops,
float64 arithmetic, no tricks. Slow on purpose; never import this from library code.
"""

from __future__ import annotations

import math

import numpy as np


def _next_value(t, i, values_next, last_values, terminated, truncated, final_values):
    """(next value, episode continues) at step t of env i, by the rules in ``advantages``."""
    T = terminated.shape[0]
    if terminated[t, i]:
        return 0.0, False
    if truncated[t, i]:
        return float(final_values[t, i]), False
    if t == T - 1:
        return float(last_values[i]), True
    return float(values_next[t + 1, i]), True


def gae(rewards, values, last_values, terminated, truncated, gamma, lam, final_values=None):
    T, N = rewards.shape
    adv = np.zeros((T, N))
    for i in range(N):
        running = 0.0
        for t in reversed(range(T)):
            nv, cont = _next_value(t, i, values, last_values, terminated, truncated, final_values)
            delta = float(rewards[t, i]) + gamma * nv - float(values[t, i])
            running = delta + (gamma * lam * running if cont else 0.0)
            adv[t, i] = running
    return adv, adv + values


def discounted_returns(rewards, last_values, terminated, truncated, gamma, final_values=None):
    T, N = rewards.shape
    out = np.zeros((T, N))
    for i in range(N):
        g = float(last_values[i])
        for t in reversed(range(T)):
            if terminated[t, i]:
                g = 0.0
            elif truncated[t, i]:
                g = float(final_values[t, i])
            g = float(rewards[t, i]) + gamma * g
            out[t, i] = g
    return out


def lambda_returns(rewards, values, last_values, terminated, truncated, gamma, lam, final_values=None):
    T, N = rewards.shape
    out = np.zeros((T, N))
    for i in range(N):
        for t in reversed(range(T)):
            nv, cont = _next_value(t, i, values, last_values, terminated, truncated, final_values)
            g_next = out[t + 1, i] if t < T - 1 else float(last_values[i])
            if cont:
                out[t, i] = float(rewards[t, i]) + gamma * ((1 - lam) * nv + lam * g_next)
            else:
                out[t, i] = float(rewards[t, i]) + gamma * nv
    return out


def n_step_returns(rewards, values, last_values, terminated, truncated, gamma, n, final_values=None):
    """Forward sum straight from the definition G = sum_k gamma^k r[t+k] + gamma^m * bootstrap."""
    T, N = rewards.shape
    out = np.zeros((T, N))
    for i in range(N):
        for t in range(T):
            g = 0.0
            for k in range(n):
                s = t + k
                if s == T:  # rollout ended before n steps
                    g += gamma**k * float(last_values[i])
                    break
                g += gamma**k * float(rewards[s, i])
                if terminated[s, i]:
                    break
                if truncated[s, i]:
                    g += gamma ** (k + 1) * float(final_values[s, i])
                    break
                if k == n - 1:
                    boot = float(values[s + 1, i]) if s + 1 < T else float(last_values[i])
                    g += gamma**n * boot
            out[t, i] = g
    return out


def vtrace(log_rhos, rewards, values, bootstrap_value, terminated, gamma, rho_bar=1.0, c_bar=1.0,
           truncated=None, final_values=None):
    """Espeholt et al. 2018, eq. (1), as an explicit sum over s >= t within the episode:
    vs[t] = V[t] + sum_s gamma^(s-t) (prod_{t<=j<s} c_j) delta_s."""
    T, N = rewards.shape
    if truncated is None:
        truncated = np.zeros((T, N), dtype=bool)
    vs = np.zeros((T, N))
    pg = np.zeros((T, N))
    for i in range(N):
        rho = [min(rho_bar, math.exp(float(x))) for x in log_rhos[:, i]]
        c = [min(c_bar, math.exp(float(x))) for x in log_rhos[:, i]]
        nv = []
        cont = []
        for t in range(T):
            a, b = _next_value(t, i, values, bootstrap_value, terminated, truncated, final_values)
            nv.append(a)
            cont.append(b and t < T - 1)
        delta = [rho[t] * (float(rewards[t, i]) + gamma * nv[t] - float(values[t, i])) for t in range(T)]
        for t in range(T):
            acc = 0.0
            weight = 1.0
            s = t
            while True:
                acc += weight * delta[s]
                if not cont[s]:
                    break
                weight *= gamma * c[s]
                s += 1
            vs[t, i] = float(values[t, i]) + acc
        for t in range(T):
            q = vs[t + 1, i] if cont[t] else nv[t]
            pg[t, i] = rho[t] * (float(rewards[t, i]) + gamma * q - float(values[t, i]))
    return vs, pg


def group_advantages(rewards, group_size, scale="std", eps=1e-6):
    """rewards [B, G] (or [B*G] with group_size): (r - mean) / (sample std + eps) or r - mean."""
    r = np.asarray(rewards, dtype=np.float64)
    r2 = r.reshape(-1, group_size)
    out = np.zeros_like(r2)
    for b in range(r2.shape[0]):
        row = [float(x) for x in r2[b]]
        g = len(row)
        mean = sum(row) / g
        std = math.sqrt(sum((x - mean) ** 2 for x in row) / (g - 1))
        for j, x in enumerate(row):
            out[b, j] = (x - mean) / (std + eps) if scale == "std" else x - mean
    return out.reshape(r.shape)


def rloo_advantages(rewards, group_size):
    r = np.asarray(rewards, dtype=np.float64)
    r2 = r.reshape(-1, group_size)
    out = np.zeros_like(r2)
    for b in range(r2.shape[0]):
        row = [float(x) for x in r2[b]]
        for j, x in enumerate(row):
            others = row[:j] + row[j + 1:]
            out[b, j] = x - sum(others) / len(others)
    return out.reshape(r.shape)


def token_kl(logp, ref_logp, mask=None, estimator="k1"):
    B, T = logp.shape
    out = np.zeros((B, T))
    for b in range(B):
        for t in range(T):
            if mask is not None and not mask[b, t]:
                continue
            d = float(logp[b, t]) - float(ref_logp[b, t])
            if estimator == "k1":
                out[b, t] = d
            elif estimator == "k2":
                out[b, t] = 0.5 * d * d
            else:
                out[b, t] = math.exp(-d) + d - 1.0
    return out


def sequence_kl(logp, ref_logp, mask=None, estimator="k1", reduction="mean"):
    kl = token_kl(logp, ref_logp, mask, estimator)
    B, T = kl.shape
    out = np.zeros(B)
    for b in range(B):
        count = T if mask is None else sum(bool(m) for m in mask[b])
        s = sum(kl[b])
        out[b] = s if reduction == "sum" else (s / count if count else 0.0)
    return out


class SumMinTree:
    """Flat lists; total/min/sample by brute force over the leaves."""

    def __init__(self, capacity):
        self.values = [0.0] * capacity
        self.is_set = [False] * capacity

    def set(self, indices, values):
        for i, v in zip(indices, values):
            self.values[int(i)] = float(v)
            self.is_set[int(i)] = True

    def total(self):
        return math.fsum(self.values)

    def min(self):
        vals = [v for v, s in zip(self.values, self.is_set) if s]
        return min(vals) if vals else math.inf

    def sample(self, u):
        """Smallest index whose inclusive prefix sum exceeds u * total."""
        total = self.total()
        out = []
        for x in u:
            target = float(x) * total
            acc = 0.0
            chosen = len(self.values) - 1
            for i, v in enumerate(self.values):
                acc += v
                if acc > target:
                    chosen = i
                    break
            out.append(chosen)
        return np.array(out, dtype=np.int64)


def epsilon_greedy(q, epsilon, keys, counters):
    """The module docstring of ``rapidrl.kernels.exploration`` as written: per env two uniforms of its stream
    (``rng.uniform_reference``), a uniform action below epsilon, else the first maximal index. Returns
    (actions, values, new counters)."""
    from rapidrl.kernels.rng import uniform_reference

    n, n_actions = q.shape
    actions, values, new = np.zeros(n, np.int64), np.zeros(n), np.array(counters, dtype=np.uint64)
    for i in range(n):
        row = [float(x) for x in q[i]]
        best = max(row)
        a = row.index(best)
        c = int(counters[i])
        if uniform_reference(int(keys[i]), c) < epsilon:
            a = min(int(uniform_reference(int(keys[i]), c + 1) * n_actions), n_actions - 1)
        actions[i], values[i] = a, best
        new[i] = c + 2
    return actions, values, new
