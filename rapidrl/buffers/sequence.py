"""Sequence replay for recurrent off-policy learning (R2D2, Kapturowski et al. 2019): sequences of consecutive steps
of one env, with the recurrent state the policy acted with, for every recurrent off-policy algorithm.

Storage is time-major, one ring of ``capacity // num_envs`` steps shared by the ``num_envs`` envs (they step
together): per step and env the observation, action, reward, the observation to bootstrap from (the true final
observation where an episode ended, as ``ReplayBuffer`` stores it), terminated, truncated, whether the step begins
an episode (``starts``) and the state the policy entered it with ([S] float32, zero at an episode's start).

A sequence is ``sequence_length`` consecutive steps of one env. Any stored step may begin one whose steps are all
stored and none is overwritten (so sequences overlap by all but one step: R2D2's stored sequences with overlap,
taken at every offset). Episode boundaries inside a sequence are data, not a cut: the learner resets the state
where ``starts`` is True, stops bootstrapping after ``terminated`` and bootstraps from the final observation after
``truncated``.

Prioritized sequences (``prioritized=True``): the start of each sequence has a priority in a sum tree
(``rapidrl.kernels.sumtree``, the one of ``PrioritizedReplayBuffer``), sampled proportionally to priority^alpha,
new sequences at the highest priority so far, invalid starts (whose sequence would run past the newest step) at 0.
The learner sets R2D2's mix of the sequence's TD errors, eta max + (1 - eta) mean (``r2d2_priority``). Importance
weights (N P(i))^-beta are divided by the batch's largest.
"""

from __future__ import annotations

from pathlib import Path
from typing import NamedTuple

import numpy as np
import torch

from rapidrl.buffers.persist import read_buffer_dir, write_buffer_dir
from rapidrl.kernels.sumtree import SumMinTree

__all__ = ["SequenceBatch", "SequenceReplayBuffer"]


class SequenceBatch(NamedTuple):
    """B sequences of L steps (torch tensors, time-major)."""

    obs: torch.Tensor  # [L, B, *obs_shape]
    actions: torch.Tensor  # [L, B, *action_shape]
    rewards: torch.Tensor  # [L, B] float32
    next_obs: torch.Tensor  # [L, B, *obs_shape]: the observation to bootstrap from after each step
    terminated: torch.Tensor  # [L, B] bool
    truncated: torch.Tensor  # [L, B] bool
    starts: torch.Tensor  # [L, B] bool: the step begins an episode (the state entering it is zero)
    state: torch.Tensor  # [B, S] float32: the state entering the first step, as the policy acted with it
    weights: torch.Tensor  # [B] float32 importance weights (1 without prioritized replay)
    indices: np.ndarray  # [B] int64: the sequences' slots (for update_priorities)


