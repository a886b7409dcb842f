"""PQN (Gallici et al., ICLR 2025, "Simplifying Deep Temporal Difference Learning"): Q-learning on many parallel envs.

No replay buffer and no target network: each iteration collects ``num_steps`` steps of ``num_envs`` envs acting
epsilon-greedily, computes Q(lambda) targets over that rollout, then takes ``update_epochs`` passes of shuffled
minibatches over it. LayerNorm in the network (``layer_norm``) keeps the bootstrapped targets stable without a
target network. Read top to bottom: the config, the loss (``pqn_loss``, a pure function), the targets, the update,
acting.

Targets. With V(s) = max_a Q(s, a), computed by the acting network when the step was taken (as CleanRL's pqn.py
and purejaxql), the Q(lambda) target of step t is the TD(lambda) return of V (``rapidrl.kernels.lambda_returns``):

    G[t] = r[t] + gamma * ((1 - lambda) * V(s[t+1]) + lambda * G[t+1])   while the episode continues,
    G[t] = r[t] + gamma * V(final obs)   at a truncation,   G[t] = r[t]   at a termination,
    G[T-1] = r[T-1] + gamma * V(s[T])    at the rollout's end (V of the observation after it).

lambda = 0 gives the one-step Q-learning target, lambda = 1 the Monte-Carlo return bootstrapped at the rollout's end.

Acting. Epsilon-greedy with epsilon falling linearly from ``exploration_initial_eps`` to ``exploration_final_eps``
over ``exploration_fraction`` of the ``learn`` call (held for a rollout, set at its start), on per-env
counter-based random streams (``rapidrl.kernels.exploration``: the same Q values give the same actions on every
path). Collection (``collection``, recorded in ``model.paths``): "fused" runs the whole rollout in one compiled call
on an env written as Numba functions, the MLP Q network's forward inside the loop (``rapidrl.train.collect.fused_q``);
"step" is the PyTorch Q network and any vector env, step by step (``rapidrl.train.collect.step.StepCollector``;
CNN Q networks).

Action masks (docs/masks.md): on an env that states its valid actions, acting (greedy and exploring), V = max_a Q in
the targets and the greedy ``predict``/``evaluate``/export consider the valid actions only.
"""

from __future__ import annotations

from dataclasses import dataclass

import gymnasium as gym
import numpy as np
import torch

from rapidrl.algos.registry import register
from rapidrl.buffers import RolloutBuffer
from rapidrl.kernels import lambda_returns
from rapidrl.kernels.exploration import epsilon_greedy
from rapidrl.kernels.rng import derive_keys
from rapidrl.nn.deploy import ArgmaxQ
from rapidrl.nn.distributions import apply_action_mask, masked_max
from rapidrl.nn.encoders import ENCODERS, encoder_for, make_encoder
from rapidrl.nn.optim import optimizer_step
from rapidrl.nn.qnets import QNetwork
from rapidrl.train.algorithm import Algorithm
from rapidrl.train.collect.step import StepCollector
from rapidrl.train.config import (
    RolloutConfig,
    check_hidden,
    check_positive,
    check_unit_interval,
    require,
    with_defaults,
)
from rapidrl.train.paths import choose
from rapidrl.train.schedules import linear_decay
from rapidrl.train.spaces import check_discrete_actions


