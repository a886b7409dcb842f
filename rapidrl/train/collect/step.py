"""Step collection: a PyTorch policy on any rapidrl vector env, one batched step at a time.

Per step: one batched policy forward on ``torch.from_numpy`` of the observations (normalized with the statistics
frozen at the rollout's start, or uint8 frames for a CNN, passed through without a copy), one env step on its
zero-copy outputs, one buffer write; no per-env Python. A truncated episode's true final observation
(``info["final_obs"]``) is valued for its bootstrap.
"""

from __future__ import annotations

import numpy as np
import torch

from rapidrl.train.timing import PhaseTimer

__all__ = ["StepCollector", "normalized"]


def normalized(normalizer, obs: np.ndarray, dtype=np.float32) -> np.ndarray:
    """Observations as the policy sees them: normalized with ``normalizer`` (if any, float32), else in the
    policy's input ``dtype`` (``ActorCritic.input_dtype``: float32, or uint8 frames for a CNN, passed through
    without a copy)."""
    return obs.astype(dtype, copy=False) if normalizer is None else normalizer(obs)


class StepCollector:
    """Per-step rollout collection: a PyTorch policy on any rapidrl vector env with NumPy outputs.

    The host collectors' interface (``rapidrl.train.collect``): ``collect(buffer, obs, raw_obs, obs_normalizer,
    seed)`` and ``value(obs)``. Phases "policy", "env" and "storage" are timed into ``timer``. ``policy`` is anything
    with ``act(obs) -> (raw actions, log_probs, values)``, ``value(obs)`` and ``to_env_action(raw)`` (an
    ``ActorCritic``; PQN's epsilon-greedy actor).
    """

    seeded = False
    """``collect`` continues torch's global generator (``seed=None``); a seed reseeds it (a collector thread's)."""

    def __init__(self, env, policy, num_steps: int, device: torch.device, timer: PhaseTimer | None = None):
        self.env, self.policy, self.num_steps, self.device = env, policy, num_steps, device
        self.timer = timer if timer is not None else PhaseTimer()
        self.final_values = np.zeros(env.num_envs, np.float32)
        self.input_dtype = getattr(policy, "input_dtype", np.float32)

    def collect(self, buffer, obs: np.ndarray, raw_obs: np.ndarray, obs_normalizer, seed: int | None
                ) -> tuple[np.ndarray, np.ndarray]:
        """Fill ``buffer`` with ``num_steps`` steps from ``obs`` [N, *obs_shape] (updated in place to the last obs).

        Per step: one batched policy forward on ``torch.from_numpy`` of the observations (uint8 frames for a CNN
        policy: no conversion, no copy before the network), one env step, one buffer write; no per-env Python.

        seed: reseeds torch's global generator (the policy samples from it) first; None leaves it.
        Returns (returns, lengths) of the episodes that ended.
        """
        if seed is not None:
            torch.manual_seed(seed)
        timer, policy, final_values, dtype = self.timer, self.policy, self.final_values, self.input_dtype
        ended_r, ended_l = [], []
        buffer.reset()
        for t in range(self.num_steps):
            with timer.phase("policy"):
                obs_n = normalized(obs_normalizer, obs, dtype)
                with torch.no_grad():
                    raw, logp, values = self._act(torch.from_numpy(obs_n).to(self.device))
                    env_actions = policy.to_env_action(raw).cpu().numpy()
            with timer.phase("env"):
                next_obs, rewards, terminated, truncated, info = self.env.step(env_actions)
            with timer.phase("storage"):
                final_values.fill(0.0)
                bootstrap = truncated & ~terminated
                if bootstrap.any():
                    final = normalized(obs_normalizer, info["final_obs"][bootstrap], dtype)
                    with torch.no_grad():
                        final_values[bootstrap] = self._final_values(torch.from_numpy(final).to(self.device),
                                                                     bootstrap).cpu().numpy()
                # info["active"]: the rows that took part in this step (multi-agent envs), the loss mask
                buffer.add(obs_n, raw, logp, values, rewards, terminated, truncated, final_values, info.get("active"))
                self._advance(terminated, truncated)
                raw_obs[t] = obs
                np.copyto(obs, next_obs)
                done = info.get("_episode")
                if done is not None and done.any():
                    ended_r.append(info["episode"]["r"][done])
                    ended_l.append(info["episode"]["l"][done])
        if not ended_r:
            return np.zeros(0, np.float32), np.zeros(0, np.int32)
        return np.concatenate(ended_r), np.concatenate(ended_l)

    # -- what the recurrent collector (``rapidrl.train.collect.recurrent``) changes -------------------
    def _act(self, obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """obs [N, ...] as the policy takes it -> (raw actions, log_probs [N], values [N])."""
        return self.policy.act(obs)

    def _final_values(self, final_obs: torch.Tensor, mask: np.ndarray) -> torch.Tensor:
        """Values [M] of the true final observations [M, ...] of the M envs selected by ``mask`` [N]."""
        return self.policy.value(final_obs)

    def _advance(self, terminated: np.ndarray, truncated: np.ndarray) -> None:
        """Called after each step is stored (a feed-forward policy carries nothing from step to step)."""

    def value(self, obs: torch.Tensor) -> torch.Tensor:
        """Values [N] of the next observations obs [N, ...] (the rollout's bootstrap)."""
        return self.policy.value(obs)
