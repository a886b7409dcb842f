"""The off-policy core shared by DQN, SAC and TD3: config fields, replay set-up, collection, the update driver.

Action masks (docs/masks.md; DQN): the replay stores each observation with its valid actions, ``[obs | mask]``
(the mask as 0/1 in the observation's dtype, ``_store_rows``), so a sampled ``next_obs`` (an n-step one included)
carries the mask of the state it bootstraps from; ``_split_rows`` takes the two apart.

One iteration of ``learn``: ``train_freq`` steps of the vector env (each adds ``num_envs`` transitions to the
replay buffer: ``_rollout``), then ``gradient_steps`` updates (``_train``) on minibatches sampled from it (none before
``learning_starts`` env steps, which use uniform-random actions). The update-to-data ratio is
``gradient_steps / (train_freq * num_envs)``.

The update is a function of one minibatch that performs the optimizer steps and returns its statistics as
one tensor. It never reads a tensor back to the host (no ``.item()``): statistics are summed on the device
and turned into Python floats at each report (every ``log_every_steps`` env steps). The minibatch tensors are the
buffer's preallocated, reused tensors, so shapes are static and the update could be CUDA-graph captured; with
``torch_compile=True`` it runs under ``torch.compile`` (eager if compilation fails).

Precision (``rapidrl.train.precision``): under precision="bf16" the "torch" backend's forward passes and the
acting run under bfloat16 autocast (the networks return float32; losses, parameters, Adam and replay stay
float32); the handwritten backends run in float32.

Truncation: at an episode end the buffer receives the true final observation as ``next_obs`` (the vector
env's ``info["final_obs"]``), and only ``terminated`` stops bootstrapping.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import warnings
import weakref
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

import gymnasium as gym
import numpy as np
import psutil
import torch

from rapidrl.algos.offpolicy_networks import network_of, spherical_networks
from rapidrl.buffers import FrameReplayBuffer, ReplayBuffer
from rapidrl.buffers.her import GOAL_SELECTIONS, HerReplayBuffer
from rapidrl.envs.goal.spec import goal_spec
from rapidrl.kernels.distributions import nth_valid
from rapidrl.nn.deploy import NormalizeObs
from rapidrl.nn.encoders import encoder_for
from rapidrl.nn.normalize import ObsNormalizer, RewardScaler
from rapidrl.nn.numba_mlp import ACTING_FORWARD_MAX_ROWS, MLPForward
from rapidrl.train.algorithm import Algorithm
from rapidrl.train.compile import maybe_compile
from rapidrl.train.config import ConfigError, RuntimeConfig, check_hidden, check_positive, check_unit_interval, require
from rapidrl.train.paths import PathChoice, fixed
from rapidrl.train.warmup import short_run


@dataclass
class OffPolicyConfig(RuntimeConfig):
    num_envs: int = 1
    """Parallel environments collecting experience."""
    learning_rate: float = 3e-4
    """Optimizer learning rate (every network)."""
    buffer_size: int = 1_000_000
    """Replay capacity in transitions."""
    learning_starts: int = 100
    """Env steps (over all envs) taken with uniform-random actions before the first update."""
    batch_size: int = 256
    """Transitions per gradient step."""
    gamma: float = 0.99
    """Discount factor."""
    tau: float = 0.005
    """Polyak coefficient of the target networks: target <- (1 - tau) target + tau online (1: hard copy)."""
    train_freq: int = 1
    """Vector-env steps between two update phases."""
    gradient_steps: int = 1
    """Gradient steps per update phase."""
    n_step: int = 1
    """n-step returns (computed by the replay buffer; 1: one-step TD targets)."""
    hidden: tuple[int, ...] = (256, 256)
    """Hidden layer sizes of every network."""
    torch_compile: bool = False
    """Run the update under ``torch.compile`` (on the "torch" gradient backend; the first update compiles for
    ~10-60 s, then runs eagerly if compiling failed, with a warning)."""
    log_every_steps: int = 100
    """Env steps between two reports (``RuntimeConfig``): 100 here, since an iteration can be a single env step,
    whose report (~1 ms for SAC) would cost more than the step; the loss statistics are then the means over the
    gradient steps since the last report."""
    replay_storage: str = "memory"
    """Where the replay buffer lives: "memory", or "mmap" (``.npy`` files under ``replay_dir``, paged in and out
    by the OS: for a ``buffer_size`` larger than the free memory). Its size is checked against the free memory
    (or disk) when the model is built."""
    replay_dir: str | None = None
    """Directory of the memory-mapped replay files (``replay_storage="mmap"``); None: a new temporary directory,
    removed when the model is garbage-collected or the process exits."""
    her: bool = False
    """Hindsight experience replay (``rapidrl.buffers.her``): on a goal-conditioned env (Dict observations with
    observation/achieved_goal/desired_goal and a vectorised compute_reward), relabel sampled goals."""
    her_goal_selection: str = "future"
    """HER's choice of hindsight goals within a transition's episode: "future", "final" or "episode"."""
    her_n_sampled_goal: int = 4
    """HER: relabelled transitions per transition kept as collected (relabelled fraction n / (n + 1))."""

    def validate(self) -> None:
        super().validate()
        require(self.replay_storage in ("memory", "mmap"),
                f"replay_storage must be 'memory' or 'mmap', got {self.replay_storage!r}")
        check_positive(self, "num_envs", "learning_rate", "buffer_size", "batch_size", "train_freq", "gradient_steps",
                       "n_step")
        check_positive(self, "learning_starts", allow_zero=True)
        check_unit_interval(self, "gamma", "tau")
        require(self.tau > 0, "tau must be > 0 (tau = 0 would never update the target networks)")
        check_hidden(self.hidden, allow_empty=self.hidden_may_be_empty)
        require(self.n_step == 1 or self.buffer_size % self.num_envs == 0,
                f"buffer_size={self.buffer_size} must be a multiple of num_envs={self.num_envs} when n_step > 1")
        require(self.batch_size <= self.buffer_size,
                f"batch_size={self.batch_size} is larger than buffer_size={self.buffer_size}")
        require(self.her_goal_selection in GOAL_SELECTIONS,
                f"her_goal_selection must be one of {GOAL_SELECTIONS}, got {self.her_goal_selection!r}")
        check_positive(self, "her_n_sampled_goal", allow_zero=True)
        require(not self.her or self.n_step == 1, "her=True relabels one-step transitions: set n_step=1")
        require(not self.her or self.buffer_size % self.num_envs == 0,
                f"her=True needs buffer_size={self.buffer_size} to be a multiple of num_envs={self.num_envs}")

    renamed_settings: ClassVar[dict[str, str]] = {"compile": "torch_compile"}  # the name of older rapidrl versions
    hidden_may_be_empty: ClassVar[bool] = False
    """``hidden=()`` is allowed (the recurrent learners: the observation goes straight into the recurrent layer)."""

    @classmethod
    def upgrade_legacy(cls, values: dict[str, Any]) -> dict[str, Any]:
        """Settings of older rapidrl versions: ``compile`` (``renamed_settings``); ``log_interval`` (gradient steps
        between reads of the statistics: ``log_every_steps``, the env steps they take at ``train_freq * num_envs``
        env steps per ``gradient_steps``)."""
        values = super().upgrade_legacy(values)
        if "log_interval" in values:
            updates = values.pop("log_interval")
            per_update = (values.get("train_freq", cls.train_freq) * values.get("num_envs", cls.num_envs)
                          / values.get("gradient_steps", cls.gradient_steps))
            values.setdefault("log_every_steps", max(1, round(updates * per_update)))
        return values


@dataclass
class CriticEnsembleConfig:
    """The critic ensemble's size (a dataclass mixin of the configs of TD3, TD3+BC, SAC, CrossQ, CQL and IQL)."""

    n_critics: int = 2
    """Critics in the ensemble (one batched ``CriticEnsemble``); the targets take the minimum over them."""

    def validate_critics(self) -> None:
        check_positive(self, "n_critics")



