"""Replay of stacked frames that stores every frame once.

An Atari observation is a stack of the last S frames (``[S, H, W]`` uint8, S = 4). Consecutive observations of
one env share S - 1 frames, and ``next_obs`` of a transition is ``obs`` of the next one, so a plain buffer
(``obs`` and ``next_obs`` as full stacks) holds each frame 2 S = 8 times: 56 KB per 84x84 transition. This
buffer keeps, per env, one ring of single frames; a transition stores only the ring position ``p`` (an absolute
frame counter) of the newest frame of its ``obs``:

    obs      = frames[p - S + 1 .. p]
    next_obs = frames[p - S + 2 .. p + 1]

``add`` writes one frame per transition (the newest frame of ``next_obs``) and, when an env starts an episode
(its first ``add``, or the one after ``terminated | truncated``), the S frames of its first ``obs`` before it.
Frames of the previous episode therefore never enter a stack: a stack is always the env's own frames. The
ring holds ``frames_per_env = transitions_per_env + 2 S`` frames; a transition whose oldest frame has been
overwritten is evicted (oldest first), so with very short episodes (S + 1 frames per transition) fewer than
``capacity`` transitions are kept. Bytes per transition: ``(1 + 2 S / K) H W`` for the frames plus 26 for
position, action (int64), reward, flags: 7,082 B at 84x84 (``bytes_per_transition``), i.e. ~7.1 GB per 1 M
transitions, against 56,474 B when ``obs`` and ``next_obs`` are stored whole.

Requirements checked by ``add`` (``validate=True``, the default; a compiled comparison): the stacks slide
(``next_obs[:-1] == obs[1:]``) and a continuing env's ``obs`` equals the stack the buffer holds for it (the
previous ``next_obs``). Where an episode ended, ``next_obs`` is the true final observation (SAME_STEP autoreset,
gymnasium's ``info["final_obs"]``), as for ``ReplayBuffer``.

``sample(B)`` draws B transitions uniformly from all stored ones (with replacement) with the buffer's NumPy
Generator and gathers the stacks with one compiled call (no Python loop over rows), into preallocated arrays
that the next ``sample`` of the same size overwrites; the result is a ``ReplayBatch`` (one-step targets:
``discounts = gamma (1 - terminated)``). Indices are validated inside the kernel against the ring (a stale or
out-of-range index is an error, never an out-of-bounds read). Not thread-safe (one thread adds and samples).

``save(dir)`` writes the rings (only the frames written so far), the transition tables and the sampler's RNG
state as ``.npy`` files (``rapidrl.buffers.persist``); ``load`` reads them back memory-mapped, so a buffer of
several GB resumes exactly. ``storage="mmap"`` keeps the buffer itself in ``.npy`` files under ``path``.
"""

from __future__ import annotations

import os
from pathlib import Path

import numba
import numpy as np
import torch

from rapidrl._device import resolve_device
from rapidrl.buffers.batch import ReplayBatch
from rapidrl.buffers.persist import read_buffer_dir, storage_array, write_buffer_dir
from rapidrl.kernels.validation import check_int, check_scalar

__all__ = ["FrameReplayBuffer"]

# per-env bookkeeping columns of ``_state`` [N, 4] int64: ring head and count of transitions, frames written,
# whether the next add starts an episode
_HEAD, _COUNT, _FRAMES, _NEW_EPISODE = range(4)
_ADD_OK, _ADD_NOT_SLIDING, _ADD_NOT_CONTINUING = 0, 1, 2


@numba.njit(cache=True, nogil=True, inline="always")
def copy_frame(dst, src):
    """dst[:] = src for two 1-D contiguous frames: a plain loop, which LLVM vectorizes (Numba's slice assignment of
    2-D frames ran 16x slower: 0.65 vs 0.04 ms for a batch of 32 stacks of 4 84x84 frames)."""
    for i in range(src.shape[0]):
        dst[i] = src[i]


@numba.njit(cache=True, nogil=True, inline="always")
def _same_frame(a, b) -> bool:
    for i in range(a.shape[0]):
        if a[i] != b[i]:
            return False
    return True


