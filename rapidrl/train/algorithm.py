"""What every algorithm shares: env set-up, seeding, the ``learn`` driver, predict, save/load.

An algorithm subclass supplies ``config_class`` (a dataclass), ``_build()`` (networks, optimizers,
storage), ``_rollout()`` (collect experience once, returning the env steps taken) and ``_train()`` (update on
it). Everything else, callbacks, timing, progress and logging, lives here once; evaluation
(``rapidrl.train.evaluation``), the path settings (``rapidrl.train.path_settings``) and the checkpoint file format
(``rapidrl.train.checkpoint``) are mixins and functions beside it.

One iteration of ``learn``: ``_rollout()``; ``num_timesteps`` grows by its steps; callbacks' ``on_rollout_end``;
``_train()``; ``num_updates`` grows by one; at a report, the statistics the update accumulated
(``_report_statistics``) and the finiteness check; ``on_update_end``; at a report the metrics flush;
``on_update_logged``. Reports come every ``log_every_steps`` env steps (``RuntimeConfig``): after the first iteration
at or after each multiple of it, and after the last; ``reporting`` says during ``_train`` whether this iteration
reports (an update reads its statistics back from the device only then).
"""

from __future__ import annotations

import dataclasses
import logging
import math
import os
from collections import deque
from pathlib import Path
from typing import Any, ClassVar

import gymnasium as gym
import numpy as np
import torch

from rapidrl._device import resolve_device
from rapidrl._unsafe.torch_private import largest_abs
from rapidrl.envs import VecEnvBase
from rapidrl.envs.core.actions import as_action_mask, mask_sizes
from rapidrl.envs.registry import qualified_id
from rapidrl.kernels.cache import install_shipped_cache
from rapidrl.train.callbacks import Callback, as_callback
from rapidrl.train.checkpoint import (
    FORMAT_VERSION,
    atomic_torch_save,
    check_plain,
    env_state,
    load_checkpoint,
    set_env_state,
)
from rapidrl.train.config import ConfigError, config_from_dict, config_to_dict
from rapidrl.train.evaluation import Evaluation, check_finite_observations, make_env
from rapidrl.train.finite import non_finite_loss
from rapidrl.train.path_settings import PathSettings
from rapidrl.train.paths import PathChoice, describe
from rapidrl.train.progress import TrainingProgress
from rapidrl.train.runtime import drawing_from, process_settings
from rapidrl.train.spaces import space_from_dict, space_to_dict, spaces_equal
from rapidrl.train.timing import PhaseTimer

_log = logging.getLogger("rapidrl")


class NonFiniteError(FloatingPointError):
    """Training produced a NaN or inf loss or parameter."""