def uniform_valid(masks: np.ndarray, u: np.ndarray) -> np.ndarray:
    """The valid action of each row of masks [N, A] bool that uniform draws u [N] in [0, 1) pick uniformly (the
    floor(u * V)-th of its V valid actions, ``rapidrl.kernels.distributions.nth_valid``) -> [N] int64."""
    return np.array([nth_valid(m, x) for m, x in zip(masks, u)], np.int64)


def check_box_actions(name: str, space: gym.Space, discrete: str = "DQN, PPO or A2C") -> None:
    """TypeError unless ``space`` is a 1-D Box (the actions of SAC and TD3); ``discrete``: the algorithms to use for
    Discrete actions instead."""
    if not isinstance(space, gym.spaces.Box) or len(space.shape) != 1:
        raise TypeError(f"{name} needs a 1-D Box action space, got {space}; for Discrete actions use {discrete}, "
                        "for MultiDiscrete/MultiBinary PPO or A2C")


def check_replay_fits(nbytes: int, buffer_size: int, storage: str, path: Path | None) -> None:
    """ConfigError when a replay buffer of ``nbytes`` cannot fit: in the memory available now ("memory"), or on
    the disk under ``path`` ("mmap"). The message names ``buffer_size`` and the memory-mapped storage."""
    gib = 1024 ** 3
    if storage == "memory":
        available = psutil.virtual_memory().available
        if nbytes > available:
            raise ConfigError(
                f"the replay buffer needs {nbytes / gib:.1f} GiB (buffer_size={buffer_size:,} transitions) but "
                f"{available / gib:.1f} GiB of memory is available: lower buffer_size, or keep the buffer in "
                "memory-mapped files on disk with replay_storage=\"mmap\" (and replay_dir=DIR)")
    else:
        free = shutil.disk_usage(path).free
        if nbytes > free:
            raise ConfigError(
                f"the memory-mapped replay buffer needs {nbytes / gib:.1f} GiB (buffer_size={buffer_size:,} "
                f"transitions) but {path} has {free / gib:.1f} GiB free: lower buffer_size or choose another "
                "replay_dir")