class SequenceReplayBuffer:
    """See the module docstring. ``add`` one step of every env; ``sample(batch_size)`` -> ``SequenceBatch``."""

    def __init__(self, capacity: int, num_envs: int, obs_shape: tuple, state_size: int, sequence_length: int, *,
                 action_shape: tuple = (), obs_dtype=np.float32, action_dtype=np.int64, seed: int = 0,
                 prioritized: bool = False, alpha: float = 0.9, beta: float = 0.6, eps: float = 1e-6,
                 device: str | torch.device = "cpu"):
        if num_envs < 1 or capacity % num_envs:
            raise ValueError(f"capacity={capacity} must be a positive multiple of num_envs={num_envs}")
        self.steps = capacity // num_envs
        """Steps kept per env (the ring's length)."""
        if not 1 <= sequence_length < self.steps:
            raise ValueError(f"sequence_length={sequence_length} must be >= 1 and below the {self.steps} steps kept "
                             f"per env (capacity {capacity} / {num_envs} envs)")
        self.num_envs, self.length, self.state_size = int(num_envs), int(sequence_length), int(state_size)
        self.obs_shape, self.action_shape = tuple(obs_shape), tuple(action_shape)
        self.device = torch.device(device)
        T, N = self.steps, self.num_envs
        self.obs = np.zeros((T, N, *self.obs_shape), obs_dtype)
        self.next_obs = np.zeros_like(self.obs)
        self.actions = np.zeros((T, N, *self.action_shape), action_dtype)
        self.rewards = np.zeros((T, N), np.float32)
        self.terminated = np.zeros((T, N), bool)
        self.truncated = np.zeros((T, N), bool)
        self.starts = np.zeros((T, N), bool)
        self.states = np.zeros((T, N, self.state_size), np.float32)
        self.pos = 0
        """The ring index the next step is written to."""
        self.stored = 0
        """Steps stored per env (at most ``steps``)."""
        self.rng = np.random.default_rng(seed)
        self.prioritized, self.alpha, self.beta, self.eps = bool(prioritized), float(alpha), float(beta), float(eps)
        self.tree = SumMinTree(T * N) if prioritized else None
        self.max_priority = 1.0

    @staticmethod
    def storage_bytes(capacity: int, obs_shape: tuple, state_size: int, action_shape: tuple = (), *,
                      obs_dtype=np.float32, action_dtype=np.int64) -> int:
        """Bytes the stored fields of a buffer built with these arguments take (before building it): obs and
        next_obs, actions, rewards, three flags and the state per step."""
        obs = int(np.prod(obs_shape)) * np.dtype(obs_dtype).itemsize
        action = int(np.prod(action_shape)) * np.dtype(action_dtype).itemsize
        return int(capacity) * (2 * obs + action + 4 + 3 + 4 * int(state_size))

    def __len__(self) -> int:
        """Transitions stored (steps x envs)."""
        return self.stored * self.num_envs

    def can_sample(self) -> bool:
        """A whole sequence is stored."""
        return self.stored >= self.length

    def end_episodes(self) -> None:
        """Nothing to do: a reset env's next step is stored with ``starts`` True, which resets the state there, and
        every stored step keeps its own observation to bootstrap from (``ReplayBuffer.end_episodes``' interface)."""

    def add(self, obs, actions, rewards, next_obs, terminated, truncated, states, starts) -> None:
        """One step of every env: obs, next_obs [N, *obs_shape], actions [N, *action_shape], rewards, terminated,
        truncated, starts [N], states [N, S] (the state each env entered the step with)."""
        t, N = self.pos, self.num_envs
        for name, value, shape in (("obs", obs, self.obs_shape), ("next_obs", next_obs, self.obs_shape),
                                   ("actions", actions, self.action_shape), ("states", states, (self.state_size,))):
            if np.shape(value) != (N, *shape):
                raise ValueError(f"{name} must have shape {(N, *shape)}, got {np.shape(value)}")
        self.obs[t], self.next_obs[t], self.actions[t] = obs, next_obs, actions
        self.rewards[t], self.terminated[t], self.truncated[t] = rewards, terminated, truncated
        self.starts[t], self.states[t] = starts, states
        self.pos = (t + 1) % self.steps
        self.stored = min(self.stored + 1, self.steps)
        if self.tree is not None:
            envs = np.arange(N, dtype=np.int64)
            self.tree.set(t * N + envs, np.zeros(N))  # overwritten: its sequence would run past the newest step
            if self.stored >= self.length:  # the sequence ending at this step is now whole
                first = (t - self.length + 1) % self.steps
                self.tree.set(first * N + envs, np.full(N, self.max_priority ** self.alpha))

    def _starts_uniform(self, batch_size: int) -> np.ndarray:
        """Slots (t * N + env) of ``batch_size`` sequences drawn uniformly from the valid starts."""
        valid = self.stored - self.length + 1
        oldest = (self.pos - self.stored) % self.steps
        t = (oldest + self.rng.integers(valid, size=batch_size)) % self.steps
        return t * self.num_envs + self.rng.integers(self.num_envs, size=batch_size)

    def sample(self, batch_size: int) -> SequenceBatch:
        """``batch_size`` sequences (uniform, or proportional to priority^alpha) as torch tensors on the device."""
        if not self.can_sample():
            raise ValueError(f"sampling needs a whole sequence: {self.stored} of {self.length} steps stored")
        if self.tree is None:
            slots = self._starts_uniform(batch_size)
            weights = np.ones(batch_size, np.float32)
        else:
            slots = self.tree.sample(self.rng.random(batch_size))
            p = self.tree.get(slots) / self.tree.total()
            valid = (self.stored - self.length + 1) * self.num_envs
            w = (valid * p) ** -self.beta
            weights = (w / w.max()).astype(np.float32)
        first, env = slots // self.num_envs, slots % self.num_envs
        rows = (first[None, :] + np.arange(self.length)[:, None]) % self.steps  # [L, B]
        cols = np.broadcast_to(env, rows.shape)

        def take(a: np.ndarray) -> torch.Tensor:
            return torch.from_numpy(np.ascontiguousarray(a[rows, cols])).to(self.device)

        return SequenceBatch(take(self.obs), take(self.actions), take(self.rewards), take(self.next_obs),
                             take(self.terminated), take(self.truncated), take(self.starts),
                             torch.from_numpy(self.states[first, env]).to(self.device),
                             torch.from_numpy(weights).to(self.device), slots.astype(np.int64))

    def update_priorities(self, indices: np.ndarray, priorities: np.ndarray) -> None:
        """New priorities (>= 0, before the exponent alpha; ``eps`` is added) of the sequences at ``indices``."""
        if self.tree is None:
            raise ValueError("update_priorities needs prioritized=True")
        priorities = np.asarray(priorities, np.float64) + self.eps
        if not np.all(np.isfinite(priorities)):
            raise ValueError("priorities must be finite")
        self.max_priority = max(self.max_priority, float(priorities.max()))
        still_valid = self.tree.get(np.asarray(indices, np.int64)) > 0  # not overwritten since it was sampled
        self.tree.set(np.asarray(indices, np.int64)[still_valid], priorities[still_valid] ** self.alpha)

    # -- persistence (``save(include_buffer=True)``, checkpoints) ------------------------------------
    _FIELDS = ("obs", "next_obs", "actions", "rewards", "terminated", "truncated", "starts", "states")

    def save(self, path) -> Path:
        """Write the buffer to directory ``path`` (``.npy`` per field, ``header.json``; no pickle)."""
        header = {"class": type(self).__name__, "pos": self.pos, "stored": self.stored,
                  "shape": [self.steps, self.num_envs, self.length, self.state_size],
                  "rng": self.rng.bit_generator.state, "max_priority": self.max_priority}
        arrays = {name: getattr(self, name) for name in self._FIELDS}
        if self.tree is not None:
            arrays["priorities"] = self.tree.get(np.arange(self.steps * self.num_envs, dtype=np.int64))
        return write_buffer_dir(path, _json_safe(header), arrays)

    def load(self, source) -> SequenceReplayBuffer:
        """Read a buffer written by ``save`` into this one (of the same sizes); returns it."""
        header, arrays = read_buffer_dir(source)
        want = [self.steps, self.num_envs, self.length, self.state_size]
        if header.get("class") != type(self).__name__ or header.get("shape") != want:
            raise ValueError(f"{source} holds a {header.get('class')} of shape {header.get('shape')} (steps, envs, "
                             f"sequence length, state size), not this buffer's {want}")
        for name in self._FIELDS:
            np.copyto(getattr(self, name), arrays[name])
        if self.tree is not None:
            self.tree.set(np.arange(self.steps * self.num_envs, dtype=np.int64), np.array(arrays["priorities"]))
        self.pos, self.stored, self.max_priority = int(header["pos"]), int(header["stored"]), header["max_priority"]
        self.rng.bit_generator.state = header["rng"]
        return self


def _json_safe(value):
    """NumPy integers in a bit generator's state -> Python ints (JSON)."""
    if isinstance(value, dict):
        return {k: _json_safe(v) for k, v in value.items()}
    return int(value) if isinstance(value, np.integer) else value
