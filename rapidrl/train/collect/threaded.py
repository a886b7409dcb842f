"""Overlapping collection and learning: a collector thread fills rollout k+1 while the learner trains on k.

The collector acts with a *behaviour copy* of the policy, its own ``ActorCritic`` (and observation
normalizer), never with the learner's parameters, which the optimizer changes mid-rollout:

- the learner ``publish``-es after each update: an in-place copy of its weights into a staging area, under a
  lock, bumping a version counter;
- the collector ``take``-s the staging area into the behaviour copy, under the same lock, only at a rollout
  boundary (before the first step of a rollout). Weights therefore never tear mid-rollout, and every
  rollout is collected by exactly one published version (``Rollout.version``).

Two ``Rollout`` slots (each a ``RolloutBuffer`` plus side arrays) alternate: the thread writes one while the
learner reads the other. ``start(seed)`` hands the next slot to the thread and returns once the thread has
taken its weights; ``wait()`` returns the finished rollout (re-raising any error of the thread). Ordered as
``wait`` (rollout k) -> ``start`` (k+1) -> update on k -> ``publish``, rollout k+1 is collected by the weights
after update k-1: the data is one update stale (policy lag 1). The stored log-probs are the behaviour
policy's, so PPO's probability ratio (and V-trace's importance weights) correct for it.

The fused collector's Numba kernel runs without the GIL, so it overlaps PyTorch's update fully. The
per-step path (``StepCollector``) releases the GIL only inside PyTorch and NumPy calls and C-level env
code; pure-Python env code still competes with the learner for the GIL.

Determinism: the learner draws every rollout's seed in order and passes it to ``start``; the fused kernel
seeds Numba's per-thread generator with it and ``StepCollector`` seeds torch's generator with it. The
weights a rollout uses are fixed by the handshake in ``start``. A seed thus fixes the whole run.
"""

from __future__ import annotations

import copy
import queue
import threading
from dataclasses import dataclass

import numpy as np
import torch

from rapidrl.buffers import RolloutBuffer
from rapidrl.train.collect.step import normalized

__all__ = ["AsyncCollector", "Rollout", "WeightMailbox"]


class WeightMailbox:
    """Learner -> collector weight hand-off: ``publish`` copies in, ``take`` copies out, both under one lock.

    learner, behaviour: modules of identical structure (every parameter and buffer is copied). normalizer /
    behaviour_normalizer: optional ``ObsNormalizer``s handed over with the weights.
    """

    def __init__(self, learner: torch.nn.Module, behaviour: torch.nn.Module, normalizer=None,
                 behaviour_normalizer=None):
        self._source = list(learner.state_dict().values())  # detached views of the learner's tensors
        self._target = list(behaviour.state_dict().values())
        self._staging = [t.clone() for t in self._source]
        self._normalizer, self._behaviour_normalizer = normalizer, behaviour_normalizer
        self._staged_norm = None if normalizer is None else normalizer.state_dict()
        self._lock = threading.Lock()
        self.version = 0
        """Number of ``publish`` calls so far (version 0: the weights at construction)."""
        self.taken = 0
        """Version held by the behaviour copy."""
        self.take()

    def publish(self) -> int:
        """Stage the learner's current weights (and normalizer statistics); returns the new version."""
        with self._lock:
            for dst, src in zip(self._staging, self._source):
                dst.copy_(src)
            if self._normalizer is not None:
                self._staged_norm = self._normalizer.state_dict()
            self.version += 1
            return self.version

    def take(self) -> int:
        """Copy the latest staged weights into the behaviour copy; returns their version."""
        with self._lock:
            for dst, src in zip(self._target, self._staging):
                dst.copy_(src)
            if self._behaviour_normalizer is not None:
                self._behaviour_normalizer.load_state_dict(self._staged_norm)
            self.taken = self.version
            return self.taken