@numba.njit(cache=True, nogil=True)
def _add_core(frames, state, slot_frame, actions_s, rewards_s, term_s, trunc_s, obs, actions, rewards, next_obs,
              term, trunc, validate):
    """Append one transition per env (row e of every input belongs to env e). Returns an _ADD_* code; on an
    error nothing has been written. frames [N, M, L], obs and next_obs [N, S, L]: frames flattened to L values."""
    N, M = frames.shape[0], frames.shape[1]
    K = slot_frame.shape[1]
    S = obs.shape[1]
    if validate:
        for e in range(N):
            for s in range(S - 1):
                if not _same_frame(next_obs[e, s], obs[e, s + 1]):
                    return _ADD_NOT_SLIDING
            if state[e, _NEW_EPISODE] == 0:
                p = state[e, _FRAMES] - 1
                for s in range(S):
                    if not _same_frame(frames[e, (p - S + 1 + s) % M], obs[e, s]):
                        return _ADD_NOT_CONTINUING
    for e in range(N):
        f = state[e, _FRAMES]
        if state[e, _NEW_EPISODE] != 0:
            for s in range(S):
                copy_frame(frames[e, (f + s) % M], obs[e, s])
            f += S
        p = f - 1
        copy_frame(frames[e, f % M], next_obs[e, S - 1])
        f += 1
        state[e, _FRAMES] = f
        head, count = state[e, _HEAD], state[e, _COUNT]
        # evict the oldest transitions whose oldest frame the ring has overwritten, and make room for one
        while count > 0:
            oldest = (head - count) % K
            if count < K and slot_frame[e, oldest] - S + 1 >= f - M:
                break
            count -= 1
        slot_frame[e, head] = p
        actions_s[e, head] = actions[e]
        rewards_s[e, head] = rewards[e]
        term_s[e, head] = term[e]
        trunc_s[e, head] = trunc[e]
        state[e, _HEAD] = (head + 1) % K
        state[e, _COUNT] = count + 1
        state[e, _NEW_EPISODE] = 1 if (term[e] or trunc[e]) else 0
    return _ADD_OK


@numba.njit(cache=True, nogil=True)
def _locate(state, K, draws, env_out, slot_out):
    """Map uniform draws [B] in [0, 1) to (env, slot) of stored transitions, uniformly over all of them."""
    N = state.shape[0]
    total = 0
    for e in range(N):
        total += state[e, _COUNT]
    for b in range(draws.shape[0]):
        g = min(int(draws[b] * total), total - 1)
        e = 0
        while g >= state[e, _COUNT]:
            g -= state[e, _COUNT]
            e += 1
        env_out[b] = e
        slot_out[b] = (state[e, _HEAD] - state[e, _COUNT] + g) % K


@numba.njit(cache=True, nogil=True)
def _gather_core(frames, state, slot_frame, actions_s, rewards_s, term_s, trunc_s, envs, slots, gamma,
                 obs_o, act_o, rew_o, nobs_o, term_o, trunc_o, disc_o, idx_o):
    """Gather stacked obs/next_obs and the other fields of transitions (envs[b], slots[b]); returns the first
    invalid row (an index out of range, not stored, or with an overwritten frame) or -1. frames [N, M, L],
    obs_o and nobs_o [B, S, L]: frames flattened to L values."""
    N, M = frames.shape[0], frames.shape[1]
    K = slot_frame.shape[1]
    S = obs_o.shape[1]
    for b in range(envs.shape[0]):
        e, k = envs[b], slots[b]
        if e < 0 or e >= N or k < 0 or k >= K:
            return b
        count, f = state[e, _COUNT], state[e, _FRAMES]
        if (state[e, _HEAD] - 1 - k) % K >= count:  # not among the stored slots
            return b
        p = slot_frame[e, k]
        if p - S + 1 < f - M or p + 1 >= f:
            return b
        for s in range(S):
            copy_frame(obs_o[b, s], frames[e, (p - S + 1 + s) % M])
            copy_frame(nobs_o[b, s], frames[e, (p - S + 2 + s) % M])
        act_o[b] = actions_s[e, k]
        rew_o[b] = rewards_s[e, k]
        term_o[b] = term_s[e, k]
        trunc_o[b] = trunc_s[e, k]
        disc_o[b] = 0.0 if term_s[e, k] else gamma
        idx_o[b] = e * K + k
    return -1


def _flat_stacks(stacks: np.ndarray) -> np.ndarray:
    """[B, S, *frame] -> [B, S, L] C-contiguous: a view of a contiguous array (so the kernels' writes land in it),
    a copy of any other (inputs only)."""
    return np.ascontiguousarray(stacks).reshape(stacks.shape[0], stacks.shape[1], -1)


