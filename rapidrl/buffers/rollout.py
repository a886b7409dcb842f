"""On-policy rollout storage: preallocated time-major ``[T, N, ...]`` arrays, GAE in place, minibatches.

On the CPU every field is a NumPy array (``buffer.rewards``) and, sharing its memory, a torch tensor
(``buffer.tensors.rewards``, via ``torch.from_numpy``). On another device every field is a torch tensor on
that device (``buffer.rewards`` is then the tensor itself, and ``buffer.tensors`` holds the same tensors).

Episode ends follow ``rapidrl.kernels.advantages``: ``terminated[t]`` cuts the trace with no bootstrap,
``truncated[t]`` cuts it and bootstraps from ``final_values[t]``, the value of the true final observation
(the env has already reset, so ``values[t + 1]`` belongs to the next episode).

Minibatches are gathered from a shuffled flat index ``[T * N]`` with one ``index_select`` per field into
tensors that are allocated once per batch size and reused: a yielded ``RolloutBatch`` is valid until
the next one is produced.

Loss masks: ``active[t, n]`` is False where row n took no part in step t (an agent that left a multi-agent
episode: the env's ``info["active"]``, stored by the per-step collector through ``add(..., active=)``). When a
rollout has such samples (``masked``), minibatches and the compiled PPO epoch draw from the active samples
only, and advantage statistics are theirs. A rollout written without masks has ``masked`` False and costs
nothing extra.

Action masks (docs/masks.md): for an env that states its valid actions, ``action_mask_size`` M > 0 and
``action_masks[t, n]`` [M] bool holds the valid actions of the observation step t acted on (written by the
collectors); minibatches then carry them (``RolloutBatch.action_masks``), so the update scores the stored actions
under the distribution they were sampled from. M = 0 (an env without masks) stores nothing and batches carry None.
"""

from __future__ import annotations

import warnings
from collections.abc import Iterator
from typing import NamedTuple

import numpy as np
import torch

from rapidrl._device import resolve_device
from rapidrl.buffers.advantages import advantage_moments, gae_torch
from rapidrl.buffers.advantages import normalize_advantages as _normalize_advantages
from rapidrl.kernels import gae_into
from rapidrl.kernels.validation import check_int

__all__ = ["ADVANTAGE_NORMALIZATIONS", "RolloutBatch", "RolloutBuffer", "RolloutStorage"]

_FIELDS = ("obs", "actions", "log_probs", "values", "rewards", "terminated", "truncated", "final_values",
           "advantages", "returns", "active", "action_masks")
_ADDED = _FIELDS[:8]  # written by add(), in its argument order
_BATCH = ("obs", "actions", "log_probs", "values", "advantages", "returns")
ADVANTAGE_NORMALIZATIONS = ("minibatch", "batch", "none")
"""The values of ``minibatches(normalize_advantage=...)``, and of the on-policy configs' ``normalize_advantage``."""
_UNSET = object()  # minibatches' deprecated normalize_advantages keyword, not given


class RolloutBatch(NamedTuple):
    """One minibatch of M flat (time, env) samples; torch tensors on the buffer's device."""

    obs: torch.Tensor  # [M, *obs_shape]
    actions: torch.Tensor  # [M, *action_shape]
    log_probs: torch.Tensor  # [M]
    values: torch.Tensor  # [M]
    advantages: torch.Tensor  # [M], normalized as asked
    returns: torch.Tensor  # [M]
    action_masks: torch.Tensor | None = None  # [M, A] bool: the valid actions the stored actions were chosen among

    def evaluate(self, policy) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """(log_probs, entropy, values) [M] of the stored actions under ``policy`` (``ActorCritic.evaluate``; over the
        valid actions of ``action_masks`` when the rollout has them)."""
        if self.action_masks is None:
            return policy.evaluate(self.obs, self.actions)
        return policy.evaluate(self.obs, self.actions, action_masks=self.action_masks)


class RolloutStorage(NamedTuple):
    """Every field of a ``RolloutBuffer``, ``[T, N, ...]`` (NumPy arrays or torch tensors)."""

    obs: object
    actions: object
    log_probs: object
    values: object
    rewards: object
    terminated: object
    truncated: object
    final_values: object
    advantages: object
    returns: object
    active: object
    action_masks: object


