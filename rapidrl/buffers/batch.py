"""A sampled replay minibatch (``ReplayBatch``) and the preallocated arrays and tensors it is gathered into."""

from __future__ import annotations

from typing import Any, NamedTuple

import numpy as np
import torch

__all__ = ["ReplayBatch"]

F32 = np.dtype(np.float32)
BOOL = np.dtype(np.bool_)
INT64 = np.dtype(np.int64)


class ReplayBatch(NamedTuple):
    """A sampled minibatch (NumPy arrays, or torch tensors with ``as_torch=True``), B rows.

    ``rewards``/``discounts``/``next_obs``/``terminated``/``truncated`` describe the (n-step) target
    ``rewards + discounts * V(next_obs)``; see ``rapidrl.buffers.replay``.
    """

    obs: Any  # [B, *obs_shape] obs_dtype
    actions: Any  # [B, *action_shape] action_dtype
    rewards: Any  # [B] float32, n-step discounted reward sum
    next_obs: Any  # [B, *obs_shape] obs_dtype, observation to bootstrap from
    terminated: Any  # [B] bool, of the last step looked at
    truncated: Any  # [B] bool, of the last step looked at
    discounts: Any  # [B] float32, gamma^m, 0 after a termination
    weights: Any  # [B] float32 importance weights (all 1 for uniform replay)
    indices: Any  # [B] int64 rows sampled (for update_priorities)


class BatchSlot:
    """Preallocated output arrays (and their torch views or device tensors) for one batch size of a buffer."""

    __slots__ = ("arrays", "event", "flat", "host", "tensors", "u")

    def __init__(self, buf, batch_size: int):
        B = batch_size
        pinned = buf.pin_memory and buf.device.type == "cuda"
        specs = (("obs", (B, *buf.obs_shape), buf.obs_dtype), ("actions", (B, *buf.action_shape), buf.action_dtype),
                 ("rewards", (B,), F32), ("next_obs", (B, *buf.obs_shape), buf.obs_dtype),
                 ("terminated", (B,), BOOL), ("truncated", (B,), BOOL), ("discounts", (B,), F32),
                 ("weights", (B,), F32), ("indices", (B,), INT64))
        if pinned:
            self.host = [torch.empty(shape, dtype=torch_dtype(dt), pin_memory=True) for _, shape, dt in specs]
            arrays = [t.numpy() for t in self.host]
        else:
            arrays = [np.empty(shape, dtype=dt) for _, shape, dt in specs]
            self.host = None
        arrays[7].fill(1.0)  # uniform replay: weights stay 1
        self.arrays = ReplayBatch(*arrays)
        if buf.device.type == "cpu":
            self.tensors = ReplayBatch(*(torch.from_numpy(a) for a in arrays))
        else:
            self.tensors = ReplayBatch(*(torch.empty(a.shape, dtype=torch_dtype(a.dtype), device=buf.device)
                                         for a in arrays))
        self.event = None
        self.u = np.empty(B, dtype=np.float64)
        self.flat = flat_outputs(self.arrays)

    def deliver(self, as_torch: bool, device: torch.device, pin_memory: bool) -> ReplayBatch:
        """The sampled arrays, or their tensors on ``device`` (copied there unless on the CPU; asynchronously from
        pinned memory, with an event the next sample waits for)."""
        if not as_torch:
            return self.arrays
        if device.type != "cpu":
            for dst, src in zip(self.tensors, self.host or self.arrays):
                dst.copy_(src if isinstance(src, torch.Tensor) else torch.from_numpy(src), non_blocking=pin_memory)
            if pin_memory and device.type == "cuda":
                self.event = torch.cuda.Event()
                self.event.record()
        return self.tensors

    def wait(self) -> None:
        """Wait until a previous asynchronous copy has finished reading the host arrays."""
        if self.event is not None:
            self.event.synchronize()


def flat_outputs(batch: ReplayBatch) -> tuple:
    """The gather core's output views: obs/actions/next_obs as [B, D], then rewards, flags, discounts."""
    B = batch.rewards.shape[0]
    return (batch.obs.reshape(B, -1), batch.actions.reshape(B, -1), batch.rewards,
            batch.next_obs.reshape(B, -1), batch.terminated, batch.truncated, batch.discounts)


def torch_dtype(dtype: np.dtype) -> torch.dtype:
    return torch.from_numpy(np.empty(0, dtype=dtype)).dtype
