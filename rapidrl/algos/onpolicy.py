"""The on-policy core shared by PPO, A2C, IMPALA and MAPPO: config fields, policy/storage set-up, the rollout.

One iteration (``_rollout``): collect T steps of N envs into ``buffer`` (``_collect``), then the advantages
(``_advantages``: reward scaling, the bootstrap value, the observation statistics, GAE); the algorithm's
``_update`` follows. What runs is resolved once, at construction, into ``model.paths``:

- ``collection``: "fused", "step" or "device" (``rapidrl.train.collect``, which also holds each collector; the
  fused and step paths normalise observations with the statistics frozen at the start of the rollout and update them
  with the raw observations afterwards, so they agree exactly on what the learner sees);
- ``async_collect``: fused or step collection in a collector thread with a behaviour copy of the policy while the
  learner trains (``rapidrl.train.collect.threaded``; PPO and IMPALA, whose updates correct for the policy lag);
- ``recurrent``: a recurrent policy collects with a collector that carries its state and updates on whole env
  columns (``rapidrl.train.recurrent``; PPO and A2C);
- ``advantages``: GAE after each rollout, or V-trace in the update (IMPALA; PPO's ``vtrace_advantages``);
- ``gradient_backend`` (the algorithm's: PPO has "handwritten" and "torch", A2C and IMPALA "torch" only) and
  ``precision`` (``rapidrl.train.precision``), resolved after it: "bf16" runs the update's forward pass and loss,
  and the step and device collection's acting, under bfloat16 autocast (the fused collector's compiled forward and
  ``async_collect``'s collector thread act in float32).

Action masks (docs/masks.md): on an env that states its valid actions every collector but the device path acts on
them (the fused collector inside its compiled loop, from the env's arena) and the rollout stores them
(``RolloutBuffer.action_masks``), so the update's log-probabilities and entropy (both gradient backends, recurrent
sequences, V-trace) are those of the masked distribution the actions were sampled from; ``predict(obs,
action_masks=...)``, ``evaluate`` and export act on them too. The device path refuses a masked env.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import gymnasium as gym
import numpy as np
import torch

from rapidrl.algos.actor_critic import explained_variance
from rapidrl.buffers import RolloutBuffer, gae_torch
from rapidrl.buffers.rollout import ADVANTAGE_NORMALIZATIONS
from rapidrl.nn import ActorCritic, ObsNormalizer, RewardScaler
from rapidrl.nn.deploy import ActorCriticMode, NormalizeObs, RecurrentMode
from rapidrl.nn.encoders import ENCODERS
from rapidrl.nn.recurrent import CELLS, RecurrentActorCritic
from rapidrl.train.algorithm import Algorithm
from rapidrl.train.collect import COLLECTIONS, choose_collection, make_collector
from rapidrl.train.collect.step import normalized
from rapidrl.train.collect.threaded import AsyncCollector
from rapidrl.train.config import RolloutConfig, check_hidden, check_positive, check_unit_interval, require
from rapidrl.train.paths import PathChoice
from rapidrl.train.recurrent import RecurrentActor, RolloutSequences, predict_with_state


@dataclass
class OnPolicyConfig(RolloutConfig):
    gae_lambda: float = 0.95
    """GAE lambda (1.0 gives Monte-Carlo advantages with bootstrapping at the rollout end)."""
    ent_coef: float = 0.0
    """Entropy bonus coefficient."""
    vf_coef: float = 0.5
    """Value loss coefficient."""
    normalize_advantage: str = "minibatch"
    """Advantage normalisation: "minibatch" (each minibatch to mean 0, std 1), "batch" (with the rollout's mean and
    std) or "none". A2C and IMPALA take each gradient step on the whole rollout, where the two modes agree."""
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
    async_collect: bool = False
    """Collect the next rollout in a thread while updating on the last (``rapidrl.train.collect.threaded``; PPO and
    IMPALA): the data is then one update stale (policy lag 1); the stored log-probs are the behaviour policy's, so
    PPO's probability ratio (IMPALA's V-trace) corrects for it."""
    collect_threads: int = 1
    """Threads of the fused collector (``collection`` "fused"): 2 or more split the envs into that many contiguous
    ranges, each collected in its own thread with its own random stream (``FusedCollector``). A run is then the same
    for a given seed and thread count, and differs from a run at another count (the actions come from other streams).
    Leave it at 1 when each core runs its own experiment, or beside ``async_collect``."""
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
        check_positive(self, "ent_coef", "vf_coef", "max_grad_norm", allow_zero=True)
        check_unit_interval(self, "gae_lambda")
        check_hidden(self.hidden, allow_empty=self.recurrent != "none")
        require(self.activation in ("tanh", "relu"), f"activation must be 'tanh' or 'relu', got {self.activation!r}")
        require(self.squash in ("clip", "tanh"), f"squash must be 'clip' or 'tanh', got {self.squash!r}")
        require(self.encoder in ENCODERS, f"encoder must be one of {ENCODERS}, got {self.encoder!r}")
        require(self.collection in COLLECTIONS, f"collection must be one of {COLLECTIONS}, got {self.collection!r}")
        require(self.normalize_advantage in ADVANTAGE_NORMALIZATIONS, "normalize_advantage must be 'minibatch', "
                f"'batch' or 'none', got {self.normalize_advantage!r}")
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
        require(isinstance(self.collect_threads, int) and not isinstance(self.collect_threads, bool)
                and 1 <= self.collect_threads <= self.num_envs,
                f"collect_threads must be an int in [1, num_envs={self.num_envs}], got {self.collect_threads!r}")
        require(self.collect_threads == 1 or self.collection in ("auto", "fused"),
                f"collect_threads={self.collect_threads} splits the fused collector (collection='fused' or 'auto'); "
                f"collection={self.collection!r} collects in one thread")
        require(isinstance(self.burn_in, int) and 0 <= self.burn_in < self.num_steps,
                f"burn_in must be an int in [0, num_steps={self.num_steps}), got {self.burn_in!r}")


    @classmethod
    def upgrade_legacy(cls, values: dict) -> dict:
        """Settings of older rapidrl versions: ``fused_rollout`` ("auto"/"always"/"never", before path settings:
        ``collection``); ``log_every`` (updates: ``log_every_steps``, that many rollouts of env steps); A2C's and
        IMPALA's ``normalize_advantage`` True/False ("batch"/"none")."""
        values = super().upgrade_legacy(values)
        if "fused_rollout" in values:
            old = values.pop("fused_rollout")
            never = "device" if values.get("env_device", "cpu") != "cpu" else "step"
            values.setdefault("collection", {"always": "fused", "never": never}.get(old, "auto"))
        if "log_every" in values:
            updates = values.pop("log_every")
            rollout = values.get("num_steps", cls.num_steps) * values.get("num_envs", cls.num_envs)
            values.setdefault("log_every_steps", 0 if updates == 1 else updates * rollout)
        if isinstance(values.get("normalize_advantage"), bool):
            values["normalize_advantage"] = "batch" if values["normalize_advantage"] else "none"
        return values