@dataclass
@with_defaults(num_envs=4, max_grad_norm=10.0)
class PQNConfig(RolloutConfig):
    """PQN's settings (its optimizer is RAdam)."""

    q_lambda: float = 0.65
    """lambda of the Q(lambda) targets (0: one-step Q-learning targets; 1: Monte-Carlo returns)."""
    update_epochs: int = 4
    """Passes over the rollout per update."""
    minibatch_size: int = 128
    """Transitions per gradient step; must divide num_steps * num_envs."""
    hidden: tuple[int, ...] = (120, 84)
    """Hidden layer sizes of the MLP Q network (not used with a CNN encoder, whose head is one linear layer)."""
    layer_norm: bool = True
    """A LayerNorm before every hidden ReLU of the Q network, the MLP's and the CNN's (PQN's stabiliser)."""
    encoder: str = "auto"
    """Observation encoder: "auto" (the Nature CNN for uint8 image observations of 36 pixels or more a side, the
    MinAtar CNN for smaller ones, "multi" for Dict/Tuple observations with images, else an MLP), "mlp", "nature",
    "minatar" or "multi" (``rapidrl.nn.encoders``)."""
    exploration_fraction: float = 0.5
    """Fraction of the ``learn`` call over which epsilon falls linearly from its initial to its final value."""
    exploration_initial_eps: float = 1.0
    """Epsilon of epsilon-greedy exploration at the start."""
    exploration_final_eps: float = 0.05
    """Epsilon after the decay."""
    collection: str = "auto"
    """How rollouts are collected (``rapidrl.train.paths``): "fused" (one compiled call per rollout: an env written as
    Numba functions, e.g. the built-in classic control, and an MLP Q network on the CPU), "step" (the PyTorch Q
    network and any vector env, step by step), or "auto" (fused where it applies, else step)."""

    def validate(self) -> None:
        super().validate()
        check_positive(self, "update_epochs", "minibatch_size")
        check_positive(self, "max_grad_norm", allow_zero=True)
        check_unit_interval(self, "q_lambda", "exploration_fraction", "exploration_initial_eps",
                            "exploration_final_eps")
        require(self.exploration_fraction > 0, "exploration_fraction must be > 0")
        check_hidden(self.hidden)
        require(isinstance(self.layer_norm, bool), f"layer_norm must be true or false, got {self.layer_norm!r}")
        require(self.encoder in ENCODERS, f"encoder must be one of {ENCODERS}, got {self.encoder!r}")
        batch = self.num_steps * self.num_envs
        require(batch % self.minibatch_size == 0,
                f"minibatch_size={self.minibatch_size} must divide the rollout (num_steps * num_envs = {batch})")


