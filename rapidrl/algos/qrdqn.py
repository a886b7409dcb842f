"""QR-DQN (Dabney et al. 2018a): DQN whose network predicts N quantiles of the return of every action.

Read top to bottom: the config, the update (``QRDQN._autograd_step``, written out; ``_compiled_step`` its twin),
acting. The loss and the greedy target are pure functions of ``rapidrl.algos.offpolicy_losses``
(``quantile_regression_loss``, ``quantile_greedy_next``; the quantile Huber terms are TQC's, shared); the network is
``QNetwork`` with ``outputs_per_action=N`` ([B, A, N]); everything else is DQN's (``rapidrl.algos.dqn``: n-step
returns, prioritized replay, frame replay, encoders, epsilon-greedy exploration, target updates, action masks,
persistence).

The N outputs of action a are the quantiles theta_j(s, a) at the fixed fractions tau_j = (j + 0.5) / N. The target
of every current quantile is the whole set r + discount * theta_k(s', a*), k = 1..N, with a* the greedy action of s'
(the largest mean over quantiles, among the valid actions of s' with action masks) of the target network, or of the
online network with ``double_q``; the loss is the quantile Huber loss (kappa = 1) summed over the current quantiles
and averaged over the target quantiles and the batch (sb3-contrib's ``quantile_huber_loss(sum_over_quantiles=True)``).
Q(s, a) = mean_j theta_j(s, a): acting, evaluation and export are greedy on it.

Defaults are sb3-contrib's QR-DQN (no gradient clipping, Adam eps 0.01 / batch size, single Q, 200 quantiles) with
DQN's CartPole-tuned schedule, which is also rl-zoo's tuned QR-DQN CartPole schedule (its ``n_quantiles`` is 10).
Gradient backends: on the CPU a plain MLP Q network trains through the "handwritten" one (DQN's compiled MLP forward
and backward, with the loss head in one Numba call: ``rapidrl.kernels.quantile.qrdqn_grads``); dueling heads, CNNs and
bf16 through PyTorch autograd.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from rapidrl.algos.dqn import DQN, DQNConfig, compiled_acting_forward
from rapidrl.algos.offpolicy_losses import quantile_greedy_next, quantile_regression_loss
from rapidrl.algos.registry import register
from rapidrl.kernels.quantile import qrdqn_grads
from rapidrl.nn.deploy import ArgmaxQ
from rapidrl.nn.optim import optimizer_step
from rapidrl.nn.qnets import QNetwork
from rapidrl.nn.quantile import MeanQuantileQ
from rapidrl.train.config import check_positive, with_defaults
from rapidrl.train.path_settings import HandwrittenBackend


@dataclass
@with_defaults(max_grad_norm=0.0, double_q=False)
class QRDQNConfig(DQNConfig):
    n_quantiles: int = 200
    """Quantiles per action, N (sb3-contrib's and the paper's 200; its tuned CartPole preset: 10)."""
    adam_eps: float | None = None
    """Adam's epsilon; None: 0.01 / batch_size (the paper's 0.01 / 32, as sb3-contrib)."""

    def validate(self) -> None:
        super().validate()
        check_positive(self, "n_quantiles")


@register
class QRDQN(DQN):
    """Quantile Regression DQN for Discrete action spaces. ``QRDQN(env, **hyperparameters)``; see QRDQNConfig."""

    name = "qrdqn"
    config_class = QRDQNConfig
    stat_names = ("loss", "q_values", "td_abs")
    handwritten = HandwrittenBackend(
        by_hand="the Q network's forward and backward in Numba (`rapidrl.kernels.mlp`); the loss head (greedy next "
                "quantiles, targets, quantile Huber loss, its gradient) in one Numba call "
                "(`rapidrl.kernels.quantile.qrdqn_grads`); plain MLP Q networks only")
    bf16_learning_tested = False

    def _make_q_network(self, encoder: torch.nn.Module | None) -> torch.nn.Module:
        c = self.config
        return QNetwork(self.obs_dim, int(self.action_space.n), c.hidden, dueling=c.dueling, encoder=encoder,
                        outputs_per_action=c.n_quantiles)

    def _bind_backend(self) -> None:
        """DQN's (the handwritten backend's compiled forward and backward); under the torch backend acting still goes
        through the compiled MLP forward where it computes the network exactly (``compiled_acting_forward``: a plain
        float32 MLP on the CPU)."""
        super()._bind_backend()
        if self._acting_forward is None:
            self._acting_forward = compiled_acting_forward(self.q_net, self.device, self.precision)

    # -- update ----------------------------------------------------------------------------------
    def _loss_head(self, q_both: np.ndarray, next_target: np.ndarray, batch, next_mask: np.ndarray | None,
                   d_out: np.ndarray, out: np.ndarray) -> None:
        """The handwritten backend's loss head (``rapidrl.kernels.quantile.qrdqn_grads``: greedy next quantiles,
        targets, quantile Huber loss and its gradient); DQN's ``_compiled_step`` runs the network around it."""
        c = self.config
        qrdqn_grads(q_both, next_target, batch.actions.numpy(), batch.rewards.numpy(), batch.discounts.numpy(),
                    batch.weights.numpy() if c.prioritized else None, c.double_q, c.n_quantiles, d_out, out,
                    next_mask=next_mask)

    def _autograd_step(self, batch) -> torch.Tensor:
        """One gradient step through autograd (any Q network; the "torch" backend and the reference of
        ``_compiled_step``); returns [loss, mean Q, mean |TD| of the means, per-sample loss...] (the priorities of
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
    def _q_of_network(self, x: torch.Tensor) -> torch.Tensor:
        """Q [B, A] = the mean over quantiles."""
        return self.q_net(x).mean(-1)

    def _q_of_compiled(self, out: np.ndarray) -> torch.Tensor:
        return torch.from_numpy(out).view(out.shape[0], -1, self.config.n_quantiles).mean(-1)  # [B, A * N] -> [B, A]

    def deterministic_module(self) -> torch.nn.Module:
        return ArgmaxQ(MeanQuantileQ(self.q_net), self.observation_space.shape if self.q_net.has_encoder else None,
                       masked=self.action_mask_size > 0)
