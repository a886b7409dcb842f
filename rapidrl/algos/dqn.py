"""DQN (Mnih et al. 2015) with Double DQN, dueling heads, n-step returns and prioritized replay.

Read top to bottom: the config, the loss (a pure function), the update, acting. Collection, replay and the
update driver come from the shared off-policy core (``rapidrl.algos.offpolicy``).

Action masks (docs/masks.md): on an env that states its valid actions, the greedy action, epsilon-greedy exploration
(a uniform valid action) and the random actions before ``learning_starts`` pick valid actions only, and the target's
max (Double DQN: argmax) over the next state's actions takes its valid ones (the mask stored with ``next_obs``).
"""

from __future__ import annotations

import copy
from dataclasses import dataclass

import numpy as np
import torch

from rapidrl.algos.offpolicy import (
    OffPolicyAlgorithm,
    OffPolicyConfig,
    frame_replay_spec,
    uniform_valid,
)
from rapidrl.algos.offpolicy_losses import dqn_loss, polyak_update
from rapidrl.algos.registry import register
from rapidrl.buffers import PrioritizedReplayBuffer
from rapidrl.kernels.td import dqn_td_grads
from rapidrl.nn.deploy import ArgmaxQ
from rapidrl.nn.distributions import apply_action_mask, masked_max
from rapidrl.nn.encoders import ENCODERS, make_encoder
from rapidrl.nn.numba_mlp import ACTING_FORWARD_MAX_ROWS, MLPForward, MLPGrad
from rapidrl.nn.optim import adam, optimizer_step
from rapidrl.nn.qnets import QNetwork
from rapidrl.train.config import GradientClipConfig, check_positive, check_unit_interval, require, with_defaults
from rapidrl.train.path_settings import HandwrittenBackend
from rapidrl.train.schedules import linear_decay
from rapidrl.train.spaces import check_discrete_actions


def compiled_acting_forward(q_net: QNetwork, device: torch.device, precision: str) -> MLPForward | None:
    """The compiled forward that acts on a few observations (``rapidrl.nn.numba_mlp.MLPForward``: ~5x faster than
    PyTorch on one CartPole observation) for a Q network it computes exactly: a plain float32 MLP on the CPU (no
    encoder, dueling heads or noisy layers, not under bf16). None otherwise. Its output is the network's, [B, A * N]
    with N outputs per action (the distributional learners reduce it to Q)."""
    plain = not (q_net.has_encoder or q_net.dueling or q_net.noisy)
    return MLPForward(q_net.net, "relu") if plain and device.type == "cpu" and precision == "fp32" else None


@dataclass
@with_defaults(learning_rate=2.3e-3, buffer_size=100_000, learning_starts=1_000, batch_size=64, tau=1.0,
               train_freq=256, gradient_steps=128, max_grad_norm=10.0)
class DQNConfig(OffPolicyConfig, GradientClipConfig):
    target_update_interval: int = 10
    """Env steps (over all envs) between target-network updates (each moves the target by ``tau``: 1, a copy)."""
    exploration_fraction: float = 0.16
    """Fraction of the ``learn`` call over which epsilon falls linearly from its initial to its final value."""
    exploration_initial_eps: float = 1.0
    """Epsilon of epsilon-greedy exploration at the start."""
    exploration_final_eps: float = 0.04
    """Epsilon after the decay."""
    double_q: bool = True
    """Double DQN: the online network picks the next action, the target network values it."""
    dueling: bool = False
    """Dueling value/advantage heads."""
    prioritized: bool = False
    """Prioritized replay (proportional, priorities |TD error| + per_eps) with importance weights."""
    per_alpha: float = 0.6
    """Priority exponent of prioritized replay."""
    per_beta: float = 0.4
    """Importance-weight exponent of prioritized replay."""
    per_eps: float = 1e-6
    """Added to |TD error| (by the buffer) so every transition keeps a non-zero priority."""
    frame_replay: bool = True
    """Store the observations of a frame-stacking env (``env.frame_stack > 1``: Atari) in ``FrameReplayBuffer``,
    each frame once (~7 KB per 84x84 transition instead of 56 KB); not with prioritized replay or n_step > 1,
    which keep whole uint8 observations in their buffers."""
    encoder: str = "auto"
    """Observation encoder: "auto" (the Nature CNN for uint8 image observations of 36 pixels or more a side, the
    MinAtar CNN for smaller ones, "multi" (a CNN per image) for Dict/Tuple observations with images, else an MLP),
    "mlp", "nature", "minatar" or "multi" (``rapidrl.nn.encoders``)."""
    adam_eps: float | None = 1e-8
    """Adam's epsilon (PyTorch's default); None: 0.01 / batch_size (the QR-DQN paper's 0.01 / 32, as sb3-contrib)."""

    def validate(self) -> None:
        super().validate()
        require(self.encoder in ENCODERS, f"encoder must be one of {ENCODERS}, got {self.encoder!r}")
        if self.adam_eps is not None:
            check_positive(self, "adam_eps")
        check_positive(self, "target_update_interval", "per_eps")
        check_positive(self, "max_grad_norm", "per_alpha", allow_zero=True)
        check_unit_interval(self, "exploration_fraction", "exploration_initial_eps", "exploration_final_eps",
                            "per_beta")
        require(self.exploration_fraction > 0, "exploration_fraction must be > 0")


