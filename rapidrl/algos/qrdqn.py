"""QR-DQN (Dabney et al. 2018a): DQN whose network predicts N quantiles of the return of every action.

Read top to bottom: the config, the update (``QRDQN._update_step``, written out), acting. The loss and the greedy
target are pure functions of ``rapidrl.algos.offpolicy_losses`` (``quantile_regression_loss``,
``quantile_greedy_next``; the quantile Huber terms are TQC's, shared); the network is ``QNetwork`` with
``outputs_per_action=N`` ([B, A, N]); everything else is DQN's (``rapidrl.algos.dqn``: n-step returns, prioritized
replay, frame replay, encoders, epsilon-greedy exploration, target updates, action masks, persistence).

The N outputs of action a are the quantiles theta_j(s, a) at the fixed fractions tau_j = (j + 0.5) / N. The target
of every current quantile is the whole set r + discount * theta_k(s', a*), k = 1..N, with a* the greedy action of s'
(the largest mean over quantiles, among the valid actions of s' with action masks) of the target network, or of the
online network with ``double_q``; the loss is the quantile Huber loss (kappa = 1) summed over the current quantiles
and averaged over the target quantiles and the batch (sb3-contrib's ``quantile_huber_loss(sum_over_quantiles=True)``).
Q(s, a) = mean_j theta_j(s, a): acting, evaluation and export are greedy on it.

Defaults are sb3-contrib's QR-DQN (no gradient clipping, Adam eps 0.01 / batch size, single Q, 200 quantiles) with
DQN's CartPole-tuned schedule, which is also rl-zoo's tuned QR-DQN CartPole schedule (its ``n_quantiles`` is 10).
Gradient backend: "torch" only (PyTorch autograd).
"""

from __future__ import annotations

import copy
from dataclasses import dataclass

import numpy as np
import torch

from rapidrl.algos.dqn import DQN, DQNConfig, compiled_acting_forward
from rapidrl.algos.offpolicy_losses import quantile_greedy_next, quantile_regression_loss
from rapidrl.algos.registry import register
from rapidrl.nn.deploy import ArgmaxQ
from rapidrl.nn.distributions import apply_action_mask
from rapidrl.nn.encoders import make_encoder
from rapidrl.nn.numba_mlp import ACTING_FORWARD_MAX_ROWS
from rapidrl.nn.optim import adam, optimizer_step
from rapidrl.nn.qnets import QNetwork
from rapidrl.nn.quantile import MeanQuantileQ
from rapidrl.train.config import check_positive, with_defaults


@dataclass
@with_defaults(max_grad_norm=0.0, double_q=False)
class QRDQNConfig(DQNConfig):
    n_quantiles: int = 200
    """Quantiles per action, N (sb3-contrib's and the paper's 200; its tuned CartPole preset: 10)."""
    adam_eps: float | None = None
    """Adam's epsilon; None: 0.01 / batch_size (the QR-DQN paper's 0.01 / 32, as sb3-contrib)."""

    def validate(self) -> None:
        super().validate()
        check_positive(self, "n_quantiles")
        if self.adam_eps is not None:
            check_positive(self, "adam_eps")


