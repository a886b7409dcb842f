"""IQN (Dabney et al. 2018b): DQN whose network maps sampled fractions tau to the return quantiles Z_tau(s, a).

Read top to bottom: the config, the update (``IQN._update_step``, written out), acting. The loss and the greedy
target are pure functions of ``rapidrl.algos.offpolicy_losses`` (``quantile_regression_loss``,
``quantile_greedy_next``: QR-DQN's, with sampled fractions); the network is
``rapidrl.nn.quantile.ImplicitQuantileNetwork`` (state features times a cosine embedding of tau, then the head);
everything else is DQN's (``rapidrl.algos.dqn``: n-step returns, prioritized replay, frame replay, encoders,
epsilon-greedy exploration, target updates, action masks, persistence).

Each update draws N fractions tau ~ U(0, 1) per sample for the current quantiles Z_tau(s, a) and N' fractions
tau' per sample for the target quantiles r + discount * Z_tau'(s', a*) of the target network. a* is the greedy
action of s' (the largest Q, among the valid actions of s' with action masks) of the target network, or of the
online network with ``double_q``, Q being the mean quantile at the K acting fractions (Dopamine: at K sampled
fractions). The loss is the quantile Huber loss (kappa = 1)
at the sampled fractions, summed over the N current quantiles and averaged over the N' targets and the batch
(Dopamine's reduction). Risk-neutral acting: Q(s, a) = mean_k Z_tau_k(s, a) at the K fixed midpoints
tau_k = (k + 0.5) / K (Dopamine samples K fractions per step; the midpoints make ``predict``, evaluation and export
deterministic, and estimate the mean with less variance).

Defaults: Dopamine's IQN (N = N' = 64, K = 32, a 64-cosine embedding, Adam eps 0.01 / 32 = 3.125e-4, single Q, no
gradient clipping) with DQN's CartPole-tuned schedule. Gradient backend: "torch" only (PyTorch autograd).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from rapidrl.algos.dqn import DQN, DQNConfig
from rapidrl.algos.offpolicy_losses import quantile_greedy_next, quantile_regression_loss
from rapidrl.algos.registry import register
from rapidrl.nn.deploy import ArgmaxQ
from rapidrl.nn.optim import optimizer_step
from rapidrl.nn.quantile import ImplicitQuantileNetwork, MeanQuantileQ, midpoint_fractions
from rapidrl.train.config import check_positive, require, with_defaults


@dataclass
@with_defaults(max_grad_norm=0.0, double_q=False)
class IQNConfig(DQNConfig):
    num_tau_samples: int = 64
    """N: fractions sampled per sample for the current quantiles."""
    num_tau_prime_samples: int = 64
    """N': fractions sampled per sample for the target quantiles."""
    num_quantile_samples: int = 32
    """K: the fixed midpoint fractions (k + 0.5) / K whose mean quantile is the Q value acting is greedy on."""
    quantile_embedding_dim: int = 64
    """Cosines of the fraction embedding, cos(pi i tau) for i = 0 .. this - 1 (the paper's 64)."""
    adam_eps: float | None = None
    """Adam's epsilon; None: 0.01 / batch_size (Dopamine's IQN: 0.01 / 32 = 3.125e-4)."""

    def validate(self) -> None:
        super().validate()
        check_positive(self, "num_tau_samples", "num_tau_prime_samples", "num_quantile_samples",
                       "quantile_embedding_dim")
        require(not self.dueling, "IQN has no dueling heads (dueling=True): the fraction embedding multiplies the "
                                  "state features before the one head")


@register
class IQN(DQN):
    """Implicit Quantile Networks for Discrete action spaces. ``IQN(env, **hyperparameters)``; see IQNConfig."""

    name = "iqn"
    config_class = IQNConfig
    stat_names = ("loss", "q_values", "td_abs")
    handwritten = None  # PyTorch autograd only
    bf16_learning_tested = False

    def _build_networks(self) -> None:
        super()._build_networks()
        self._acting_fractions = midpoint_fractions(self.config.num_quantile_samples, self.device)  # [K]

    def _make_q_network(self, encoder: torch.nn.Module | None) -> torch.nn.Module:
        c = self.config
        return ImplicitQuantileNetwork(self.obs_dim, int(self.action_space.n), c.hidden, encoder=encoder,
                                       embedding_dim=c.quantile_embedding_dim)

    def _gradient_backends(self) -> dict:
        return {"torch": lambda: None}

    # -- update ----------------------------------------------------------------------------------
    def _update_step(self, batch) -> torch.Tensor:
        """One gradient step; returns [loss, mean Q, mean |TD| of the means, per-sample loss...] (the priorities of
        prioritized replay after 3)."""
        c = self.config
        obs, _ = self._split_rows(batch.obs)
        next_obs, next_mask = self._split_rows(batch.next_obs)  # next_mask: the valid actions of s' (or None)
        b = obs.shape[0]
        rows = torch.arange(b, device=obs.device)
        tau = torch.rand(b, c.num_tau_samples, generator=self.torch_rng, device=obs.device)  # [B, N] ~ U(0, 1)
        tau_next = torch.rand(b, c.num_tau_prime_samples, generator=self.torch_rng, device=obs.device)  # [B, N']
        with self._autocast():  # bf16 autocast under precision="bf16" (the networks return float32)
            quantiles = self.q_net(obs, tau)[rows, batch.actions.long()]  # [B, N] of the taken actions
        with torch.no_grad():
            with self._autocast():
                next_features = self.q_target.features(next_obs)  # [B, F]
                next_quantiles = self.q_target.quantiles(next_features, tau_next)  # [B, A, N']
                # a* from the quantiles at the K acting fractions: the online network's (double Q) or the target's
                select = (self.q_net(next_obs, self._acting_fractions) if c.double_q
                          else self.q_target.quantiles(next_features, self._acting_fractions))  # [B, A, K]
            next_best = quantile_greedy_next(next_quantiles, select, next_mask)  # [B, N']; 0 without valid actions
            target = batch.rewards[:, None] + batch.discounts[:, None] * next_best  # [B, N']
        weights = batch.weights if c.prioritized else None
        loss, per_sample = quantile_regression_loss(quantiles, target, tau, weights)
        self.optimizer.zero_grad(set_to_none=False)
        loss.backward()
        optimizer_step(self.optimizer, c.max_grad_norm)
        q = quantiles.detach().mean(1)  # [B]
        td_abs = (target.mean(1) - q).abs()  # [B]
        return torch.cat([torch.stack([loss.detach(), q.mean(), td_abs.mean()]), per_sample])

    # -- acting ----------------------------------------------------------------------------------
    def _q_of_network(self, x: torch.Tensor) -> torch.Tensor:
        """Q [B, A] = the mean quantile at the K midpoint fractions."""
        return self.q_net(x, self._acting_fractions).mean(-1)

    def deterministic_module(self) -> torch.nn.Module:
        return ArgmaxQ(MeanQuantileQ(self.q_net, self._acting_fractions.cpu()),
                       self.observation_space.shape if self.q_net.has_encoder else None,
                       masked=self.action_mask_size > 0)
