"""Recurrent actor-critic (LSTM or GRU) for PPO and A2C on partially observed tasks.

Layout: observation -> encoder (an MLP of ``hidden`` sizes, or the Nature/MinAtar CNN for images) -> one LSTM or
GRU layer of ``size`` units -> a linear actor head (gain 0.01) and a linear critic head (gain 1), as CleanRL's
ppo_atari_lstm. Two options change what follows the encoder (both off by default):

- ``critic_core``: the critic has its own recurrent layer (same cell and size) on the same encoder features, as
  sb3-contrib's ``enable_critic_lstm``; the actor's layer then feeds the actor only, so the value loss does not
  shape the actor's memory;
- ``head_hidden``: the actor and the critic each get their own MLP of these sizes between their recurrent layer
  and their output layer (sb3-contrib's ``net_arch=dict(pi=[...], vf=[...])`` after the LSTM).

``ortho_init=False`` leaves every layer at PyTorch's default initialisation (sb3's ``ortho_init=False``) instead of
the orthogonal one below.

The recurrent state of a batch of B envs is one tensor ``[B, S]``: per layer ``[h | c]`` (2 * size) for an LSTM,
``h`` (size) for a GRU, and with ``critic_core`` the actor's layer's state then the critic's side by side
(``[actor | critic]``, S doubled), so storage, episode-start resets, predict and checkpoints handle every layout
alike. The layers' outputs are likewise ``[actor | critic]`` (``output_size`` wide) with ``critic_core``.

Episode starts reset the state: ``episode_starts[t, b]`` True means observation t of env b is the first of an
episode, and the state entering step t is zeroed for that env. ``unroll`` runs the cell over whole sequences in
as few calls as the starts allow: one call per stretch of steps in which no env of the batch starts an episode.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import gymnasium as gym
import numpy as np
import torch
from torch import nn

from rapidrl.nn.encoders import encoder_for, make_encoder
from rapidrl.nn.policies import ActorCritic, flat_obs_dim, mlp, orthogonal_init

CELLS = ("lstm", "gru")


def run_cell(rnn: nn.Module, cell: str, size: int, x: torch.Tensor, state: torch.Tensor
             ) -> tuple[torch.Tensor, torch.Tensor]:
    """One layer ``rnn`` (``make_cell``'s) over x [L, B, F] from its state [B, S] ([h | c] for an LSTM, h for a GRU),
    no resets, in one call of the fused layer: (outputs [L, B, size], state after the last step [B, S])."""
    if cell == "lstm":
        h0 = state[:, :size].unsqueeze(0).contiguous()
        c0 = state[:, size:].unsqueeze(0).contiguous()
        out, (h, c) = rnn(x, (h0, c0))
        return out, torch.cat([h[0], c[0]], -1)
    out, h = rnn(x, state.unsqueeze(0).contiguous())
    return out, h[0]


def unroll_stretches(run, features: torch.Tensor, state: torch.Tensor, episode_starts: torch.Tensor
                     ) -> tuple[torch.Tensor, torch.Tensor]:
    """features [T, B, F] from state [B, S] (entering step 0) with episode_starts [T, B] bool (the state entering step
    t is zeroed where True) -> (outputs [T, B, .], state after step T-1 [B, S]), calling ``run(x [L, B, F], state) ->
    (outputs, state)`` once per stretch of steps in which no column starts an episode."""
    T = features.shape[0]
    any_start = episode_starts.any(1).tolist()
    cuts = [t for t in range(1, T) if any_start[t]] + [T]
    outputs, t0 = [], 0
    for t1 in cuts:
        if any_start[t0]:
            state = state * (~episode_starts[t0]).unsqueeze(-1).to(state.dtype)
        out, state = run(features[t0:t1], state)
        outputs.append(out)
        t0 = t1
    return (outputs[0] if len(outputs) == 1 else torch.cat(outputs)), state


def run_segments(run, features: torch.Tensor, state: torch.Tensor, layout: SegmentLayout,
                 next_features: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor | None]:
    """features [T, B, F] from state [B, S] (entering step 0) in one call of ``run(x [P, K, F], state [K, S]) ->
    (outputs, state)``: the episode segments of ``layout`` side by side, padded at the end (padding after a segment
    cannot change its outputs), each from its own initial state (the column's stored one for its first segment unless
    step 0 starts an episode, zeros otherwise). Returns (outputs [T, B, O], next outputs [T, B, O] or None):
    ``next_features`` [K, F] (the observation each segment's last step bootstraps from, in segment order; a layout
    ``with_next``) go into the step after each segment, and the next outputs are ``layout.next_rows``'."""
    T, B = layout.steps, layout.columns
    init = state * layout.keep
    if layout.rows is None:  # no episode starts after step 0, no next steps: one segment per column
        return run(features, init)[0], None
    count, length, width = layout.count, layout.length, features.shape[-1]
    padded = features.new_zeros(length * count, width).index_copy(0, layout.rows, features.reshape(T * B, width))
    if next_features is not None:
        padded = padded.index_copy(0, layout.extra, next_features)
    init = state.new_zeros(count, state.shape[1]).index_copy(0, layout.first, init)
    out = run(padded.view(length, count, width), init)[0]
    out = out.reshape(length * count, out.shape[-1])
    outputs = out.index_select(0, layout.rows).view(T, B, -1)
    return outputs, (None if next_features is None else out.index_select(0, layout.next_rows).view(T, B, -1))


def make_cell(cell: str, features: int, size: int) -> nn.Module:
    """One LSTM or GRU layer (``nn.LSTM``/``nn.GRU``) of ``size`` units on ``features`` inputs: orthogonal weights
    (gain 1), zero biases."""
    rnn = (nn.LSTM if cell == "lstm" else nn.GRU)(features, size)
    for name, param in rnn.named_parameters():
        if name.startswith("weight"):
            nn.init.orthogonal_(param, 1.0)
        else:
            nn.init.zeros_(param)
    return rnn


def check_state(state: torch.Tensor, batch: int, state_size: int) -> None:
    """ValueError/TypeError unless ``state`` is a float tensor [batch, state_size] (a recurrent policy's state from a
    previous call)."""
    if not isinstance(state, torch.Tensor):
        raise TypeError(f"state must be a torch.Tensor [B, {state_size}] (from a previous call), "
                        f"got {type(state).__name__}")
    if tuple(state.shape) != (batch, state_size) or not state.dtype.is_floating_point:
        raise ValueError(f"state must be a float tensor of shape ({batch}, {state_size}), got "
                         f"{tuple(state.shape)} {state.dtype}")


def cell_step(rnn: nn.Module, cell: str, size: int, x: torch.Tensor, state: torch.Tensor
              ) -> tuple[torch.Tensor, torch.Tensor]:
    """One step of one layer ``rnn`` (``make_cell``'s): x [B, F], its state [B, S] ([h | c] for an LSTM, h for a GRU)
    -> (output [B, size], new state [B, S]). Calls the cell's single-step function with the layer's weights (the
    mathematics of ``nn.LSTM``/``nn.GRU`` over one step; a fraction of their call overhead)."""
    if cell == "lstm":
        h, c = torch.lstm_cell(x, (state[:, :size], state[:, size:]), rnn.weight_ih_l0, rnn.weight_hh_l0,
                               rnn.bias_ih_l0, rnn.bias_hh_l0)
        return h, torch.cat([h, c], -1)
    h = torch.gru_cell(x, state, rnn.weight_ih_l0, rnn.weight_hh_l0, rnn.bias_ih_l0, rnn.bias_hh_l0)
    return h, h


class RecurrentActorCritic(ActorCritic):
    """Actor-critic with an LSTM or GRU between the encoder and the heads.

    Args: as ``ActorCritic`` (``hidden`` may be empty: the observation goes straight into the cell), plus
        cell: "lstm" or "gru"; size: units of the recurrent layer;
        critic_core: the critic gets its own recurrent layer (see the module docstring);
        head_hidden: hidden sizes of the actor's and of the critic's own MLP after the recurrent layer (empty:
            linear heads on the recurrent layer's output);
        ortho_init: orthogonal weights and zero biases (True), or PyTorch's default initialisation of every
            linear, convolutional and recurrent layer (False).

    Acting: ``act(obs [B, ...], state [B, S], episode_starts [B]) -> (actions, log_probs, values, new_state)``.
    Updating: ``evaluate_sequence(obs [T, B, ...], actions [T, B, ...], state [B, S], episode_starts [T, B])``.
    """

    recurrent = True

    def __init__(self, observation_space: gym.Space, action_space: gym.Space, hidden: Sequence[int] = (64,), *,
                 cell: str = "lstm", size: int = 128, activation: str = "tanh", log_std_init: float = 0.0,
                 squash: str = "clip", encoder: str = "auto", shared: bool = True, critic_core: bool = False,
                 head_hidden: Sequence[int] = (), ortho_init: bool = True):
        nn.Module.__init__(self)
        if cell not in CELLS:
            raise ValueError(f"cell must be one of {CELLS}, got {cell!r}")
        if isinstance(size, bool) or not isinstance(size, (int, np.integer)) or size < 1:
            raise ValueError(f"size must be a positive int, got {size!r}")
        if squash not in ("clip", "tanh"):
            raise ValueError(f"squash must be 'clip' or 'tanh', got {squash!r}")
        self.encoder_kind = encoder_for(observation_space, encoder)
        obs_dim = flat_obs_dim(observation_space)
        out_dim = self._setup_action_space(action_space)
        self.obs_dim, self.action_dim, self.shared, self.squash = obs_dim, out_dim, True, squash
        self.hidden, self.activation = tuple(int(h) for h in hidden), activation
        if any(isinstance(h, bool) or not isinstance(h, (int, np.integer)) or h < 1 for h in head_hidden):
            raise ValueError(f"head_hidden must be a sequence of positive ints, got {head_hidden!r}")
        self.cell, self.size = cell, int(size)
        self.critic_core, self.head_hidden = bool(critic_core), tuple(int(h) for h in head_hidden)
        self.core_state_size = 2 * self.size if cell == "lstm" else self.size
        """Width of one recurrent layer's state."""
        self.state_size = self.core_state_size * (2 if self.critic_core else 1)
        """Width S of the state tensor [B, S]."""
        self.output_size = self.size * (2 if self.critic_core else 1)
        """Width of the recurrent layers' outputs ([actor | critic] with ``critic_core``)."""
        self.input_dtype = np.dtype(np.float32)
        if self.encoder_kind != "mlp":
            self.trunk = make_encoder(observation_space, self.encoder_kind)
            features = self.trunk.out_dim
            if observation_space.dtype == np.uint8:
                self.input_dtype = np.dtype(np.uint8)
        else:
            self.trunk = mlp(obs_dim, self.hidden, None, activation)
            features = self.hidden[-1] if self.hidden else obs_dim
        self.rnn = self._make_core(features)
        if self.critic_core:
            self.critic_rnn = self._make_core(features)
        if self.head_hidden:
            self.actor = mlp(self.size, self.head_hidden, out_dim, activation, out_gain=0.01)
            self.critic = mlp(self.size, self.head_hidden, 1, activation, out_gain=1.0)
        else:
            self.actor = orthogonal_init(nn.Linear(self.size, out_dim), 0.01)
            self.critic = orthogonal_init(nn.Linear(self.size, 1), 1.0)
        self.ortho_init = bool(ortho_init)
        if not self.ortho_init:
            for module in self.modules():
                if isinstance(module, (nn.Linear, nn.Conv2d, nn.LSTM, nn.GRU)):
                    module.reset_parameters()
        self._setup_gaussian(action_space, out_dim, log_std_init)

    def _make_core(self, features: int) -> nn.Module:
        """One LSTM or GRU layer of ``size`` units (``make_cell``)."""
        return make_cell(self.cell, features, self.size)

    # -- state ------------------------------------------------------------------------------------
    def initial_state(self, batch: int, device=None) -> torch.Tensor:
        """The state of fresh episodes: zeros [batch, S]."""
        return torch.zeros(batch, self.state_size, device=device)

    def check_state(self, state: torch.Tensor, batch: int) -> None:
        """ValueError/TypeError unless ``state`` is a float tensor [batch, S] (``check_state``)."""
        check_state(state, batch, self.state_size)

    def _run_core(self, rnn: nn.Module, x: torch.Tensor, state: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """One layer over x [L, B, F] from its state [B, core_state_size], no resets: (outputs [L, B, size], state)."""
        return run_cell(rnn, self.cell, self.size, x, state)

    def _run(self, x: torch.Tensor, state: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """The layers over x [L, B, F] from state [B, S] with no resets: (outputs [L, B, output_size], state [B, S])."""
        return self._over_layers(self._run_core, x, state)

    def unroll(self, features: torch.Tensor, state: torch.Tensor, episode_starts: torch.Tensor
               ) -> tuple[torch.Tensor, torch.Tensor]:
        """features [T, B, F], state [B, S] (entering step 0), episode_starts [T, B] bool ->
        (outputs [T, B, output_size], state after step T-1 [B, S]). The state entering step t is zeroed where
        episode_starts[t]; the cell runs once per stretch of steps in which no env starts an episode."""
        return unroll_stretches(self._run, features, state, episode_starts)

    def unroll_segments(self, features: torch.Tensor, state: torch.Tensor, episode_starts: torch.Tensor,
                        layout: SegmentLayout | None = None) -> torch.Tensor:
        """The outputs [T, B, output_size] of ``unroll`` (not its final state) in one call of the cell, however many
        episodes start: every env column is cut into its episode segments, the segments are laid side by side
        as a batch of sequences padded at the end to the longest (padding after a segment cannot change its
        outputs), run from their own initial states (the stored state for a column's first segment unless it
        starts an episode, zeros otherwise), and the outputs are gathered back to [T, B].

        layout: ``segment_layout(episode_starts)`` when already computed (reusable while the starts are the same:
        every epoch of an update over the same columns)."""
        T, B = episode_starts.shape
        layout = segment_layout(episode_starts) if layout is None else layout
        if (layout.steps, layout.columns) != (T, B):
            raise ValueError(f"the segment layout is for [{layout.steps}, {layout.columns}] steps x columns, "
                             f"the sequence is [{T}, {B}]")
        return run_segments(self._run, features, state, layout)[0]

    def _features(self, obs: torch.Tensor) -> torch.Tensor:
        """obs [B, *obs_shape] -> encoder features [B, F]."""
        return self.trunk(obs)

    # -- acting -----------------------------------------------------------------------------------
    def _step_core(self, r: nn.Module, x: torch.Tensor, state: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """One step of one layer: x [B, F], its state [B, core_state_size] -> (output [B, size], new state)
        (``cell_step``: the same mathematics as ``_run_core``)."""
        return cell_step(r, self.cell, self.size, x, state)

    def _entering(self, obs: torch.Tensor, state: torch.Tensor, episode_starts: torch.Tensor | None
                  ) -> tuple[torch.Tensor, torch.Tensor]:
        """(encoder features [B, F], state [B, S] zeroed where an episode starts) of one step."""
        self.check_state(state, obs.shape[0])
        x = self._features(obs)
        if episode_starts is not None:
            state = state * (~episode_starts).unsqueeze(-1).to(state.dtype)
        return x, state

    def _step(self, obs: torch.Tensor, state: torch.Tensor, episode_starts: torch.Tensor | None
              ) -> tuple[torch.Tensor, torch.Tensor]:
        """One step for B envs: (layers' output [B, output_size], new state [B, S])."""
        x, state = self._entering(obs, state, episode_starts)
        return self._over_layers(self._step_core, x, state)

    def _over_layers(self, core_fn, x: torch.Tensor, state: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """``core_fn(layer, x, layer_state) -> (out, new layer_state)`` over the actor's layer, and with
        ``critic_core`` over the critic's too on its half of ``state``: outputs and state ``[actor | critic]``."""
        if not self.critic_core:
            return core_fn(self.rnn, x, state)
        k = self.core_state_size
        out_a, state_a = core_fn(self.rnn, x, state[:, :k])
        out_c, state_c = core_fn(self.critic_rnn, x, state[:, k:])
        return torch.cat([out_a, out_c], -1), torch.cat([state_a, state_c], -1)

    # -- heads --------------------------------------------------------------------------------------
    def actor_output(self, h: torch.Tensor) -> torch.Tensor:
        """The actor's output [M, A] (logits or Gaussian means) from the layers' outputs h [M, output_size]."""
        return self.actor(h[:, :self.size] if self.critic_core else h)

    def values_of(self, h: torch.Tensor) -> torch.Tensor:
        """Values [M] from the layers' outputs h [M, output_size]."""
        return self.critic(h[:, self.size:] if self.critic_core else h).squeeze(-1)

    def score_outputs(self, h: torch.Tensor, actions: torch.Tensor, action_masks: torch.Tensor | None = None
                      ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """(log_probs, entropy, values), each [M], of stored raw ``actions`` [M, ...] from the layers' outputs
        h [M, output_size] (``sequence_outputs``), over the valid actions of ``action_masks`` [M, A] when given."""
        logp, entropy = self._score(self.actor_output(h), actions, action_masks)
        return logp, entropy, self.values_of(h)

    def act(self, obs: torch.Tensor, state: torch.Tensor, episode_starts: torch.Tensor | None = None,
            deterministic: bool = False, action_masks: torch.Tensor | None = None,
            generator: torch.Generator | None = None) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
        """obs [B, ...], state [B, S], episode_starts [B] bool (None: no env starts) ->
        (raw actions, log_probs [B], values [B], new state [B, S]); among the valid actions of ``action_masks``
        [B, A] bool when given, drawn from ``generator`` (None: torch's global generator; ``ActorCritic.act``)."""
        h, state = self._step(obs, state, episode_starts)
        actions, logp = self._sample(self.actor_output(h), deterministic, action_masks, generator)
        return actions, logp, self.values_of(h), state

    def value(self, obs: torch.Tensor, state: torch.Tensor | None = None,
              episode_starts: torch.Tensor | None = None) -> torch.Tensor:
        """Values [B] of obs [B, ...] entered with ``state`` [B, S] (None: fresh episodes). With ``critic_core``
        only the critic's layer runs."""
        if state is None:
            state = self.initial_state(obs.shape[0], obs.device)
        if not self.critic_core:
            h, _ = self._step(obs, state, episode_starts)
            return self.critic(h).squeeze(-1)
        x, state = self._entering(obs, state, episode_starts)
        h, _ = self._step_core(self.critic_rnn, x, state[:, self.core_state_size:])
        return self.critic(h).squeeze(-1)

    def evaluate(self, obs: torch.Tensor, actions: torch.Tensor):
        raise TypeError("a recurrent policy scores whole sequences: use evaluate_sequence(obs [T, B, ...], "
                        "actions [T, B, ...], state [B, S], episode_starts [T, B])")

    def sequence_outputs(self, obs: torch.Tensor, state: torch.Tensor, episode_starts: torch.Tensor,
                         burn_in: int = 0, layout: SegmentLayout | None = None) -> torch.Tensor:
        """The layers' outputs [(T - burn_in) * B, output_size] along obs [T, B, ...] from ``state`` [B, S] (the
        state entering step 0) with ``episode_starts`` [T, B]: the input of the heads (``score_outputs``).

        burn_in: the first steps only advance the state, without gradients (their outputs are not returned).
        layout: ``segment_layout(episode_starts[burn_in:])`` when already computed.
        """
        T, B = episode_starts.shape
        if not 0 <= burn_in < T:
            raise ValueError(f"burn_in must lie in [0, {T}), got {burn_in}")
        self.check_state(state, B)
        if burn_in:
            with torch.no_grad():
                feats = self._features(obs[:burn_in].reshape(burn_in * B, *obs.shape[2:]))
                _, state = self.unroll(feats.reshape(burn_in, B, -1), state, episode_starts[:burn_in])
        L = T - burn_in
        feats = self._features(obs[burn_in:].reshape(L * B, *obs.shape[2:])).reshape(L, B, -1)
        return self.unroll_segments(feats, state, episode_starts[burn_in:], layout).reshape(L * B, self.output_size)

    def evaluate_sequence(self, obs: torch.Tensor, actions: torch.Tensor, state: torch.Tensor,
                          episode_starts: torch.Tensor, burn_in: int = 0, layout: SegmentLayout | None = None
                          ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """(log_probs, entropy, values), each [T - burn_in, B], of stored raw ``actions`` [T, B, ...] along
        obs [T, B, ...] from ``state`` [B, S] with ``episode_starts`` [T, B] (see ``sequence_outputs``)."""
        T, B = episode_starts.shape
        h = self.sequence_outputs(obs, state, episode_starts, burn_in, layout)
        L = T - burn_in
        logp, entropy, values = self.score_outputs(h, actions[burn_in:].reshape(L * B, *actions.shape[2:]))
        return logp.view(L, B), entropy.view(L, B), values.view(L, B)


@dataclass(frozen=True)
class SegmentLayout:
    """Where the steps of B env columns of T steps go when their episode segments are laid side by side as
    ``count`` sequences of ``length`` steps (``unroll_segments``)."""

    steps: int
    """T."""
    columns: int
    """B."""
    count: int
    """K, the number of segments."""
    length: int
    """The longest segment."""
    rows: torch.Tensor | None
    """[T * B] int64: row of step (t, b) in the padded [length * K] batch; None when no episode starts after
    step 0 (one segment per column, no padding)."""
    first: torch.Tensor | None
    """[B] int64: the segment each column begins with (None with ``rows``: column b is segment b)."""
    keep: torch.Tensor
    """[B, 1] float32: 0 where step 0 of a column starts an episode (its stored state is dropped), else 1."""
    next_rows: torch.Tensor | None = None
    """``with_next``: [T * B] int64, the row of the step that follows step (t, b) in its segment: (t + 1, b) inside
    it, and after a segment's last step one extra step appended to the segment (its bootstrap observation)."""
    ends: torch.Tensor | None = None
    """``with_next``: [K] int64, step t * B + b of each segment's last step, in segment order."""
    extra: torch.Tensor | None = None
    """``with_next``: [K] int64, the row of the extra step after each segment."""


def segment_layout(episode_starts: torch.Tensor, with_next: bool = False) -> SegmentLayout:
    """The ``SegmentLayout`` of episode_starts [T, B] bool (one host read of the starts). ``with_next``: every segment
    gets one more step after its last, for the observation its last step bootstraps from (``next_rows``, ``ends``,
    ``extra``; the off-policy learners' ``RecurrentEncoder.unroll``)."""
    T, B = episode_starts.shape
    device = episode_starts.device
    keep = (~episode_starts[0]).unsqueeze(-1).float()
    starts = episode_starts.cpu().numpy()
    if not with_next and not starts[1:].any():
        return SegmentLayout(T, B, B, T, None, None, keep)
    offset, seg_of, first, length = _segments(starts)
    count = first.shape[0]
    rows = offset * count + seg_of  # [T, B]
    tensor = lambda a: torch.from_numpy(np.ascontiguousarray(a, np.int64).reshape(-1)).to(device)  # noqa: E731
    if not with_next:
        return SegmentLayout(T, B, count, length, tensor(rows), tensor(seg_of[0]), keep)
    extra = np.bincount(seg_of.reshape(-1), minlength=count) * count + np.arange(count)  # after each segment
    last = np.ones((T, B), bool)
    last[:-1] = starts[1:]  # a segment's last step: the next one starts an episode, or the sequence ends
    next_rows = np.empty_like(rows)
    next_rows[:-1] = rows[1:]
    next_rows[last] = extra[seg_of[last]]
    ends_flat = np.flatnonzero(last.reshape(-1))
    ends = np.empty(count, np.int64)
    ends[seg_of.reshape(-1)[ends_flat]] = ends_flat
    return SegmentLayout(T, B, count, length + 1, tensor(rows), tensor(seg_of[0]), keep, tensor(next_rows),
                         tensor(ends), tensor(extra))


def _segments(episode_starts: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, int]:
    """The episode segments of env columns, from episode_starts [T, B] bool (NumPy: a few microseconds).

    Every column begins a segment at step 0 and at each episode start. Returns (offset [T, B]: step within its
    segment, seg_of [T, B]: segment index, segments numbered column by column, first [K] bool: the segment begins
    at step 0, length: the longest segment)."""
    T, B = episode_starts.shape
    cut = episode_starts.T.copy()  # [B, T]
    cut[:, 0] = True
    flat = cut.reshape(-1)
    seg_pos = np.flatnonzero(flat)  # b * T + t of each segment's first step
    seg_t = seg_pos % T
    seg_of = (np.cumsum(flat) - 1).reshape(B, T).T  # [T, B]
    offset = np.arange(T)[:, None] - seg_t[seg_of]
    return offset, np.ascontiguousarray(seg_of), seg_t == 0, int(offset.max()) + 1


__all__ = ["CELLS", "RecurrentActorCritic", "SegmentLayout", "run_cell", "run_segments", "segment_layout",
           "unroll_stretches"]
