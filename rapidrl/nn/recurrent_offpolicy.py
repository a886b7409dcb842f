"""Recurrent off-policy networks: ``RecurrentEncoder`` (observation -> ReLU MLP of ``hidden``, or a CNN and then that
MLP, -> one LSTM or GRU layer of ``size`` units) and, on it, R2D2's Q network (``rapidrl.algos.r2d2``: a linear Q
head, or dueling value and advantage heads, Q [B, A]) and recurrent SAC's actor and critic
(``rapidrl.algos.recurrent_sac``).

The state of B envs is one tensor [B, S] as in ``rapidrl.nn.recurrent`` ([h | c] for an LSTM, h for a GRU), and
``starts[t, b]`` True zeroes the state entering step t of column b (an episode begins there). The target of step t
bootstraps from next_obs_t one more cell step after the state after step t: inside an episode that is the next step's
observation, whose features the unroll has already computed (h[t + 1]); after an episode's last step (the true final
observation where a time limit cut it) and the sequence's last, ``unroll`` appends that one step to the segment, so the
whole sequence and every bootstrap run in one call of the fused LSTM/GRU layer.

``act``, ``initial_state``, ``check_state`` and ``to_env_action`` are the interface of a recurrent policy
(``rapidrl.train.recurrent.predict_with_state`` and ``RecurrentActor``): acting is greedy, among the valid actions of
``action_masks``.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import nn

from rapidrl.nn.distributions import apply_action_mask
from rapidrl.nn.policies import mlp, orthogonal_init
from rapidrl.nn.qnets import CriticEnsemble, sample_squashed_gaussian
from rapidrl.nn.recurrent import (
    CELLS,
    SegmentLayout,
    cell_step,
    check_state,
    make_cell,
    run_cell,
    run_segments,
    segment_layout,
    unroll_stretches,
)

__all__ = ["RecurrentCritic", "RecurrentDeterministicActor", "RecurrentEncoder", "RecurrentQNetwork",
           "RecurrentSquashedGaussianActor"]


class RecurrentEncoder(nn.Module):
    """observation -> ReLU MLP of ``hidden`` -> one LSTM/GRU layer of ``size`` units: features h [.., size] with a
    state [B, S]. R2D2's Q network and recurrent SAC's actor and critic put their heads on it.

    ``features``: a CNN (``rapidrl.nn.encoders``: images [M, C, H, W] of any dtype -> [M, out_dim]) before the MLP,
    which then starts from its ``out_dim`` features (R2D2's convolutional torso before the LSTM). Without it the
    observations are flat float rows [M, O].

    ``step(obs [B, *obs], state, starts [B]) -> (h [B, size], state after)``: acting; ``unroll(obs [L, B, *obs],
    state, starts [L, B], next_obs) -> (h [L, B, size], bootstrap features h_next [L, B, size])``: training, in one
    call of the fused layer; ``state_after``: burn-in. ``*obs`` is [O], or [C, H, W] with ``features``."""

    def __init__(self, obs_dim: int, hidden: Sequence[int], *, cell: str = "lstm", size: int = 128,
                 features: nn.Module | None = None):
        super().__init__()
        if cell not in CELLS:
            raise ValueError(f"cell must be one of {CELLS}, got {cell!r}")
        if size < 1:
            raise ValueError(f"size must be >= 1, got {size}")
        self.cell, self.size = cell, int(size)
        width = obs_dim if features is None else int(features.out_dim)
        mlp_part = mlp(width, hidden, None, "relu")  # empty hidden: the observation (features) straight into the cell
        self.image_input = features is not None
        """The observations are images for a CNN (kept in their shape and dtype), not flat float rows."""
        self.trunk = mlp_part if features is None else nn.Sequential(features, *mlp_part)
        self.rnn = make_cell(cell, hidden[-1] if hidden else width, self.size)
        self.state_size = 2 * self.size if cell == "lstm" else self.size
        """Width S of the state [B, S]."""

    def initial_state(self, batch: int, device=None) -> torch.Tensor:
        """The state of fresh episodes: zeros [batch, S]."""
        return torch.zeros(batch, self.state_size, device=device)

    def encode(self, obs: torch.Tensor) -> torch.Tensor:
        """The cell's input [M, F] of observations [M, *obs]; images may also come as flat rows [M, C * H * W] (an
        exported policy's input), which the CNN gets back in their shape."""
        if self.image_input and obs.dim() == 2:
            obs = obs.view(obs.shape[0], *self.trunk[0].obs_shape)
        return self.trunk(obs)

    def check_state(self, state: torch.Tensor, batch: int) -> None:
        """ValueError/TypeError unless ``state`` is a float tensor [batch, S]."""
        check_state(state, batch, self.state_size)

    def step(self, obs: torch.Tensor, state: torch.Tensor, starts: torch.Tensor | None = None
             ) -> tuple[torch.Tensor, torch.Tensor]:
        """One step of B envs: obs [B, O], state [B, S] entering it (zeroed where ``starts`` [B] bool) -> (h [B, size],
        the state after it [B, S])."""
        if starts is not None:
            state = state * (~starts).unsqueeze(-1).to(state.dtype)
        return cell_step(self.rnn, self.cell, self.size, self.encode(obs), state)

    def _run(self, x: torch.Tensor, state: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """The cell over x [L, B, F] from state [B, S], no resets, in one call (``run_cell``)."""
        return run_cell(self.rnn, self.cell, self.size, x, state)

    def unroll(self, obs: torch.Tensor, state: torch.Tensor, starts: torch.Tensor, next_obs: torch.Tensor | None = None,
               layout: SegmentLayout | None = None) -> tuple[torch.Tensor, torch.Tensor | None]:
        """obs [L, B, *obs] from state [B, S] (entering step 0), starts [L, B] bool -> (h [L, B, size], h_next
        [L, B, size] or None). ``h_next[t]`` (with ``next_obs`` [L, B, *obs]) is the features of next_obs[t] one cell
        step after step t: the bootstrap of every step, h[t + 1] inside an episode, and after an episode's last step
        (a time limit, a termination) or the sequence's last, one more step on its own next observation.

        One call of the fused layer: each column is cut into its episode segments, laid side by side as a batch padded
        at the end (``segment_layout(starts, with_next=True)``; pass it when several networks unroll the same
        starts), with the extra bootstrap step after each segment. The trunk (a CNN) runs on the L * B observations
        and only the K segment-end next observations, not on all L * B of next_obs."""
        L, B = starts.shape
        with_next = next_obs is not None
        layout = segment_layout(starts, with_next) if layout is None else layout
        if (layout.steps, layout.columns) != (L, B) or (with_next and layout.next_rows is None):
            raise ValueError(f"the segment layout is for [{layout.steps}, {layout.columns}] steps x columns"
                             f"{'' if layout.next_rows is not None else ' without next steps'}, the sequence is "
                             f"[{L}, {B}]{' with next_obs' if with_next else ''}")
        x = self.encode(obs.reshape(L * B, *obs.shape[2:])).view(L, B, -1)
        x_next = None
        if with_next:  # the trunk on the K observations the segments' last steps bootstrap from
            x_next = self.encode(next_obs.reshape(L * B, *next_obs.shape[2:]).index_select(0, layout.ends))
        return run_segments(self._run, x, state, layout, x_next)

    def state_after(self, obs: torch.Tensor, state: torch.Tensor, starts: torch.Tensor) -> torch.Tensor:
        """The state [B, S] after obs [L, B, *obs] from state [B, S] with starts [L, B] (R2D2's burn-in): the fused
        layer once per stretch of steps in which no column starts an episode (``unroll_stretches``)."""
        L, B = starts.shape
        x = self.encode(obs.reshape(L * B, *obs.shape[2:])).view(L, B, -1)
        return unroll_stretches(self._run, x, state, starts)[1]


class _OnEncoder(nn.Module):
    """A network on a ``RecurrentEncoder`` (``self.encoder``): its state and the recurrent-policy interface's
    ``initial_state``, ``check_state`` and ``to_env_action`` are the encoder's."""

    recurrent = True

    @property
    def state_size(self) -> int:
        """Width S of the state [B, S]."""
        return self.encoder.state_size

    def initial_state(self, batch: int, device=None) -> torch.Tensor:
        """The state of fresh episodes: zeros [batch, S]."""
        return self.encoder.initial_state(batch, device)

    def check_state(self, state: torch.Tensor, batch: int) -> None:
        """ValueError/TypeError unless ``state`` is a float tensor [batch, S]."""
        self.encoder.check_state(state, batch)

    def to_env_action(self, raw: torch.Tensor) -> torch.Tensor:
        """The env's actions: what ``act`` returns (a discrete argmax, or actions already in the bounds)."""
        return raw


class RecurrentQNetwork(_OnEncoder):
    """Q values of every discrete action with memory: a ``RecurrentEncoder`` (with a CNN ``features`` for images) and a
    linear Q head (or dueling heads). ``step(obs [B, *obs], state [B, S]) -> (Q [B, A], state)``; training unrolls
    ``self.encoder`` and puts ``q_of`` on its features."""

    def __init__(self, obs_dim: int, num_actions: int, hidden: Sequence[int], *, cell: str = "lstm",
                 size: int = 128, dueling: bool = False, features: nn.Module | None = None):
        super().__init__()
        self.encoder = RecurrentEncoder(obs_dim, hidden, cell=cell, size=size, features=features)
        self.cell, self.size, self.dueling, self.num_actions = cell, int(size), bool(dueling), int(num_actions)
        if dueling:
            self.value = orthogonal_init(nn.Linear(self.size, 1), 1.0)
            self.advantage = orthogonal_init(nn.Linear(self.size, self.num_actions), 1.0)
        else:
            self.head = orthogonal_init(nn.Linear(self.size, self.num_actions), 1.0)

    def q_of(self, h: torch.Tensor) -> torch.Tensor:
        """Q [..., A] from the cell's outputs h [..., size] (dueling: V + A - mean_a A)."""
        if not self.dueling:
            return self.head(h)
        adv = self.advantage(h)
        return self.value(h) + adv - adv.mean(-1, keepdim=True)

    def step(self, obs: torch.Tensor, state: torch.Tensor, starts: torch.Tensor | None = None
             ) -> tuple[torch.Tensor, torch.Tensor]:
        """One step of B envs -> (Q [B, A], the state after it [B, S]) (``RecurrentEncoder.step``)."""
        h, state = self.encoder.step(obs, state, starts)
        return self.q_of(h), state

    # -- acting (the recurrent-policy interface) --------------------------------------------------
    def act(self, obs: torch.Tensor, state: torch.Tensor, episode_starts: torch.Tensor | None = None,
            deterministic: bool = True, action_masks: torch.Tensor | None = None,
            generator: torch.Generator | None = None):
        """(greedy actions [B] among the valid ones of ``action_masks`` [B, A] bool, None, None, new state [B, S]):
        ``RecurrentActorCritic.act``'s signature (a Q network's action does not depend on ``deterministic`` or
        ``generator``; exploration is the algorithm's)."""
        self.check_state(state, obs.shape[0])
        q, state = self.step(obs, state, episode_starts)
        return apply_action_mask(q, action_masks).argmax(-1), None, None, state


class RecurrentSquashedGaussianActor(_OnEncoder):
    """SAC's squashed Gaussian policy with memory: a ``RecurrentEncoder`` and a [size, 2A] head (gain 0.01), sampled
    as ``rapidrl.nn.qnets.SquashedGaussianActor`` (``squashed_gaussian``) into the bounds [low, high]."""

    def __init__(self, obs_dim: int, low: torch.Tensor, high: torch.Tensor, hidden: Sequence[int], *,
                 cell: str = "lstm", size: int = 128, log_std_min: float = -5.0, log_std_max: float = 2.0):
        super().__init__()
        self.encoder = RecurrentEncoder(obs_dim, hidden, cell=cell, size=size)
        self.head = orthogonal_init(nn.Linear(self.encoder.size, 2 * int(low.shape[0])), 0.01)
        self.log_std_min, self.log_std_max = log_std_min, log_std_max
        self.register_buffer("scale", (high - low).float() / 2)
        self.register_buffer("center", (high + low).float() / 2)

    def sample(self, h: torch.Tensor, deterministic: bool = False, generator: torch.Generator | None = None
               ) -> tuple[torch.Tensor, torch.Tensor]:
        """(actions [M, A] in the bounds, log pi [M]) from features h [M, size]: reparameterised samples, or the
        squashed mean when deterministic."""
        return sample_squashed_gaussian(self.head(h), self.scale, self.center, self.log_std_min, self.log_std_max,
                                        deterministic, generator)

    def act(self, obs: torch.Tensor, state: torch.Tensor, episode_starts: torch.Tensor | None = None,
            deterministic: bool = False, action_masks: torch.Tensor | None = None,
            generator: torch.Generator | None = None):
        """(actions [B, A], log pi [B], None, new state [B, S]): the recurrent-policy interface."""
        self.check_state(state, obs.shape[0])
        h, state = self.encoder.step(obs, state, episode_starts)
        actions, log_prob = self.sample(h, deterministic, generator)
        return actions, log_prob, None, state


class RecurrentCritic(nn.Module):
    """n critics with one memory: Q_i(s_t, a) = MLP_i([h_t, a]), h_t a ``RecurrentEncoder``'s features of the
    observations so far, the n MLPs one batched ``CriticEnsemble`` over (h, a). ``heads(h [M, size], a [M, A])``
    -> [n, M]."""

    def __init__(self, obs_dim: int, act_dim: int, hidden: Sequence[int], n: int, *, cell: str = "lstm",
                 size: int = 128, head_hidden: Sequence[int] = (256, 256)):
        super().__init__()
        self.encoder = RecurrentEncoder(obs_dim, hidden, cell=cell, size=size)
        self.heads = CriticEnsemble(n, self.encoder.size, act_dim, head_hidden)
        self.state_size = self.encoder.state_size


class RecurrentDeterministicActor(_OnEncoder):
    """TD3's deterministic policy with memory: a ``RecurrentEncoder`` and a [size, A] output layer (gain 0.01),
    mu = center + scale * tanh(.), in the bounds [low, high]."""

    def __init__(self, obs_dim: int, low: torch.Tensor, high: torch.Tensor, hidden: Sequence[int], *,
                 cell: str = "lstm", size: int = 128):
        super().__init__()
        self.encoder = RecurrentEncoder(obs_dim, hidden, cell=cell, size=size)
        self.head = orthogonal_init(nn.Linear(self.encoder.size, int(low.shape[0])), 0.01)
        self.register_buffer("scale", (high - low).float() / 2)
        self.register_buffer("center", (high + low).float() / 2)

    def mu(self, h: torch.Tensor) -> torch.Tensor:
        """Actions [M, A] from features h [M, size]."""
        return self.center + self.scale * torch.tanh(self.head(h))

    def act(self, obs: torch.Tensor, state: torch.Tensor, episode_starts: torch.Tensor | None = None,
            deterministic: bool = True, action_masks: torch.Tensor | None = None,
            generator: torch.Generator | None = None):
        """(mu [B, A], None, None, new state [B, S]): the recurrent-policy interface (exploration noise is the
        algorithm's)."""
        self.check_state(state, obs.shape[0])
        h, state = self.encoder.step(obs, state, episode_starts)
        return self.mu(h), None, None, state