def image_obs_dtype(observation_space: gym.Space, encoder_kind: str) -> np.dtype:
    """The dtype observations are stored and acted on in: uint8 for a CNN on uint8 images (the network scales them),
    else float32."""
    image = encoder_kind != "mlp" and observation_space.dtype == np.uint8
    return np.dtype(np.uint8) if image else np.dtype(np.float32)


def frame_replay_spec(model: OffPolicyAlgorithm) -> tuple[type, tuple, dict[str, Any]] | None:
    """``FrameReplayBuffer``'s spec (each frame stored once) where it can hold ``model``'s replay: ``frame_replay`` on,
    a frame-stacking env (``env.frame_stack > 1``: Atari) whose uint8 frames are stored as they are, 1-step returns.
    None otherwise. Callers exclude what their other buffers add (prioritized replay, HER)."""
    c = model.config
    if c.frame_replay and c.n_step == 1 and getattr(model.env, "frame_stack", 1) > 1 and model._obs_dtype == np.uint8:
        return FrameReplayBuffer, (c.buffer_size, model.observation_space.shape), \
            dict(num_envs=c.num_envs, gamma=c.gamma, seed=c.seed, device=c.device)
    return None


def _state_of(thing) -> Any:
    """What ``OffPolicyAlgorithm._state`` saves of a module or optimizer (its state dict) or a tensor (a copy)."""
    return thing.detach().clone() if isinstance(thing, torch.Tensor) else thing.state_dict()


def buffer_path(path: str | os.PathLike) -> Path:
    """Where ``save(path, include_buffer=True)`` writes the replay buffer: beside the model file."""
    path = Path(path)
    return path.with_name(path.name + ".buffer")


