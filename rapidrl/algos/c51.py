"""C51 (Bellemare et al. 2017, "A Distributional Perspective on Reinforcement Learning") and Rainbow (Hessel et al.
2018, "Rainbow: Combining Improvements in Deep Reinforcement Learning"): one distributional Q-learner on the DQN core.

C51 learns, for every action, a categorical distribution of the return on N fixed atoms
z_i = v_min + i (v_max - v_min) / (N - 1): the Q network outputs N logits per action ([B, A, N],
``QNetwork(outputs_per_action=N)``), p_i(s, a) = softmax(logits)_i and Q(s, a) = sum_i z_i p_i(s, a). One update:

1. the next action a* = argmax_a Q(s', a) over the valid actions of s' (the target network's Q; with ``double_q`` the
   online network's, as Rainbow);
2. the target distribution: r + discount * Z(s', a*) of the target network, projected back onto the atoms
   (``categorical_projection``; discount = gamma^n for an n-step return, 0 after termination, the replay's
   ``discounts``);
3. the loss: the cross-entropy -sum_i m_i log p_i(s, a) (``c51_loss``), importance-weighted under prioritized
   replay, whose new priorities are the per-sample losses.

Rainbow is C51 with Double Q, dueling heads (combined per atom), noisy networks (``noisy``: factorised Gaussian
``NoisyLinear`` layers, ``rapidrl.nn.noisy``, in place of epsilon-greedy: the noise is drawn again before every
update and every exploring action step, and left out of deterministic acting, evaluation and export, which leave the
noise the model holds as it was), 3-step returns and prioritized replay (alpha 0.5, beta annealed to 1 over
``per_beta_anneal_steps`` gradient steps where set).

Everything else (collection, replay, n-step returns, prioritized replay, target updates, epsilon-greedy, action masks,
encoders, persistence) is DQN's (``rapidrl.algos.dqn``), which these classes subclass. Gradient backends: on the CPU a
plain MLP Q network trains through the "handwritten" one (DQN's compiled MLP forward and backward, with C51's loss head
in one Numba call: ``rapidrl.kernels.categorical``); dueling heads, noisy layers (Rainbow), CNNs and bf16 through
PyTorch autograd.

Read top to bottom: the configs, the expected-Q reduction, the update (``C51._autograd_step``, and its compiled twin
``C51._compiled_step``), acting.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import numpy as np
import torch
from torch import nn

from rapidrl.algos.dqn import DQN, DQNConfig, compiled_acting_forward
from rapidrl.algos.offpolicy_losses import c51_loss, categorical_projection
from rapidrl.algos.registry import register
from rapidrl.buffers import PrioritizedReplayBuffer
from rapidrl.kernels.categorical import c51_grads
from rapidrl.nn.deploy import ReducedArgmaxQ
from rapidrl.nn.distributions import apply_action_mask
from rapidrl.nn.noisy import NoisyLinear
from rapidrl.nn.optim import optimizer_step
from rapidrl.nn.qnets import QNetwork
from rapidrl.train.config import check_positive, require, with_defaults
from rapidrl.train.path_settings import HandwrittenBackend


@dataclass
@with_defaults(double_q=False)
class C51Config(DQNConfig):
    """DQNConfig (the training defaults are DQN's CartPole ones) with the return distribution's support. C51 as
    published: no Double Q (``double_q=False``), epsilon-greedy, one-step returns, uniform replay; each is DQN's
    option here."""

    n_atoms: int = 51
    """Atoms of the return distribution (the paper's 51)."""
    v_min: float = -10.0
    """Lowest atom: the smallest return the distribution can represent (the paper's -10, for clipped Atari rewards;
    set it to the task's return range)."""
    v_max: float = 10.0
    """Highest atom (the paper's 10)."""
    noisy: bool = False
    """Noisy networks (Fortunato et al. 2018): every linear layer after the encoder is a factorised Gaussian
    ``NoisyLinear``; the noise is drawn again before each update and each exploring action step and removed for
    deterministic acting (evaluation, export). Exploration then comes from the noise: set the epsilons to 0."""
    adam_eps: float | None = 3.125e-4
    """Adam's epsilon (the paper's 0.01 / 32; Rainbow's 1.5e-4); None: 0.01 / batch_size."""
    per_beta_anneal_steps: int | None = None
    """Prioritized replay: gradient steps over which the importance-weight exponent rises linearly from ``per_beta``
    to 1 (the Rainbow paper anneals it over the whole run); None: ``per_beta`` throughout."""

    def validate(self) -> None:
        super().validate()
        require(self.n_atoms >= 2, f"n_atoms must be >= 2, got {self.n_atoms}")
        require(self.v_max > self.v_min, f"v_max ({self.v_max}) must be larger than v_min ({self.v_min})")
        if self.per_beta_anneal_steps is not None:
            check_positive(self, "per_beta_anneal_steps")


@dataclass
@with_defaults(double_q=True, dueling=True, noisy=True, n_step=3, prioritized=True, per_alpha=0.5, per_beta=0.4,
               exploration_initial_eps=0.0, exploration_final_eps=0.0, adam_eps=1.5e-4)
class RainbowConfig(C51Config):
    """C51Config with Rainbow's combination (Hessel et al. 2018, Table 1): Double Q, dueling heads, noisy networks
    without epsilon-greedy, 3-step returns, prioritized replay (alpha 0.5, beta 0.4 -> 1 where
    ``per_beta_anneal_steps`` is set), Adam epsilon 1.5e-4. The presets add the published learning rates, replay
    sizes and target periods (configs/rainbow_*.toml)."""


class ExpectedQ(nn.Module):
    """Q values from C51's logits: [B, A, N] -> sum_i z_i softmax(logits)_i [B, A] (support: the atoms z [N])."""

    def __init__(self, support: torch.Tensor):
        super().__init__()
        self.register_buffer("support", support.detach().clone().float())

    def forward(self, logits: torch.Tensor) -> torch.Tensor:
        return (logits.float().softmax(-1) * self.support).sum(-1)


@register
class C51(DQN):
    """Categorical DQN for Discrete action spaces. ``C51(env, **hyperparameters)``; see C51Config."""

    name = "c51"
    config_class = C51Config
    stat_names = ("loss", "q_values", "cross_entropy")
    handwritten = HandwrittenBackend(
        by_hand="the Q network's forward and backward in Numba (`rapidrl.kernels.mlp`); the loss head (greedy next "
                "action, categorical projection, cross-entropy, its gradient) in one Numba call "
                "(`rapidrl.kernels.categorical.c51_grads`); plain MLP Q networks only (no dueling heads or noisy "
                "layers)")
    bf16_learning_tested = False

    def _build_networks(self) -> None:
        super()._build_networks()
        c = self.config
        self.expected_q = ExpectedQ(torch.linspace(c.v_min, c.v_max, c.n_atoms)).to(self.device)
        self.support = self.expected_q.support  # the atoms z [N]

    def _make_q_network(self, encoder: nn.Module | None) -> nn.Module:
        c = self.config
        return QNetwork(self.obs_dim, int(self.action_space.n), c.hidden, dueling=c.dueling, encoder=encoder,
                        outputs_per_action=c.n_atoms, noisy=c.noisy)

    def _gradient_backends(self) -> dict:
        def mlp() -> str | None:
            return "needs an MLP Q network (image observations use a CNN encoder)" if self.q_net.has_encoder else None

        def plain() -> str | None:
            c = self.config
            return "needs a plain MLP Q network (dueling=False, noisy=False)" if c.dueling or c.noisy else None

        return self._handwritten_or_torch(mlp, plain)

    def _bind_backend(self) -> None:
        """DQN's (the handwritten backend's compiled forward and backward); under the torch backend acting still goes
        through the compiled MLP forward where it computes the network exactly (``compiled_acting_forward``: a plain
        float32 MLP on the CPU)."""
        super()._bind_backend()
        if self._acting_forward is None:
            self._acting_forward = compiled_acting_forward(self.q_net, self.device, self.precision)
        self._support_np = self.support.cpu().numpy()  # the atoms for NumPy and Numba

    def _buffer_spec(self):
        cls, args, kwargs = super()._buffer_spec()
        if cls is PrioritizedReplayBuffer and self.config.per_beta_anneal_steps is not None:
            kwargs = dict(kwargs, beta_final=1.0, beta_anneal_steps=self.config.per_beta_anneal_steps)
        return cls, args, kwargs

    # -- update ----------------------------------------------------------------------------------
    def _loss_head(self, q_both: np.ndarray, next_target: np.ndarray, batch, next_mask: np.ndarray | None,
                   d_out: np.ndarray, out: np.ndarray) -> None:
        """The handwritten backend's loss head (``rapidrl.kernels.categorical.c51_grads``: greedy next action,
        projection, cross-entropy and its gradient); DQN's ``_compiled_step`` runs the network around it."""
        c = self.config
        c51_grads(q_both, next_target, batch.actions.numpy(), batch.rewards.numpy(), batch.discounts.numpy(),
                  batch.weights.numpy() if c.prioritized else None, c.double_q, self._support_np, d_out, out,
                  next_mask=next_mask)

    def _autograd_step(self, batch) -> torch.Tensor:
        """One gradient step through autograd (any Q network: dueling, noisy, CNNs; the "torch" backend and the
        reference of ``_compiled_step``); returns [loss, mean Q, mean cross-entropy, cross-entropy per sample...]
        (the priorities after 3)."""
        c = self.config
        obs, _ = self._split_rows(batch.obs)
        next_obs, next_mask = self._split_rows(batch.next_obs)  # next_mask: the valid actions of s' (or None)
        rows = torch.arange(obs.shape[0], device=obs.device)
        if c.noisy:  # new noise for this update: the online network's (s and s') and the target network's
            self.q_net.sample_noise(self.torch_rng)
            self.q_target.sample_noise(self.torch_rng)
        with self._autocast():  # bf16 autocast under precision="bf16" (the Q networks return float32)
            logits = self.q_net(obs)[rows, batch.actions.long()]  # [B, N] of the taken actions
        with torch.no_grad():
            with self._autocast():
                next_logits = self.q_target(next_obs)  # [B, A, N]
                select_logits = self.q_net(next_obs) if c.double_q else next_logits  # [B, A, N]
            best = apply_action_mask(self.expected_q(select_logits), next_mask).argmax(1)  # [B]
            next_probs = next_logits[rows, best].softmax(-1)  # [B, N]
            discounts = batch.discounts  # [B]: gamma^n, 0 after termination
            if next_mask is not None:  # a state without valid actions is worth 0 (masked_max's convention)
                discounts = torch.where(next_mask.any(1), discounts, torch.zeros_like(discounts))
            target = categorical_projection(batch.rewards, discounts, next_probs, self.support)  # [B, N]
        weights = batch.weights if c.prioritized else None
        loss, per_sample = c51_loss(logits, target, weights)
        self.optimizer.zero_grad(set_to_none=False)
        loss.backward()
        optimizer_step(self.optimizer, c.max_grad_norm)
        q = (logits.detach().softmax(-1) * self.support).sum(-1)  # [B]
        return torch.cat([torch.stack([loss.detach(), q.mean(), per_sample.mean()]), per_sample])

    # -- acting ----------------------------------------------------------------------------------
    def _q_of_network(self, x: torch.Tensor) -> torch.Tensor:
        """Expected Q [B, A] with the Q network's noise as it is."""
        return self.expected_q(self.q_net(x))

    def _q_of_compiled(self, out: np.ndarray) -> torch.Tensor:
        logits = out.reshape(out.shape[0], -1, self.config.n_atoms)  # [B, A, N]
        e = np.exp(logits - logits.max(-1, keepdims=True))  # ExpectedQ in NumPy: a third of its time on one row
        return torch.from_numpy((e @ self._support_np) / e.sum(-1))  # [B, A]

    def _explore_actions(self, obs: np.ndarray, action_masks: np.ndarray | None = None) -> np.ndarray:
        if self.config.noisy:  # new noise for every exploring step
            self.q_net.sample_noise(self.torch_rng)
        return super()._explore_actions(obs, action_masks)

    def _policy_actions(self, obs: np.ndarray, deterministic: bool, action_masks: np.ndarray | None = None
                        ) -> np.ndarray:
        if not deterministic:
            return self._explore_actions(obs, action_masks)
        with self._mean_network():
            return self._greedy(obs, action_masks)

    @contextmanager
    def _mean_network(self) -> Iterator[None]:
        """The online network without noise inside the block (``noisy``), its noise as it was after: deterministic
        acting changes nothing a checkpoint holds."""
        if not self.config.noisy:
            yield
            return
        noise = [t for m in self.q_net.modules() if isinstance(m, NoisyLinear) for t in (m.weight_epsilon,
                                                                                          m.bias_epsilon)]
        kept = [t.clone() for t in noise]
        self.q_net.remove_noise()
        try:
            yield
        finally:
            with torch.no_grad():
                for t, k in zip(noise, kept):
                    t.copy_(k)

    def deterministic_module(self) -> torch.nn.Module:
        module = ReducedArgmaxQ(self.q_net, self.expected_q,
                                self.observation_space.shape if self.q_net.has_encoder else None,
                                masked=self.action_mask_size > 0)
        module.net.remove_noise()  # the frozen copy's mean network
        return module


@register
class Rainbow(C51):
    """Rainbow (Hessel et al. 2018): C51 with Double Q, dueling, noisy networks, 3-step returns and prioritized
    replay. ``Rainbow(env, **hyperparameters)``; see RainbowConfig (each component can be switched off)."""

    name = "rainbow"
    config_class = RainbowConfig
