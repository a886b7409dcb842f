"""R2D2 (Kapturowski et al. 2019, "Recurrent Experience Replay in Distributed Reinforcement Learning"): DQN with an
LSTM or GRU, trained on sequences from replay, for partially observed tasks with discrete actions.

Read top to bottom: the config, one update, acting. The pieces:
- the network: ``rapidrl.nn.recurrent_offpolicy.RecurrentQNetwork`` (MLP, or the MinAtar or Nature CNN for images,
  -> LSTM/GRU -> Q head, optionally dueling);
- the replay: ``rapidrl.buffers.sequence.SequenceReplayBuffer`` (sequences of one env's consecutive steps with the
  state the policy acted with; uniform or prioritized);
- the maths, pure functions of ``rapidrl.algos.offpolicy_losses``: ``value_rescale`` and its inverse,
  ``sequence_nstep_returns``, ``r2d2_priority``.

One update, on B sequences of L = ``sequence_length`` steps:
1. burn-in: the online and the target network run over the first ``burn_in`` steps from the stored state, without
   gradients (R2D2's "stored state with burn-in");
2. both unroll over the remaining steps (the online one with gradients), resetting the state where an episode starts
   inside the sequence, in one call of the fused LSTM/GRU layer each (``RecurrentEncoder.unroll``);
3. for every step t, Q(next_obs_t) one cell step after the state after step t: the next step's features inside an
   episode, one more step on the true final observation after a time limit (bootstrapped exactly), nothing after a
   termination;
4. the double-Q target: a* = argmax over the valid actions of the online network's Q(next_obs_t), valued by the
   target network, through h^-1; the n-step return within the sequence, stopped at episode ends
   (``sequence_nstep_returns``), back through h: y_t = h(G_t) (``value_rescaling``; off: G_t itself);
5. the loss: mean over steps of 0.5 (Q(s_t, a_t) - y_t)^2 weighted per sequence by the importance weights; one Adam
   step with the gradient's norm clipped; new priorities eta max |td| + (1 - eta) mean |td|.
The target network is copied every ``target_update_interval`` env steps (DQN's ``tau`` = 1: a copy).

Acting is epsilon-greedy (DQN's schedule) on the online network, carrying each env's state; the state entering each
step is stored with it. ``predict(obs, state, episode_start)`` acts with a state as recurrent PPO does.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import ClassVar

import numpy as np
import torch

from rapidrl.algos.dqn import DQNConfig
from rapidrl.algos.offpolicy import OffPolicyAlgorithm, uniform_valid
from rapidrl.algos.offpolicy_losses import (
    polyak_update,
    r2d2_priority,
    sequence_nstep_returns,
    value_rescale,
    value_rescale_inverse,
)
from rapidrl.algos.recurrent_offpolicy import RecurrentOffPolicy, SequenceConfig, burn_in
from rapidrl.algos.registry import register
from rapidrl.buffers.sequence import SequenceReplayBuffer
from rapidrl.nn.distributions import apply_action_mask, masked_max
from rapidrl.nn.encoders import make_encoder
from rapidrl.nn.optim import adam, optimizer_step
from rapidrl.nn.recurrent import segment_layout
from rapidrl.nn.recurrent_offpolicy import RecurrentQNetwork
from rapidrl.train.config import check_positive, check_unit_interval, require, with_defaults
from rapidrl.train.schedules import linear_decay
from rapidrl.train.spaces import check_discrete_actions

R2D2_ENCODERS = ("auto", "mlp", "minatar", "nature")
"""R2D2's observation encoders before the cell: "auto" picks the MinAtar or Nature CNN for uint8 images (by size) and
an MLP otherwise (``rapidrl.nn.encoders.encoder_for``)."""


@dataclass
@with_defaults(learning_rate=1e-4, buffer_size=100_000, learning_starts=2_000, batch_size=64, tau=1.0, gamma=0.997,
               n_step=5, train_freq=4, gradient_steps=1, max_grad_norm=40.0, target_update_interval=2_500,
               exploration_fraction=0.1, exploration_final_eps=0.01, hidden=(64,), double_q=True, per_alpha=0.9,
               per_beta=0.6, adam_eps=1e-3)
class R2D2Config(DQNConfig, SequenceConfig):
    """DQN's settings (exploration, target updates, double Q, dueling, prioritized replay) with R2D2's defaults where
    the paper gives them (lr 1e-4, Adam eps 1e-3, batch 64, n 5, gamma 0.997, priority exponents 0.9 and 0.6, eta
    0.9, value rescaling eps 1e-3, gradient norm 40), plus the sequences' and the memory's settings
    (``SequenceConfig``: an LSTM of 128 units, sequences of 40 steps with 10 of burn-in; the paper's are 512, 80 and
    40 on Atari)."""

    value_rescaling: bool = True
    """Train towards h(G) with bootstrap values h^-1(Q') (R2D2's rescaling; False: plain n-step targets)."""
    rescale_eps: float = 1e-3
    """The eps of h(x) = sign(x)(sqrt(|x| + 1) - 1) + eps x."""
    priority_eta: float = 0.9
    """A sequence's priority: eta max |td| + (1 - eta) mean |td| over its trained steps."""
    frame_replay: bool = True
    """Store the observations of a frame-stacking env (``env.frame_stack > 1``: Atari) as frames in the sequence
    replay: two frames per step instead of two whole stacks (``SequenceReplayBuffer(frame_stack=...)``, exact; with
    prioritized replay and n-step returns too)."""
    hidden_may_be_empty: ClassVar[bool] = True  # hidden=(): the observation straight into the recurrent layer

    def validate(self) -> None:
        super().validate()
        self.validate_sequences()
        require(self.encoder in R2D2_ENCODERS, f"R2D2's encoder before the recurrent layer must be one of "
                f"{R2D2_ENCODERS}, got {self.encoder!r} (observations with several images train with recurrent PPO)")
        check_positive(self, "rescale_eps")
        check_unit_interval(self, "priority_eta")


