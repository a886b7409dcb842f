"""What a recurrent policy (``recurrent="lstm"|"gru"``) changes outside collection: acting with a state
(``predict_with_state``, ``RecurrentActor``) and the update's view of a rollout as whole env columns
(``RolloutSequences``).

Collection carries the state (``rapidrl.train.collect.recurrent``) and keeps, per rollout, the state entering its
first step and which envs start an episode there. An update replays each env column from that state: the starts
of later steps are rebuilt from the stored episode ends (``episode_starts``), so the first epoch's ratios are
exactly 1. A minibatch is a set of whole columns (truncated backpropagation through time over the rollout, as
CleanRL's ppo_atari_lstm); ``burn_in`` steps at the start of each column only warm the state up.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass

import numpy as np
import torch

from rapidrl.buffers.advantages import advantage_moments, normalize_advantages
from rapidrl.nn.recurrent import SegmentLayout, segment_layout

__all__ = ["RecurrentActor", "RolloutSequences", "SequenceBatch", "episode_starts", "predict_with_state"]


def episode_starts(initial_starts: torch.Tensor, terminated: torch.Tensor, truncated: torch.Tensor) -> torch.Tensor:
    """[T, N] bool: step t of env n is the first of an episode. initial_starts [N]; terminated, truncated [T, N]."""
    done = terminated | truncated
    return torch.cat([initial_starts.unsqueeze(0), done[:-1]])


class RecurrentActor:
    """Acting step by step with a recurrent policy outside training (evaluation, ``predict`` loops): holds the
    state of ``n`` envs. ``__call__(obs [n, ...] float32 tensor, episode_starts [n] bool) -> raw actions``, sampled from
    ``generator`` (None: torch's global generator)."""

    def __init__(self, policy, n: int, device, deterministic: bool, generator: torch.Generator | None = None):
        self.policy, self.deterministic, self.generator = policy, deterministic, generator
        self.state = policy.initial_state(n, device)

    @torch.no_grad()
    def __call__(self, obs: torch.Tensor, starts: torch.Tensor, action_masks: torch.Tensor | None = None
                 ) -> torch.Tensor:
        raw, _, _, self.state = self.policy.act(obs, self.state, starts, deterministic=self.deterministic,
                                                action_masks=action_masks, generator=self.generator)
        return raw


def predict_with_state(policy, obs: np.ndarray, state, episode_start, deterministic: bool, device,
                       action_masks: np.ndarray | None = None, generator: torch.Generator | None = None
                       ) -> tuple[np.ndarray, np.ndarray]:
    """``predict`` of a recurrent policy, as sb3-contrib's: obs [B, ...] (normalized as the policy takes them),
    state [B, S] (None: fresh episodes) and episode_start [B] bool (None: none starts) -> (env actions [B, ...],
    the state after this step [B, S] float32); among the valid actions of ``action_masks`` [B, M] bool (checked)
    when given; sampled from ``generator`` (None: torch's global generator)."""
    n = obs.shape[0]
    if state is None:
        state = policy.initial_state(n, device)
    else:
        state = torch.as_tensor(np.asarray(state) if not isinstance(state, torch.Tensor) else state,
                                dtype=torch.float32).reshape(n, -1).to(device)
        policy.check_state(state, n)
    starts = np.zeros(n, bool) if episode_start is None else np.asarray(episode_start, dtype=bool).reshape(-1)
    if starts.shape != (n,):
        raise ValueError(f"episode_start must have {n} entries (one per observation), got {starts.shape}")
    with torch.no_grad():
        x = torch.from_numpy(np.ascontiguousarray(obs)).to(device)
        masks = None if action_masks is None else torch.from_numpy(action_masks).to(device)
        raw, _, _, state = policy.act(x, state, torch.from_numpy(starts).to(device), deterministic=deterministic,
                                      action_masks=masks, generator=generator)
        actions = policy.to_env_action(raw).cpu().numpy()
    return actions, state.cpu().numpy()


@dataclass
class SequenceBatch:
    """Whole env columns of a rollout: what the update's loss reads, past the burn-in and flattened over steps and
    columns ([(T - burn_in) * n]), like a ``RolloutBatch`` of flat samples, and what replaying them needs."""

    obs: torch.Tensor
    """[T, n, *obs_shape]: the columns' observations, burn-in included."""
    actions: torch.Tensor
    """[(T - burn_in) * n, *action_shape]."""
    log_probs: torch.Tensor
    values: torch.Tensor
    advantages: torch.Tensor
    """Normalized as asked."""
    returns: torch.Tensor
    action_masks: torch.Tensor | None
    """[(T - burn_in) * n, M] bool: the valid actions the stored actions were chosen among (None: the env has no
    masks)."""
    initial_state: torch.Tensor
    """[n, S]: the state entering each column's first step."""
    starts: torch.Tensor
    """[T, n] bool: the columns' episode starts."""
    layout: SegmentLayout | None
    """``segment_layout(starts[burn_in:])`` when known (else computed by the replay)."""
    burn_in: int

    def evaluate(self, policy) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """(log_probs, entropy, values) [(T - burn_in) * n] of the stored actions, replaying the columns through the
        recurrent layers from their initial state (``RecurrentActorCritic.sequence_outputs``)."""
        h = policy.sequence_outputs(self.obs, self.initial_state, self.starts, self.burn_in, self.layout)
        log_probs, entropy, values = policy.score_outputs(h, self.actions, self.action_masks)
        return log_probs.reshape(-1), entropy.reshape(-1), values.reshape(-1)


class RolloutSequences:
    """The rollout in ``buffer`` as its N env columns, for the update of a recurrent policy (module docstring).

    collector: the ``RecurrentStepCollector`` that fills ``buffer`` (its ``initial_state`` [N, S] and
    ``initial_starts`` [N] of the rollout); burn_in: the first steps of each column only warm the state up.
    """

    def __init__(self, buffer, collector, burn_in: int):
        self.buffer, self.collector, self.burn_in = buffer, collector, burn_in

    def starts(self) -> torch.Tensor:
        """[T, N] bool: the rollout's episode starts."""
        b = self.buffer.tensors
        initial = torch.from_numpy(self.collector.initial_starts).to(b.terminated.device)
        return episode_starts(initial, b.terminated, b.truncated)

    def field(self, name: str, idx: torch.Tensor | None = None) -> torch.Tensor:
        """Stored ``name`` of env columns ``idx`` [n] (None: all N, in order) past the burn-in, flattened over steps
        and columns: [(T - burn_in) * n, *field_shape]."""
        x = getattr(self.buffer.tensors, name)[self.burn_in:]
        return (x if idx is None else x[:, idx]).reshape(-1, *x.shape[2:])

    def batch(self, idx: torch.Tensor | None, starts: torch.Tensor | None = None, layout: SegmentLayout | None = None,
              normalize: str = "none", moments: tuple | None = None) -> SequenceBatch:
        """Env columns ``idx`` (None: all N, in order) as a ``SequenceBatch``. starts: ``starts()`` when already
        computed; normalize: the advantages' normalisation ("minibatch": these columns' own moments, "batch":
        ``moments``, the rollout's, "none")."""
        starts = self.starts() if starts is None else starts
        advantages = self.field("advantages", idx)
        if normalize != "none":
            advantages = normalize_advantages(advantages, moments)
        b, state = self.buffer.tensors, self.collector.initial_state
        masks = self.field("action_masks", idx) if self.buffer.action_mask_size else None
        return SequenceBatch(b.obs if idx is None else b.obs[:, idx], self.field("actions", idx),
                             self.field("log_probs", idx), self.field("values", idx), advantages,
                             self.field("returns", idx), masks, state if idx is None else state[idx],
                             starts if idx is None else starts[:, idx], layout, self.burn_in)

    def whole(self, normalize: str = "none") -> SequenceBatch:
        """All N columns in order, advantages normalized over them ("minibatch" and "batch" alike): one batch."""
        return self.batch(None, normalize=normalize)

    def epochs(self, columns: int, generator: torch.Generator, normalize: str
               ) -> Callable[[], Iterator[SequenceBatch]]:
        """A function giving one epoch's minibatches: the N columns in an order drawn from ``generator``, cut into
        minibatches of ``columns`` columns each. The starts, the layout of all N columns and the "batch" moments
        are computed here once, for every epoch of the update."""
        starts = self.starts()
        layout = segment_layout(starts[self.burn_in:])
        moments = advantage_moments(self.buffer.tensors.advantages[self.burn_in:]) if normalize == "batch" else None
        n = starts.shape[1]

        def epoch() -> Iterator[SequenceBatch]:
            perm = torch.randperm(n, generator=generator).to(starts.device)
            for start in range(0, n, columns):
                # one minibatch of all columns: their order cannot change the loss, so no gather
                idx = perm[start:start + columns] if columns < n else None
                yield self.batch(idx, starts, layout if idx is None else None, normalize, moments)

        return epoch
