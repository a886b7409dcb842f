"""Deterministic policies as plain modules, for export (``rapidrl.export``) and deployment.

Each wraps a frozen CPU copy of a trained network and maps flat float32 observations ``x [B, O]`` (raw: any
observation normalisation is folded in) to the actions ``predict(obs, deterministic=True)`` returns. An
algorithm builds its own in ``Algorithm.deterministic_module`` from these pieces. A policy trained with action masks
(``masked=True``) takes them as a second input, ``action_masks [B, M]`` bool, and picks among the valid actions.
A recurrent policy (``RecurrentMode``) also takes its state and the episode starts, and returns its next state.
"""

from __future__ import annotations

import copy

import numpy as np
import torch
from torch import nn

from rapidrl.nn.distributions import apply_action_mask

__all__ = ["ActorCriticMode", "ArgmaxQ", "NormalizeObs", "RecurrentMode", "ReducedArgmaxQ", "SquashedMean",
           "frozen_copy"]


def frozen_copy(module: nn.Module) -> nn.Module:
    """A CPU copy of ``module`` in eval mode without gradients (the trained model is left as it is)."""
    return copy.deepcopy(module).cpu().eval().requires_grad_(False)


class NormalizeObs(nn.Module):
    """clip((x - mean) / sqrt(var + eps), -clip, clip) with an ``ObsNormalizer``'s statistics at this moment."""

    def __init__(self, normalizer):
        super().__init__()
        rms = normalizer.rms
        self.register_buffer("mean", torch.as_tensor(np.asarray(rms.mean), dtype=torch.float32).reshape(-1))
        self.register_buffer("inv_std", torch.as_tensor(1.0 / np.sqrt(np.asarray(rms.var) + normalizer.eps),
                                                        dtype=torch.float32).reshape(-1))
        self.clip = float(normalizer.clip)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return ((x - self.mean) * self.inv_std).clamp(-self.clip, self.clip)


class ActorCriticMode(nn.Module):
    """An ``ActorCritic``'s deterministic action (the distribution's mode, among the valid actions of
    ``action_masks`` when given), clipped or squashed into the bounds. normalize: a module applied to ``x`` first
    (``NormalizeObs``; a masked policy cannot sit in an ``nn.Sequential``, which passes one input)."""

    def __init__(self, policy: nn.Module, masked: bool = False, normalize: nn.Module | None = None):
        super().__init__()
        self.net = frozen_copy(policy)
        self.masked = masked
        self.normalize = normalize

    def forward(self, x: torch.Tensor, action_masks: torch.Tensor | None = None) -> torch.Tensor:
        if self.normalize is not None:
            x = self.normalize(x)
        raw, _, _ = self.net.act(x, deterministic=True, action_masks=action_masks)
        return self.net.to_env_action(raw)


class RecurrentMode(nn.Module):
    """One deterministic step of a recurrent policy (the interface of ``rapidrl.train.recurrent``: ``act``,
    ``initial_state``, ``to_env_action``; recurrent PPO/A2C, R2D2, recurrent SAC and TD3): ``(x [B, O], state [B, S],
    episode_start [B] bool[, action_masks [B, M] bool]) -> (actions, state after [B, S])``, as
    ``predict(obs, state, episode_start, deterministic=True)``. The state of fresh episodes is zeros [B, S]
    (``state_size``); ``episode_start`` True zeroes a row's state before the step. normalize: as ``ActorCriticMode``."""

    def __init__(self, policy: nn.Module, normalize: nn.Module | None = None):
        super().__init__()
        self.net = frozen_copy(policy)
        self.normalize = normalize
        self.state_size = int(self.net.initial_state(1).shape[1])

    def forward(self, x: torch.Tensor, state: torch.Tensor, episode_start: torch.Tensor,
                action_masks: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        if self.normalize is not None:
            x = self.normalize(x)
        raw, _, _, state = self.net.act(x, state.float(), episode_start.bool(), deterministic=True,
                                        action_masks=action_masks)
        return self.net.to_env_action(raw), state


class ArgmaxQ(nn.Module):
    """The greedy action of a Q network: argmax_a Q(x, a) [B] int64, over the valid actions of ``action_masks``
    [B, A] bool when given. obs_shape: the shape the network takes one observation in (a CNN's [C, H, W]); the flat
    ``x`` is reshaped to it first. None: the network takes ``x``. masked: the policy was trained with action masks
    (the export takes them as an input)."""

    def __init__(self, q_net: nn.Module, obs_shape: tuple[int, ...] | None = None, masked: bool = False):
        super().__init__()
        self.net = frozen_copy(q_net)
        self.obs_shape = None if obs_shape is None else tuple(int(s) for s in obs_shape)
        self.masked = masked

    def forward(self, x: torch.Tensor, action_masks: torch.Tensor | None = None) -> torch.Tensor:
        if self.obs_shape is not None:
            x = x.reshape(x.shape[0], *self.obs_shape)
        return apply_action_mask(self.net(x), action_masks).argmax(1)


class ReducedArgmaxQ(ArgmaxQ):
    """The greedy action of a network with several outputs per action, [B, A, N], that ``reduce`` (a module) turns into
    Q values [B, A]: argmax_a reduce(net(x))[:, a] (C51's expectation over its atoms, QR-DQN's mean over its
    quantiles), over the valid actions of ``action_masks`` when given; otherwise as ``ArgmaxQ``."""

    def __init__(self, q_net: nn.Module, reduce: nn.Module, obs_shape: tuple[int, ...] | None = None,
                 masked: bool = False):
        super().__init__(q_net, obs_shape, masked)
        self.reduce = frozen_copy(reduce)

    def forward(self, x: torch.Tensor, action_masks: torch.Tensor | None = None) -> torch.Tensor:
        if self.obs_shape is not None:
            x = x.reshape(x.shape[0], *self.obs_shape)
        return apply_action_mask(self.reduce(self.net(x)), action_masks).argmax(1)


class SquashedMean(nn.Module):
    """A ``SquashedGaussianActor``'s deterministic action: tanh of the mean, scaled into the bounds."""

    def __init__(self, actor: nn.Module):
        super().__init__()
        self.net = frozen_copy(actor)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x, True)[0]
