"""The on-policy core shared by PPO, A2C, IMPALA and MAPPO: config fields, policy/storage set-up, rollout collection.

Collection has three paths, chosen once by ``collection`` (``rapidrl.train.paths``; "auto": the first that
applies, in this order), that produce the same data in distribution:
- "fused" (built-in classic-control envs with MLP policies on the CPU): one compiled call collects the whole
  T x N rollout (``rapidrl.train.fused``);
- "step": the PyTorch policy and the vector env's zero-copy outputs, for any env (a recurrent policy
  (``recurrent="lstm"|"gru"``) collects here with a collector that carries its state, ``rapidrl.train.recurrent``;
  PPO and A2C then update on whole env columns);
- "device": with a ``TorchVecEnv`` the whole loop stays on the env's device (``rapidrl.train.device_collect``).
The fused and step paths normalise observations with the statistics frozen at the start of the rollout and
update them with the raw observations afterwards, so they agree exactly on what the learner sees. With
``async_collect`` (PPO, IMPALA) fused or step collection runs in a collector thread with a behaviour copy of the
policy while the learner trains (``rapidrl.train.async_collect``).

The gradient backend (``gradient_backend``) is the algorithm's: PPO has "compiled" and "torch", A2C and IMPALA
"torch" only (``_gradient_backends``). ``precision`` (``rapidrl.train.precision``) is resolved after it: "bf16"
runs the update's forward pass and loss, and the step and device collection's acting, under bfloat16 autocast
(the fused collector's compiled forward and ``async_collect``'s collector thread act in float32).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import gymnasium as gym
import numpy as np
import torch

from rapidrl.buffers import RolloutBuffer, gae_torch
from rapidrl.nn import ActorCritic, ObsNormalizer, RewardScaler
from rapidrl.nn.deploy import ActorCriticMode, NormalizeObs
from rapidrl.nn.encoders import ENCODERS
from rapidrl.nn.recurrent import CELLS, RecurrentActorCritic, SegmentLayout
from rapidrl.train.actor_critic import explained_variance
from rapidrl.train.algorithm import Algorithm
from rapidrl.train.async_collect import AsyncCollector, StepCollector, normalized
from rapidrl.train.config import RuntimeConfig, check_hidden, check_positive, check_unit_interval, require
from rapidrl.train.paths import choose
from rapidrl.train.recurrent import RecurrentActor, RecurrentStepCollector, episode_starts

COLLECTIONS = ("auto", "device", "fused", "step")


@dataclass
class OnPolicyConfig(RuntimeConfig):
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
    encoder: str = "auto"
    """Observation encoder: "auto" (the Nature CNN for uint8 image observations of 36 pixels or more a side, the
    MinAtar CNN for smaller ones, "multi" for Dict/Tuple observations with images, else MLPs), "mlp", "nature",
    "minatar" or "multi" (``rapidrl.nn.encoders``). A CNN (or the multi-input encoder: a CNN per image, one layer
    on the other parts) is a trunk shared by linear actor and critic heads, trained with autograd on the per-step
    collection path."""
    collection: str = "auto"
    """How rollouts are collected (``rapidrl.train.paths``): "fused" (one compiled call per rollout: a built-in
    classic-control env and an MLP policy on the CPU), "step" (the PyTorch policy and any vector env, step by
    step), "device" (a ``TorchVecEnv``: env, policy and storage on the env's device), or "auto" (the first of
    fused, step, device that applies). ``async_collect`` runs fused or step collection in a thread."""
    log_every: int = 1
    """Record losses and episode statistics every this many updates (PPO, IMPALA and the device path; each
    record reads scalars back from the device, so a larger value keeps a GPU run free of host syncs)."""
    cuda_graph: bool = False
    """Device path on CUDA only: replay the rollout collection as one captured CUDA graph."""
    recurrent: str = "none"
    """Memory (PPO, A2C): "lstm" or "gru" puts one recurrent layer of ``recurrent_size`` units between the encoder
    (the ``hidden`` MLP, or the CNN) and the heads (``rapidrl.nn.recurrent``); "none" for a feed-forward policy.
    Updates then run backpropagation through time over whole env columns of the rollout."""
    recurrent_size: int = 128
    """Units of the recurrent layer."""
    critic_recurrent: bool = False
    """Recurrent policies: the critic gets its own recurrent layer (same cell and size, on the same encoder
    features) instead of sharing the actor's, as sb3-contrib's ``enable_critic_lstm``; the state then holds both
    layers' states (twice as wide)."""
    head_hidden: tuple[int, ...] = ()
    """Recurrent policies: hidden layer sizes of the actor's and of the critic's own MLP between the recurrent layer
    and their output layers (sb3-contrib's ``net_arch=dict(pi=[...], vf=[...])``, with ``activation``); empty:
    linear heads on the recurrent layer."""
    ortho_init: bool = True
    """Orthogonal initialisation of the policy's layers (the PPO paper's); False (recurrent policies) leaves them at
    PyTorch's defaults, as sb3's ``ortho_init=False``."""
    burn_in: int = 0
    """Recurrent policies: the first steps of each env column only warm up the state in an update (no gradient,
    not in the loss); 0 trains on every step from the state stored at the rollout start."""

    def validate(self) -> None:
        super().validate()
        check_positive(self, "num_envs", "num_steps", "learning_rate", "log_every")
        check_positive(self, "ent_coef", "vf_coef", "max_grad_norm", allow_zero=True)
        check_unit_interval(self, "gamma", "gae_lambda")
        check_hidden(self.hidden, allow_empty=self.recurrent != "none")
        require(self.activation in ("tanh", "relu"), f"activation must be 'tanh' or 'relu', got {self.activation!r}")
        require(self.squash in ("clip", "tanh"), f"squash must be 'clip' or 'tanh', got {self.squash!r}")
        require(self.encoder in ENCODERS, f"encoder must be one of {ENCODERS}, got {self.encoder!r}")
        require(self.collection in COLLECTIONS, f"collection must be one of {COLLECTIONS}, got {self.collection!r}")
        require(self.recurrent in ("none", *CELLS),
                f"recurrent must be 'none', 'lstm' or 'gru', got {self.recurrent!r}")
        check_positive(self, "recurrent_size")
        require(isinstance(self.critic_recurrent, bool), f"critic_recurrent must be true or false, got "
                f"{self.critic_recurrent!r}")
        require(isinstance(self.ortho_init, bool), f"ortho_init must be true or false, got {self.ortho_init!r}")
        if self.critic_recurrent or self.head_hidden or not self.ortho_init:
            require(self.recurrent != "none", "critic_recurrent, head_hidden and ortho_init=False apply to recurrent "
                    "policies (recurrent='lstm' or 'gru'); a feed-forward policy's actor and critic are separate MLPs "
                    "already (shared=False, hidden)")
            require(isinstance(self.head_hidden, (tuple, list))
                    and all(isinstance(h, int) and not isinstance(h, bool) and h > 0 for h in self.head_hidden),
                    f"head_hidden must be a sequence of positive ints, got {self.head_hidden!r}")
        require(isinstance(self.burn_in, int) and 0 <= self.burn_in < self.num_steps,
                f"burn_in must be an int in [0, num_steps={self.num_steps}), got {self.burn_in!r}")


    @classmethod
    def upgrade_legacy(cls, values: dict) -> dict:
        """``fused_rollout`` ("auto"/"always"/"never") of rapidrl before path settings: ``collection``."""
        values = super().upgrade_legacy(values)
        if "fused_rollout" in values:
            old = values.pop("fused_rollout")
            never = "device" if values.get("env_device", "cpu") != "cpu" else "step"
            values.setdefault("collection", {"always": "fused", "never": never}.get(old, "auto"))
        return values