def pqn_loss(q: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """0.5 * mean_i (Q(s_i, a_i) - G_i)^2 over a minibatch: q, targets [B] (the targets are constants).

    The squared TD error of purejaxql's PQN (CleanRL's pqn.py takes the mean without the 0.5: twice the gradient,
    which RAdam's normalised steps cancel, except in its first (unrectified) steps and under gradient clipping).
    """
    return 0.5 * (q - targets).square().mean()


class EpsilonGreedyActor:
    """What ``StepCollector`` acts with: epsilon-greedy on a Q network (``rapidrl.kernels.exploration``).

    ``act(obs)`` returns (actions [N] int64, zeros [N] (no log-probabilities), V = max_a Q [N]); ``value(obs)`` is
    V of any observations (the final observations of truncated episodes, the rollout's bootstrap). With
    ``action_masks`` (bool [N, A]) both consider the valid actions only. The random streams are ``keys``/``counters``
    [N] uint64, advanced by every ``act``; ``epsilon`` is set per rollout.
    """

    value_takes_masks = True
    """``StepCollector`` passes the final observations' masks to ``value`` (V = max over their valid actions)."""

    def __init__(self, q_values, num_envs: int, keys: np.ndarray, counters: np.ndarray, input_dtype: np.dtype):
        self.q_values, self.keys, self.counters, self.input_dtype = q_values, keys, counters, input_dtype
        self.epsilon = 1.0
        self._actions = np.zeros(num_envs, np.int64)
        self._values = np.zeros(num_envs, np.float32)
        self._log_probs = torch.zeros(num_envs)

    def act(self, obs: torch.Tensor, action_masks: torch.Tensor | None = None, generator: torch.Generator | None = None
            ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """``generator`` is not drawn from: the random streams are ``keys``/``counters`` (class docstring)."""
        q = self.q_values(obs).float().cpu().numpy()  # [N, A]
        mask = None if action_masks is None else action_masks.cpu().numpy()
        epsilon_greedy(q, self.epsilon, self.keys, self.counters, mask=mask, out_actions=self._actions,
                       out_values=self._values)
        return torch.from_numpy(self._actions), self._log_probs, torch.from_numpy(self._values)

    def value(self, obs: torch.Tensor, action_masks: torch.Tensor | None = None) -> torch.Tensor:
        return masked_max(self.q_values(obs).float(), action_masks)  # [M]

    @staticmethod
    def to_env_action(actions: torch.Tensor) -> torch.Tensor:
        return actions


@register
class PQN(Algorithm):
    """Parallelised Q-Network for Discrete action spaces. ``PQN(env, **hyperparameters)``; see PQNConfig."""

    name = "pqn"
    config_class = PQNConfig
    supports_action_masks = True

    def _build(self) -> None:
        c = self.config
        check_discrete_actions("PQN", self.action_space)
        if not isinstance(self.observation_space, gym.spaces.Box):
            raise TypeError(f"PQN needs a Box observation space, got {self.observation_space}")
        kind = encoder_for(self.observation_space, c.encoder)
        encoder = None if kind == "mlp" else make_encoder(self.observation_space, kind, layer_norm=c.layer_norm)
        obs_shape = self.observation_space.shape
        self.q_net = QNetwork(int(np.prod(obs_shape)), int(self.action_space.n), c.hidden, encoder=encoder,
                              layer_norm=c.layer_norm).to(self.device)
        self.optimizer = torch.optim.RAdam(self.q_net.parameters(), lr=c.learning_rate, foreach=True)
        # uint8 frames for a CNN on uint8 images (the network scales them), else float32
        image = kind != "mlp" and self.observation_space.dtype == np.uint8
        self._obs_dtype = np.dtype(np.uint8) if image else np.dtype(np.float32)
        self.buffer = RolloutBuffer(c.num_steps, c.num_envs, obs_shape, (), obs_dtype=self._obs_dtype,
                                    action_dtype=np.int64, device=c.device)
        self._obs = np.zeros((c.num_envs, *obs_shape), self._obs_dtype)
        self._raw_obs = np.zeros((c.num_steps, c.num_envs, *obs_shape), self._obs_dtype)
        self._needs_reset = True
        self.torch_generator = torch.Generator().manual_seed(self.seed)  # minibatch order
        # acting's random streams: per-env keys from the seed, counters saved with the training state
        self._act_keys = derive_keys(int(self.np_rng.integers(0, 2**63)), c.num_envs)
        self._act_counters = np.zeros(c.num_envs, np.uint64)
        self.actor = EpsilonGreedyActor(self._q_values, c.num_envs, self._act_keys, self._act_counters,
                                        self._obs_dtype)
        from rapidrl.train.collect.fused_q import FusedQCollector, fused_q_unavailable

        self.paths["collection"] = choose("collection", c.collection, {
            "fused": lambda: fused_q_unavailable(self.env, self.q_net, self.device), "step": lambda: None})
        if self.paths["collection"].value == "fused":
            self.collector = FusedQCollector(self.env, self.q_net, c.num_steps, self._act_keys, self._act_counters)
        else:
            self.collector = StepCollector(self.env, self.actor, c.num_steps, self.device, self.timer,
                                           generator=self.torch_rng)
        self.paths["gradient_backend"] = self._resolve_gradient_backend()
        self.paths["precision"] = self._resolve_precision()

    def trainable_modules(self) -> list[torch.nn.Module]:
        return [self.q_net]

    def _update_batch(self) -> int:
        return self.config.minibatch_size

    def _q_values(self, obs: torch.Tensor) -> torch.Tensor:
        """Q [B, A] (float32) of observations [B, *obs_shape] as stored (an MLP takes them flattened)."""
        if not self.q_net.has_encoder:
            obs = obs.reshape(obs.shape[0], -1)
        return self.q_net(obs)

    def epsilon(self) -> float:
        """Current exploration rate: linear from initial to final over exploration_fraction of ``learn``."""
        c = self.config
        return linear_decay(c.exploration_initial_eps, c.exploration_final_eps, c.exploration_fraction,
                            self.progress_remaining())

    # -- the iteration ---------------------------------------------------------------------------
    def _rollout(self) -> int:
        """Collect one rollout epsilon-greedily and write its Q(lambda) targets into ``buffer.returns``."""
        c = self.config
        progress = self.progress_remaining()
        if c.anneal_lr:
            for g in self.optimizer.param_groups:
                g["lr"] = c.learning_rate * progress
        self.actor.epsilon = self.epsilon()
        if self._needs_reset:
            obs, _ = self.env.reset(seed=self._env_seed)
            np.copyto(self._obs, obs)
            self._needs_reset = False
        with torch.no_grad():
            if self.paths["collection"].value == "fused":
                with self.timer.phase("collect"):
                    returns, lengths = self.collector.collect(self.buffer, self._obs, self.actor.epsilon)
            else:
                returns, lengths = self.collector.collect(self.buffer, self._obs, self._raw_obs, None, seed=None)
            self._record_episodes(returns, lengths)
            with self.timer.phase("targets"):
                # an env with masks: the valid actions of the last observations, from the env (the one source)
                masks = torch.from_numpy(self.env.action_masks()).to(self.device) if self.action_mask_size else None
                last_values = self.actor.value(torch.from_numpy(self._obs).to(self.device), masks)  # [N]
                self._write_targets(last_values.cpu().numpy())
        return c.num_steps * c.num_envs

    def _write_targets(self, last_values: np.ndarray) -> None:
        """buffer.returns <- the Q(lambda) targets of the rollout (module docstring): the TD(lambda) returns of the
        stored V = max_a Q (``values``, and ``final_values`` at truncations) with ``last_values`` [N] = V(s_T)."""
        c, b = self.config, self.buffer
        host = [np.asarray(x.cpu()) if isinstance(x, torch.Tensor) else x
                for x in (b.rewards, b.values, b.terminated, b.truncated, b.final_values)]
        rewards, values, terminated, truncated, final_values = host
        targets = lambda_returns(rewards, values, last_values, terminated, truncated, gamma=c.gamma,
                                 lam=c.q_lambda, final_values=final_values)  # [T, N]
        if isinstance(b.returns, np.ndarray):
            np.copyto(b.returns, targets)
        else:
            b.returns.copy_(torch.from_numpy(targets))

    def _train(self) -> None:
        """``update_epochs`` passes of shuffled minibatches over the rollout, each one RAdam step on ``pqn_loss``."""
        c = self.config
        totals = torch.zeros(2, device=self.device)
        count = 0
        with self.timer.phase("update"):
            for mb in self.buffer.minibatches(c.minibatch_size, generator=self.torch_generator,
                                              normalize_advantage="none", epochs=c.update_epochs):
                with self._autocast():  # bf16 autocast under precision="bf16" (the Q network returns float32)
                    q = self._q_values(mb.obs).gather(1, mb.actions.unsqueeze(1)).squeeze(1)  # [B]
                    loss = pqn_loss(q, mb.returns)
                self.optimizer.zero_grad(set_to_none=False)
                loss.backward()
                optimizer_step(self.optimizer, c.max_grad_norm)
                totals += torch.stack([loss.detach(), q.detach().mean()])
                count += 1
        if not self.reporting:
            return  # scalars are read back at reports only (log_every_steps)
        td_loss, q_mean = (totals / count).tolist()
        self.record({"losses/td_loss": td_loss, "losses/q_values": q_mean, "charts/epsilon": self.actor.epsilon,
                     "charts/learning_rate": self.optimizer.param_groups[0]["lr"]})

    # -- acting ----------------------------------------------------------------------------------
    def _policy_actions(self, obs: np.ndarray, deterministic: bool, action_masks: np.ndarray | None = None
                        ) -> np.ndarray:
        """Greedy actions, or epsilon-greedy at the current epsilon with streams drawn from ``np_rng`` (over the
        valid actions of ``action_masks`` [B, A] bool when given)."""
        with torch.no_grad():
            x = torch.from_numpy(np.ascontiguousarray(obs, dtype=self._obs_dtype)).to(self.device)
            q = self._q_values(x).float()  # [B, A]
            if deterministic:
                masks = None if action_masks is None else torch.from_numpy(action_masks).to(q.device)
                return apply_action_mask(q, masks).argmax(1).cpu().numpy()
            q = q.cpu().numpy()
        keys = derive_keys(int(self.np_rng.integers(0, 2**63)), q.shape[0])
        return epsilon_greedy(q, self.epsilon(), keys, np.zeros(q.shape[0], np.uint64), mask=action_masks)[0]

    def deterministic_module(self) -> torch.nn.Module:
        return ArgmaxQ(self.q_net, self.observation_space.shape if self.q_net.has_encoder else None,
                       masked=self.action_mask_size > 0)

    # -- persistence -----------------------------------------------------------------------------
    def _state(self) -> dict:
        return {"q_net": self.q_net.state_dict(), "optimizer": self.optimizer.state_dict()}

    def _load_state(self, state: dict) -> None:
        self.q_net.load_state_dict(state["q_net"])
        self.optimizer.load_state_dict(state["optimizer"])

    def _extra_training_state(self) -> dict:
        # an env with masks: its state holds them (Algorithm's "env"), or a resumed run resets it
        return {"obs": torch.from_numpy(self._obs.copy()), "needs_reset": self._needs_reset,
                "generator": self.torch_generator.get_state(),
                "act_keys": torch.from_numpy(self._act_keys.view(np.int64).copy()),
                "act_counters": torch.from_numpy(self._act_counters.view(np.int64).copy())}

    def _load_extra_training_state(self, state: dict) -> None:
        np.copyto(self._obs, state["obs"].numpy())  # an older checkpoint's "action_mask": the env state has it
        self._needs_reset = bool(state["needs_reset"])
        self.torch_generator.set_state(state["generator"])
        np.copyto(self._act_keys, state["act_keys"].numpy().view(np.uint64))
        np.copyto(self._act_counters, state["act_counters"].numpy().view(np.uint64))