class Algorithm(PathSettings, Evaluation):
    """Base class of PPO, A2C, DQN, SAC, TD3 (see each for the hyperparameters)."""

    name: ClassVar[str] = "algorithm"
    config_class: ClassVar[type]
    supports_distributed: ClassVar[bool] = False  # True where every gradient step calls _sync_grads
    has_replay_buffer: ClassVar[bool] = False
    """``save`` takes ``include_buffer=True`` and writes the replay buffer beside the model (off-policy)."""
    supports_action_masks: ClassVar[bool] = False
    """Acts on the valid actions only of an env that states them (docs/masks.md): PPO, A2C, IMPALA, MAPPO, IPPO, DQN,
    PQN. Another algorithm refuses such an env rather than ignore its masks."""

    def __init__(self, env, config=None, *, eval_env=None, env_kwargs: dict | None = None, distributed: bool = False,
                 **hyperparameters):
        if config is None:
            config = config_from_dict(self.config_class, hyperparameters)
        elif hyperparameters:
            config = dataclasses.replace(config, **hyperparameters)
        if not isinstance(config, self.config_class):
            raise TypeError(f"config must be a {self.config_class.__name__}, got {type(config).__name__}")
        config.validate()
        install_shipped_cache()  # a wheel's compiled kernels into Numba's cache, once, before any kernel runs
        self.config = config
        self.device = resolve_device(config.device)
        self.env_kwargs = dict(env_kwargs or {})
        # Several learners (torchrun): each rank gets its own env seed stream; see rapidrl.train.ddp.
        self.dist = None
        if distributed:
            if not self.supports_distributed:
                raise NotImplementedError(
                    f"distributed=True is not supported by {self.name.upper()}; algorithms that average gradients "
                    "over ranks: PPO, A2C, IMPALA")
            from rapidrl.train.ddp import DistributedContext

            self.dist = DistributedContext.from_env()
        rank = 0 if self.dist is None else self.dist.rank
        seed = config.seed if config.seed is not None else int(np.random.SeedSequence().entropy % 2**31)
        self.seed = seed
        # a generator lives on the CPU or an accelerator; another device (e.g. "meta") is refused by the paths check
        # that follows, with its reason, rather than here by torch
        rng_device = self.device if self.device.type in ("cpu", "cuda") else torch.device("cpu")
        self.torch_rng = torch.Generator(device=rng_device).manual_seed(seed)
        """The model's own torch generator, on its device: every torch draw of training, ``predict`` and a sampled
        ``evaluate`` (actions, noise) comes from it, and on the CPU the parameters are initialised from it first
        (``rapidrl.train.runtime``). torch's global generator is neither drawn from nor reseeded."""
        self.np_rng = np.random.default_rng([seed, rank])
        env_seed = None if config.seed is None else seed + 100_003 * rank
        if isinstance(env, str):
            self.env_id = env
            self.env = make_env(env, config.num_envs, env_seed, config.env_device, self.env_kwargs)
        elif isinstance(env, VecEnvBase):
            self.env_id = getattr(env, "env_id", None)
            if env.num_envs != config.num_envs:
                raise ConfigError(f"num_envs={config.num_envs} but the env given has {env.num_envs} envs")
            self.env = env
        else:
            raise TypeError(f"env must be an environment id (str) or a rapidrl vector env, got {type(env).__name__}")
        self.observation_space: gym.Space = self.env.single_observation_space
        self.action_space: gym.Space = self.env.single_action_space
        self.action_mask_size = int(getattr(self.env, "action_mask_size", 0))
        """M, the width of the env's action masks (0: it states none): training, ``evaluate`` and ``predict(obs,
        action_masks=...)`` act on the valid actions only, and the exported policy takes the masks as an input."""
        if self.action_mask_size and not self.supports_action_masks:
            raise ConfigError(f"{self.name.upper()} does not use action masks, and {self.env_id or 'the env'} states "
                              "them: train it with PPO, A2C, IMPALA, MAPPO, IPPO, DQN, PQN, C51, Rainbow, QRDQN, IQN, "
                              "SACDiscrete or R2D2 (docs/masks.md)")
        self._eval_env = eval_env
        self.num_timesteps = 0
        self.num_episodes = 0
        self.num_updates = 0
        self.timer = PhaseTimer()
        self.metrics: dict[str, float] = {}
        self.history: list[dict[str, float]] = []
        self.loggers: list = []
        self._returns: deque = deque(maxlen=100)
        self._lengths: deque = deque(maxlen=100)
        self._obs = None
        self._needs_reset = True  # the env must be reset before the next step (set again after a resume)
        self._schedule: tuple[int, int] | None = None  # (first step, total) of the current learn call
        self._saved_clock: dict | None = None  # the learn call's timer at the checkpoint loaded (``PhaseTimer.state``)
        self._env_seed = env_seed
        self.reporting = True
        """Whether the current iteration ends with a report (``log_every_steps``; set by ``learn`` before ``_train``):
        an update records its statistics then. True outside ``learn``."""
        self.paths: dict[str, PathChoice] = {}
        """The implementation of each path setting that runs, and why (``rapidrl.train.paths``; filled by _build)."""
        with process_settings(config, single_thread=True), drawing_from(self.torch_rng, seed):
            self._build()  # at one thread: the initial parameters of a seed are the same at any torch_threads
        _log.info("%s paths: %s", self.name, describe(self.paths))
        if self.dist is not None:
            self.dist.setup(self)

    def trainable_modules(self) -> list[torch.nn.Module]:
        """The modules whose parameters are trained (and kept identical across distributed ranks).

        Default: every ``nn.Module`` attribute of the algorithm; override to be explicit."""
        return [v for v in vars(self).values() if isinstance(v, torch.nn.Module)]

    def _sync_grads(self, params) -> None:
        """Average gradients over distributed ranks (a no-op for a single learner)."""
        if self.dist is not None:
            self.dist.all_reduce_grads(params)

    def _process_settings(self):
        """The process settings of ``learn`` and ``evaluate`` (``rapidrl.train.runtime.process_settings``): the
        config's threads, denormal flushing and heap retention, Numba's BLAS at one thread for a compiled gradient
        backend (at the config's threads, torch at one, where the update is all compiled: ``_compiled_products``); set
        back when the call returns."""
        backend = self.paths.get("gradient_backend")
        handwritten = backend is not None and backend.value == "handwritten"
        return process_settings(self.config, numba_blas=handwritten,
                                compiled_products=self._compiled_products() if handwritten else None)

    def _compiled_products(self) -> tuple[tuple, tuple] | None:
        """None, or, where the handwritten update's arithmetic is all compiled code (torch only steps the optimizer:
        DQN, C51, QR-DQN), the (layer shapes ``(out, in)``, row counts) of the MLP it multiplies. Then
        ``torch_threads`` goes to Numba's BLAS and torch runs at one thread (``runtime.compiled_thread_split``: DQN
        CartPole at 2 threads 1.28x the one-thread SPS on a Zen 4), where that BLAS computes these products bit for bit
        as at one thread (``rapidrl.nn.numba_mlp.threads_keep_products_exact``; not an AVX2 EPYC's OpenBLAS), so a
        seed's run is the same at any thread count."""
        return None

    # -- to be supplied by subclasses -----------------------------------------------------------
    def _build(self) -> None:
        raise NotImplementedError

    def _rollout(self) -> int:
        """Collect experience once (a rollout, or ``train_freq`` steps into replay); return the env steps taken.
        ``num_timesteps`` still counts the steps before this rollout while it runs."""
        raise NotImplementedError

    def _train(self) -> None:
        """Update on what ``_rollout`` collected (``num_timesteps`` now includes it)."""
        raise NotImplementedError

    def _policy_actions(self, obs: np.ndarray, deterministic: bool) -> np.ndarray:
        """obs [B, *obs_shape] (raw) -> env actions [B, ...] as NumPy."""
        raise NotImplementedError

    def _state(self) -> dict[str, Any]:
        """Tensors and plain values to save (networks, optimizers, normalizers)."""
        raise NotImplementedError

    def _load_state(self, state: dict[str, Any]) -> None:
        raise NotImplementedError

    # -- episodes and metrics ----------------------------------------------------------------------
    def _track_episodes(self, info: dict) -> None:
        """Record returns/lengths of episodes that ended (info['episode'] where info['_episode'])."""
        done = info.get("_episode")
        if done is None or not done.any():
            return
        self._record_episodes(info["episode"]["r"][done], info["episode"]["l"][done])

    def _record_episodes(self, returns: np.ndarray, lengths: np.ndarray) -> None:
        """Record finished episodes given as arrays of returns and lengths."""
        if len(returns):
            self._returns.extend(returns.tolist())
            self._lengths.extend(lengths.tolist())
            self.num_episodes += len(returns)

    def recent_returns(self, k: int = 100) -> list[float]:
        """Returns of the last ``k`` finished training episodes."""
        return list(self._returns)[-k:]

    def record(self, values: dict[str, float]) -> None:
        """Add metrics to the current record (flushed to loggers after each update)."""
        self.metrics.update(values)

    def _check_finite(self, parameters: bool = True) -> None:
        """Raise NonFiniteError if a recorded loss or (``parameters``) a trained parameter is NaN or inf (at every
        report, before the callbacks run; the callbacks that save skip non-finite states themselves)."""
        bad = non_finite_loss(self.metrics)
        if bad is not None:
            raise NonFiniteError(f"{bad} is {self.metrics[bad]} at step {self.num_timesteps}; training stopped")
        if not parameters:
            return
        named = [(name, p) for module in self.trainable_modules() for name, p in module.named_parameters()]
        if not named:
            return
        # one reduction over every parameter: the largest |value| of each is NaN or inf exactly when one is
        largest = largest_abs([p.detach() for _, p in named])
        if not bool(torch.isfinite(largest).all()):
            bad = next(name for (name, _), m in zip(named, largest.tolist()) if not math.isfinite(m))
            raise NonFiniteError(f"parameter {bad} is not finite at step {self.num_timesteps}; training stopped")

    def _flush_metrics(self, parameters_checked: bool = False) -> None:
        self.metrics["global_step"] = self.num_timesteps
        if self._returns:
            self.metrics["charts/episodic_return"] = float(np.mean(list(self._returns)[-20:]))
            self.metrics["charts/episodic_length"] = float(np.mean(list(self._lengths)[-20:]))
        rep = self.timer.report(self.num_timesteps - self._start_steps)
        self.metrics["charts/SPS"] = rep.pop("sps")
        self.metrics.update(rep)
        if self.dist is not None:
            self.dist.reduce_metrics(self.metrics)
        # again: callbacks may have recorded metrics (evaluation, custom losses); the parameters only where this
        # update's report did not check them (a reduction over every parameter: 0.3 ms per PPO CartPole update)
        self._check_finite(parameters=not parameters_checked)
        self.history.append(dict(self.metrics))
        for logger in self.loggers:
            logger.log(self.metrics, self.num_timesteps)

    # -- the driver ------------------------------------------------------------------------------
    def learn(self, total_timesteps: int, callback=None, progress_bar: bool = True, *, resume: bool = False):
        """Train for ``total_timesteps`` env steps (counted over all envs). Returns self.

        callback: a Callback, a list of them, or ``f(algo) -> bool`` called after each update
        (``rapidrl.train.callbacks``: which hook fires when).
        resume: continue the ``learn`` call a checkpoint was saved in (``save(..., training_state=True)``
        then ``load``): runs to that call's end with its schedules, so the result equals an uninterrupted
        run for deterministic settings. ``total_timesteps`` must then equal the original call's.

        The config's process settings (threads, denormal flushing, heap retention) hold for the call only and are set
        back when it returns (``rapidrl.train.runtime``).
        """
        with self._process_settings():
            return self._learn(total_timesteps, callback, progress_bar, resume)

    def _learn(self, total_timesteps: int, callback, progress_bar: bool, resume: bool):
        if isinstance(total_timesteps, bool) or not isinstance(total_timesteps, (int, np.integer)) \
                or total_timesteps <= 0:
            raise ValueError(f"total_timesteps must be a positive int, got {total_timesteps!r}")
        if resume:
            if self._schedule is None:
                raise ValueError("resume=True needs a model loaded from a checkpoint saved with training_state=True")
            if self._schedule[1] != total_timesteps:
                raise ValueError(f"resume: the checkpoint's run had total_timesteps={self._schedule[1]}, "
                                 f"got {total_timesteps}")
        else:
            self._schedule = (self.num_timesteps, int(total_timesteps))
        target = self._schedule[0] + self._schedule[1]
        cb: Callback = as_callback(callback)
        self.timer.reset()
        self._start_steps = self.num_timesteps
        if resume and self._saved_clock is not None:  # time/total and SPS span the call's every part, not just this one
            self.timer.restore(self._saved_clock)
            self._start_steps = self._schedule[0]
        cb.on_training_start(self)
        desc = f"{self.name.upper()} {self.env_id or ''}".strip()
        with TrainingProgress(target, desc, enabled=progress_bar) as progress:
            progress.update(self.num_timesteps, 0.0, None)
            report_at = self._next_report()
            while self.num_timesteps < target:
                with self._autocast():  # acting in the resolved precision (the update sets its own)
                    self.num_timesteps += self._rollout()
                keep_going = cb.on_rollout_end(self)
                self.reporting = report = self.num_timesteps >= min(report_at, target)
                self._train()
                self.num_updates += 1
                if report:
                    self._report_statistics()
                    self._check_finite()
                keep_going = cb.on_update_end(self) and keep_going
                if report or not keep_going:
                    report_at = self._next_report()
                    self._flush_metrics(parameters_checked=report)
                    recent = self.recent_returns(20)
                    progress.update(self.num_timesteps, self.metrics["charts/SPS"],
                                    float(np.mean(recent)) if recent else None)
                cb.on_update_logged(self)  # checkpoints come after the logs they resume
                if not keep_going:
                    break
        self.reporting = True
        cb.on_training_end(self)
        return self

    def _report_statistics(self) -> None:
        """At a report, after ``_train``: record what the updates since the last report accumulated on the device
        (off-policy statistics, the device path's episode sums); the on-policy updates record theirs in
        ``_train`` when ``reporting``. Nothing by default."""

    def _next_report(self) -> int:
        """The env step count at or after which the next report is due (multiples of ``log_every_steps``, so a
        resumed run reports at the same steps as an uninterrupted one; 0: after every iteration)."""
        every = self.config.log_every_steps
        if not every:
            return self.num_timesteps
        return (self.num_timesteps // every + 1) * every

    @property
    def learn_schedule(self) -> tuple[int, int] | None:
        """(first step, total_timesteps) of the current or last ``learn`` call (a loaded checkpoint's: what
        ``learn(..., resume=True)`` continues), or None before any."""
        return self._schedule

    def progress_remaining(self) -> float:
        """1 at the start of the current ``learn`` call, falling linearly to 0 at its end (for schedules)."""
        if self._schedule is None:
            return 1.0
        start, total = self._schedule
        return max(0.0, 1.0 - (self.num_timesteps - start) / total)

    # -- acting ----------------------------------------------------------------------------------
    def predict(self, obs, deterministic: bool = False, action_masks=None) -> np.ndarray:
        """Actions for ``obs`` ([B, *obs_shape] or a single observation [*obs_shape]), as NumPy.

        action_masks: the valid actions of each observation (bool [B, M] or [M] for one observation, M the width of
        the action space's masks: ``check_action_masks``), as the env gives them; the actions are then chosen among
        the valid ones (algorithms with ``supports_action_masks``). None: every action may be chosen.
        """
        obs, single = self._observation_batch(obs)
        if action_masks is None:
            actions = self._policy_actions(obs, deterministic)
        else:
            masks = self.check_action_masks(action_masks, obs.shape[0], single)
            actions = self._policy_actions(obs, deterministic, action_masks=masks)
        return actions[0] if single else actions

    def _observation_batch(self, obs) -> tuple[np.ndarray, bool]:
        """``predict``'s observations as a batch [B, *obs_shape] (one observation [*obs_shape] becomes [1, ...]) and
        whether one was given; ValueError for another shape or a value that is not finite."""
        obs = np.asarray(obs)
        shape = self.observation_space.shape
        single = obs.shape == shape
        if single:
            obs = obs[None]
        if obs.shape[1:] != shape:
            raise ValueError(f"obs must have shape {shape} or (B, *{shape}), got {obs.shape}")
        check_finite_observations(obs, "predict")
        return obs, single

    def check_action_masks(self, action_masks, batch: int, single: bool = False) -> np.ndarray:
        """``action_masks`` as a bool [batch, M] array (a single observation's [M] when ``single``), checked: the width
        of the action space's masks (``rapidrl.envs.core.actions.mask_sizes``) and a valid action in every row (and
        component). ValueError/TypeError otherwise, and for an algorithm without ``supports_action_masks``."""
        if not self.supports_action_masks:
            raise ValueError(f"{self.name.upper()} does not use action masks (docs/masks.md)")
        sizes = mask_sizes(self.action_space)
        m = as_action_mask(action_masks)  # the dtypes (bool, 0/1 ints or floats) the env adapters take, as they do
        want = (sum(sizes),) if single else (batch, sum(sizes))
        if m.shape != want:
            raise ValueError(f"action_masks must have shape {want} (one row per observation, the valid actions of "
                             f"{self.action_space}), got {m.shape}")
        m = m.reshape(batch, -1)
        start = 0
        for size in sizes:
            none = ~m[:, start:start + size].any(1)
            if none.any():
                raise ValueError(f"action_masks[{int(np.flatnonzero(none)[0])}] has no valid action"
                                 + (f" in component [{start}, {start + size})" if len(sizes) > 1 else ""))
            start += size
        return np.ascontiguousarray(m)

    def deterministic_module(self) -> torch.nn.Module:
        """A frozen CPU module mapping flat raw observations ``x [B, O]`` float32 to the actions
        ``predict(obs, deterministic=True)`` returns (what ``rapidrl.export`` writes; ``rapidrl.nn.deploy`` has
        the pieces). ValueError where the algorithm has no exportable policy."""
        raise ValueError(f"exporting {self.name!r} models is not supported")

    # -- persistence -----------------------------------------------------------------------------
    def save(self, path: str | os.PathLike, *, training_state: bool = False) -> Path:
        """Write the model, optimizer, normalizers, config and counters atomically to ``path``.

        training_state: also store what an exact resume needs: RNG states, env state (built-in envs),
        current observations, episode statistics and the schedule of the current ``learn`` call.
        """
        path = Path(path)
        payload = {
            "format": "rapidrl",
            "version": FORMAT_VERSION,
            "algo": self.name,
            "env_id": None if self.env_id is None else qualified_id(self.env_id),  # load imports its module
            "env_kwargs": dict(self.env_kwargs),
            "config": config_to_dict(self.config),
            "observation_space": space_to_dict(self.observation_space),
            "action_space": space_to_dict(self.action_space),
            "action_mask_size": self.action_mask_size,
            "num_timesteps": self.num_timesteps,
            "num_updates": self.num_updates,
            "state": self._state(),
        }
        if training_state:
            payload["training"] = self._training_state()
        check_plain(payload)
        atomic_torch_save(payload, path)
        return path

    @classmethod
    def load(cls, path: str | os.PathLike, env=None, device: str | None = None, env_kwargs: dict | None = None,
             distributed: bool = False, **overrides):
        """Rebuild a saved model. ``env``: an id or vector env (default: the saved env id and env_kwargs)."""
        payload = load_checkpoint(path)
        if payload["algo"] != cls.name:
            raise ValueError(f"{path} holds a {payload['algo'].upper()} model, not {cls.name.upper()}")
        values = dict(payload["config"])
        if device is not None:
            values["device"] = device
        values.update(overrides)
        config = config_from_dict(cls.config_class, values)
        if env is None:
            if payload["env_id"] is None:
                raise ValueError(f"{path} was trained on an env instance without id: pass env=...")
            env = payload["env_id"]
        if env_kwargs is None:
            env_kwargs = payload.get("env_kwargs", {})
        model = cls(env, config, env_kwargs=env_kwargs, distributed=distributed)
        for which in ("observation_space", "action_space"):
            saved = space_from_dict(payload[which])
            if not spaces_equal(saved, getattr(model, which)):
                raise ValueError(f"env mismatch on load: saved {which} is {saved}, the env has {getattr(model, which)}")
        model._load_state(payload["state"])
        model.num_timesteps = int(payload["num_timesteps"])
        model.num_updates = int(payload["num_updates"])
        if "training" in payload:
            model._load_training_state(payload["training"])
        return model

    def _training_state(self) -> dict[str, Any]:
        extra = self._extra_training_state()  # first: it may finish work in flight that moves the env (async)
        return {
            "torch_rng": self.torch_rng.get_state(),
            "np_rng": self.np_rng.bit_generator.state,
            "env": env_state(self.env),
            "returns": list(self._returns),
            "lengths": list(self._lengths),
            "num_episodes": self.num_episodes,
            "schedule": list(self._schedule) if self._schedule is not None else None,
            "clock": self.timer.state(),
            "extra": extra,
        }

    def _load_training_state(self, st: dict[str, Any]) -> None:
        if st["torch_rng"].numel() == self.torch_rng.get_state().numel():  # (before 2026-12: the global CPU state,
            self.torch_rng.set_state(st["torch_rng"])                    # the stream a CPU model then drew from)
        self.np_rng.bit_generator.state = st["np_rng"]
        restored = set_env_state(self.env, st["env"])
        self._returns.extend(st["returns"])
        self._lengths.extend(st["lengths"])
        self.num_episodes = int(st["num_episodes"])
        self._schedule = tuple(st["schedule"]) if st["schedule"] is not None else None
        self._saved_clock = st.get("clock")  # absent in checkpoints written before 2026-11-26: the clock restarts
        self._load_extra_training_state(st["extra"])
        if not restored:  # an engine or Python env, whose state the checkpoint could not hold: fresh episodes
            self._needs_reset = True

    def _extra_training_state(self) -> dict[str, Any]:
        """Algorithm-specific resume state (current observations, generators, ...)."""
        return {}

    def _load_extra_training_state(self, state: dict[str, Any]) -> None:
        pass
