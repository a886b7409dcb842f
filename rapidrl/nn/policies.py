"""Actor-critic policies for on-policy algorithms (PyTorch).

One call gives everything a rollout needs: ``ActorCritic.act(obs) -> (actions, log_probs, values)``; one
call gives everything a PPO/A2C update needs: ``evaluate(obs, actions) -> (log_probs, entropy, values)``. Both take
``action_masks`` (bool [B, n] for Discrete, [B, sum(nvec)] for MultiDiscrete/MultiBinary; docs/masks.md): the
categorical distributions then cover the valid actions only (``rapidrl.nn.distributions.apply_action_mask``).
Layer layout is plain ``nn.Linear`` stacks, so the fused rollout collector can read the weights zero-copy.
With an image encoder (``rapidrl.nn.encoders``: the Nature or MinAtar CNN) the policy is a shared CNN trunk with
linear actor and critic heads, and takes uint8 observations (``input_dtype``).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import gymnasium as gym
import numpy as np
import torch
from torch import nn

from rapidrl.nn.distributions import (
    apply_action_mask,
    categorical_entropy,
    categorical_log_probs,
    gaussian_entropy,
    gaussian_log_prob,
    split_action_mask,
    tanh_log_jacobian,
)
from rapidrl.nn.dtypes import Float32Linear, full_precision
from rapidrl.nn.encoders import encoder_for, make_encoder

ACTIVATIONS = {"tanh": nn.Tanh, "relu": nn.ReLU}


def orthogonal_init(layer: nn.Linear, gain: float) -> nn.Linear:
    """Orthogonal weights with ``gain``, zero bias (the PPO-paper initialisation)."""
    nn.init.orthogonal_(layer.weight, gain)
    nn.init.zeros_(layer.bias)
    return layer


def mlp(in_dim: int, hidden: Sequence[int], out_dim: int | None, activation: str, out_gain: float = 1.0, *,
        layer_norm: bool = False, float32_output: bool = False) -> nn.Sequential:
    """``Linear -> act`` for each hidden size, then an optional output ``Linear`` with ``out_gain``.

    float32_output: the output layer computes in float32 under bf16 autocast (``rapidrl.nn.dtypes.Float32Linear``:
    values whose differences matter).

    layer_norm: ``Linear -> LayerNorm -> act`` for each hidden size (PQN's networks, Gallici et al. 2025, as
    CleanRL's pqn.py); the LayerNorm has its learned scale and shift (1 and 0 at initialisation)."""
    if activation not in ACTIVATIONS:
        raise ValueError(f"activation must be one of {sorted(ACTIVATIONS)}, got {activation!r}")
    layers: list[nn.Module] = []
    d = in_dim
    for h in hidden:
        layers.append(orthogonal_init(nn.Linear(d, h), math.sqrt(2.0)))
        if layer_norm:
            layers.append(nn.LayerNorm(h))
        layers.append(ACTIVATIONS[activation]())
        d = h
    if out_dim is not None:
        layers.append(orthogonal_init((Float32Linear if float32_output else nn.Linear)(d, out_dim), out_gain))
    return nn.Sequential(*layers)


def flat_obs_dim(space: gym.Space) -> int:
    """Input width of an MLP for a Box observation space."""
    if not isinstance(space, gym.spaces.Box):
        raise TypeError(f"MLP policies need a Box observation space, got {space}")
    return int(np.prod(space.shape))


class ActorCritic(nn.Module):
    """Actor-critic for Discrete (categorical), MultiDiscrete/MultiBinary (independent categoricals) and Box
    (diagonal Gaussian) action spaces: MLPs, or a CNN trunk.

    Args:
        observation_space: a single env's Box observation space.
        action_space: a single env's Discrete or Box action space.
        hidden: hidden layer sizes of the actor and of the critic.
        shared: one trunk for both heads (else separate networks, the default and usually better).
        activation: "tanh" or "relu".
        log_std_init: initial state-independent log standard deviation (Box only).
        squash: "clip" (sample unbounded Gaussian, clip to bounds in the env; log-prob of the raw sample)
            or "tanh" (tanh-squashed Gaussian scaled to the bounds, log-prob with the Jacobian term).
        encoder: "auto" (a CNN for uint8 [C, H, W] observations, the multi-input encoder for Dict/Tuple
            observations with images, else MLPs), "mlp", "nature", "minatar" or "multi"
            (``rapidrl.nn.encoders.encoder_for``). With a CNN the trunk is the CNN, shared by a linear actor head
            (gain 0.01) and a linear critic head (gain 1) as in CleanRL's ppo_atari; ``hidden``, ``shared`` and
            ``activation`` then do not apply, and observations go in as stored (uint8 [B, C, H, W]).
    """

    recurrent = False
    """True for ``rapidrl.nn.recurrent.RecurrentActorCritic`` (acting and scoring then carry a state)."""

    def __init__(self, observation_space: gym.Space, action_space: gym.Space, hidden: Sequence[int] = (64, 64),
                 *, shared: bool = False, activation: str = "tanh", log_std_init: float = 0.0,
                 squash: str = "clip", encoder: str = "auto"):
        super().__init__()
        self.encoder_kind = encoder_for(observation_space, encoder)
        obs_dim = flat_obs_dim(observation_space)
        out_dim = self._setup_action_space(action_space)
        if squash not in ("clip", "tanh"):
            raise ValueError(f"squash must be 'clip' or 'tanh', got {squash!r}")
        if not hidden:
            raise ValueError("hidden must name at least one layer size")
        self.obs_dim, self.action_dim, self.shared, self.squash = obs_dim, out_dim, shared, squash
        self.hidden, self.activation = tuple(int(h) for h in hidden), activation
        self.input_dtype = np.dtype(np.float32)
        """dtype the policy takes observations in (uint8 for a CNN on a uint8 space; float32 otherwise)."""
        if self.encoder_kind != "mlp":
            self.shared = True
            self.trunk = make_encoder(observation_space, self.encoder_kind)
            self.actor = orthogonal_init(nn.Linear(self.trunk.out_dim, out_dim), 0.01)
            self.critic = orthogonal_init(nn.Linear(self.trunk.out_dim, 1), 1.0)
            if observation_space.dtype == np.uint8:
                self.input_dtype = np.dtype(np.uint8)
        elif shared:
            self.trunk = mlp(obs_dim, hidden, None, activation)
            self.actor = orthogonal_init(nn.Linear(hidden[-1], out_dim), 0.01)
            self.critic = orthogonal_init(nn.Linear(hidden[-1], 1), 1.0)
        else:
            self.trunk = None
            self.actor = mlp(obs_dim, hidden, out_dim, activation, out_gain=0.01)
            self.critic = mlp(obs_dim, hidden, 1, activation, out_gain=1.0)
        self._setup_gaussian(action_space, out_dim, log_std_init)

    def _setup_action_space(self, action_space: gym.Space) -> int:
        """Set ``discrete``/``multi`` (and ``nvec``, ``action_start``) from ``action_space``; return the actor's
        output width (logits, concatenated logits, or Gaussian means)."""
        self.discrete = isinstance(action_space, gym.spaces.Discrete)
        self.multi = isinstance(action_space, (gym.spaces.MultiDiscrete, gym.spaces.MultiBinary))
        """MultiDiscrete / MultiBinary actions: one categorical per component (MultiBinary = categoricals of 2)."""
        if self.discrete:
            return int(action_space.n)
        if self.multi:
            if isinstance(action_space, gym.spaces.MultiBinary):
                nvec, start = np.full(int(np.prod(action_space.shape)), 2), np.zeros(1, np.int64)
            else:
                nvec, start = action_space.nvec.ravel(), action_space.start.ravel()
            if len(np.shape(action_space.shape)) and len(action_space.shape) != 1:
                raise TypeError(f"{type(self).__name__} supports 1-D MultiDiscrete/MultiBinary action spaces, "
                                f"got {action_space}")
            self.nvec = [int(n) for n in nvec]
            self.register_buffer("action_start", torch.as_tensor(np.broadcast_to(start, len(self.nvec)).copy()))
            self.action_env_dtype = action_space.dtype
            return int(sum(self.nvec))
        if isinstance(action_space, gym.spaces.Box) and len(action_space.shape) == 1:
            return int(action_space.shape[0])
        raise TypeError(f"{type(self).__name__} supports Discrete, MultiDiscrete, MultiBinary and 1-D Box action "
                        f"spaces, got {action_space}")

    def _setup_gaussian(self, action_space: gym.Space, out_dim: int, log_std_init: float) -> None:
        """Box actions: the state-independent ``log_std`` parameter and the bounds (registered last, after the
        networks, which fixes the parameter order optimizers and checkpoints see)."""
        if not self.discrete and not self.multi:
            self.log_std = nn.Parameter(torch.full((out_dim,), float(log_std_init)))
            low = torch.as_tensor(action_space.low, dtype=torch.float32)
            high = torch.as_tensor(action_space.high, dtype=torch.float32)
            self.register_buffer("action_low", low)
            self.register_buffer("action_high", high)

    def input_columns(self) -> tuple[tuple[int, int], tuple[int, int]]:
        """The column ranges ``[lo, hi)`` of a flat observation row that the actor and the critic read (both the
        whole row here; multi-agent policies read slices). The compiled PPO update gathers exactly these."""
        return (0, self.obs_dim), (0, self.obs_dim)

    # -- heads ------------------------------------------------------------------------------------
    def _heads(self, obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """obs [B, O] -> (actor output [B, A], values [B]), float32: under bfloat16 autocast (precision="bf16") the
        layers compute in bf16 and the distribution maths after them in float32 (``full_precision``; a no-op
        otherwise)."""
        if self.trunk is not None:
            h = self.trunk(obs)
            return full_precision(self.actor(h)), full_precision(self.critic(h).squeeze(-1))
        return full_precision(self.actor(obs)), full_precision(self.critic(obs).squeeze(-1))

    def value(self, obs: torch.Tensor) -> torch.Tensor:
        """State values [B] (float32, as ``_heads``)."""
        if self.trunk is not None:
            return full_precision(self.critic(self.trunk(obs)).squeeze(-1))
        return full_precision(self.critic(obs).squeeze(-1))

    # -- distributions ----------------------------------------------------------------------------
    def _gaussian_logp(self, mean: torch.Tensor, raw: torch.Tensor) -> torch.Tensor:
        """Sum over action dims of N(raw; mean, exp(log_std)) log-density [B]."""
        return gaussian_log_prob(raw, mean, self.log_std)

    def squash_log_jacobian(self, raw: torch.Tensor) -> torch.Tensor:
        """log |d action / d raw| summed over dims [B] for the scaled tanh squash."""
        return tanh_log_jacobian(raw, (self.action_high - self.action_low) / 2)

    def _multi_logp(self, out: torch.Tensor, action_masks: torch.Tensor | None = None) -> list[torch.Tensor]:
        """Per-component log-probabilities: out [B, sum(nvec)] (and masks [B, sum(nvec)]) -> [[B, n_k] for each
        component k]."""
        return [categorical_log_probs(apply_action_mask(chunk, m)) for chunk, m in
                zip(torch.split(out, self.nvec, dim=-1), split_action_mask(action_masks, self.nvec))]

    def to_env_action(self, raw: torch.Tensor) -> torch.Tensor:
        """Map a policy sample to the env's action (clip to bounds or scaled tanh; MultiDiscrete: + start)."""
        if self.discrete:
            return raw
        if self.multi:
            return raw + self.action_start
        if self.squash == "tanh":
            return self.action_low + (torch.tanh(raw) + 1.0) * (self.action_high - self.action_low) / 2
        return torch.clamp(raw, self.action_low, self.action_high)

    def act(self, obs: torch.Tensor, deterministic: bool = False, action_masks: torch.Tensor | None = None,
            generator: torch.Generator | None = None) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Sample: obs [B, O] -> (raw actions [B] int64 or [B, A], log_probs [B], values [B]); among the valid actions
        of ``action_masks`` (module docstring) when given.

        Raw actions are what the buffer stores (unclipped Gaussian samples); ``to_env_action`` maps them.
        generator: the torch generator the samples are drawn from, on the policy's device (an algorithm passes its
        own, ``Algorithm.torch_rng``); None: torch's global generator.
        """
        out, values = self._heads(obs)
        actions, logp = self._sample(out, deterministic, action_masks, generator)
        return actions, logp, values

    def _sample(self, out: torch.Tensor, deterministic: bool, action_masks: torch.Tensor | None = None,
                generator: torch.Generator | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """Actor output [B, A] -> (raw actions, log_probs [B]), sampled from ``generator`` (None: torch's global
        generator), among the valid actions of ``action_masks``."""
        if self.discrete:
            out = apply_action_mask(out, action_masks)
            logp_all = categorical_log_probs(out)
            if deterministic:
                actions = out.argmax(-1)
            else:
                actions = torch.multinomial(logp_all.exp(), 1, generator=generator).squeeze(-1)
            return actions, logp_all.gather(-1, actions.unsqueeze(-1)).squeeze(-1)
        if self.multi:  # raw actions [B, K] int64 (component indices, before + start)
            parts = self._multi_logp(out, action_masks)
            picks = [lp.argmax(-1) if deterministic else torch.multinomial(lp.exp(), 1, generator=generator).squeeze(-1)
                     for lp in parts]
            actions = torch.stack(picks, -1)
            logp = sum(lp.gather(-1, a.unsqueeze(-1)).squeeze(-1) for lp, a in zip(parts, picks))
            return actions, logp
        if deterministic:
            raw = out
        else:
            raw = out + torch.empty_like(out).normal_(generator=generator) * torch.exp(self.log_std)
        logp = self._gaussian_logp(out, raw)
        if self.squash == "tanh":
            logp = logp - self.squash_log_jacobian(raw)
        return raw, logp

    def evaluate(self, obs: torch.Tensor, actions: torch.Tensor, action_masks: torch.Tensor | None = None
                 ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """(log_probs [B], entropy [B], values [B]) of stored raw ``actions`` under the current policy (restricted to
        the valid actions of ``action_masks``, the masks the actions were chosen under, when given).

        For the tanh squash the entropy is that of the underlying Gaussian (no closed form after tanh).
        """
        out, values = self._heads(obs)
        logp, entropy = self._score(out, actions, action_masks)
        return logp, entropy, values

    def _score(self, out: torch.Tensor, actions: torch.Tensor, action_masks: torch.Tensor | None = None
               ) -> tuple[torch.Tensor, torch.Tensor]:
        """Actor output [B, A] and stored raw actions (and their masks) -> (log_probs [B], entropy [B])."""
        if self.discrete:
            logp_all = categorical_log_probs(apply_action_mask(out, action_masks))
            logp = logp_all.gather(-1, actions.long().unsqueeze(-1)).squeeze(-1)
            return logp, categorical_entropy(logp_all)
        if self.multi:  # independent components: log-probs and entropies add
            parts = self._multi_logp(out, action_masks)
            a = actions.long()
            logp = sum(lp.gather(-1, a[:, k:k + 1]).squeeze(-1) for k, lp in enumerate(parts))
            entropy = sum(categorical_entropy(lp) for lp in parts)
            return logp, entropy
        logp = self._gaussian_logp(out, actions)
        if self.squash == "tanh":
            logp = logp - self.squash_log_jacobian(actions)
        entropy = gaussian_entropy(self.log_std).expand(out.shape[0])
        return logp, entropy