class FrameReplayBuffer:
    """Uniform replay of stacked-frame observations, each frame stored once (see the module docstring).

    Args:
        capacity: transitions kept at most (split evenly over envs: ``capacity // num_envs`` per env).
        obs_shape: one observation's shape ``(S, H, W)`` (S stacked frames, uint8).
        num_envs: N; every ``add`` holds exactly one row per env, row e for env e.
        action_shape / action_dtype: per-transition action (default: a discrete int64 action).
        gamma: discount of the one-step target (``discounts = gamma (1 - terminated)``).
        seed: seed of the sampling Generator (None: fresh entropy).
        device: where ``sample(as_torch=True)`` puts tensors (CPU: zero-copy views).
        validate: check in ``add`` that stacks slide and continue the stored ones (see the module docstring).
        storage: "memory" (NumPy arrays) or "mmap" (``.npy`` files in directory ``path``, created or overwritten,
            for rings larger than RAM).
    """

    _ARRAYS = ("frames", "state", "slot_frame", "actions", "rewards", "terminated", "truncated")

    def __init__(self, capacity: int, obs_shape: tuple, *, num_envs: int = 1, action_shape: tuple = (),
                 action_dtype=np.int64, gamma: float = 0.99, seed: int | None = None,
                 device: str | torch.device = "cpu", validate: bool = True, storage: str = "memory",
                 path: str | os.PathLike | None = None):
        self.num_envs = check_int("num_envs", num_envs, low=1)
        self.capacity = check_int("capacity", capacity, low=self.num_envs)
        obs_shape = tuple(int(s) for s in obs_shape)
        if len(obs_shape) < 2 or obs_shape[0] < 1 or any(s < 1 for s in obs_shape):
            raise ValueError(f"obs_shape must be (stack, *frame_shape) with positive sizes, got {obs_shape}")
        self.obs_shape = obs_shape
        self.stack, self.frame_shape = obs_shape[0], obs_shape[1:]
        self.action_shape = tuple(int(s) for s in action_shape)
        self.action_dtype = np.dtype(action_dtype)
        self.gamma = check_scalar("gamma", gamma, low=0.0, high=1.0)
        self.device = resolve_device(device)
        self.validate = bool(validate)
        if storage not in ("memory", "mmap"):
            raise ValueError(f"storage must be 'memory' or 'mmap', got {storage!r}")
        if storage == "mmap" and path is None:
            raise ValueError("storage='mmap' needs path (a directory for the .npy files)")
        self.storage, self.path = storage, None if path is None else Path(path)
        if self.path is not None and storage == "mmap":
            self.path.mkdir(parents=True, exist_ok=True)
        self.seed = seed
        self._rng = np.random.default_rng(seed)
        N = self.num_envs
        self.transitions_per_env = self.capacity // N
        self.frames_per_env = self.transitions_per_env + 2 * self.stack
        for name, (shape, dtype) in self._specs().items():
            setattr(self, f"_{name}", storage_array(storage, self.path, name, shape, dtype))
        self._state[:, _NEW_EPISODE] = 1
        self._batches: dict[int, tuple[ReplayBatch, ReplayBatch | None, np.ndarray, np.ndarray, np.ndarray]] = {}

    def _specs(self) -> dict[str, tuple[tuple, np.dtype]]:
        """Shape and dtype of each stored array (``_ARRAYS`` order)."""
        N, K, M = self.num_envs, self.transitions_per_env, self.frames_per_env
        return {"frames": ((N, M, *self.frame_shape), np.dtype(np.uint8)), "state": ((N, 4), np.dtype(np.int64)),
                "slot_frame": ((N, K), np.dtype(np.int64)),
                "actions": ((N, K, *self.action_shape), self.action_dtype), "rewards": ((N, K), np.dtype(np.float32)),
                "terminated": ((N, K), np.dtype(np.bool_)), "truncated": ((N, K), np.dtype(np.bool_))}

    @staticmethod
    def storage_bytes(capacity: int, obs_shape: tuple, *, num_envs: int = 1, action_shape: tuple = (),
                      action_dtype=np.int64, **_ignored) -> int:
        """Bytes the stored arrays of a buffer built with these arguments take (before building it)."""
        stack, frame = int(obs_shape[0]), int(np.prod(obs_shape[1:]))
        K = capacity // num_envs
        per_transition = 8 + int(np.prod(action_shape)) * np.dtype(action_dtype).itemsize + 4 + 2
        return num_envs * ((K + 2 * stack) * frame + K * per_transition + 4 * 8)

    # -- size --------------------------------------------------------------------------------------
    def __len__(self) -> int:
        return int(self._state[:, _COUNT].sum())

    @property
    def bytes_per_transition(self) -> float:
        """Storage bytes (frames, positions, actions, rewards, flags) divided by ``capacity`` transitions."""
        arrays = (self._frames, self._state, self._slot_frame, self._actions, self._rewards, self._terminated,
                  self._truncated)
        return sum(a.nbytes for a in arrays) / (self.transitions_per_env * self.num_envs)

    # -- adding ------------------------------------------------------------------------------------
    def add(self, obs, actions, rewards, next_obs, terminated, truncated) -> None:
        """Append one transition per env: obs, next_obs [N, S, H, W] uint8; actions [N, *action_shape];
        rewards [N]; terminated, truncated [N] bool (``next_obs`` is the true final observation where an episode
        ended). Everything is checked before anything is written."""
        N, shape = self.num_envs, (self.num_envs, *self.obs_shape)
        for name, x in (("obs", obs), ("next_obs", next_obs)):
            if not isinstance(x, np.ndarray) or x.dtype != np.uint8 or x.shape != shape:
                raise ValueError(f"{name} must be a uint8 array of shape {shape}, got "
                                 f"{getattr(x, 'dtype', type(x).__name__)} {getattr(x, 'shape', '')}")
        actions = np.asarray(actions)
        if actions.shape != (N, *self.action_shape) or not np.can_cast(actions.dtype, self.action_dtype, "same_kind"):
            raise ValueError(f"actions must have shape {(N, *self.action_shape)} and a dtype castable to "
                             f"{self.action_dtype}, got {actions.dtype} {actions.shape}")
        rewards = np.asarray(rewards)
        if rewards.shape != (N,) or rewards.dtype.kind not in "biuf":
            raise ValueError(f"rewards must be a numeric array of shape {(N,)}, got {rewards.dtype} {rewards.shape}")
        flags = []
        for name, x in (("terminated", terminated), ("truncated", truncated)):
            x = np.asarray(x)
            if x.shape != (N,) or x.dtype != np.bool_:
                raise ValueError(f"{name} must be a bool array of shape {(N,)}, got {x.dtype} {x.shape}")
            flags.append(x)
        code = _add_core(self._flat_frames(), self._state, self._slot_frame, self._actions, self._rewards,
                         self._terminated, self._truncated, _flat_stacks(obs),
                         np.ascontiguousarray(actions, self.action_dtype), np.ascontiguousarray(rewards, np.float32),
                         _flat_stacks(next_obs), flags[0], flags[1], self.validate)
        if code == _ADD_NOT_SLIDING:
            raise ValueError("next_obs[:, :-1] must equal obs[:, 1:] (observations must be stacks of consecutive "
                             "frames)")
        if code == _ADD_NOT_CONTINUING:
            raise ValueError("obs of an env whose episode continues must equal that env's previous next_obs")

    def end_episodes(self) -> None:
        """Cut every env's open episode as truncated at its newest stored transition, so that the next ``add``
        starts a new episode (a resumed run whose env state was not saved, and was reset)."""
        for e in range(self.num_envs):
            if self._state[e, _COUNT] > 0:
                newest = (self._state[e, _HEAD] - 1) % self.transitions_per_env
                self._truncated[e, newest] |= not self._terminated[e, newest]
        self._state[:, _NEW_EPISODE] = 1

    # -- sampling ----------------------------------------------------------------------------------
    def _batch(self, batch_size: int):
        out = self._batches.get(batch_size)
        if out is None:
            B, S = batch_size, self.obs_shape
            arrays = ReplayBatch(np.zeros((B, *S), np.uint8), np.zeros((B, *self.action_shape), self.action_dtype),
                                 np.zeros(B, np.float32), np.zeros((B, *S), np.uint8), np.zeros(B, np.bool_),
                                 np.zeros(B, np.bool_), np.zeros(B, np.float32), np.ones(B, np.float32),
                                 np.zeros(B, np.int64))
            if self.device.type == "cpu":
                tensors = ReplayBatch(*(torch.from_numpy(a) for a in arrays))
            else:
                tensors = ReplayBatch(*(torch.from_numpy(a).to(self.device) for a in arrays))
            out = (arrays, tensors, np.zeros(B), np.zeros(B, np.int64), np.zeros(B, np.int64))
            self._batches[batch_size] = out
        return out

    def sample(self, batch_size: int, *, as_torch: bool = False) -> ReplayBatch:
        """Draw ``batch_size`` stored transitions uniformly (with replacement): stacked uint8 ``obs``/``next_obs``
        [B, S, H, W], actions, rewards, flags, ``discounts``, ``weights`` (ones), ``indices`` (env * K + slot).
        Arrays (or, with ``as_torch``, tensors on ``device``) are reused by the next call of the same size."""
        B = check_int("batch_size", batch_size, low=1)
        size = len(self)
        if size == 0:
            raise ValueError("cannot sample from an empty buffer")
        if B > size:
            raise ValueError(f"batch_size={B} is larger than the {size} stored transitions")
        arrays, tensors, draws, envs, slots = self._batch(B)
        self._rng.random(out=draws)
        _locate(self._state, self.transitions_per_env, draws, envs, slots)
        self._gather(envs, slots, arrays)
        return self._deliver(arrays, tensors, as_torch)

    def gather(self, envs: np.ndarray, slots: np.ndarray) -> ReplayBatch:
        """The transitions at (``envs[b]``, ``slots[b]``) [B] int64 (new arrays); ValueError for an index that
        does not hold a stored transition."""
        envs = np.ascontiguousarray(envs, np.int64)
        slots = np.ascontiguousarray(slots, np.int64)
        if envs.ndim != 1 or envs.shape != slots.shape or envs.shape[0] == 0:
            raise ValueError(f"envs and slots must be 1-D of the same non-zero length, got {envs.shape}, {slots.shape}")
        B, S = envs.shape[0], self.obs_shape
        out = ReplayBatch(np.zeros((B, *S), np.uint8), np.zeros((B, *self.action_shape), self.action_dtype),
                          np.zeros(B, np.float32), np.zeros((B, *S), np.uint8), np.zeros(B, np.bool_),
                          np.zeros(B, np.bool_), np.zeros(B, np.float32), np.ones(B, np.float32), np.zeros(B, np.int64))
        self._gather(envs, slots, out)
        return out

    def _flat_frames(self) -> np.ndarray:
        """The frame rings as [N, M, L] (a view: the rings are C-contiguous, in memory or memory-mapped)."""
        return self._frames.reshape(self._frames.shape[0], self._frames.shape[1], -1)

    def _gather(self, envs, slots, out: ReplayBatch) -> None:
        bad = _gather_core(self._flat_frames(), self._state, self._slot_frame, self._actions, self._rewards,
                           self._terminated, self._truncated, envs, slots, self.gamma, _flat_stacks(out.obs),
                           out.actions, out.rewards, _flat_stacks(out.next_obs), out.terminated, out.truncated,
                           out.discounts, out.indices)
        if bad >= 0:
            raise ValueError(f"index (env {envs[bad]}, slot {slots[bad]}) does not hold a stored transition")

    def _deliver(self, arrays: ReplayBatch, tensors: ReplayBatch, as_torch: bool) -> ReplayBatch:
        if not as_torch:
            return arrays
        if self.device.type != "cpu":
            for dst, src in zip(tensors, arrays):
                dst.copy_(torch.from_numpy(src))
        return tensors

    # -- persistence -------------------------------------------------------------------------------
    def _config(self) -> dict:
        return dict(capacity=self.capacity, obs_shape=list(self.obs_shape), num_envs=self.num_envs,
                    action_shape=list(self.action_shape), action_dtype=self.action_dtype.str, gamma=self.gamma)

    def save(self, path: str | os.PathLike) -> Path:
        """Write the buffer to directory ``path`` (replaced atomically): one ``.npy`` per array, the rings cut to
        the frames written so far, and ``header.json`` (configuration, sampler RNG state). No pickle."""
        path = Path(path)
        if self.path is not None and path.resolve() == self.path.resolve():
            raise ValueError(f"cannot save into the buffer's own mmap directory {path}")
        written = min(int(self._state[:, _FRAMES].max()), self.frames_per_env)
        arrays = {name: getattr(self, f"_{name}") for name in self._ARRAYS}
        arrays["frames"] = self._frames[:, :written]
        header = {"class": type(self).__name__, "config": self._config(),
                  "state": {"rng": self._rng.bit_generator.state, "frames_written": written}}
        return write_buffer_dir(path, header, arrays)

    def load(self, source: str | os.PathLike) -> FrameReplayBuffer:
        """Read a buffer written by ``save`` into this one (same configuration); returns it."""
        source = Path(source)
        header, arrays = read_buffer_dir(source)
        if header.get("class") != type(self).__name__ or header.get("config") != self._config():
            raise ValueError(f"{source} holds a {header.get('class')} with {header.get('config')}, not this buffer's "
                             f"{self._config()}")
        written = int(header["state"]["frames_written"])
        for name, (shape, dtype) in self._specs().items():
            expected = (shape[0], written, *shape[2:]) if name == "frames" else shape
            src = arrays.get(name)
            if src is None or src.shape != expected or src.dtype != dtype:
                raise ValueError(f"{source}/{name}.npy is missing or has the wrong shape or dtype (expected "
                                 f"{expected} {dtype})")
        self._frames[:, :written] = arrays["frames"]
        for name in self._ARRAYS[1:]:
            getattr(self, f"_{name}")[...] = arrays[name]
        self._rng.bit_generator.state = header["state"]["rng"]
        return self
