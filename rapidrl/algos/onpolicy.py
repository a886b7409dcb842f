"""The on-policy core shared by PPO and A2C: config fields, policy/storage set-up, rollout collection.

Collection has two paths that produce the same data in distribution:
- fused (built-in envs with MLP policies): one compiled call collects the whole T x N rollout
  (``rapidrl.train.fused``);
- per-step: the PyTorch policy and the vector env's zero-copy outputs, for any env.
Both normalise observations with the statistics frozen at the start of the rollout and update them
with the raw observations afterwards, so the two paths agree exactly on what the learner sees.
"""

from __future__ import annotations

from dataclasses import dataclass

import gymnasium as gym
import numpy as np
import torch

from rapidrl.buffers import RolloutBuffer
from rapidrl.nn import ActorCritic, ObsNormalizer, RewardScaler
from rapidrl.train.algorithm import Algorithm
from rapidrl.train.config import check_hidden, check_positive, check_unit_interval, require


@dataclass
class OnPolicyConfig:
    num_envs: int = 8
    """Parallel environments collecting experience."""
    num_steps: int = 128
    """Steps per env in each rollout (the rollout holds num_steps * num_envs transitions)."""
    learning_rate: float = 2.5e-4
    """Optimizer learning rate (start value when annealed)."""
    anneal_lr: bool = True
    """Decay the learning rate linearly to 0 over the total timesteps of ``learn``."""
    gamma: float = 0.99
    """Discount factor."""
    gae_lambda: float = 0.95
    """GAE lambda (1.0 gives Monte-Carlo advantages with bootstrapping at the rollout end)."""
    ent_coef: float = 0.0
    """Entropy bonus coefficient."""
    vf_coef: float = 0.5
    """Value loss coefficient."""
    max_grad_norm: float = 0.5
    """Global gradient-norm clip (0 disables clipping)."""
    hidden: tuple[int, ...] = (64, 64)
    """Hidden layer sizes of the actor and critic MLPs."""
    shared: bool = False
    """Share one trunk between actor and critic."""
    activation: str = "tanh"
    """Hidden activation: "tanh" or "relu"."""
    log_std_init: float = 0.0
    """Initial log standard deviation of Gaussian policies."""
    squash: str = "clip"
    """Continuous actions: "clip" to the bounds, or "tanh"-squash the Gaussian."""
    normalize_obs: bool = False
    """Normalize observations with running mean/std (saved with the model)."""
    normalize_reward: bool = False
    """Scale rewards by the running std of the discounted return."""
    fused_rollout: str = "auto"
    """"auto" (fused compiled collection when the env is built-in and the policy an MLP), "always", "never"."""
    seed: int | None = 0
    """Seed for networks, envs and minibatch shuffling (None: nondeterministic)."""
    device: str = "cpu"
    """Device of the networks and the rollout storage."""
    env_device: str = "cpu"
    """Device of built-in envs ("cpu": Numba kernels; else the PyTorch backend on that device)."""
    torch_threads: int | None = 1
    """torch.set_num_threads at construction (1 is fastest for small MLPs on CPU); None leaves it."""

    def validate(self) -> None:
        check_positive(self, "num_envs", "num_steps", "learning_rate")
        check_positive(self, "ent_coef", "vf_coef", "max_grad_norm", allow_zero=True)
        check_unit_interval(self, "gamma", "gae_lambda")
        check_hidden(self.hidden)
        require(self.activation in ("tanh", "relu"), f"activation must be 'tanh' or 'relu', got {self.activation!r}")
        require(self.squash in ("clip", "tanh"), f"squash must be 'clip' or 'tanh', got {self.squash!r}")
        require(self.fused_rollout in ("auto", "always", "never"),
                f"fused_rollout must be 'auto', 'always' or 'never', got {self.fused_rollout!r}")
        require(self.seed is None or (isinstance(self.seed, int) and self.seed >= 0),
                f"seed must be a non-negative int or None, got {self.seed!r}")
        require(self.torch_threads is None or (isinstance(self.torch_threads, int) and self.torch_threads > 0),
                f"torch_threads must be a positive int or None, got {self.torch_threads!r}")