@dataclass
class Rollout:
    """One slot of the double buffer: a collected rollout and what the learner needs besides the buffer."""

    buffer: RolloutBuffer
    raw_obs: np.ndarray
    """[T, N, *obs_shape] un-normalized observations (for the learner's normalizer update)."""
    last_obs: np.ndarray
    """[N, *obs_shape] observations after the last step, normalized as the behaviour policy saw them."""
    last_values: np.ndarray
    """[N] behaviour values of ``last_obs`` (the GAE bootstrap)."""
    ep_returns: np.ndarray | None = None
    """Returns of the episodes that ended during the rollout."""
    ep_lengths: np.ndarray | None = None
    """Their lengths."""
    version: int = -1
    """The published weight version that collected it."""


class AsyncCollector:
    """Collects rollouts in a background thread with a behaviour copy of ``policy`` (see the module docstring).

    Args:
        make_collector: ``f(env, behaviour_policy) -> collector`` with ``collect(buffer, obs, raw_obs,
            obs_normalizer, seed) -> (returns, lengths)`` (``FusedCollector`` or ``StepCollector``).
        env: the vector env; owned by the thread while a rollout is in flight.
        policy: the learner's ``ActorCritic``; obs_normalizer: the learner's ``ObsNormalizer`` or None.
        obs: [N, *obs_shape] current raw observations, advanced in place by each rollout.
        make_buffer: ``f() -> RolloutBuffer`` (called twice, one per slot).
    The thread starts at the first ``start`` and is joined by ``close`` (which waits for a rollout in
    flight and keeps it for the next ``wait``): ``close`` is safe to call at any time, more than once.
    """

    def __init__(self, make_collector, env, policy, obs_normalizer, obs: np.ndarray, make_buffer):
        self.behaviour = copy.deepcopy(policy)
        self.behaviour.requires_grad_(False)
        self.behaviour_normalizer = copy.deepcopy(obs_normalizer)
        self.mailbox = WeightMailbox(policy, self.behaviour, obs_normalizer, self.behaviour_normalizer)
        self.collector = make_collector(env, self.behaviour)
        self.obs = obs
        n = obs.shape[0]
        self.slots = []
        for _ in range(2):
            buf = make_buffer()
            self.slots.append(Rollout(buf, np.zeros((buf.num_steps, *obs.shape), obs.dtype),
                                      np.zeros(obs.shape, obs.dtype), np.zeros(n, np.float32)))
        self._next_slot = 0
        self._jobs: queue.Queue = queue.Queue()
        self._done: queue.Queue = queue.Queue()
        self._taken = threading.Event()
        self._thread: threading.Thread | None = None
        self._in_flight = False
        self._ready: tuple[Rollout, BaseException | None] | None = None

    @property
    def pending(self) -> bool:
        """True while a started rollout has not been returned by ``wait``."""
        return self._in_flight or self._ready is not None

    def publish(self) -> int:
        """Stage the learner's current weights for the next rollout; returns the version."""
        return self.mailbox.publish()

    def start(self, seed: int) -> None:
        """Begin the next rollout in the thread; returns once the thread has taken the published weights."""
        if self.pending:
            raise RuntimeError("a rollout is already pending: call wait() before start()")
        if self._thread is None:
            self._thread = threading.Thread(target=self._work, name="rapidrl-collector", daemon=True)
            self._thread.start()
        slot = self.slots[self._next_slot]
        self._next_slot ^= 1
        self._taken.clear()
        self._in_flight = True
        self._jobs.put((slot, int(seed)))
        self._taken.wait()

    def wait(self) -> Rollout:
        """The rollout started last (blocks until it is complete); re-raises an error of the thread."""
        if self._ready is None:
            if not self._in_flight:
                raise RuntimeError("no rollout pending: call start() first")
            self._ready = self._done.get()
            self._in_flight = False
        (slot, error), self._ready = self._ready, None
        if error is not None:
            raise RuntimeError("the collector thread failed") from error
        return slot

    def close(self) -> None:
        """Join the thread (after the rollout in flight, which stays available to ``wait``)."""
        if self._in_flight:
            self._ready = self._done.get()
            self._in_flight = False
        if self._thread is not None:
            self._jobs.put(None)
            self._thread.join()
            self._thread = None

    def drain(self) -> Rollout | None:
        """Let the rollout in flight finish (it stays available to ``wait``) and return it; None if none is pending.

        Afterwards the thread touches neither the env nor ``obs`` until the next ``start``: their state is that after
        the pending rollout, which is what an exact-resume checkpoint must capture."""
        if self._in_flight:
            self._ready = self._done.get()
            self._in_flight = False
        if self._ready is None:
            return None
        slot, error = self._ready
        if error is not None:
            self._ready = None
            raise RuntimeError("the collector thread failed") from error
        return slot

    def state_dict(self) -> dict:
        """The pending rollout, finished (``drain``) and copied, and the weight-version counters: with the env's and
        the learner's state, what resuming needs to continue exactly as an uninterrupted run (tensors and ints)."""
        slot = self.drain()
        state = {"version": self.mailbox.version, "taken": self.mailbox.taken, "pending": None}
        if slot is not None:
            state["pending"] = {"buffer": slot.buffer.state_dict(), "raw_obs": torch.from_numpy(slot.raw_obs.copy()),
                                "last_obs": torch.from_numpy(slot.last_obs.copy()),
                                "last_values": torch.from_numpy(slot.last_values.copy()),
                                "ep_returns": torch.from_numpy(np.asarray(slot.ep_returns).copy()),
                                "ep_lengths": torch.from_numpy(np.asarray(slot.ep_lengths).copy()),
                                "version": slot.version}
        return state

    def load_state_dict(self, state: dict) -> None:
        """Inverse of ``state_dict``, on a collector that has not started; the learner's weights (and normalizer)
        must already be loaded: they are published as the weights of the next rollout, as after the update that
        preceded the checkpoint."""
        if self._thread is not None or self.pending:
            raise RuntimeError("load_state_dict needs a collector that has not started a rollout")
        self.mailbox.publish()
        self.mailbox.version, self.mailbox.taken = int(state["version"]), int(state["taken"])
        pending = state["pending"]
        if pending is None:
            return
        slot = self.slots[self._next_slot ^ 1]  # the next start() writes the other slot
        slot.buffer.load_state_dict(pending["buffer"])
        np.copyto(slot.raw_obs, pending["raw_obs"].numpy())
        np.copyto(slot.last_obs, pending["last_obs"].numpy())
        np.copyto(slot.last_values, pending["last_values"].numpy())
        slot.ep_returns, slot.ep_lengths = pending["ep_returns"].numpy(), pending["ep_lengths"].numpy()
        slot.version = int(pending["version"])
        self._ready = (slot, None)

    def _work(self) -> None:
        while (job := self._jobs.get()) is not None:
            slot, seed = job
            try:
                try:
                    slot.version = self.mailbox.take()
                finally:
                    self._taken.set()
                self._collect(slot, seed)
                self._done.put((slot, None))
            except BaseException as e:  # handed to the learner by wait()
                self._done.put((slot, e))

    def _collect(self, slot: Rollout, seed: int) -> None:
        norm = self.behaviour_normalizer
        slot.ep_returns, slot.ep_lengths = self.collector.collect(slot.buffer, self.obs, slot.raw_obs, norm, seed)
        slot.ep_returns, slot.ep_lengths = slot.ep_returns.copy(), slot.ep_lengths.copy()  # fused: reused arrays
        np.copyto(slot.last_obs, normalized(norm, self.obs, self.obs.dtype))
        with torch.no_grad():
            last = torch.from_numpy(slot.last_obs).to(slot.buffer.device)
            slot.last_values[:] = self.behaviour.value(last).cpu().numpy()