@register
class DQN(OffPolicyAlgorithm):
    """Deep Q-Network for Discrete action spaces. ``DQN(env, **hyperparameters)``; see DQNConfig."""

    name = "dqn"
    config_class = DQNConfig
    saved_state = ("q_net", "q_target", "optimizer")
    supports_action_masks = True
    multi_input = True
    stat_names = ("loss", "q_values", "td_abs")
    handwritten = HandwrittenBackend(
        by_hand="the Q network's forward and backward in Numba (`rapidrl.kernels.mlp`); the loss head (targets, Huber "
                "loss, its gradient) in one Numba call (`rapidrl.kernels.td`); plain MLP Q networks only")
    bf16_learning_tested = True

    def _check_spaces(self) -> None:
        super()._check_spaces()
        check_discrete_actions(type(self).__name__, self.action_space)  # DQN and its subclasses by name

    def _build_networks(self) -> None:
        """The Q network (``_make_q_network``), its target copy and Adam."""
        c = self.config
        encoder = None if self._encoder_kind() == "mlp" else make_encoder(self.observation_space, self._encoder_kind())
        self.q_net = self._make_q_network(encoder).to(self.device)
        self.q_target = copy.deepcopy(self.q_net).requires_grad_(False)
        self.optimizer = adam(self.q_net.parameters(), c.learning_rate,
                              eps=c.adam_eps if c.adam_eps is not None else 0.01 / c.batch_size)
        self._params = list(self.q_net.parameters())
        self._target_params = list(self.q_target.parameters())
        self._last_target_update = 0

    def _make_q_network(self, encoder: torch.nn.Module | None) -> torch.nn.Module:
        """The online Q network on the observation ``encoder`` (None: an MLP on the flat observations)."""
        c = self.config
        return QNetwork(self.obs_dim, int(self.action_space.n), c.hidden, dueling=c.dueling, encoder=encoder)

    # -- gradient backends -----------------------------------------------------------------------
    def _gradient_backends(self) -> dict:
        def mlp() -> str | None:
            return "needs an MLP Q network (image observations use a CNN encoder)" if self.q_net.has_encoder else None

        def plain() -> str | None:
            return "needs a plain MLP Q network (dueling=False)" if self.config.dueling else None

        return self._handwritten_or_torch(mlp, plain)

    def _bind_backend(self) -> None:
        """The handwritten backend: the compiled MLP forward and backward of the update (``rapidrl.kernels.mlp`` on
        zero-copy views of the Q networks), and a forward of its own for acting on a few observations."""
        self._q_grad = self._target_forward = self._acting_forward = None
        if self.gradient_backend == "handwritten":
            self._q_grad = MLPGrad(self.q_net.net, "relu")
            self._target_forward = MLPForward(self.q_target.net, "relu")
            self._acting_forward = MLPForward(self.q_net.net, "relu")

    def _compiled_products(self) -> tuple[tuple, tuple]:
        """The Q network's layer shapes, at the batch (the target's forward, the backward) and at twice it (the online
        forward of s and s' together, double Q): the whole update is compiled (C51 and QR-DQN share it)."""
        b = self.config.batch_size
        return tuple(tuple(w.shape) for w in self._q_grad.ws), (b, 2 * b)

    def _buffer_spec(self):
        c = self.config
        if not c.prioritized:
            return frame_replay_spec(self) or super()._buffer_spec()
        return PrioritizedReplayBuffer, (c.buffer_size, self._stored_obs_shape()), \
            dict(alpha=c.per_alpha, beta=c.per_beta, eps=c.per_eps, **self._buffer_kwargs())

    # -- update ----------------------------------------------------------------------------------
    def _update_step(self, batch) -> torch.Tensor:
        """One gradient step; returns [loss, mean Q, mean |TD|, |TD| per sample...] (priorities after 3)."""
        return self._compiled_step(batch) if self.gradient_backend == "handwritten" else self._autograd_step(batch)

    @torch.no_grad()
    def _compiled_step(self, batch) -> torch.Tensor:
        """The "handwritten" backend: ``_autograd_step`` with the loss head in one compiled call (``_loss_head``:
        targets, loss, its gradient with respect to the network's output) and the MLP's forward and backward compiled
        (``rapidrl.kernels.mlp``): the same update, a fraction of the PyTorch calls
        (``tests/test_closed_form_offpolicy.py`` compares the two, for DQN, C51 and QR-DQN)."""
        c = self.config
        b = batch.obs.shape[0]
        obs, _ = self._split_rows(batch.obs)
        next_obs, next_mask = self._split_rows(batch.next_obs)
        # double_q: one online forward for s and s' ([2B, A K]); the backward uses the rows of s only
        x = torch.cat([obs, next_obs]) if c.double_q else obs.contiguous()
        q_both = self._q_grad(x.numpy())  # [2B, A K] or [B, A K]: K outputs per action
        next_target = self._target_forward(next_obs.contiguous().numpy())  # [B, A K]
        d_out = np.empty_like(next_target)
        out = torch.empty(3 + b)
        self._loss_head(q_both, next_target, batch, None if next_mask is None else next_mask.numpy(), d_out,
                        out.numpy())
        self._q_grad.backward(d_out)  # d loss / d output of the B rows of s -> .grad
        optimizer_step(self.optimizer, c.max_grad_norm)
        return out

    def _loss_head(self, q_both: np.ndarray, next_target: np.ndarray, batch, next_mask: np.ndarray | None,
                   d_out: np.ndarray, out: np.ndarray) -> None:
        """The compiled loss head of ``_compiled_step`` (``rapidrl.kernels.td.dqn_td_grads``: TD targets, Huber loss,
        its gradient with respect to Q into d_out, the statistics into out)."""
        c = self.config
        dqn_td_grads(q_both, next_target, batch.actions.numpy(), batch.rewards.numpy(), batch.discounts.numpy(),
                     batch.weights.numpy() if c.prioritized else None, c.double_q, d_out, out, next_mask=next_mask)

    def _autograd_step(self, batch) -> torch.Tensor:
        """The "torch" backend: the update through autograd on ``dqn_loss`` (any Q network, dueling and CNNs
        included; the reference of ``_compiled_step``; what torch.compile traces)."""
        c = self.config
        obs, _ = self._split_rows(batch.obs)
        next_obs, next_mask = self._split_rows(batch.next_obs)  # next_mask: the valid actions of s' (or None)
        with self._autocast():  # bf16 autocast under precision="bf16" (the Q networks return float32)
            q = self.q_net(obs).gather(1, batch.actions.long().unsqueeze(1)).squeeze(1)  # [B]
        with torch.no_grad():  # s' outside the graph: the backward covers the B rows of s only (for a CNN the
            with self._autocast():  # backward is ~2x a forward; one [2B] forward for s and s' backpropagated 2B rows)
                next_target = self.q_target(next_obs)  # [B, A]
                next_online = self.q_net(next_obs) if c.double_q else None  # [B, A]
            if c.double_q:
                best = apply_action_mask(next_online, next_mask).argmax(1, keepdim=True)
                next_q = next_target.gather(1, best).squeeze(1)
                if next_mask is not None:  # a state without valid actions is worth 0 (masked_max's convention)
                    next_q = torch.where(next_mask.any(1), next_q, torch.zeros_like(next_q))
            else:
                next_q = masked_max(next_target, next_mask)
        weights = batch.weights if c.prioritized else None
        loss, td = dqn_loss(q, next_q, batch.rewards, batch.discounts, weights)
        self.optimizer.zero_grad(set_to_none=False)
        loss.backward()
        optimizer_step(self.optimizer, c.max_grad_norm)
        td_abs = td.abs()
        return torch.cat([torch.stack([loss.detach(), q.detach().mean(), td_abs.mean()]), td_abs])

    def _after_update(self, batch, out: torch.Tensor) -> torch.Tensor:
        c = self.config
        if c.prioritized:
            self.buffer.update_priorities(batch.indices, out[3:])
        return out[:3]

    def _train(self) -> None:
        super()._train()
        c = self.config
        now = self.num_timesteps
        if now >= c.learning_starts and now - self._last_target_update >= c.target_update_interval:
            polyak_update(self._target_params, self._params, c.tau)
            self._last_target_update = now
        self.record({"charts/epsilon": self.epsilon()})

    # -- acting ----------------------------------------------------------------------------------
    def epsilon(self) -> float:
        """Current exploration rate: linear from initial to final over exploration_fraction of ``learn``."""
        c = self.config
        return linear_decay(c.exploration_initial_eps, c.exploration_final_eps, c.exploration_fraction,
                            self.progress_remaining())

    def _greedy(self, obs: np.ndarray, action_masks: np.ndarray | None = None) -> np.ndarray:
        """argmax_a Q(obs, a) [B] (over the valid actions of ``action_masks`` [B, A] bool when given)."""
        if (action_masks is None and self._acting_forward is not None and self.q_net.outputs_per_action == 1
                and obs.shape[0] <= ACTING_FORWARD_MAX_ROWS):  # the compiled forward's output is Q [B, A]
            return self._acting_forward(obs.reshape(obs.shape[0], -1)).argmax(1)
        q = self._q_values(obs)
        mask = None if action_masks is None else torch.from_numpy(action_masks).to(q.device)
        return apply_action_mask(q, mask).argmax(1).cpu().numpy()

    def _q_values(self, obs: np.ndarray) -> torch.Tensor:
        """Q [B, A] of observations [B, ...]: from the compiled acting forward where it applies, else PyTorch's."""
        if self._acting_forward is not None and obs.shape[0] <= ACTING_FORWARD_MAX_ROWS:
            return self._q_of_compiled(self._acting_forward(np.ascontiguousarray(obs.reshape(obs.shape[0], -1))))
        with torch.no_grad():
            return self._q_of_network(self._network_input(obs))

    def _network_input(self, obs: np.ndarray) -> torch.Tensor:
        """Observations [B, ...] as the Q network takes them: images [B, C, H, W] as stored (uint8: zero-copy),
        anything else flat float32 [B, O]."""
        if self.q_net.has_encoder:
            return torch.from_numpy(np.ascontiguousarray(obs, dtype=self._obs_dtype)).to(self.device)
        x = torch.from_numpy(np.ascontiguousarray(obs, dtype=np.float32)).to(self.device)
        return x.reshape(x.shape[0], -1)

    def _q_of_network(self, x: torch.Tensor) -> torch.Tensor:
        """Q [B, A] float32 of network inputs ``x`` (``_network_input``)."""
        return self.q_net(x).float()

    def _q_of_compiled(self, out: np.ndarray) -> torch.Tensor:
        """Q [B, A] of the compiled acting forward's output ``out`` [B, A * outputs_per_action]."""
        return torch.from_numpy(out)

    def deterministic_module(self) -> torch.nn.Module:
        return ArgmaxQ(self.q_net, self.observation_space.shape if self.q_net.has_encoder else None,
                       masked=self.action_mask_size > 0)

    def _explore_actions(self, obs: np.ndarray, action_masks: np.ndarray | None = None) -> np.ndarray:
        actions = self._greedy(obs, action_masks)
        explore = self.np_rng.random(actions.shape[0]) < self.epsilon()
        if explore.any():
            if action_masks is None:
                actions[explore] = self.np_rng.integers(self.action_space.n, size=int(explore.sum()))
            else:  # a uniform valid action
                actions[explore] = uniform_valid(action_masks[explore], self.np_rng.random(int(explore.sum())))
        return actions

    def _policy_actions(self, obs: np.ndarray, deterministic: bool, action_masks: np.ndarray | None = None
                        ) -> np.ndarray:
        return self._greedy(obs, action_masks) if deterministic else self._explore_actions(obs, action_masks)

    # -- persistence -----------------------------------------------------------------------------
    def _extra_training_state(self) -> dict:
        return {**super()._extra_training_state(), "last_target_update": self._last_target_update}

    def _load_extra_training_state(self, state: dict) -> None:
        super()._load_extra_training_state(state)
        self._last_target_update = int(state["last_target_update"])