@register
class R2D2(RecurrentOffPolicy, OffPolicyAlgorithm):
    """Recurrent replay DQN for Discrete actions on flat observations or images (a CNN before the cell).
    ``R2D2(env, **hyperparameters)``; see R2D2Config."""

    name = "r2d2"
    config_class = R2D2Config
    saved_state = ("q_net", "q_target", "optimizer")
    supports_action_masks = True
    stat_names = ("loss", "q_values", "td_abs")

    multi_input = True  # images too (a CNN before the cell); a Dict/Tuple with images is refused below

    def _check_spaces(self) -> None:
        super()._check_spaces()
        if getattr(self.observation_space, "image_parts", ()):
            raise TypeError(f"R2D2 takes one image or a flat observation, got {self.observation_space}: observations "
                            "with images inside a Dict or Tuple train with recurrent PPO (a CNN per image)")
        check_discrete_actions(type(self).__name__, self.action_space)

    # -- set-up ----------------------------------------------------------------------------------
    def _build_networks(self) -> None:
        c = self.config
        kind = self._encoder_kind()
        features = None if kind == "mlp" else make_encoder(self.observation_space, kind)
        self.q_net = RecurrentQNetwork(self.obs_dim, int(self.action_space.n), c.hidden, cell=c.cell,
                                       size=c.recurrent_size, dueling=c.dueling, features=features).to(self.device)
        self.q_target = copy.deepcopy(self.q_net).requires_grad_(False)
        self.optimizer = adam(self.q_net.parameters(), c.learning_rate,
                              eps=c.adam_eps if c.adam_eps is not None else 0.01 / c.batch_size)
        self._params, self._target_params = list(self.q_net.parameters()), list(self.q_target.parameters())
        self._last_target_update = 0

    def _make_buffer(self) -> SequenceReplayBuffer:
        c = self.config
        state_size = (2 if c.cell == "lstm" else 1) * c.recurrent_size
        return self._sequence_buffer(state_size, prioritized=c.prioritized, alpha=c.per_alpha, beta=c.per_beta,
                                     eps=c.per_eps)

    # -- update ----------------------------------------------------------------------------------
    def _train(self) -> None:
        super()._train()
        c, now = self.config, self.num_timesteps
        if now >= c.learning_starts and now - self._last_target_update >= c.target_update_interval:
            polyak_update(self._target_params, self._params, c.tau)
            self._last_target_update = now
        self.record({"charts/epsilon": self.epsilon()})

    def _update_step(self, batch) -> torch.Tensor:
        """One update on B sequences (module docstring); returns [loss, mean Q, mean |td|, priorities [B]...]."""
        c = self.config
        k = c.burn_in
        obs, _ = self._split_rows(batch.obs)  # [L, B, O] (the masks of s' matter, below)
        next_obs, next_mask = self._split_rows(batch.next_obs)
        state, target_state = burn_in([self.q_net.encoder, self.q_target.encoder], obs[:k],
                                      [batch.state, batch.state], batch.starts[:k])
        obs, next_obs, starts = obs[k:], next_obs[k:], batch.starts[k:]
        actions, rewards = batch.actions[k:], batch.rewards[k:]
        terminated, truncated = batch.terminated[k:], batch.truncated[k:]
        next_mask = None if next_mask is None else next_mask[k:]
        length, b = obs.shape[0], obs.shape[1]
        layout = segment_layout(starts, with_next=True)  # one for both networks
        h, h_next = self.q_net.encoder.unroll(obs, state, starts, next_obs, layout)  # [T, B, size] each
        q = self.q_net.q_of(h).gather(-1, actions.unsqueeze(-1)).squeeze(-1)  # [T, B]
        with torch.no_grad():
            _, h_next_target = self.q_target.encoder.unroll(obs, target_state, starts, next_obs, layout)
            next_q_target = self.q_target.q_of(h_next_target.reshape(length * b, -1))
            mask = None if next_mask is None else next_mask.reshape(length * b, -1)
            if c.double_q:
                next_q_online = self.q_net.q_of(h_next.detach().reshape(length * b, -1))
                best = apply_action_mask(next_q_online, mask).argmax(-1, keepdim=True)
                next_value = next_q_target.gather(-1, best).squeeze(-1)
                if mask is not None:  # a state without a valid action is worth 0
                    next_value = torch.where(mask.any(-1), next_value, torch.zeros_like(next_value))
            else:
                next_value = masked_max(next_q_target, mask)
            next_value = next_value.view(length, b)
            if c.value_rescaling:
                next_value = value_rescale_inverse(next_value, c.rescale_eps)
            discounts = c.gamma * (~terminated).float()
            returns = sequence_nstep_returns(rewards, discounts, terminated | truncated, next_value, c.n_step)
            target = value_rescale(returns, c.rescale_eps) if c.value_rescaling else returns
        td = q - target  # [T, B]
        loss = (0.5 * td.square().mean(0) * batch.weights).mean()
        self.optimizer.zero_grad(set_to_none=False)
        loss.backward()
        optimizer_step(self.optimizer, c.max_grad_norm)
        td = td.detach()
        return torch.cat([torch.stack([loss.detach(), q.detach().mean(), td.abs().mean()]),
                          r2d2_priority(td, c.priority_eta)])

    def _after_update(self, batch, out: torch.Tensor) -> torch.Tensor:
        if self.config.prioritized:
            self.buffer.update_priorities(batch.indices, out[3:].cpu().numpy())
        return out[:3]

    # -- acting ----------------------------------------------------------------------------------
    def epsilon(self) -> float:
        """Current exploration rate: linear from initial to final over exploration_fraction of ``learn``."""
        c = self.config
        return linear_decay(c.exploration_initial_eps, c.exploration_final_eps, c.exploration_fraction,
                            self.progress_remaining())

    def _advance(self, x: torch.Tensor, entering: torch.Tensor):
        return self.q_net.step(x, entering)

    def _acting_policy(self) -> torch.nn.Module:
        return self.q_net

    def _explore_from(self, q: torch.Tensor, obs: np.ndarray, action_masks: np.ndarray | None) -> np.ndarray:
        mask = None if action_masks is None else torch.from_numpy(action_masks).to(q.device)
        return self._predicted(apply_action_mask(q, mask).argmax(-1).cpu().numpy(), False, action_masks)

    def _predicted(self, actions: np.ndarray, deterministic: bool, masks: np.ndarray | None) -> np.ndarray:
        """Greedy actions, or (not deterministic) epsilon-greedy at the current epsilon among the valid actions."""
        if deterministic:
            return actions
        explore = self.np_rng.random(actions.shape[0]) < self.epsilon()
        if explore.any():
            if masks is None:
                actions[explore] = self.np_rng.integers(self.action_space.n, size=int(explore.sum()))
            else:
                actions[explore] = uniform_valid(masks[explore], self.np_rng.random(int(explore.sum())))
        return actions

    # -- persistence -----------------------------------------------------------------------------
    def _extra_training_state(self) -> dict:
        return {**super()._extra_training_state(), "last_target_update": self._last_target_update}

    def _load_extra_training_state(self, state: dict) -> None:
        super()._load_extra_training_state(state)
        self._last_target_update = int(state["last_target_update"])