@register
class QRDQN(DQN):
    """Quantile Regression DQN for Discrete action spaces. ``QRDQN(env, **hyperparameters)``; see QRDQNConfig."""

    name = "qrdqn"
    config_class = QRDQNConfig
    stat_names = ("loss", "q_values", "td_abs")
    handwritten = None  # PyTorch autograd only
    bf16_learning_tested = False

    def _build_networks(self) -> None:
        c = self.config
        encoder = None if self._encoder_kind() == "mlp" else make_encoder(self.observation_space, self._encoder_kind())
        self.q_net = QNetwork(self.obs_dim, int(self.action_space.n), c.hidden, dueling=c.dueling, encoder=encoder,
                              outputs_per_action=c.n_quantiles).to(self.device)
        self.q_target = copy.deepcopy(self.q_net).requires_grad_(False)
        self.optimizer = adam(self.q_net.parameters(), c.learning_rate,
                              eps=c.adam_eps if c.adam_eps is not None else 0.01 / c.batch_size)
        self._params = list(self.q_net.parameters())
        self._target_params = list(self.q_target.parameters())
        self._last_target_update = 0

    def _gradient_backends(self) -> dict:
        return {"torch": lambda: None}

    def _bind_backend(self) -> None:
        """The torch backend; acting through the compiled MLP forward where it computes the network exactly
        (``compiled_acting_forward``: a plain float32 MLP on the CPU)."""
        super()._bind_backend()
        self._acting_forward = compiled_acting_forward(self.q_net, self.device, self.precision)

    # -- update ----------------------------------------------------------------------------------
    def _update_step(self, batch) -> torch.Tensor:
        """One gradient step; returns [loss, mean Q, mean |TD| of the means, per-sample loss...] (the priorities of
        prioritized replay after 3)."""
        c = self.config
        obs, _ = self._split_rows(batch.obs)
        next_obs, next_mask = self._split_rows(batch.next_obs)  # next_mask: the valid actions of s' (or None)
        rows = torch.arange(obs.shape[0], device=obs.device)
        with self._autocast():  # bf16 autocast under precision="bf16" (the Q networks return float32)
            quantiles = self.q_net(obs)[rows, batch.actions.long()]  # [B, N] of the taken actions
        with torch.no_grad():
            with self._autocast():
                next_quantiles = self.q_target(next_obs)  # [B, A, N]
                select = self.q_net(next_obs) if c.double_q else next_quantiles  # [B, A, N]
            next_best = quantile_greedy_next(next_quantiles, select, next_mask)  # [B, N]; 0 without valid actions
            target = batch.rewards[:, None] + batch.discounts[:, None] * next_best  # [B, N]
        weights = batch.weights if c.prioritized else None
        loss, per_sample = quantile_regression_loss(quantiles, target, None, weights)  # tau_j = (j + 0.5) / N
        self.optimizer.zero_grad(set_to_none=False)
        loss.backward()
        optimizer_step(self.optimizer, c.max_grad_norm)
        q = quantiles.detach().mean(1)  # [B]
        td_abs = (target.mean(1) - q).abs()  # [B]
        return torch.cat([torch.stack([loss.detach(), q.mean(), td_abs.mean()]), per_sample])

    # -- acting ----------------------------------------------------------------------------------
    def _q_values(self, obs: np.ndarray) -> torch.Tensor:
        """Q [B, A] = the mean over quantiles, of observations [B, ...]."""
        if self._acting_forward is not None and obs.shape[0] <= ACTING_FORWARD_MAX_ROWS:
            out = torch.from_numpy(self._acting_forward(obs.reshape(obs.shape[0], -1)))  # [B, A * N]
            return out.view(obs.shape[0], -1, self.config.n_quantiles).mean(-1)
        with torch.no_grad():
            if self.q_net.has_encoder:  # obs [B, C, H, W] as stored (uint8 images: zero-copy)
                x = torch.from_numpy(np.ascontiguousarray(obs, dtype=self._obs_dtype)).to(self.device)
            else:
                x = torch.from_numpy(np.ascontiguousarray(obs, dtype=np.float32)).to(self.device)
                x = x.reshape(x.shape[0], -1)
            return self.q_net(x).mean(-1)  # [B, A]

    def _greedy(self, obs: np.ndarray, action_masks: np.ndarray | None = None) -> np.ndarray:
        """argmax_a Q(obs, a) [B] (over the valid actions of ``action_masks`` [B, A] when given)."""
        q = self._q_values(obs)
        mask = None if action_masks is None else torch.from_numpy(action_masks).to(q.device)
        return apply_action_mask(q, mask).argmax(1).cpu().numpy()

    def deterministic_module(self) -> torch.nn.Module:
        return ArgmaxQ(MeanQuantileQ(self.q_net), self.observation_space.shape if self.q_net.has_encoder else None,
                       masked=self.action_mask_size > 0)