class OffPolicyAlgorithm(Algorithm):
    """Replay collection and the update driver; DQN/SAC/TD3 supply networks, acting and ``_update_step``.

    Subclass hooks: ``_build_networks()``, ``_update_step(batch) -> out`` (a 1-D tensor), optionally
    ``_after_update(batch, out) -> stats`` for work outside the compiled update (priorities, delayed steps) returning
    the statistics named by ``stat_names``; acting: ``_act(x, deterministic)`` on an observation tensor [B, O]
    (``_obs_tensor``) returning env actions as NumPy, optionally ``_explore(x)`` (training actions after
    ``learning_starts``; default ``_act(x, False)``), and ``_actor_module()`` for export; or ``_policy_actions(obs,
    deterministic)`` and ``_explore_actions(obs)`` on NumPy observations (DQN, SAC's compiled forward); state:
    ``saved_state`` (or ``_state``/``_load_state``).
    """

    stat_names: tuple[str, ...] = ()
    saved_state: tuple[str, ...] = ()
    """The attributes ``_state`` saves under their names: modules and optimizers (their state dicts) and tensors
    (SAC's log alpha); one that is None (an optimizer the settings leave out) is skipped."""
    has_replay_buffer = True
    _acting_forward: MLPForward | None = None
    """The compiled MLP forward that acts on a few observations, where ``_bind_backend`` made one (DQN, SAC, TD3,
    DDPG)."""
    updates_obs_statistics = True
    """With ``normalize_obs``, the statistics follow the observations acted on while training (False for the offline
    algorithms: theirs are the dataset's, ``rapidrl.algos.offline``)."""
    multi_input = False
    """True when the networks take Dict/Tuple observations with images (a CNN on each image: DQN)."""
    box_actions_only = False
    discrete_instead = "DQN, PPO or A2C"
    """What to use for Discrete actions where ``box_actions_only`` (an offline algorithm names offline ones)."""
    """The networks act in a 1-D Box (the actor-critics; ``_check_spaces`` refuses other action spaces)."""

    def _build(self) -> None:
        c = self.config
        self._check_spaces()  # before anything is allocated (a replay buffer can be many GB)
        self.discrete = isinstance(self.action_space, gym.spaces.Discrete)
        self.obs_dim = int(np.prod(self.observation_space.shape))
        self._obs_dtype = self._obs_storage_dtype()
        if self.action_mask_size and len(self.observation_space.shape) != 1:
            raise ConfigError(f"{self.name.upper()} with action masks needs flat observations (the replay stores each "
                              f"with its mask), got {self.observation_space.shape}: image observations with masks "
                              "train with PPO, A2C, IMPALA or PQN")
        self.buffer = self._make_buffer()
        self._obs = np.zeros((c.num_envs, *self._stored_obs_shape()), self._obs_dtype)
        self._next_obs = np.zeros_like(self._obs)  # next_obs as stored: final obs where an episode ended
        self._needs_reset = True
        self.obs_normalizer = self._make_obs_normalizer()
        self.reward_scaler = self._make_reward_scaler()
        self._reward_divisor = 1.0
        self._refresh_normalization()
        self._build_networks()
        self._spherical = spherical_networks(self)  # network="simbav2": projected back onto the sphere per update
        self.paths["gradient_backend"] = self._resolve_gradient_backend()
        self.paths["collection"] = fixed("collection", "step", "the only one: a vector-env step per call, into replay")
        self.paths["precision"] = self._resolve_precision()
        self._bind_backend()
        self.paths["acting"] = self._acting_path()
        self._update_fn = maybe_compile(self._update_step, c.torch_compile)
        self._stat_sum = torch.zeros(len(self.stat_names), device=self.device)
        self._stat_count = 0
        self.num_gradient_steps = 0

    def _encoder_kind(self) -> str:
        """The observation encoder the config's ``encoder`` resolves to for this env (``encoder_for``): "mlp" for an
        algorithm without that setting."""
        return encoder_for(self.observation_space, getattr(self.config, "encoder", "mlp"))

    def _obs_storage_dtype(self) -> np.dtype:
        """dtype of stored and acted-on observations: uint8 for a CNN on uint8 images (``image_obs_dtype``), else
        float32."""
        return image_obs_dtype(self.observation_space, self._encoder_kind())

    def _stored_obs_shape(self) -> tuple[int, ...]:
        """The shape of a stored observation: the observation's, or ``(O + M,)``, observation and action mask, for an
        env with action masks."""
        if self.action_mask_size:
            return (self.obs_dim + self.action_mask_size,)
        return self.observation_space.shape

    def _store_rows(self, out: np.ndarray, obs: np.ndarray, masks: np.ndarray | None, where=True) -> None:
        """out [N, *stored shape] <- the observations [N, *obs_shape] (and their masks [N, M]) where ``where``."""
        if not self.action_mask_size:
            np.copyto(out, obs, where=where)
            return
        where = np.asarray(where).reshape(-1, 1)
        np.copyto(out[:, :self.obs_dim], obs, where=where)
        np.copyto(out[:, self.obs_dim:], masks, where=where)

    def _split_rows(self, rows):
        """Stored rows [..., O + M] (NumPy or torch; [B, O + M], or R2D2's sequences [L, B, O + M]) -> (observations
        [..., O], masks [..., M] bool), or (rows, None) for an env without action masks."""
        if not self.action_mask_size:
            return rows, None
        return rows[..., :self.obs_dim], rows[..., self.obs_dim:] > 0.5

    def _buffer_kwargs(self) -> dict[str, Any]:
        c = self.config
        return dict(obs_dtype=self._obs_dtype, action_dtype=np.int64 if self.discrete else np.float32, seed=c.seed,
                    n_step=c.n_step, gamma=c.gamma, num_envs=c.num_envs, device=c.device)

    def _buffer_spec(self) -> tuple[type, tuple, dict[str, Any]]:
        """(buffer class, positional args, keyword args) of the replay buffer (DQN picks among three classes)."""
        c = self.config
        action_shape = () if self.discrete else self.action_space.shape
        if c.her:  # hindsight relabelling on the env's goals (a one-line error for an env without them)
            return HerReplayBuffer, (c.buffer_size, self.observation_space.shape, action_shape), \
                dict(goal=goal_spec(self.env), goal_selection=c.her_goal_selection,
                     n_sampled_goal=c.her_n_sampled_goal, **self._buffer_kwargs())
        return ReplayBuffer, (c.buffer_size, self._stored_obs_shape(), action_shape), self._buffer_kwargs()

    def _make_buffer(self):
        """The replay buffer of ``_buffer_spec``, after checking that it fits in memory (or on disk, for mmap)."""
        c = self.config
        cls, args, kwargs = self._buffer_spec()
        if c.her and cls is not HerReplayBuffer:
            raise ConfigError(f"her=True relabels uniform replay; {cls.__name__} cannot (set prioritized=False)")
        path = None
        if c.replay_storage == "mmap":
            if c.replay_dir is None:
                path = Path(tempfile.mkdtemp(prefix="rapidrl-replay-"))
                weakref.finalize(self, shutil.rmtree, path, True)
            else:
                path = Path(c.replay_dir)
                path.mkdir(parents=True, exist_ok=True)
        check_replay_fits(cls.storage_bytes(*args, **kwargs), c.buffer_size, c.replay_storage, path)
        return cls(*args, **kwargs, storage=c.replay_storage, path=path)

    # -- observation normalisation (normalize_obs) ------------------------------------------------
    def _make_obs_normalizer(self) -> ObsNormalizer | None:
        """The statistics of ``normalize_obs`` (SimBa's RSNorm: no clipping, eps 1e-8), None without it. Every network
        input is normalised with them: acting (``_obs_tensor``, ``_normalized_obs``), the update's minibatch
        (``_normalize_batch``) and the exported policy (``deterministic_module``)."""
        if not getattr(self.config, "normalize_obs", False):
            return None
        return ObsNormalizer(self.observation_space.shape, clip=np.inf, eps=1e-8)

    def _make_reward_scaler(self) -> RewardScaler | None:
        """SimbaV2's reward scaling (network="simbav2"), None otherwise: the statistics of the discounted returns of
        the rewards collected (warm-up included), by whose ``divisor`` every sampled minibatch's rewards are divided
        (``_normalize_batch``). The replay keeps raw rewards."""
        if network_of(self.config) != "simbav2":
            return None
        return RewardScaler(self.config.num_envs, self.config.gamma)

    def _refresh_normalization(self) -> None:
        """The update's tensors of the observation normalisation from the statistics now: x * scale + shift (None:
        identity)."""
        self._obs_scale = self._obs_shift = None
        if self.obs_normalizer is not None:
            rms = self.obs_normalizer.rms
            inv = 1.0 / np.sqrt(rms.var + self.obs_normalizer.eps)
            self._obs_scale = torch.as_tensor(inv.reshape(-1), dtype=torch.float32, device=self.device)
            self._obs_shift = torch.as_tensor((-rms.mean * inv).reshape(-1), dtype=torch.float32, device=self.device)

    def _normalized_obs(self, obs: np.ndarray) -> np.ndarray:
        """Observations [B, ...] as the networks take them: normalised float32 [B, O] with ``normalize_obs``, else the
        observations as they are."""
        if self.obs_normalizer is None:
            return obs
        return self.obs_normalizer(obs.reshape(obs.shape[0], -1))

    def _normalize_batch(self, batch):
        """A sampled minibatch with its observations normalised in place (the sampler's own arrays, which its next
        call overwrites anyway); the batch as it is without ``normalize_obs``."""
        if self._obs_scale is not None:
            batch.obs.mul_(self._obs_scale).add_(self._obs_shift)
            batch.next_obs.mul_(self._obs_scale).add_(self._obs_shift)
        if self.reward_scaler is not None:
            batch.rewards.div_(self._reward_divisor)
        return batch

    # -- to be supplied by DQN/SAC/TD3 -----------------------------------------------------------
    def _check_spaces(self) -> None:
        """Raise TypeError for observation or action spaces the algorithm cannot train on (called first)."""
        if not isinstance(self.observation_space, gym.spaces.Box):
            raise TypeError(f"{self.name.upper()} needs a Box observation space, got {self.observation_space}")
        if getattr(self.observation_space, "image_parts", ()) and not self.multi_input:
            raise TypeError(f"{self.name.upper()}'s networks are MLPs: observations with images inside a Dict or Tuple "
                            f"({self.observation_space}) train with PPO, A2C or DQN, which put a CNN on each image")
        if len(self.observation_space.shape) != 1 and not self.multi_input:
            raise TypeError(f"{self.name.upper()}'s networks are MLPs on flat observations, got shape "
                            f"{self.observation_space.shape}; image observations train with PPO, A2C or DQN (CNNs)")
        if self.box_actions_only:
            check_box_actions(type(self).__name__, self.action_space, self.discrete_instead)

    def _build_networks(self) -> None:
        raise NotImplementedError

    def _bind_backend(self) -> None:
        """Set up what the resolved gradient backend needs (after ``_build_networks``)."""

    def _update_batch(self) -> int:
        return self.config.batch_size

    def _acts_compiled(self) -> bool:
        """Whether ``_bind_backend`` makes a compiled float32 MLP forward for acting (SAC, TD3, DDPG): on the
        handwritten backend, and under precision="bf16" on the CPU with the MLP networks, whose torch update
        autocasts while acting on one observation is per-call overhead that autocast adds to (SAC HalfCheetah acted
        through the PyTorch actor lost most of bf16's gain end to end)."""
        return self.gradient_backend == "handwritten" or (
            self.precision == "bf16" and self.device.type == "cpu" and getattr(self.config, "network", "mlp") == "mlp")

    def _acting_path(self) -> PathChoice:
        """``paths["acting"]``: how the actions of training and ``predict`` are computed on the CPU."""
        if self._acting_forward is None:
            return PathChoice("acting", "torch", "the PyTorch networks")
        return PathChoice("acting", "compiled", f"the compiled MLP forward (rapidrl.nn.numba_mlp.MLPForward) for up to "
                          f"{ACTING_FORWARD_MAX_ROWS} observations per call (faster there), the PyTorch networks above")

    def _update_step(self, batch) -> torch.Tensor:
        raise NotImplementedError

    def _after_update(self, batch, out: torch.Tensor) -> torch.Tensor:
        """Work outside the update function; returns the statistics to accumulate (``stat_names`` order)."""
        return out

    # -- acting ----------------------------------------------------------------------------------
    def _obs_tensor(self, obs: np.ndarray) -> torch.Tensor:
        """Observations [B, ...] -> float32 tensor [B, O] on the device (normalised with ``normalize_obs``)."""
        x = np.ascontiguousarray(self._normalized_obs(obs).reshape(obs.shape[0], -1), dtype=np.float32)
        return torch.from_numpy(x).to(self.device)

    def _act(self, x: torch.Tensor, deterministic: bool) -> np.ndarray:
        raise NotImplementedError

    def _explore(self, x: torch.Tensor) -> np.ndarray:
        return self._act(x, deterministic=False)

    def _policy_actions(self, obs: np.ndarray, deterministic: bool) -> np.ndarray:
        with torch.no_grad():
            return self._act(self._obs_tensor(obs), deterministic)

    def _explore_actions(self, obs: np.ndarray) -> np.ndarray:
        with torch.no_grad():
            return self._explore(self._obs_tensor(obs))

    def _actor_module(self) -> torch.nn.Module:
        raise NotImplementedError

    def deterministic_module(self) -> torch.nn.Module:
        """The exported policy: ``_actor_module()``, after the observation normalisation of ``normalize_obs``."""
        actor = self._actor_module()
        if self.obs_normalizer is None:
            return actor
        return torch.nn.Sequential(NormalizeObs(self.obs_normalizer), actor)

    # -- collection ------------------------------------------------------------------------------
    def _random_actions(self) -> np.ndarray:
        n = self.config.num_envs
        if self.discrete and self.action_mask_size:  # uniform over each env's valid actions
            return uniform_valid(self._split_rows(self._obs)[1], self.np_rng.random(n))
        if self.discrete:
            return self.np_rng.integers(self.action_space.n, size=n)
        low, high = self.action_space.low, self.action_space.high
        return self.np_rng.uniform(low, high, size=(n, *low.shape)).astype(np.float32)

    def _collect_step(self, steps_so_far: int) -> None:
        """One vector-env step: act, step, store (final obs as next_obs where an episode ended)."""
        timer = self.timer
        with timer.phase("policy"):
            if self.obs_normalizer is not None and self.updates_obs_statistics:
                self.obs_normalizer.rms.update(self._obs)  # as SimBa: every observation acted on, warm-up included
            if steps_so_far < self.config.learning_starts:
                actions = self._random_actions()
            elif self.action_mask_size:
                actions = self._explore_actions(*self._split_rows(self._obs))
            else:
                actions = self._explore_actions(self._obs)
        with timer.phase("env"):
            next_obs, rewards, terminated, truncated, info = self.env.step(actions)
        with timer.phase("storage"):
            if self.reward_scaler is not None:
                self.reward_scaler.update(np.asarray(rewards, np.float64), np.logical_or(terminated, truncated))
            masks = info.get("action_mask")
            self._store_rows(self._next_obs, next_obs, masks)
            final = info.get("_final_obs")
            if final is not None and final.any():
                self._store_rows(self._next_obs, info["final_obs"], info.get("final_action_mask"),
                                 where=final.reshape(-1, *[1] * (next_obs.ndim - 1)))
            self._add_to_replay(actions, rewards, terminated, truncated)
            self._store_rows(self._obs, next_obs, masks)
            self._track_episodes(info)

    def _add_to_replay(self, actions: np.ndarray, rewards: np.ndarray, terminated: np.ndarray,
                       truncated: np.ndarray) -> None:
        """Store the step just taken: (``_obs``, actions, rewards, ``_next_obs``, terminated, truncated) of every env
        (R2D2 adds the recurrent states its policy acted with)."""
        self.buffer.add(self._obs, actions, rewards, self._next_obs, terminated, truncated)

    def _rollout(self) -> int:
        c = self.config
        if self._needs_reset:
            obs, info = self.env.reset(seed=c.seed)
            self._store_rows(self._obs, obs, info.get("action_mask"))
            self._needs_reset = False
            self.buffer.end_episodes()  # a resumed run's reset env: the stored episodes end where they stopped
        for k in range(c.train_freq):
            self._collect_step(self.num_timesteps + k * c.num_envs)
        return c.train_freq * c.num_envs

    def _train(self) -> None:
        c = self.config
        if self.num_timesteps >= c.learning_starts and len(self.buffer) >= c.batch_size:
            with self.timer.phase("update"):
                if self.obs_normalizer is not None and self.updates_obs_statistics:
                    self._refresh_normalization()  # the statistics of the observations collected so far
                if self.reward_scaler is not None:
                    self._reward_divisor = self.reward_scaler.divisor(c.value_range)
                for _ in range(c.gradient_steps):
                    self._train_step()

    # -- updates ---------------------------------------------------------------------------------
    def _train_step(self) -> None:
        """Sample, update, accumulate statistics on the device (read at the next report: ``_report_statistics``)."""
        batch = self._sample_batch()
        stats = self._after_update(batch, self._update_fn(batch))
        for network in self._spherical:  # SimbaV2: every trained weight back onto the unit sphere after its step
            network.project_weights()
        self.num_gradient_steps += 1
        self._stat_sum += stats
        self._stat_count += 1

    def _sample_batch(self):
        """The minibatch of the next update (tensors on the device): the replay buffer's (offline algorithms draw
        from their dataset, ``rapidrl.algos.offline``)."""
        return self._normalize_batch(self.buffer.sample(self.config.batch_size, as_torch=True))

    def _report_statistics(self) -> None:
        """The means of the statistics of the gradient steps since the last report (one host read)."""
        if not self._stat_count:
            return
        means = (self._stat_sum / self._stat_count).tolist()
        self.record({f"losses/{k}": v for k, v in zip(self.stat_names, means)})
        self.record({"charts/gradient_steps": float(self.num_gradient_steps)})
        self._stat_sum.zero_()
        self._stat_count = 0

    def learn(self, total_timesteps: int, callback=None, progress_bar: bool = True, *, resume: bool = False):
        """``Algorithm.learn``; first a warning when ``total_timesteps`` ends before the warm-up does (the first update
        comes after ``learning_starts`` steps: ``rapidrl.train.warmup.short_run``, which ``rapidrl train`` refuses)."""
        if not resume and isinstance(total_timesteps, (int, np.integer)) and total_timesteps > 0:
            short = short_run(self, self.num_timesteps + int(total_timesteps))
            if short is not None and short[1]:
                warnings.warn(short[0], UserWarning, stacklevel=2)
        return super().learn(total_timesteps, callback, progress_bar, resume=resume)

    # -- persistence -----------------------------------------------------------------------------
    def save(self, path: str | os.PathLike, *, training_state: bool = False, include_buffer: bool = False) -> Path:
        """Like ``Algorithm.save``; include_buffer also writes the replay buffer to ``<path>.buffer``."""
        out = super().save(path, training_state=training_state)
        if include_buffer:
            self.buffer.save(buffer_path(out))
        return out

    @classmethod
    def load(cls, path: str | os.PathLike, env=None, device: str | None = None, *, include_buffer: bool = False,
             **overrides):
        """Like ``Algorithm.load``; include_buffer also reads the replay buffer saved beside the model."""
        model = super().load(path, env=env, device=device, **overrides)
        if include_buffer:
            model.buffer.load(buffer_path(path))
        return model

    def _state(self) -> dict[str, Any]:
        state = {name: _state_of(getattr(self, name)) for name in self.saved_state if getattr(self, name) is not None}
        if self.obs_normalizer is not None:
            state["obs_normalizer"] = self.obs_normalizer.state_dict()
        return state

    def _load_state(self, state: dict[str, Any]) -> None:
        for name in self.saved_state:
            target = getattr(self, name)
            if isinstance(target, torch.Tensor):
                with torch.no_grad():
                    target.copy_(state[name])
            elif target is not None:
                target.load_state_dict(state[name])
        if self.obs_normalizer is not None:
            self.obs_normalizer.load_state_dict(state["obs_normalizer"])
            self._refresh_normalization()

    def _extra_training_state(self) -> dict[str, Any]:
        state = {"obs": torch.from_numpy(self._obs.copy()), "needs_reset": self._needs_reset,
                 "num_gradient_steps": self.num_gradient_steps}
        if self.reward_scaler is not None:
            state["reward_scaler"] = self.reward_scaler.state_dict()
        return state

    def _load_extra_training_state(self, state: dict[str, Any]) -> None:
        np.copyto(self._obs, state["obs"].numpy())
        self._needs_reset = bool(state["needs_reset"])
        self.num_gradient_steps = int(state["num_gradient_steps"])
        if self.reward_scaler is not None:
            self.reward_scaler.load_state_dict(state["reward_scaler"])