class OnPolicyAlgorithm(Algorithm):
    """Rollout -> advantages -> ``_update`` (supplied by PPO/A2C/IMPALA)."""

    uses_gae: ClassVar[bool] = True
    """Compute GAE advantages/returns after each rollout (IMPALA computes V-trace targets in its update)."""
    supports_distributed: ClassVar[bool] = True
    supports_recurrent: ClassVar[bool] = False
    """The update can train a recurrent policy on whole sequences (PPO, A2C)."""
    supports_loss_masks: ClassVar[bool] = True
    """The update can leave inactive samples out (``RolloutBuffer.active``: agents that left a multi-agent
    episode); IMPALA's V-trace and recurrent policies train on whole env columns and refuse such rollouts."""

    def _build(self) -> None:
        c = self.config
        if not isinstance(self.observation_space, gym.spaces.Box):
            raise TypeError(f"{self.name.upper()} needs a Box observation space, got {self.observation_space}")
        if c.recurrent != "none":
            require(self.supports_recurrent, f"{self.name.upper()} has no recurrent policies (PPO and A2C have)")
            require(not getattr(c, "async_collect", False) and not getattr(c, "vtrace_advantages", False),
                    "recurrent policies support neither async_collect nor vtrace_advantages")
            require(c.precision != "bf16",
                    "precision='bf16' is not supported with a recurrent policy (its update runs in float32): "
                    "set precision='fp32' or 'auto'")
            self.policy = RecurrentActorCritic(self.observation_space, self.action_space, c.hidden,
                                               cell=c.recurrent, size=c.recurrent_size, activation=c.activation,
                                               log_std_init=c.log_std_init, squash=c.squash,
                                               encoder=c.encoder, critic_core=c.critic_recurrent,
                                               head_hidden=c.head_hidden, ortho_init=c.ortho_init).to(self.device)
        else:
            self.policy = self._policy_class()(self.observation_space, self.action_space, c.hidden,
                                               shared=c.shared, activation=c.activation,
                                               log_std_init=c.log_std_init, squash=c.squash,
                                               encoder=c.encoder).to(self.device)
        # observations are kept, stored and fed in the policy's input dtype: uint8 frames for a CNN on images
        self._obs_dtype = self.policy.input_dtype
        require(not (c.normalize_obs and (self._obs_dtype == np.uint8 or self.policy.encoder_kind == "multi")),
                "normalize_obs does not apply to image observations (the CNN scales them itself)")
        self.optimizer = self._make_optimizer()
        obs_shape = self.observation_space.shape
        self.buffer = self._make_buffer()
        self.obs_normalizer = ObsNormalizer(obs_shape) if c.normalize_obs else None
        self.reward_scaler = RewardScaler(c.num_envs, c.gamma) if c.normalize_reward else None
        self._raw_obs = np.zeros((c.num_steps, c.num_envs, *obs_shape), self._obs_dtype)
        self._obs = np.zeros((c.num_envs, *obs_shape), self._obs_dtype)
        self._needs_reset = True
        self.torch_generator = torch.Generator().manual_seed(self.seed)
        self.collector = self._step_collector = self.async_collector = self.device_collector = None
        self._last_obs = self._obs  # the last rollout's final observations, normalized (its bootstrap state)
        self.paths["collection"] = collection = choose("collection", c.collection, self._collections())
        self._make_collector(collection.value)
        self.paths["gradient_backend"] = self._resolve_gradient_backend()
        self.paths["precision"] = self._resolve_precision()
        self._bind_backend()

    # -- paths -------------------------------------------------------------------------------------
    def _collections(self) -> dict:
        """The collection paths in "auto"'s order, each with its check (None: it can run; else what to change)."""
        from rapidrl.envs import TorchVecEnv
        from rapidrl.train.fused import fused_unavailable

        c = self.config
        on_device = isinstance(self.env, TorchVecEnv) or c.env_device != "cpu"

        def device() -> str | None:
            if not on_device:
                return "needs a TorchVecEnv (env_device='cuda', or make_vec(..., vectorization='torch'))"
            unsupported = [name for name in ("normalize_obs", "normalize_reward", "async_collect", "vtrace_advantages")
                           if getattr(c, name, False)]
            if unsupported:
                return f"supports none of {', '.join(unsupported)}"
            if self.policy.recurrent:
                return "recurrent policies collect on the host (recurrent='none')"
            return None

        def fused() -> str | None:
            return fused_unavailable(self.env, self.policy, self.device)

        def step() -> str | None:
            return "a TorchVecEnv returns device tensors (collection='device')" if on_device else None

        return {"fused": fused, "step": step, "device": device}  # a TorchVecEnv fits only the last

    def _make_collector(self, path: str) -> None:
        from rapidrl.train.device_collect import DeviceCollector
        from rapidrl.train.fused import FusedCollector

        c = self.config
        if path == "device":
            self.device_collector = DeviceCollector(self.env, self.policy, c.num_steps, cuda_graph=c.cuda_graph)
        elif getattr(c, "async_collect", False):  # a field of PPOConfig and IMPALAConfig

            def make_collector(env, policy):
                return FusedCollector(env, policy, c.num_steps) if path == "fused" else \
                    StepCollector(env, policy, c.num_steps, self.device)

            self.async_collector = AsyncCollector(make_collector, self.env, self.policy, self.obs_normalizer,
                                                  self._obs, self._make_buffer)
            self.buffer = self.async_collector.slots[0].buffer
        elif path == "fused":
            self.collector = FusedCollector(self.env, self.policy, c.num_steps)
        else:
            collector = RecurrentStepCollector if self.policy.recurrent else StepCollector
            self._step_collector = collector(self.env, self.policy, c.num_steps, self.device, self.timer)

    def _bind_backend(self) -> None:
        """Set up what the resolved gradient backend needs (PPO binds the compiled epoch)."""

    def _bf16_unsupported(self) -> str | None:
        return "recurrent policies update in float32 (recurrent='none')" if self.policy.recurrent else None

    def _make_buffer(self) -> RolloutBuffer:
        c = self.config
        discrete = isinstance(self.action_space, gym.spaces.Discrete)
        multi = isinstance(self.action_space, (gym.spaces.MultiDiscrete, gym.spaces.MultiBinary))
        action_shape = () if discrete else (len(self.policy.nvec),) if multi else self.action_space.shape
        return RolloutBuffer(c.num_steps, c.num_envs, self.observation_space.shape, action_shape,
                             obs_dtype=self._obs_dtype, action_dtype=np.int64 if discrete or multi else np.float32,
                             device=c.device)

    def _make_optimizer(self) -> torch.optim.Optimizer:
        raise NotImplementedError

    def _policy_class(self):
        """The policy constructor ``_build`` calls with ActorCritic's arguments (multi-agent PPO returns its own)."""
        return ActorCritic

    def trainable_modules(self) -> list[torch.nn.Module]:
        return [self.policy]

    # -- acting ----------------------------------------------------------------------------------
    def _normalize(self, obs: np.ndarray) -> np.ndarray:
        return normalized(self.obs_normalizer, obs, self._obs_dtype)

    def predict(self, obs, state=None, episode_start=None, deterministic: bool = False):
        """Actions for ``obs`` ([B, *obs_shape] or one observation), as NumPy.

        Recurrent policies (``recurrent="lstm"|"gru"``) as sb3-contrib's: ``predict(obs, state, episode_start,
        deterministic) -> (actions, state)``, where state is the float32 array [B, S] returned by the previous call
        (None: fresh episodes) and episode_start [B] bool marks observations that begin an episode (their state is
        reset). Feed-forward policies take neither and return the actions only.
        """
        if not self.policy.recurrent:
            if state is not None or episode_start is not None:
                raise ValueError("state and episode_start apply to recurrent policies only (this one is feed-forward)")
            return super().predict(obs, deterministic=deterministic)
        obs = np.asarray(obs)
        shape = self.observation_space.shape
        single = obs.shape == shape
        batch = obs[None] if single else obs
        if batch.shape[1:] != shape:
            raise ValueError(f"obs must have shape {shape} or (B, *{shape}), got {obs.shape}")
        n = batch.shape[0]
        if state is None:
            state = self.policy.initial_state(n, self.device)
        else:
            state = torch.as_tensor(np.asarray(state) if not isinstance(state, torch.Tensor) else state,
                                    dtype=torch.float32).reshape(n, -1).to(self.device)
            self.policy.check_state(state, n)
        starts = np.zeros(n, bool) if episode_start is None else np.asarray(episode_start, dtype=bool).reshape(-1)
        if starts.shape != (n,):
            raise ValueError(f"episode_start must have {n} entries (one per observation), got {starts.shape}")
        with torch.no_grad():
            x = torch.from_numpy(np.ascontiguousarray(self._normalize(batch))).to(self.device)
            raw, _, _, state = self.policy.act(x, state, torch.from_numpy(starts).to(self.device),
                                               deterministic=deterministic)
            actions = self.policy.to_env_action(raw).cpu().numpy()
        state = state.cpu().numpy()
        return (actions[0], state) if single else (actions, state)

    def deterministic_module(self) -> torch.nn.Module:
        if self.policy.recurrent:
            raise ValueError("exporting recurrent policies is not supported yet (the exported graph would need the "
                             "state as an input and an output)")
        mode = ActorCriticMode(self.policy)
        if self.obs_normalizer is None:
            return mode
        return torch.nn.Sequential(NormalizeObs(self.obs_normalizer), mode)

    def _episode_actor(self, n: int, deterministic: bool):
        if not self.policy.recurrent:
            return super()._episode_actor(n, deterministic)
        actor = RecurrentActor(self.policy, n, self.device, deterministic)

        def act(obs: np.ndarray, starts: np.ndarray) -> np.ndarray:
            x = torch.from_numpy(np.ascontiguousarray(self._normalize(obs))).to(self.device)
            raw = actor(x, torch.from_numpy(np.asarray(starts, dtype=bool)).to(self.device))
            return self.policy.to_env_action(raw).cpu().numpy()

        return act

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
        if self.policy.recurrent:
            self._step_collector.reset_state()

    def _draw_seed(self) -> int:
        return int(self.np_rng.integers(0, 2**31 - 1))

    def _collect(self) -> None:
        """Fill ``self.buffer`` with one rollout and compute advantages."""
        if self.device_collector is not None:
            self._collect_on_device()
            return
        if self._needs_reset:
            self._reset_envs()
        last_values = None
        if self.async_collector is not None:
            rollout = self._collect_async()
            self.buffer, self._raw_obs = rollout.buffer, rollout.raw_obs
            self._last_obs, last_values = rollout.last_obs, rollout.last_values
        else:
            if self.collector is not None:
                with self.timer.phase("collect"):
                    returns, lengths = self.collector.collect(self.buffer, self._obs, self._raw_obs,
                                                              self.obs_normalizer, seed=self._draw_seed())
                    self._record_episodes(returns, lengths)
            else:
                self._collect_per_step()
            self._last_obs = self._normalize(self._obs)
        c = self.config
        with self.timer.phase("advantages"):
            if self.reward_scaler is not None:
                done = self.buffer.terminated | self.buffer.truncated
                for t in range(c.num_steps):
                    self.buffer.rewards[t] = self.reward_scaler(self.buffer.rewards[t], done[t])
            if last_values is None:
                source = self._step_collector or self.policy  # a recurrent collector values with its state
                with torch.no_grad():
                    last_values = source.value(torch.from_numpy(self._last_obs).to(self.device))
            if self.obs_normalizer is not None:
                self.obs_normalizer.rms.update(self._raw_obs.reshape(-1, *self._obs.shape[1:]))
            if self.uses_gae:
                self.buffer.compute_advantages(last_values, gamma=c.gamma, lam=c.gae_lambda)

    def _collect_per_step(self) -> None:
        """The generic path: PyTorch policy + any rapidrl vector env, one step at a time."""
        returns, lengths = self._step_collector.collect(self.buffer, self._obs, self._raw_obs, self.obs_normalizer,
                                                        seed=None)
        self._record_episodes(returns, lengths)

    def _collect_async(self):
        """Rollout k from the collector thread; rollout k+1 starts (with the weights published so far)."""
        ac = self.async_collector
        with self.timer.phase("collect_wait"):
            if not ac.pending:  # first rollout: publish the current weights (they may have been loaded)
                ac.publish()
                ac.start(self._draw_seed())
            rollout = ac.wait()
            ac.start(self._draw_seed())
        self._record_episodes(rollout.ep_returns, rollout.ep_lengths)
        return rollout

    def _collect_on_device(self) -> None:
        """Device path: rollout, GAE and episode sums stay on the env's device (scalars read every log_every)."""
        c, dc = self.config, self.device_collector
        if self._needs_reset:
            dc.reset(self._env_seed)
            self._needs_reset = False
        with self.timer.phase("collect"):
            dc.collect(self.buffer)
        if self.uses_gae:
            with self.timer.phase("advantages"):
                b = self.buffer.tensors
                gae_torch(b.rewards, b.values, dc.last_values, b.terminated, b.truncated, gamma=c.gamma,
                          lam=c.gae_lambda, final_values=b.final_values, out_advantages=b.advantages,
                          out_returns=b.returns)
        if self.num_updates % c.log_every == 0:
            count, mean_return, mean_length = dc.pop_episode_stats()
            self.num_episodes += count
            if count:
                self.record({"charts/episodic_return": mean_return, "charts/episodic_length": mean_length})

    def learn(self, total_timesteps: int, callback=None, progress_bar: bool = True, *, resume: bool = False):
        """See ``Algorithm.learn``; with ``async_collect`` the collector thread is joined when it returns or raises."""
        try:
            return super().learn(total_timesteps, callback, progress_bar, resume=resume)
        finally:
            if self.async_collector is not None:
                self.async_collector.close()

    # -- the iteration ---------------------------------------------------------------------------
    def _rollout(self) -> int:
        c = self.config
        self._schedule_update(self.progress_remaining())
        self._collect()
        if self.buffer.masked and (self.policy.recurrent or not self.supports_loss_masks):
            what = "a recurrent policy" if self.policy.recurrent else self.name.upper()
            raise ValueError(f"{what} trains on whole env columns and cannot leave out the rows of agents that left "
                             "mid-episode (the env's info['active']): use a feed-forward PPO, A2C, MAPPO or IPPO")
        return c.num_steps * c.num_envs

    def _schedule_update(self, progress_remaining: float) -> None:
        """Set what the next update anneals, at the progress of the rollout's start: the learning rate (PPO
        anneals its clip range here too)."""
        c = self.config
        if c.anneal_lr:
            lr = c.learning_rate * progress_remaining
            for g in self.optimizer.param_groups:
                g["lr"] = lr

    def _train(self) -> None:
        with self.timer.phase("update"):
            self._update()
        if self.async_collector is not None:
            self.async_collector.publish()

    def _update(self) -> None:
        raise NotImplementedError

    def _rollout_starts(self) -> torch.Tensor:
        """[T, N] bool: the episode starts of the rollout in the buffer (recurrent collection)."""
        b = self.buffer.tensors
        initial = torch.from_numpy(self._step_collector.initial_starts).to(b.terminated.device)
        return episode_starts(initial, b.terminated, b.truncated)

    def _column_outputs(self, idx: torch.Tensor | None, starts: torch.Tensor,
                        layout: SegmentLayout | None = None) -> torch.Tensor:
        """Recurrent policies: the layers' outputs [(T - burn_in) * n, output_size] along env columns ``idx`` [n]
        (None: all N, in order) of the rollout, replayed from the state stored at its start with its episode starts
        (``starts``: ``_rollout_starts()``; ``layout``: ``segment_layout(starts[burn_in:])`` of those columns,
        computed when None; ``rapidrl.train.recurrent``)."""
        b, col = self.buffer.tensors, self._step_collector
        if idx is None:
            return self.policy.sequence_outputs(b.obs, col.initial_state, starts, self.config.burn_in, layout)
        return self.policy.sequence_outputs(b.obs[:, idx], col.initial_state[idx], starts[:, idx],
                                            self.config.burn_in, layout)

    def _score_columns(self, idx: torch.Tensor | None, starts: torch.Tensor | None = None,
                       layout: SegmentLayout | None = None) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Recurrent policies: (log_probs, entropy, values), each [(T - burn_in) * n], of the stored actions of env
        columns ``idx`` (as ``_column_outputs``; ``starts`` computed when None)."""
        starts = self._rollout_starts() if starts is None else starts
        return self.policy.score_outputs(self._column_outputs(idx, starts, layout), self._columns("actions", idx))

    def _columns(self, field: str, idx: torch.Tensor | None) -> torch.Tensor:
        """Stored ``field`` of env columns ``idx`` (None: all) past the burn-in, flattened over steps and columns:
        [(T - burn_in) * n, *field_shape]."""
        x = getattr(self.buffer.tensors, field)[self.config.burn_in:]
        return (x if idx is None else x[:, idx]).reshape(-1, *x.shape[2:])

    def _explained_variance(self) -> float:
        """1 - Var[returns - values] / Var[returns] over the rollout (NaN-free: 0 when Var[returns] = 0)."""
        return explained_variance(self.buffer.returns, self.buffer.values)

    # -- persistence -----------------------------------------------------------------------------
    def _state(self) -> dict:
        state = {"policy": self.policy.state_dict(), "optimizer": self.optimizer.state_dict()}
        if self.obs_normalizer is not None:
            state["obs_normalizer"] = self.obs_normalizer.state_dict()
        if self.reward_scaler is not None:
            state["reward_scaler"] = self.reward_scaler.state_dict()
        return state

    def _extra_training_state(self) -> dict:
        # a device env's state is not saved (``env_state``): it is reset on resume
        state = {}
        if self.async_collector is not None:  # first: the rollout in flight finishes, moving the env and obs
            state["async"] = self.async_collector.state_dict()
        state |= {"obs": torch.from_numpy(self._obs.copy()),
                 "needs_reset": self._needs_reset or self.device_collector is not None,
                 "generator": self.torch_generator.get_state()}
        if self.policy.recurrent:
            state["recurrent"] = self._step_collector.state_dict()
        return state

    def _load_extra_training_state(self, state: dict) -> None:
        np.copyto(self._obs, state["obs"].numpy())
        self._needs_reset = bool(state["needs_reset"])
        self.torch_generator.set_state(state["generator"])
        if self.policy.recurrent:
            self._step_collector.load_state_dict(state["recurrent"])
        if self.async_collector is not None:
            self.async_collector.load_state_dict(state["async"])

    def _load_state(self, state: dict) -> None:
        self.policy.load_state_dict(state["policy"])
        self.optimizer.load_state_dict(state["optimizer"])
        if self.obs_normalizer is not None:
            self.obs_normalizer.load_state_dict(state["obs_normalizer"])
        if self.reward_scaler is not None:
            self.reward_scaler.load_state_dict(state["reward_scaler"])
