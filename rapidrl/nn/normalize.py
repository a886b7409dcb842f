"""Running statistics for observation normalization and reward scaling (NumPy, float64).

Parallel-merge update of mean and variance (Chan et al.), so a batch of N observations updates the
statistics in one call. ``state_dict()`` holds float64 tensors and Python floats only, so a checkpoint that
stores it loads with ``torch.load(weights_only=True)``; ``load_state_dict`` takes tensors or arrays.
"""

from __future__ import annotations

import numpy as np
import torch


def _tensor(x) -> torch.Tensor:
    """A float64 array or NumPy scalar -> a float64 tensor that owns its memory (0-d for scalars)."""
    return torch.from_numpy(np.array(x, np.float64))


def _array(x) -> np.ndarray:
    """A tensor, array or number from a state dict -> a float64 array that owns its memory."""
    return np.array(x.numpy() if isinstance(x, torch.Tensor) else x, np.float64)


class RunningMeanStd:
    """Mean and variance of a stream of arrays of shape ``shape``."""

    def __init__(self, shape: tuple = (), epsilon: float = 1e-4):
        self.mean = np.zeros(shape, np.float64)
        self.var = np.ones(shape, np.float64)
        self.count = float(epsilon)

    def update(self, batch: np.ndarray) -> None:
        """batch: [B, *shape]."""
        self.merge(batch.mean(axis=0), batch.var(axis=0), batch.shape[0])

    def merge(self, b_mean, b_var, b_count: int) -> None:
        """Merge in a batch of ``b_count`` arrays with mean ``b_mean`` and variance ``b_var`` (``update``'s merge)."""
        delta = b_mean - self.mean
        total = self.count + b_count
        self.mean = self.mean + delta * (b_count / total)
        m2 = self.var * self.count + b_var * b_count + np.square(delta) * (self.count * b_count / total)
        self.var = m2 / total
        self.count = total

    def state_dict(self) -> dict:
        return {"mean": _tensor(self.mean), "var": _tensor(self.var), "count": float(self.count)}

    def load_state_dict(self, state: dict) -> None:
        self.mean = _array(state["mean"])
        self.var = _array(state["var"])
        self.count = float(state["count"])


class ObsNormalizer:
    """obs -> clip((obs - mean) / sqrt(var + eps), -clip, clip), statistics updated while training."""

    def __init__(self, shape: tuple, clip: float = 10.0, eps: float = 1e-8):
        self.rms = RunningMeanStd(shape)
        self.clip, self.eps = float(clip), float(eps)

    def __call__(self, obs: np.ndarray, update: bool = False) -> np.ndarray:
        """obs [B, *shape] -> normalized float32 [B, *shape]."""
        if update:
            self.rms.update(obs)
        out = (obs - self.rms.mean) / np.sqrt(self.rms.var + self.eps)
        return np.clip(out, -self.clip, self.clip).astype(np.float32)

    def state_dict(self) -> dict:
        return {"rms": self.rms.state_dict(), "clip": self.clip, "eps": self.eps}

    def load_state_dict(self, state: dict) -> None:
        self.rms.load_state_dict(state["rms"])
        self.clip, self.eps = float(state["clip"]), float(state["eps"])


class RewardScaler:
    """Divide rewards by the running std of the discounted return (as SB3's VecNormalize does).

    ``returns`` [N] accumulates gamma * returns + reward per env and restarts where an episode ended.
    """

    def __init__(self, num_envs: int, gamma: float, clip: float = 10.0, eps: float = 1e-8):
        self.rms = RunningMeanStd(())
        self.returns = np.zeros(num_envs, np.float64)
        self.max_abs = 0.0  # the largest |return| seen (SimbaV2's bound: ``divisor``)
        self.gamma, self.clip, self.eps = float(gamma), float(clip), float(eps)

    def update(self, rewards: np.ndarray, dones: np.ndarray) -> None:
        """Add one step's rewards [N] to the discounted returns and their statistics; restart where ``dones`` [N]."""
        self._advance(rewards[None], dones[None])

    def __call__(self, rewards: np.ndarray, dones: np.ndarray) -> np.ndarray:
        """rewards [N], dones [N] bool -> scaled float32 rewards [N] (after ``update``)."""
        return self.scale_rollout(rewards[None], dones[None])[0]

    def scale_rollout(self, rewards: np.ndarray, dones: np.ndarray) -> np.ndarray:
        """rewards [T, N], dones [T, N] bool -> scaled float32 rewards [T, N]: step t's rewards divided by the std
        after step t's update, as T calls in order give, in a few whole-rollout NumPy calls."""
        variances = self._advance(rewards, dones)
        return np.clip(rewards / np.sqrt(variances + self.eps)[:, None], -self.clip, self.clip).astype(np.float32)

    def _advance(self, rewards: np.ndarray, dones: np.ndarray) -> np.ndarray:
        """Add T steps' rewards [T, N] to the discounted returns, one step after another, and merge each step's
        returns into the statistics in order (their means and variances as row reductions: bitwise the one-step
        reductions); restart where ``dones`` [T, N]. Returns the variance after each step [T]."""
        returns = np.empty(rewards.shape, np.float64)
        r = self.returns
        for t in range(rewards.shape[0]):
            r = r * self.gamma + rewards[t]  # a new array: the restart below leaves returns[t] as it is
            returns[t] = r
            r[dones[t]] = 0.0
        self.returns = r
        variances = np.empty(rewards.shape[0], np.float64)
        for t, (b_mean, b_var) in enumerate(zip(returns.mean(axis=1), returns.var(axis=1), strict=True)):
            self.rms.merge(b_mean, b_var, rewards.shape[1])
            variances[t] = self.rms.var
        if returns.size:
            self.max_abs = max(self.max_abs, float(np.abs(returns).max()))
        return variances

    def divisor(self, g_max: float) -> float:
        """SimbaV2's reward scale: max(sqrt(var + eps), max |return| / g_max), so that the scaled returns have unit
        variance and stay within about g_max (off-policy: every sampled minibatch's rewards are divided by it)."""
        return max(float(np.sqrt(self.rms.var + self.eps)), self.max_abs / float(g_max))

    def state_dict(self) -> dict:
        return {"rms": self.rms.state_dict(), "returns": _tensor(self.returns), "gamma": self.gamma, "clip": self.clip,
                "eps": self.eps, "max_abs": self.max_abs}

    def load_state_dict(self, state: dict) -> None:
        self.rms.load_state_dict(state["rms"])
        self.returns = _array(state["returns"])
        self.gamma, self.clip, self.eps = float(state["gamma"]), float(state["clip"]), float(state["eps"])
        self.max_abs = float(state.get("max_abs", 0.0))  # not saved before rapidrl 0.1's SimbaV2