def _to_tensors(state):
    """Recursively turn NumPy arrays into tensors (so torch.load(weights_only=True) reads them)."""
    if isinstance(state, dict):
        return {k: _to_tensors(v) for k, v in state.items()}
    if isinstance(state, np.ndarray):
        return torch.from_numpy(state.copy())
    return state


def _to_arrays(state):
    if isinstance(state, dict):
        return {k: _to_arrays(v) for k, v in state.items()}
    if isinstance(state, torch.Tensor):
        return state.numpy()
    return state


class OnPolicyAlgorithm(Algorithm):
    """Rollout -> advantages -> ``_update`` (supplied by PPO/A2C)."""

    def _build(self) -> None:
        c = self.config
        if not isinstance(self.observation_space, gym.spaces.Box):
            raise TypeError(f"{self.name.upper()} needs a Box observation space, got {self.observation_space}")
        self.policy = ActorCritic(self.observation_space, self.action_space, c.hidden, shared=c.shared,
                                  activation=c.activation, log_std_init=c.log_std_init, squash=c.squash
                                  ).to(self.device)
        self.optimizer = self._make_optimizer()
        obs_shape = self.observation_space.shape
        discrete = isinstance(self.action_space, gym.spaces.Discrete)
        self.buffer = RolloutBuffer(c.num_steps, c.num_envs, obs_shape, () if discrete else self.action_space.shape,
                                    action_dtype=np.int64 if discrete else np.float32, device=c.device)
        self.obs_normalizer = ObsNormalizer(obs_shape) if c.normalize_obs else None
        self.reward_scaler = RewardScaler(c.num_envs, c.gamma) if c.normalize_reward else None
        self._raw_obs = np.zeros((c.num_steps, c.num_envs, *obs_shape), np.float32)
        self._obs = np.zeros((c.num_envs, *obs_shape), np.float32)
        self._needs_reset = True
        self.torch_generator = torch.Generator().manual_seed(self.seed)
        from rapidrl.train.fused import FusedCollector, fused_applies

        use_fused = c.fused_rollout != "never" and fused_applies(self.env, self.policy, self.device)
        self.collector = FusedCollector(self.env, self.policy, c.num_steps) if use_fused else None
        if c.fused_rollout == "always" and self.collector is None:
            raise ValueError("fused_rollout='always' needs a built-in env on the CPU and an MLP policy on the CPU")

    def _make_optimizer(self) -> torch.optim.Optimizer:
        raise NotImplementedError

    def trainable_modules(self) -> list[torch.nn.Module]:
        return [self.policy]

    # -- acting ----------------------------------------------------------------------------------
    def _normalize(self, obs: np.ndarray) -> np.ndarray:
        if self.obs_normalizer is None:
            return obs.astype(np.float32, copy=False)
        return self.obs_normalizer(obs)

    def _policy_actions(self, obs: np.ndarray, deterministic: bool) -> np.ndarray:
        with torch.no_grad():
            x = torch.from_numpy(np.ascontiguousarray(self._normalize(obs))).to(self.device)
            raw, _, _ = self.policy.act(x, deterministic=deterministic)
            return self.policy.to_env_action(raw).cpu().numpy()

    # -- collection ------------------------------------------------------------------------------
    def _reset_envs(self) -> None:
        obs, _ = self.env.reset(seed=self._env_seed)
        np.copyto(self._obs, obs)
        self._needs_reset = False

    def _collect(self) -> None:
        """Fill ``self.buffer`` with one rollout and compute advantages."""
        if self._needs_reset:
            self._reset_envs()
        if self.collector is not None:
            with self.timer.phase("collect"):
                returns, lengths = self.collector.collect(self.buffer, self._obs, self._raw_obs, self.obs_normalizer,
                                                          seed=int(self.np_rng.integers(0, 2**31 - 1)))
                self._record_episodes(returns, lengths)
        else:
            self._collect_per_step()
        c = self.config
        with self.timer.phase("advantages"):
            if self.reward_scaler is not None:
                done = self.buffer.terminated | self.buffer.truncated
                for t in range(c.num_steps):
                    self.buffer.rewards[t] = self.reward_scaler(self.buffer.rewards[t], done[t])
            with torch.no_grad():
                last_values = self.policy.value(torch.from_numpy(self._normalize(self._obs)).to(self.device))
            if self.obs_normalizer is not None:
                self.obs_normalizer.rms.update(self._raw_obs.reshape(-1, *self._obs.shape[1:]))
            self.buffer.compute_advantages(last_values.cpu().numpy() if self.buffer.device.type == "cpu"
                                           else last_values, gamma=c.gamma, lam=c.gae_lambda)

    def _collect_per_step(self) -> None:
        """The generic path: PyTorch policy + any rapidrl vector env, one step at a time."""
        buf, timer, policy = self.buffer, self.timer, self.policy
        buf.reset()
        final_values = np.zeros(self.config.num_envs, np.float32)
        for t in range(self.config.num_steps):
            with timer.phase("policy"):
                obs_n = self._normalize(self._obs)
                with torch.no_grad():
                    raw, logp, values = policy.act(torch.from_numpy(obs_n).to(self.device))
                    env_actions = policy.to_env_action(raw).cpu().numpy()
            with timer.phase("env"):
                next_obs, rewards, terminated, truncated, info = self.env.step(env_actions)
            with timer.phase("storage"):
                final_values.fill(0.0)
                bootstrap = truncated & ~terminated
                if bootstrap.any():
                    final = self._normalize(info["final_obs"][bootstrap])
                    with torch.no_grad():
                        final_values[bootstrap] = policy.value(torch.from_numpy(final).to(self.device)).cpu().numpy()
                buf.add(obs_n, raw, logp, values, rewards, terminated, truncated, final_values)
                self._raw_obs[t] = self._obs
                np.copyto(self._obs, next_obs)
                self._track_episodes(info)

    # -- the iteration ---------------------------------------------------------------------------
    def _iteration(self) -> int:
        c = self.config
        if c.anneal_lr:
            lr = c.learning_rate * self.progress_remaining()
            for g in self.optimizer.param_groups:
                g["lr"] = lr
        self._collect()
        with self.timer.phase("update"):
            self._update()
        return c.num_steps * c.num_envs

    def _update(self) -> None:
        raise NotImplementedError

    def _explained_variance(self) -> float:
        """1 - Var[returns - values] / Var[returns] over the rollout (NaN-free: 0 when Var[returns] = 0)."""
        v = self.buffer.values.reshape(-1)
        r = self.buffer.returns.reshape(-1)
        var_r = float(np.var(r)) if isinstance(r, np.ndarray) else float(torch.var(r, unbiased=False))
        if var_r == 0.0:
            return 0.0
        diff = r - v
        var_d = float(np.var(diff)) if isinstance(diff, np.ndarray) else float(torch.var(diff, unbiased=False))
        return 1.0 - var_d / var_r

    # -- persistence -----------------------------------------------------------------------------
    def _state(self) -> dict:
        state = {"policy": self.policy.state_dict(), "optimizer": self.optimizer.state_dict()}
        if self.obs_normalizer is not None:
            state["obs_normalizer"] = _to_tensors(self.obs_normalizer.state_dict())
        if self.reward_scaler is not None:
            state["reward_scaler"] = _to_tensors(self.reward_scaler.state_dict())
        return state

    def _extra_training_state(self) -> dict:
        return {"obs": torch.from_numpy(self._obs.copy()), "needs_reset": self._needs_reset,
                "generator": self.torch_generator.get_state()}

    def _load_extra_training_state(self, state: dict) -> None:
        np.copyto(self._obs, state["obs"].numpy())
        self._needs_reset = bool(state["needs_reset"])
        self.torch_generator.set_state(state["generator"])

    def _load_state(self, state: dict) -> None:
        self.policy.load_state_dict(state["policy"])
        self.optimizer.load_state_dict(state["optimizer"])
        if self.obs_normalizer is not None:
            self.obs_normalizer.load_state_dict(_to_arrays(state["obs_normalizer"]))
        if self.reward_scaler is not None:
            self.reward_scaler.load_state_dict(_to_arrays(state["reward_scaler"]))
