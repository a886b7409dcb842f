"""Experience storage: on-policy rollouts, uniform replay, prioritized replay.

``RolloutBuffer`` holds one time-major ``[T, N, ...]`` rollout with GAE in place and shuffled
minibatches; ``ReplayBuffer`` is a ring buffer of transitions with n-step targets, memory or mmap
storage and save/load (``buffer.sampler(B)``: a bound ``ReplaySampler`` for cheap repeated
sampling); ``PrioritizedReplayBuffer`` adds proportional prioritization on a sum/min tree;
``FrameReplayBuffer`` replays stacked-frame observations storing each frame once; ``HerReplayBuffer`` relabels the goals
of goal-conditioned transitions when sampled (hindsight experience replay). Pixel observations stay uint8
in every buffer (``RolloutBuffer(obs_dtype=np.uint8)``, ``ReplayBuffer(obs_dtype=np.uint8)``).
"""

from __future__ import annotations

from rapidrl.buffers.advantages import gae_torch, normalize_advantages, vtrace_targets
from rapidrl.buffers.frame_replay import FrameReplayBuffer
from rapidrl.buffers.her import HerReplayBuffer
from rapidrl.buffers.prioritized import PrioritizedReplayBuffer
from rapidrl.buffers.replay import ReplayBatch, ReplayBuffer, ReplaySampler
from rapidrl.buffers.rollout import RolloutBatch, RolloutBuffer, RolloutStorage

__all__ = [
    "FrameReplayBuffer",
    "HerReplayBuffer",
    "PrioritizedReplayBuffer",
    "ReplayBatch",
    "ReplayBuffer",
    "ReplaySampler",
    "RolloutBatch",
    "RolloutBuffer",
    "RolloutStorage",
    "gae_torch",
    "normalize_advantages",
    "vtrace_targets",
]
