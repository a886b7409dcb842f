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

Frame storage (``frame_stack=S > 1``, for stacked pixel frames: observations [S, *frame], the newest frame last): each
step stores only the newest frame of its observation and of its ``next_obs`` (2 frames instead of 2 S: 14 KB instead of
56 KB per 84x84 Atari step), and a code saying how the older frames of its observation are rebuilt:
- ``SLIDE``: they are the previous step's observation without its oldest frame (obs[:-1] == previous obs[1:]), so they
  are the newest frames of the steps before it (the walk back stops at a padded step);
- ``ZERO`` / ``REPEAT``: a stack that begins an episode, padded with zeros (rapidrl's Atari) or with its first frame
  (Gymnasium's ``FrameStackObservation`` default).
``next_obs`` is the observation slid by one frame with its own newest frame (true at a time limit or a termination
too). ``add`` checks both, so rebuilt observations are exact; an observation that is neither is a ``ValueError``. The
frame ring keeps ``S - 1`` steps more than the other fields, so a sequence's first observation never needs an
overwritten frame, and the sequences (and random draws) are those of whole-observation storage.

Prioritized sequences (``prioritized=True``): the start of each sequence has a priority in a sum tree
(``rapidrl.kernels.sumtree``, the one of ``PrioritizedReplayBuffer``), sampled proportionally to priority^alpha,
new sequences at the highest priority so far, invalid starts (whose sequence would run past the newest step) at 0.
The learner sets R2D2's mix of the sequence's TD errors, eta max + (1 - eta) mean (``r2d2_priority``). Importance
weights (N P(i))^-beta are divided by the batch's largest.
"""

from __future__ import annotations

from pathlib import Path
from typing import NamedTuple

import numba
import numpy as np
import torch

from rapidrl.buffers.frame_replay import copy_frame
from rapidrl.buffers.persist import read_buffer_dir, write_buffer_dir
from rapidrl.kernels.sumtree import SumMinTree

__all__ = ["SequenceBatch", "SequenceReplayBuffer"]


SLIDE, ZERO, REPEAT = 0, 1, 2
"""How a stored step's older frames are rebuilt (frame storage, module docstring)."""


@numba.njit(cache=True, nogil=True)
def _gather_stacks(frames, codes, next_frames, steps, rows, envs, obs_out, next_out) -> int:
    """Rebuild stacked observations: obs_out[l, b] and next_out[l, b] [S, F] of the step ``steps[l, b]`` (absolute;
    frame ring row steps % R, R = frames.shape[0]) of env ``envs[b]``, whose ring row in ``next_frames`` is
    ``rows[l, b]``. frames [R, N, F], codes [R, N] int8, next_frames [T, N, F]. Returns the first b with an index out
    of range, or -1 (nothing read out of bounds)."""
    R, N = frames.shape[0], frames.shape[1]
    T = next_frames.shape[0]
    L, B, S = obs_out.shape[0], obs_out.shape[1], obs_out.shape[2]
    for b in range(B):
        e = envs[b]
        if e < 0 or e >= N:
            return b
        for t in range(L):
            a, row = steps[t, b], rows[t, b]
            if a < 0 or row < 0 or row >= T:
                return b
            copy_frame(obs_out[t, b, S - 1], frames[a % R, e])
            pad = SLIDE
            for i in range(S - 2, -1, -1):
                if pad == SLIDE:
                    code = codes[a % R, e]
                    if code == SLIDE:
                        a -= 1
                        if a < 0:
                            return b
                    else:
                        pad = code
                if pad == ZERO:
                    obs_out[t, b, i, :] = 0
                else:
                    copy_frame(obs_out[t, b, i], frames[a % R, e])
            for i in range(S - 1):
                copy_frame(next_out[t, b, i], obs_out[t, b, i + 1])
            copy_frame(next_out[t, b, S - 1], next_frames[row, e])
    return -1


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
                 frame_stack: int = 1, device: str | torch.device = "cpu"):
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
        self.frame_stack = int(frame_stack)
        """S > 1: observations [S, *frame] kept as frames (module docstring); 1: kept whole."""
        if self.frame_stack < 1 or (self.frame_stack > 1 and (len(self.obs_shape) < 2
                                                              or self.obs_shape[0] != self.frame_stack)):
            raise ValueError(f"frame_stack={frame_stack} needs observations of shape (frame_stack, *frame), got "
                             f"{self.obs_shape}")
        if self.frame_stack > 1:
            frame = int(np.prod(self.obs_shape[1:]))
            self.frames = np.zeros((T + self.frame_stack - 1, N, frame), obs_dtype)
            """The newest frame of every step's observation; S - 1 steps more than the other fields."""
            self.codes = np.zeros((T + self.frame_stack - 1, N), np.int8)
            """How each step's older frames are rebuilt (SLIDE, ZERO, REPEAT)."""
            self.next_frames = np.zeros((T, N, frame), obs_dtype)
            """The newest frame of every step's next_obs."""
            self.last_obs = np.zeros((N, self.frame_stack, frame), obs_dtype)
            """Each env's latest observation (to tell a sliding stack; none before the first ``add``)."""
        else:
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
        self.total = 0
        """Steps added per env since the buffer was built (the frame ring's clock)."""
        self.stored = 0
        """Steps stored per env (at most ``steps``)."""
        self.rng = np.random.default_rng(seed)
        self.prioritized, self.alpha, self.beta, self.eps = bool(prioritized), float(alpha), float(beta), float(eps)
        self.tree = SumMinTree(T * N) if prioritized else None
        self.max_priority = 1.0

    @staticmethod
    def storage_bytes(capacity: int, obs_shape: tuple, state_size: int, action_shape: tuple = (), *,
                      obs_dtype=np.float32, action_dtype=np.int64, frame_stack: int = 1, num_envs: int = 1) -> int:
        """Bytes the stored fields of a buffer built with these arguments take (before building it): obs and
        next_obs (or with ``frame_stack`` > 1 two frames and a code, and the frame ring's S - 1 extra steps),
        actions, rewards, three flags and the state per step."""
        item = np.dtype(obs_dtype).itemsize
        action = int(np.prod(action_shape)) * np.dtype(action_dtype).itemsize
        per_step = action + 4 + 3 + 4 * int(state_size)
        if frame_stack > 1:
            frame = int(np.prod(obs_shape[1:])) * item
            extra = (frame_stack - 1) * int(num_envs) * (frame + 1) + int(num_envs) * int(frame_stack) * frame
            return int(capacity) * (per_step + 2 * frame + 1) + extra
        return int(capacity) * (per_step + 2 * int(np.prod(obs_shape)) * item)

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
        if self.frame_stack > 1:
            self._add_frames(obs, next_obs)
        else:
            self.obs[t], self.next_obs[t] = obs, next_obs
        self.actions[t] = actions
        self.rewards[t], self.terminated[t], self.truncated[t] = rewards, terminated, truncated
        self.starts[t], self.states[t] = starts, states
        self.pos = (t + 1) % self.steps
        self.total += 1
        self.stored = min(self.stored + 1, self.steps)
        if self.tree is not None:
            envs = np.arange(N, dtype=np.int64)
            self.tree.set(t * N + envs, np.zeros(N))  # overwritten: its sequence would run past the newest step
            if self.stored >= self.length:  # the sequence ending at this step is now whole
                first = (t - self.length + 1) % self.steps
                self.tree.set(first * N + envs, np.full(N, self.max_priority ** self.alpha))

    def _add_frames(self, obs, next_obs) -> None:
        """Frame storage's part of ``add``: check that the stacks slide and that each observation continues its
        env's previous one or begins a padded stack (ValueError naming the env otherwise; nothing is written then),
        and store the two newest frames and the code."""
        N, S = self.num_envs, self.frame_stack
        dtype = self.frames.dtype
        o = np.ascontiguousarray(obs, dtype).reshape(N, S, -1)
        n = np.ascontiguousarray(next_obs, dtype).reshape(N, S, -1)
        sliding = (n[:, :-1] == o[:, 1:]).all((1, 2))
        if not sliding.all():
            raise ValueError(f"frame storage needs next_obs to be obs slid by one frame (next_obs[:-1] == obs[1:]); "
                             f"env {int(np.argmin(sliding))}'s is not (frame_replay=False stores whole observations)")
        older = o[:, :-1]
        codes = np.full(N, -1, np.int8)
        codes[np.all(older == o[:, -1:], (1, 2))] = REPEAT
        codes[np.all(older == 0, (1, 2))] = ZERO
        if self.total > 0:  # every env adds a step each time: each has a previous observation
            codes[np.all(older == self.last_obs[:, 1:], (1, 2))] = SLIDE
        if (codes < 0).any():
            raise ValueError(f"env {int(np.argmin(codes))}'s observation neither continues its previous one "
                             "(obs[:-1] == the previous obs[1:]) nor begins a stack padded with zeros or with its "
                             "first frame, so frame storage cannot rebuild it (frame_replay=False stores whole "
                             "observations)")
        row = self.total % self.frames.shape[0]
        self.frames[row], self.codes[row], self.next_frames[self.pos] = o[:, -1], codes, n[:, -1]
        self.last_obs[:] = o

    def _stacks(self, rows: np.ndarray, envs: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(obs, next_obs) [L, B, *obs_shape] of the steps at ring rows ``rows`` [L, B] of envs ``envs`` [B],
        rebuilt from the frames (``_gather_stacks``)."""
        newest = (self.pos - 1) % self.steps
        steps = (self.total - 1 - (newest - rows) % self.steps).astype(np.int64)  # absolute steps
        shape = (*rows.shape, self.frame_stack, self.frames.shape[2])
        obs, next_obs = np.empty(shape, self.frames.dtype), np.empty(shape, self.frames.dtype)
        bad = _gather_stacks(self.frames, self.codes, self.next_frames, steps, rows.astype(np.int64),
                             envs.astype(np.int64), obs, next_obs)
        if bad >= 0:
            raise IndexError(f"sequence {bad} has an index outside the stored steps")
        return obs.reshape(*rows.shape, *self.obs_shape), next_obs.reshape(*rows.shape, *self.obs_shape)

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

        if self.frame_stack > 1:
            obs, next_obs = (torch.from_numpy(a).to(self.device) for a in self._stacks(rows, env))
        else:
            obs, next_obs = take(self.obs), take(self.next_obs)
        return SequenceBatch(obs, take(self.actions), take(self.rewards), next_obs,
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
    _FIELDS = ("actions", "rewards", "terminated", "truncated", "starts", "states")
    _WHOLE = ("obs", "next_obs")
    _FRAMES = ("frames", "codes", "next_frames", "last_obs")

    def _fields(self) -> tuple[str, ...]:
        return self._FIELDS + (self._FRAMES if self.frame_stack > 1 else self._WHOLE)

    def save(self, path) -> Path:
        """Write the buffer to directory ``path`` (``.npy`` per field, ``header.json``; no pickle)."""
        header = {"class": type(self).__name__, "pos": self.pos, "stored": self.stored, "total": self.total,
                  "shape": [self.steps, self.num_envs, self.length, self.state_size, self.frame_stack],
                  "rng": self.rng.bit_generator.state, "max_priority": self.max_priority}
        arrays = {name: getattr(self, name) for name in self._fields()}
        if self.tree is not None:
            arrays["priorities"] = self.tree.get(np.arange(self.steps * self.num_envs, dtype=np.int64))
        return write_buffer_dir(path, _json_safe(header), arrays)

    def load(self, source) -> SequenceReplayBuffer:
        """Read a buffer written by ``save`` into this one (of the same sizes); returns it."""
        header, arrays = read_buffer_dir(source)
        want = [self.steps, self.num_envs, self.length, self.state_size, self.frame_stack]
        shape = header.get("shape")
        if isinstance(shape, list) and len(shape) == 4:  # written before frame storage: whole observations
            shape = [*shape, 1]
        if header.get("class") != type(self).__name__ or shape != want:
            raise ValueError(f"{source} holds a {header.get('class')} of shape {header.get('shape')} (steps, envs, "
                             f"sequence length, state size, frame stack), not this buffer's {want}")
        for name in self._fields():
            np.copyto(getattr(self, name), arrays[name])
        if self.tree is not None:
            self.tree.set(np.arange(self.steps * self.num_envs, dtype=np.int64), np.array(arrays["priorities"]))
        self.pos, self.stored, self.max_priority = int(header["pos"]), int(header["stored"]), header["max_priority"]
        self.total = int(header.get("total", self.stored))
        self.rng.bit_generator.state = header["rng"]
        return self


def _json_safe(value):
    """NumPy integers in a bit generator's state -> Python ints (JSON)."""
    if isinstance(value, dict):
        return {k: _json_safe(v) for k, v in value.items()}
    return int(value) if isinstance(value, np.integer) else value