class OnPolicyAlgorithm(Algorithm):
    """Rollout -> advantages -> ``_update`` (supplied by PPO/A2C/IMPALA)."""

    supports_distributed: ClassVar[bool] = True
    supports_action_masks: ClassVar[bool] = True
    supports_recurrent: ClassVar[bool] = False
    """The update can train a recurrent policy on whole sequences (PPO, A2C)."""
    supports_async_collect: ClassVar[bool] = False
    """The update corrects for data one update stale (PPO's probability ratio, V-trace): ``async_collect`` may
    run (PPO, IMPALA)."""
    supports_loss_masks: ClassVar[bool] = True
    """The update can leave inactive samples out (``RolloutBuffer.active``: agents that left a multi-agent
    episode); IMPALA's V-trace and recurrent policies train on whole env columns and refuse such rollouts."""

    def _build(self) -> None:
        c = self.config
        if not isinstance(self.observation_space, gym.spaces.Box):
            raise TypeError(f"{self.name.upper()} needs a Box observation space, got {self.observation_space}")
        advantages = self._advantage_estimator()
        self.policy = self._make_policy(vtrace=advantages.value == "vtrace")
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
        self._last_obs = self._obs  # the last rollout's final observations, normalized (its bootstrap state)
        records = self._make_collection(advantages)
        self.paths["gradient_backend"] = self._resolve_gradient_backend()
        self.paths["precision"] = self._resolve_precision()
        self.paths.update(records)  # after the three settings, as printed
        self._bind_backend()

    def _make_policy(self, vtrace: bool) -> torch.nn.Module:
        """The policy of the config: ``RecurrentActorCritic`` (``recurrent``) or ``_policy_class()``'s. vtrace: the
        advantages are V-trace's (no recurrent policy then)."""
        c = self.config
        if c.recurrent == "none":
            return self._policy_class()(self.observation_space, self.action_space, c.hidden, shared=c.shared,
                                        activation=c.activation, log_std_init=c.log_std_init, squash=c.squash,
                                        encoder=c.encoder).to(self.device)
        require(self.supports_recurrent, f"{self.name.upper()} has no recurrent policies (PPO and A2C have)")
        require(not c.async_collect and not vtrace, "recurrent policies support neither async_collect nor "
                "vtrace_advantages")
        require(c.precision != "bf16", "precision='bf16' is not supported with a recurrent policy (its update runs "
                "in float32): set precision='fp32' or 'auto'")
        return RecurrentActorCritic(self.observation_space, self.action_space, c.hidden, cell=c.recurrent,
                                    size=c.recurrent_size, activation=c.activation, log_std_init=c.log_std_init,
                                    squash=c.squash, encoder=c.encoder, critic_core=c.critic_recurrent,
                                    head_hidden=c.head_hidden, ortho_init=c.ortho_init).to(self.device)

    # -- paths -------------------------------------------------------------------------------------
    def _advantage_estimator(self) -> PathChoice:
        """``paths["advantages"]``: GAE after each rollout, unless the algorithm says otherwise (IMPALA, PPO's
        ``vtrace_advantages``: V-trace in the update)."""
        return PathChoice("advantages", "gae", "GAE after each rollout")

    def _make_collection(self, advantages: PathChoice) -> dict[str, PathChoice]:
        """The one place where collection is chosen: ``paths["collection"]`` here, and the records of what runs with
        it, returned for ``paths``: ``async_collect``, ``recurrent`` and ``advantages`` (``_advantage_estimator``'s).
        Then the collector: ``collector`` (the host collector, None on the device path or in a thread),
        ``device_collector`` or ``async_collector`` (``rapidrl.train.collect``)."""
        c = self.config
        require(not c.async_collect or self.supports_async_collect,
                f"{self.name.upper()} has no asynchronous collection (async_collect=True needs an update that corrects "
                "for data one update stale: PPO, IMPALA)")
        vtrace = advantages.value == "vtrace"
        unsupported = tuple(name for name, used in (("normalize_obs", c.normalize_obs),
                                                     ("normalize_reward", c.normalize_reward),
                                                     ("async_collect", c.async_collect), ("V-trace advantages", vtrace),
                                                     ("action masks", self.action_mask_size > 0))
                            if used)
        self.paths["collection"] = choose_collection(c.collection, self.env, self.policy, self.device,
                                                     env_device=c.env_device, device_unsupported=unsupported)
        collection = self.paths["collection"].value
        require(c.collect_threads == 1 or collection == "fused",
                f"collect_threads={c.collect_threads} splits the fused collector, and this run collects with "
                f"'{collection}' ({self.paths['collection'].reason}); set collect_threads=1")
        records = {
            "async_collect": PathChoice("async_collect", "thread" if c.async_collect else "off",
                                        f"async_collect={c.async_collect}"),
            "recurrent": PathChoice("recurrent", c.recurrent, "a feed-forward policy" if c.recurrent == "none"
                                    else "collection carries the state; updates replay whole env columns"),
            "advantages": advantages}
        self.collector = self.device_collector = self.async_collector = None
        if collection == "device":
            self.device_collector = make_collector("device", self.env, self.policy, c.num_steps, self.device,
                                                   cuda_graph=c.cuda_graph, generator=self.torch_rng)
        elif c.async_collect:  # the thread's collector acts with a behaviour copy of the policy
            self.async_collector = AsyncCollector(
                lambda env, policy: make_collector(collection, env, policy, c.num_steps, self.device,
                                                   threads=c.collect_threads), self.env,
                self.policy, self.obs_normalizer, self._obs, self._make_buffer)
            self.buffer = self.async_collector.slots[0].buffer
        else:
            self.collector = make_collector(collection, self.env, self.policy, c.num_steps, self.device, self.timer,
                                            cuda_graph=c.cuda_graph, generator=self.torch_rng,
                                            threads=c.collect_threads)
        self._sequences = RolloutSequences(self.buffer, self.collector, c.burn_in) if self.policy.recurrent else None
        """The rollout as env columns, for the update of a recurrent policy (``rapidrl.train.recurrent``)."""
        return records

    def _bind_backend(self) -> None:
        """Set up what the resolved gradient backend needs (PPO binds the compiled epoch)."""

    def _update_batch(self) -> int:
        """Rows of one gradient step: the whole rollout (PPO: a minibatch)."""
        return self.config.num_steps * self.config.num_envs

    def _bf16_unsupported(self) -> str | None:
        return "recurrent policies update in float32 (recurrent='none')" if self.policy.recurrent else None

    def _make_buffer(self) -> RolloutBuffer:
        c = self.config
        discrete = isinstance(self.action_space, gym.spaces.Discrete)
        multi = isinstance(self.action_space, (gym.spaces.MultiDiscrete, gym.spaces.MultiBinary))
        action_shape = () if discrete else (len(self.policy.nvec),) if multi else self.action_space.shape
        return RolloutBuffer(c.num_steps, c.num_envs, self.observation_space.shape, action_shape,
                             obs_dtype=self._obs_dtype, action_dtype=np.int64 if discrete or multi else np.float32,
                             device=c.device, action_mask_size=self.action_mask_size)

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

    def predict(self, obs, state=None, episode_start=None, deterministic: bool = False, action_masks=None):
        """Actions for ``obs`` ([B, *obs_shape] or one observation), as NumPy; among the valid actions of
        ``action_masks`` (bool [B, M] or [M], ``Algorithm.predict``) when given.

        Recurrent policies (``recurrent="lstm"|"gru"``) as sb3-contrib's: ``predict(obs, state, episode_start,
        deterministic) -> (actions, state)``, where state is the float32 array [B, S] returned by the previous call
        (None: fresh episodes) and episode_start [B] bool marks observations that begin an episode (their state is
        reset; ``rapidrl.train.recurrent.predict_with_state``). Feed-forward policies take neither and return the
        actions only.
        """
        if not self.policy.recurrent:
            if state is not None or episode_start is not None:
                raise ValueError("state and episode_start apply to recurrent policies only (this one is feed-forward)")
            return super().predict(obs, deterministic=deterministic, action_masks=action_masks)
        batch, single = self._observation_batch(obs)
        masks = None if action_masks is None else self.check_action_masks(action_masks, batch.shape[0], single)
        actions, state = predict_with_state(self.policy, self._normalize(batch), state, episode_start, deterministic,
                                            self.device, masks, generator=self.torch_rng)
        return (actions[0], state) if single else (actions, state)

    def deterministic_module(self) -> torch.nn.Module:
        normalize = None if self.obs_normalizer is None else NormalizeObs(self.obs_normalizer)
        if self.policy.recurrent:  # takes and returns the state (rapidrl.export)
            return RecurrentMode(self.policy, normalize=normalize)
        if self.action_mask_size:  # the exported module takes the masks as a second input
            return ActorCriticMode(self.policy, masked=True, normalize=normalize)
        mode = ActorCriticMode(self.policy)
        if normalize is None:
            return mode
        return torch.nn.Sequential(normalize, mode)

    def episode_actor(self, n: int, deterministic: bool = True):
        if not self.policy.recurrent:
            return super().episode_actor(n, deterministic)
        actor = RecurrentActor(self.policy, n, self.device, deterministic, self.torch_rng)

        def act(obs: np.ndarray, starts: np.ndarray, action_masks: np.ndarray | None = None) -> np.ndarray:
            x = torch.from_numpy(np.ascontiguousarray(self._normalize(obs))).to(self.device)
            masks = None if action_masks is None else torch.from_numpy(np.ascontiguousarray(action_masks)).to(
                self.device)
            raw = actor(x, torch.from_numpy(np.asarray(starts, dtype=bool)).to(self.device), masks)
            return self.policy.to_env_action(raw).cpu().numpy()

        return act

    def _policy_actions(self, obs: np.ndarray, deterministic: bool, action_masks: np.ndarray | None = None
                        ) -> np.ndarray:
        """Actions for obs [B, ...] (normalized here), among the valid actions of ``action_masks`` [B, M] bool when
        given."""
        with torch.no_grad():
            x = torch.from_numpy(np.ascontiguousarray(self._normalize(obs))).to(self.device)
            masks = None if action_masks is None else torch.from_numpy(np.ascontiguousarray(action_masks)).to(
                self.device)
            raw, _, _ = self.policy.act(x, deterministic=deterministic, action_masks=masks, generator=self.torch_rng)
            return self.policy.to_env_action(raw).cpu().numpy()

    # -- the iteration: rollout, then advantages ---------------------------------------------------
    def _rollout(self) -> int:
        self._schedule_update(self.progress_remaining())
        if self.device_collector is not None:
            self._collect_on_device()
        else:
            self._collect()
            self._advantages()
        if self.buffer.masked and (self.policy.recurrent or not self.supports_loss_masks):
            what = "a recurrent policy" if self.policy.recurrent else self.name.upper()
            raise ValueError(f"{what} trains on whole env columns and cannot leave out the rows of agents that left "
                             "mid-episode (the env's info['active']): use a feed-forward PPO, A2C, MAPPO or IPPO")
        return self.config.num_steps * self.config.num_envs

    def _collect(self) -> None:
        """Fill ``self.buffer`` with one rollout from the current observations (host collection; ``_last_obs`` and
        ``_last_values``: what its bootstrap needs)."""
        if self._needs_reset:
            self._reset_envs()
        if self.async_collector is not None:  # rollout k from the thread; rollout k+1 starts
            rollout = self._collect_async()
            self.buffer, self._raw_obs = rollout.buffer, rollout.raw_obs
            self._last_obs, self._last_values = rollout.last_obs, rollout.last_values
            returns, lengths = rollout.ep_returns, rollout.ep_lengths
        else:
            col = self.collector
            returns, lengths = col.collect(self.buffer, self._obs, self._raw_obs, self.obs_normalizer,
                                           seed=self._draw_seed() if col.seeded else None)
            self._last_obs, self._last_values = self._normalize(self._obs), None
        self._record_episodes(returns, lengths)

    def _advantages(self) -> None:
        """Reward scaling, the bootstrap values, the observation statistics (with the rollout's raw observations),
        then GAE into ``buffer.advantages`` and ``buffer.returns`` (``paths["advantages"]``: V-trace runs in the
        update instead)."""
        c = self.config
        with self.timer.phase("advantages"):
            if self.reward_scaler is not None:
                done = self.buffer.terminated | self.buffer.truncated
                self.buffer.rewards[:] = self.reward_scaler.scale_rollout(self.buffer.rewards, done)
            last_values = self._last_values
            if last_values is None:
                with torch.no_grad():
                    last_values = self.collector.value(torch.from_numpy(self._last_obs).to(self.device))
            if self.obs_normalizer is not None:
                self.obs_normalizer.rms.update(self._raw_obs.reshape(-1, *self._obs.shape[1:]))
            if self.paths["advantages"].value == "gae":
                self.buffer.compute_advantages(last_values, gamma=c.gamma, lam=c.gae_lambda)

    def _reset_envs(self) -> None:
        obs, _ = self.env.reset(seed=self._env_seed)
        np.copyto(self._obs, obs)
        self._needs_reset = False
        if self.policy.recurrent:
            self.collector.reset_state()

    def _draw_seed(self) -> int:
        return int(self.np_rng.integers(0, 2**31 - 1))

    def _collect_async(self):
        """Rollout k from the collector thread; rollout k+1 starts (with the weights published so far)."""
        ac = self.async_collector
        with self.timer.phase("collect_wait"):
            if not ac.pending:  # first rollout: publish the current weights (they may have been loaded)
                ac.publish()
                ac.start(self._draw_seed())
            rollout = ac.wait()
            ac.start(self._draw_seed())
        return rollout

    def _collect_on_device(self) -> None:
        """Device path: rollout, GAE and episode sums stay on the env's device (the sums read at each report:
        ``_report_statistics``)."""
        c, dc = self.config, self.device_collector
        if self._needs_reset:
            dc.reset(self._env_seed)
            self._needs_reset = False
        with self.timer.phase("collect"):
            dc.collect(self.buffer)
        if self.paths["advantages"].value == "gae":
            with self.timer.phase("advantages"):
                b = self.buffer.tensors
                gae_torch(b.rewards, b.values, dc.last_values, b.terminated, b.truncated, gamma=c.gamma,
                          lam=c.gae_lambda, final_values=b.final_values, out_advantages=b.advantages,
                          out_returns=b.returns)

    def learn(self, total_timesteps: int, callback=None, progress_bar: bool = True, *, resume: bool = False):
        """See ``Algorithm.learn``; with ``async_collect`` the collector thread is joined when it returns or raises."""
        try:
            return super().learn(total_timesteps, callback, progress_bar, resume=resume)
        finally:
            if self.async_collector is not None:
                self.async_collector.close()

    def _schedule_update(self, progress_remaining: float) -> None:
        """Set what the next update anneals, at the progress of the rollout's start: the learning rate (PPO
        anneals its clip range here too)."""
        c = self.config
        if c.anneal_lr:
            lr = c.learning_rate * progress_remaining
            for g in self.optimizer.param_groups:
                g["lr"] = lr

    def _report_statistics(self) -> None:
        """The device path's episode sums since the last report (one host read)."""
        if self.device_collector is not None:
            count, mean_return, mean_length = self.device_collector.pop_episode_stats()
            self.num_episodes += count
            if count:
                self.record({"charts/episodic_return": mean_return, "charts/episodic_length": mean_length})

    # -- the update ------------------------------------------------------------------------------
    def _train(self) -> None:
        with self.timer.phase("update"):
            self._update()
        if self.async_collector is not None:
            self.async_collector.publish()

    def _update(self) -> None:
        raise NotImplementedError

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
            state["recurrent"] = self.collector.state_dict()
        return state

    def _load_extra_training_state(self, state: dict) -> None:
        np.copyto(self._obs, state["obs"].numpy())
        self._needs_reset = bool(state["needs_reset"])
        self.torch_generator.set_state(state["generator"])
        if self.policy.recurrent:
            self.collector.load_state_dict(state["recurrent"])
        if self.async_collector is not None:
            self.async_collector.load_state_dict(state["async"])

    def _load_state(self, state: dict) -> None:
        self.policy.load_state_dict(state["policy"])
        self.optimizer.load_state_dict(state["optimizer"])
        if self.obs_normalizer is not None:
            self.obs_normalizer.load_state_dict(state["obs_normalizer"])
        if self.reward_scaler is not None:
            self.reward_scaler.load_state_dict(state["reward_scaler"])