def _kind(x) -> str:
    """NumPy dtype kind of an array or tensor ('b', 'i', 'u', 'f', 'c')."""
    if isinstance(x, np.ndarray):
        return x.dtype.kind
    if x.dtype == torch.bool:
        return "b"
    if x.dtype.is_floating_point:
        return "f"
    if x.dtype.is_complex:
        return "c"
    return "u" if x.dtype == torch.uint8 else "i"


_ACCEPTS = {"f": "biuf", "i": "biu", "u": "biu", "b": "b"}


class RolloutBuffer:
    """Preallocated ``[num_steps, num_envs, ...]`` storage for one on-policy rollout.

    Args:
        num_steps (T), num_envs (N): rollout size.
        obs_shape, action_shape: per-env shapes (``()`` for a discrete action).
        obs_dtype: storage dtype of observations; action_dtype: storage dtype of actions (default
            int64 for ``action_shape == ()``, else float32).
        device: "cpu" (NumPy storage + torch views) or a torch device (torch storage).
        action_mask_size: M, the width of the env's action masks (0: the env states none, nothing is stored).

    Fields (``[T, N]`` unless noted): obs ``[T, N, *obs_shape]``, actions ``[T, N, *action_shape]``,
    log_probs, values, rewards, final_values, advantages, returns (float32); terminated, truncated, active (bool);
    action_masks ``[T, N, M]`` (bool).
    """

    def __init__(self, num_steps: int, num_envs: int, obs_shape: tuple, action_shape: tuple = (), *,
                 obs_dtype=np.float32, action_dtype=None, device: str | torch.device = "cpu",
                 action_mask_size: int = 0):
        self.num_steps = check_int("num_steps", num_steps, low=1)
        self.num_envs = check_int("num_envs", num_envs, low=1)
        self.action_mask_size = check_int("action_mask_size", action_mask_size, low=0)
        self.obs_shape = tuple(int(s) for s in obs_shape)
        self.action_shape = tuple(int(s) for s in action_shape)
        if action_dtype is None:
            action_dtype = np.int64 if self.action_shape == () else np.float32
        self.obs_dtype = np.dtype(obs_dtype)
        self.action_dtype = np.dtype(action_dtype)
        self.device = resolve_device(device)
        T, N = self.num_steps, self.num_envs
        specs = {"obs": ((T, N, *self.obs_shape), self.obs_dtype),
                 "actions": ((T, N, *self.action_shape), self.action_dtype),
                 **{f: ((T, N), np.dtype(np.float32)) for f in ("log_probs", "values", "rewards", "final_values",
                                                               "advantages", "returns")},
                 **{f: ((T, N), np.dtype(np.bool_)) for f in ("terminated", "truncated", "active")},
                 "action_masks": ((T, N, self.action_mask_size), np.dtype(np.bool_))}
        self._specs = {f: specs[f] for f in _FIELDS}
        if self.device.type == "cpu":
            self.arrays = RolloutStorage(*(np.zeros(s, dtype=d) for s, d in self._specs.values()))
            self.tensors = RolloutStorage(*(torch.from_numpy(a) for a in self.arrays))
            storage = self.arrays
        else:
            self.arrays = None
            self.tensors = RolloutStorage(*(torch.zeros(s, dtype=torch.from_numpy(np.empty(0, d)).dtype,
                                                        device=self.device) for s, d in self._specs.values()))
            storage = self.tensors
        for name, x in zip(_FIELDS, storage):
            setattr(self, name, x)
        self._batch_fields = _BATCH + (("action_masks",) if self.action_mask_size else ())
        """What a minibatch gathers: the action masks too when the rollout has them."""
        self._flat = {f: getattr(self.tensors, f).reshape(T * N, *getattr(self.tensors, f).shape[2:])
                      for f in self._batch_fields}
        self.active[...] = True
        self._pos = 0
        self.masked = False
        """Some stored sample is inactive (``active`` False): minibatches then draw from the active ones only."""
        self._minibatch_cache: dict[int, RolloutBatch] = {}
        self._perm = torch.empty(T * N, dtype=torch.int64)
        self._arange = np.arange(T * N, dtype=np.int64)
        self._perm_device = self._perm if self.device.type == "cpu" else torch.empty(
            T * N, dtype=torch.int64, device=self.device)

    # -- filling -----------------------------------------------------------------------------------
    @property
    def pos(self) -> int:
        """Time index the next ``add`` writes."""
        return self._pos

    @property
    def full(self) -> bool:
        return self._pos == self.num_steps

    def reset(self) -> None:
        """Start a new rollout (storage is overwritten by the next adds)."""
        if self.masked:
            self.active[:] = True
            self.masked = False
        self._pos = 0

    def mark_full(self) -> None:
        """Declare all T steps written by a writer other than ``add`` (the fused rollout collector)."""
        self._pos = self.num_steps

    def add(self, obs, actions, log_probs, values, rewards, terminated, truncated, final_values=None,
            active: np.ndarray | None = None, action_masks: np.ndarray | None = None) -> None:
        """Write one time step for all N envs at ``pos`` and advance.

        obs [N, *obs_shape], actions [N, *action_shape], log_probs/values/rewards [N], terminated/
        truncated [N] bool, final_values [N] (value of the true final observation where truncated;
        None is allowed only when no env is truncated-not-terminated). NumPy arrays or torch tensors
        (any device); numbers are cast to the storage dtype within their kind family (bool < int <
        float), flags must be bool. Everything is checked before anything is written.
        active: None (every row took part in this step) or a NumPy bool [N] loss mask (False: leave the row's
        sample out of the update, e.g. an agent that left a multi-agent episode).
        action_masks: the NumPy bool [N, M] valid actions the actions were chosen among; required when the buffer has
        ``action_mask_size`` M > 0, refused otherwise.
        """
        if self._pos >= self.num_steps:
            raise ValueError(f"rollout is full ({self.num_steps} steps); call reset() first")
        args = [obs, actions, log_probs, values, rewards, terminated, truncated, final_values]
        cpu = self.device.type == "cpu"
        for k, (name, x) in enumerate(zip(_ADDED, args)):
            if x is None and name == "final_values":
                continue
            if isinstance(x, torch.Tensor):
                x = x.detach()
                if cpu:
                    x = x.cpu().numpy()
            elif isinstance(x, np.ndarray):
                if not cpu:
                    x = torch.from_numpy(x)
            else:
                raise TypeError(f"{name} must be a numpy.ndarray or torch.Tensor, got {type(x).__name__}")
            shape, dtype = self._specs[name]
            if tuple(x.shape) != shape[1:]:
                raise ValueError(f"{name} must have shape {shape[1:]}, got {tuple(x.shape)}")
            if _kind(x) not in _ACCEPTS[dtype.kind]:
                raise TypeError(f"{name} has dtype {x.dtype}, which cannot be stored as {dtype}")
            args[k] = x
        if final_values is None and bool((args[6] & ~args[5]).any()):
            raise ValueError("final_values is None but an env is truncated: pass the value of its final observation")
        if active is not None:
            if not (isinstance(active, np.ndarray) and active.dtype == np.bool_ and active.shape == (self.num_envs,)):
                raise TypeError(f"active must be None or a NumPy bool array of shape ({self.num_envs},)")
            active = None if active.all() else active
        if (action_masks is None) != (self.action_mask_size == 0):
            raise ValueError(f"action_masks must be given exactly when the buffer stores masks (action_mask_size="
                             f"{self.action_mask_size})")
        if action_masks is not None and not (isinstance(action_masks, np.ndarray) and action_masks.dtype == np.bool_
                                             and action_masks.shape == (self.num_envs, self.action_mask_size)):
            raise TypeError(f"action_masks must be a NumPy bool array of shape ({self.num_envs}, "
                            f"{self.action_mask_size})")
        t = self._pos
        if action_masks is not None:
            self.action_masks[t] = action_masks if cpu else torch.from_numpy(action_masks).to(self.device)
        if active is not None:
            self.active[t] = active if cpu else torch.from_numpy(active).to(self.device)
            self.masked = True
        for name, x in zip(_ADDED, args):
            dst = getattr(self, name)
            if x is None:
                dst[t] = 0
            elif cpu:
                dst[t] = x
            else:
                dst[t].copy_(x, non_blocking=True)
        self._pos = t + 1

    # -- persistence -------------------------------------------------------------------------------
    def state_dict(self) -> dict:
        """Every field (CPU tensors, copies) and the write position: what a checkpoint stores of a rollout."""
        state = {name: getattr(self.tensors, name).detach().cpu().clone() for name in _FIELDS}
        state["pos"] = self._pos
        state["masked"] = self.masked
        return state

    def load_state_dict(self, state: dict) -> None:
        """Inverse of ``state_dict``, in place (views of the fields held elsewhere stay valid)."""
        for name in _FIELDS:
            if name == "active" and name not in state:  # a rollout saved before loss masks existed
                self.tensors.active.fill_(True)
                continue
            if name == "action_masks" and name not in state and self.action_mask_size == 0:
                continue  # a rollout saved before action masks existed (its env had none)
            dst, src = getattr(self.tensors, name), state[name]
            if tuple(src.shape) != tuple(dst.shape) or src.dtype != dst.dtype:
                raise ValueError(f"saved rollout field {name} is {src.dtype} {tuple(src.shape)}, this buffer holds "
                                 f"{dst.dtype} {tuple(dst.shape)}")
            dst.copy_(src)
        self._pos = int(state["pos"])
        self.masked = bool(state.get("masked", False))

    # -- advantages --------------------------------------------------------------------------------
    def compute_advantages(self, last_values, *, gamma: float, lam: float) -> None:
        """GAE into ``advantages``/``returns`` in place (``rapidrl.kernels.gae_into`` on the CPU,
        ``gae_torch`` on a device). last_values: [N], value of the observation after the last step."""
        if not self.full:
            raise ValueError(f"compute_advantages needs a full rollout: {self._pos}/{self.num_steps} steps added")
        if self.device.type == "cpu":
            if isinstance(last_values, torch.Tensor):
                last_values = last_values.detach().cpu().numpy()
            if isinstance(last_values, np.ndarray) and last_values.dtype != np.float32:
                last_values = last_values.astype(np.float32)
            gae_into(self.rewards, self.values, last_values, self.terminated, self.truncated, gamma=gamma, lam=lam,
                     out_advantages=self.advantages, out_returns=self.returns, final_values=self.final_values)
        else:
            if isinstance(last_values, np.ndarray):
                last_values = torch.from_numpy(last_values)
            last_values = last_values.detach().to(device=self.device, dtype=self.rewards.dtype)
            gae_torch(self.rewards, self.values, last_values, self.terminated, self.truncated, gamma=gamma, lam=lam,
                      final_values=self.final_values, out_advantages=self.advantages, out_returns=self.returns)

    # -- minibatches -------------------------------------------------------------------------------
    def minibatches(self, batch_size: int, *, generator: torch.Generator | np.random.Generator | None = None,
                    normalize_advantage: str = "minibatch", epochs: int = 1,
                    normalize_advantages=_UNSET) -> Iterator[RolloutBatch]:
        """Yield shuffled minibatches of the full rollout, ``epochs`` passes over all T*N samples.

        batch_size: 1 .. T*N. Each epoch is one random permutation cut into ceil(T*N / batch_size)
        minibatches: every sample appears exactly once per epoch, and when batch_size does not divide
        T*N the last minibatch of the epoch is smaller (T*N mod batch_size samples).
        generator: torch.Generator, numpy Generator, or None (torch's global generator).
        normalize_advantage: "minibatch" (each minibatch to mean 0, std 1), "batch" (with the mean and
        std of the whole rollout) or "none" (``ADVANTAGE_NORMALIZATIONS``, the configs' ``normalize_advantage``).
        Std is the population std (+1e-8), so a 1-sample minibatch gives 0, not NaN. The stored advantages are
        never modified. rapidrl's earlier spellings, ``normalize_advantages=`` and its None for "none", are taken
        with a DeprecationWarning.
        Yields ``RolloutBatch`` views of reused tensors (overwritten by the next minibatch). A ``masked`` rollout
        yields fresh tensors holding its active samples only (each once per epoch).
        """
        total = self.num_steps * self.num_envs
        batch_size = check_int("batch_size", batch_size, low=1, high=total)
        epochs = check_int("epochs", epochs, low=1)
        if normalize_advantages is None:
            warnings.warn('minibatches(normalize_advantages=None), later normalize_advantages="none", is now '
                          'spelled normalize_advantage="none"', DeprecationWarning, stacklevel=2)
            normalize_advantage = "none"
        elif normalize_advantages is not _UNSET:
            warnings.warn("minibatches(normalize_advantages=...) is now spelled normalize_advantage=...",
                          DeprecationWarning, stacklevel=2)
            normalize_advantage = normalize_advantages
        if normalize_advantage not in ADVANTAGE_NORMALIZATIONS:
            raise ValueError(f"normalize_advantage must be one of {ADVANTAGE_NORMALIZATIONS}, "
                             f"got {normalize_advantage!r}")
        normalize = None if normalize_advantage == "none" else normalize_advantage
        if generator is not None and not isinstance(generator, (torch.Generator, np.random.Generator)):
            raise TypeError(f"generator must be a torch.Generator, numpy Generator or None, "
                            f"got {type(generator).__name__}")
        if not self.full:
            raise ValueError(f"minibatches needs a full rollout: {self._pos}/{self.num_steps} steps added")
        fields = self._batch_fields
        out = self._minibatch_cache.get(batch_size)
        if out is None:
            out = RolloutBatch(*(torch.empty((batch_size, *self._flat[f].shape[1:]), dtype=self._flat[f].dtype,
                                             device=self.device) for f in fields))
            self._minibatch_cache[batch_size] = out
        if self.masked:
            yield from self._active_minibatches(batch_size, generator, normalize, epochs)
            return
        moments = advantage_moments(self.tensors.advantages) if normalize == "batch" else None
        for _ in range(epochs):
            self._shuffle(generator)
            for start in range(0, total, batch_size):
                m = min(batch_size, total - start)
                idx = self._perm_device[start:start + m]
                mb = RolloutBatch(*(x[:m] for x in out[:len(fields)])) if m < batch_size else out
                for name, dst in zip(fields, mb):
                    torch.index_select(self._flat[name], 0, idx, out=dst)
                if normalize is not None:
                    _normalize_advantages(mb.advantages, moments, inplace=True)
                yield mb

    def _active_minibatches(self, batch_size: int, generator, normalize: str | None, epochs: int
                            ) -> Iterator[RolloutBatch]:
        """``minibatches`` of a masked rollout: each epoch a random permutation of the active samples cut into
        minibatches of ``batch_size`` (the last one smaller); "batch" normalisation uses the active samples'
        moments. Fresh tensors per minibatch."""
        index = self.active_indices()
        if len(index) == 0:
            return
        fields = [self._flat[f] for f in self._batch_fields]
        moments = advantage_moments(self._flat["advantages"][index]) if normalize == "batch" else None
        for _ in range(epochs):
            chosen = index[self._draw_order(len(index), generator).to(index.device)]
            for start in range(0, len(chosen), batch_size):
                idx = chosen[start:start + batch_size]
                mb = RolloutBatch(*(f[idx] for f in fields))
                if normalize is not None:
                    _normalize_advantages(mb.advantages, moments, inplace=True)
                yield mb

    def active_indices(self) -> torch.Tensor:
        """Flat indices [K] (int64, on the buffer's device) of the active samples, in order."""
        active = self.active.reshape(-1)
        if isinstance(active, np.ndarray):
            return torch.from_numpy(np.flatnonzero(active)).to(self.device)
        return torch.nonzero(active).reshape(-1)

    def active_permutation(self, generator=None) -> torch.Tensor:
        """The active samples' flat indices in a random order: what one epoch of ``minibatches`` of a masked
        rollout draws (``permutation`` for rollouts without masks)."""
        index = self.active_indices()
        return index[self._draw_order(len(index), generator).to(index.device)]

    @staticmethod
    def _draw_order(n: int, generator) -> torch.Tensor:
        if isinstance(generator, np.random.Generator):
            return torch.from_numpy(generator.permutation(n))
        return torch.randperm(n, generator=generator)

    def flat_action_masks(self) -> torch.Tensor | None:
        """The ``[T*N, M]`` view of the stored action masks, or None when the rollout has none (M = 0)."""
        return self._flat["action_masks"] if self.action_mask_size else None

    def flat(self, name: str) -> torch.Tensor:
        """The ``[T*N, ...]`` view of stored field ``name`` (one of obs, actions, log_probs, values, advantages,
        returns, ...): the storage itself, not a copy."""
        if name not in self._flat:
            raise ValueError(f"name must be one of {sorted(self._flat)}, got {name!r}")
        return self._flat[name]

    def permutation(self, generator=None) -> torch.Tensor:
        """A fresh random permutation of the T*N samples, drawn exactly as one epoch of ``minibatches`` draws it
        (so a caller that cuts minibatches itself sees the same samples). Reused tensor [T*N] int64."""
        self._shuffle(generator)
        return self._perm

    def _shuffle(self, generator) -> None:
        """Fill the flat permutation (on the device) from ``generator``."""
        n = self._perm.shape[0]
        if isinstance(generator, np.random.Generator):
            perm = self._perm.numpy()
            np.copyto(perm, self._arange)
            generator.shuffle(perm)
        else:
            torch.randperm(n, generator=generator, out=self._perm)
        if self._perm_device is not self._perm:
            self._perm_device.copy_(self._perm)
