"""Step collection with a recurrent policy (``rapidrl.nn.recurrent.RecurrentActorCritic``).

The collector carries the policy's state ``[N, S]`` and the episode-start flags ``[N]`` from step to step and
from rollout to rollout. What an update needs to replay a rollout exactly is kept per rollout:

- ``initial_state`` [N, S]: the state entering the rollout's first step;
- ``initial_starts`` [N] bool: which envs start an episode at that step.

The starts of later steps are not stored: ``episode_starts[t] = terminated[t - 1] | truncated[t - 1]``
(``rapidrl.train.recurrent.episode_starts``, with the update's replay of the rollout). Truncated episodes bootstrap
from the value of their true final observation taken with the state that observation was reached with (the state
after the last step of the episode), never a fresh one.
"""

from __future__ import annotations

import numpy as np
import torch

from rapidrl.train.collect.step import StepCollector

__all__ = ["RecurrentStepCollector"]


class RecurrentStepCollector(StepCollector):
    """``StepCollector`` for a recurrent policy: same interface, plus ``state``/``starts`` across rollouts."""

    def __init__(self, env, policy, num_steps: int, device: torch.device, timer=None,
                 generator: torch.Generator | None = None):
        super().__init__(env, policy, num_steps, device, timer, generator)
        n = env.num_envs
        self.state = policy.initial_state(n, device)
        """State [N, S] entering the next step."""
        self.starts = np.ones(n, np.bool_)
        """Envs whose next observation is the first of an episode."""
        self.initial_state = self.state.clone()
        self.initial_starts = self.starts.copy()
        self._next_state = self.state

    def reset_state(self) -> None:
        """Every env starts a new episode (after ``env.reset``)."""
        self.state.zero_()
        self.starts[:] = True

    def collect(self, buffer, obs, raw_obs, obs_normalizer, seed):
        self.initial_state.copy_(self.state)
        np.copyto(self.initial_starts, self.starts)
        return super().collect(buffer, obs, raw_obs, obs_normalizer, seed)

    def _act(self, obs: torch.Tensor, action_masks: torch.Tensor | None = None):
        starts = torch.from_numpy(self.starts).to(self.device)
        raw, logp, values, self._next_state = self.policy.act(obs, self.state, starts, action_masks=action_masks,
                                                              generator=self.generator)
        return raw, logp, values

    def _final_values(self, final_obs: torch.Tensor, mask: np.ndarray, final_masks=None) -> torch.Tensor:
        index = torch.from_numpy(np.flatnonzero(mask)).to(self.device)
        return self.policy.value(final_obs, self._next_state.index_select(0, index))

    def _advance(self, terminated: np.ndarray, truncated: np.ndarray) -> None:
        self.state = self._next_state
        np.logical_or(terminated, truncated, out=self.starts)

    def value(self, obs: torch.Tensor) -> torch.Tensor:
        return self.policy.value(obs, self.state, torch.from_numpy(self.starts).to(self.device))

    def state_dict(self) -> dict:
        return {"state": self.state.detach().cpu().clone(), "starts": torch.from_numpy(self.starts.copy())}

    def load_state_dict(self, d: dict) -> None:
        self.state = d["state"].to(self.device).clone()
        np.copyto(self.starts, d["starts"].numpy())
