"""Step collection: a PyTorch policy on any rapidrl vector env, one batched step at a time.

Per step: one batched policy forward on ``torch.from_numpy`` of the observations (normalized with the statistics
frozen at the rollout's start, or uint8 frames for a CNN, passed through without a copy), one env step on its
zero-copy outputs, one buffer write; no per-env Python. A truncated episode's true final observation
(``info["final_obs"]``) is valued for its bootstrap.

Action masks (docs/masks.md): on an env that states its valid actions (``has_action_masks``), the policy acts on
the valid actions of each observation (``env.action_masks()``, the masks of the env's current observations, which
the collection starts from) and the rollout stores them beside the actions when it has room for them
(``RolloutBuffer.action_mask_size``). An env without masks is collected exactly as before.
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
    ``ActorCritic``; PQN's epsilon-greedy actor). A policy whose ``value`` takes the final observations' masks
    (``value_takes_masks``: PQN's max over the valid actions) gets them.

    generator: the torch generator the policy samples from (``act(..., generator=)``), on ``device``: the model's own
    (``Algorithm.torch_rng``), continued from rollout to rollout; None: a generator of the collector's own, which a
    ``seed`` reseeds (a collector thread's). torch's global generator is never drawn from.
    """

    seeded = False
    """``collect`` continues the generator (``seed=None``); a seed reseeds it (a collector thread's)."""

    def __init__(self, env, policy, num_steps: int, device: torch.device, timer: PhaseTimer | None = None,
                 generator: torch.Generator | None = None):
        self.env, self.policy, self.num_steps, self.device = env, policy, num_steps, device
        self.generator = generator if generator is not None else torch.Generator(device=device)
        self.timer = timer if timer is not None else PhaseTimer()
        self.final_values = np.zeros(env.num_envs, np.float32)
        self.input_dtype = getattr(policy, "input_dtype", np.float32)
        self.masked = bool(getattr(env, "has_action_masks", False))
        """The env states its valid actions: acting (and storage, where the rollout has room) uses them."""
        self._masks = np.ones((env.num_envs, env.action_mask_size), np.bool_) if self.masked else None

    def collect(self, buffer, obs: np.ndarray, raw_obs: np.ndarray, obs_normalizer, seed: int | None
                ) -> tuple[np.ndarray, np.ndarray]:
        """Fill ``buffer`` with ``num_steps`` steps from ``obs`` [N, *obs_shape] (updated in place to the last obs).

        Per step: one batched policy forward on ``torch.from_numpy`` of the observations (uint8 frames for a CNN
        policy: no conversion, no copy before the network), one env step, one buffer write; no per-env Python.

        seed: reseeds the collector's generator (the policy samples from it) first; None continues it.
        The masks acted on come from the env (``action_masks()``), the one source: a caller that needs those of the
        last observations reads them there too.
        Returns (returns, lengths) of the episodes that ended.
        """
        if seed is not None:
            self.generator.manual_seed(seed)
        timer, policy, final_values, dtype = self.timer, self.policy, self.final_values, self.input_dtype
        ended_r, ended_l = [], []
        masks, store_masks = self._masks, buffer.action_mask_size > 0
        if store_masks and not self.masked:
            raise ValueError("the rollout stores action masks but the env states none")
        buffer.reset()
        for t in range(self.num_steps):
            with timer.phase("policy"):
                obs_n = normalized(obs_normalizer, obs, dtype)
                if masks is not None:  # the valid actions of obs (the env's next step overwrites its view)
                    np.copyto(masks, self.env.action_masks())
                with torch.no_grad():
                    x = torch.from_numpy(obs_n).to(self.device)
                    raw, logp, values = self._act(x) if masks is None else \
                        self._act(x, torch.from_numpy(masks).to(self.device))
                    env_actions = policy.to_env_action(raw).cpu().numpy()
            with timer.phase("env"):
                next_obs, rewards, terminated, truncated, info = self.env.step(env_actions)
            with timer.phase("storage"):
                final_values.fill(0.0)
                bootstrap = truncated & ~terminated
                if bootstrap.any():
                    final = torch.from_numpy(normalized(obs_normalizer, info["final_obs"][bootstrap], dtype))
                    final_masks = None
                    if self.masked and getattr(policy, "value_takes_masks", False):
                        final_masks = torch.from_numpy(info["final_action_mask"][bootstrap]).to(self.device)
                    with torch.no_grad():
                        final_values[bootstrap] = self._final_values(final.to(self.device), bootstrap,
                                                                     final_masks).cpu().numpy()
                # info["active"]: the rows that took part in this step (multi-agent envs), the loss mask
                buffer.add(obs_n, raw, logp, values, rewards, terminated, truncated, final_values, info.get("active"),
                           masks if store_masks else None)
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
    def _act(self, obs: torch.Tensor, action_masks: torch.Tensor | None = None
             ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """obs [N, ...] as the policy takes it (and the valid actions [N, M] of an env with masks) -> (raw actions,
        log_probs [N], values [N])."""
        return self.policy.act(obs, action_masks=action_masks, generator=self.generator)

    def _final_values(self, final_obs: torch.Tensor, mask: np.ndarray, final_masks: torch.Tensor | None = None
                      ) -> torch.Tensor:
        """Values [M] of the true final observations [M, ...] of the M envs selected by ``mask`` [N] (with their
        valid actions [M, A] for a policy whose ``value`` takes them)."""
        if final_masks is None:
            return self.policy.value(final_obs)
        return self.policy.value(final_obs, final_masks)

    def _advance(self, terminated: np.ndarray, truncated: np.ndarray) -> None:
        """Called after each step is stored (a feed-forward policy carries nothing from step to step)."""

    def value(self, obs: torch.Tensor) -> torch.Tensor:
        """Values [N] of the next observations obs [N, ...] (the rollout's bootstrap)."""
        return self.policy.value(obs)
