"""What every algorithm shares: env set-up, seeding, the ``learn`` driver, predict/evaluate, save/load.

An algorithm subclass supplies ``config_class`` (a dataclass), ``_build()`` (networks, optimizers,
storage), ``_rollout()`` (collect experience once, returning the env steps taken) and ``_train()`` (update on
it). Everything else, callbacks, timing, progress, logging, evaluation and checkpoints, lives here once.

One iteration of ``learn``: ``_rollout()``; ``num_timesteps`` grows by its steps; callbacks' ``on_rollout_end``;
``_train()``; ``num_updates`` grows by one; ``on_update_end``; at a report step the finiteness check and the
metrics flush (``report_steps``); ``on_update_logged``.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import math
import os
import pickle
import tempfile
from collections import OrderedDict, deque
from pathlib import Path
from typing import Any, ClassVar

import gymnasium as gym
import numpy as np
import torch

from rapidrl._device import resolve_device
from rapidrl._unsafe.torch_private import largest_abs
from rapidrl.envs import VecEnvBase
from rapidrl.envs.registry import qualified_id
from rapidrl.train.callbacks import Callback, as_callback
from rapidrl.train.config import ConfigError, apply_runtime, config_from_dict, config_to_dict
from rapidrl.train.finite import non_finite_loss
from rapidrl.train.paths import PathChoice, choose, describe
from rapidrl.train.precision import autocast, heavy_networks, native_bf16, resolve_precision
from rapidrl.train.progress import EvaluationProgress, TrainingProgress
from rapidrl.train.spaces import space_from_dict, space_to_dict, spaces_equal
from rapidrl.train.timing import PhaseTimer

FORMAT_VERSION = 1
EVAL_SEED_OFFSET = 10_000  # evaluation envs and generators are seeded apart from training's (seed + 10_000 + ...)
_log = logging.getLogger("rapidrl")


class NonFiniteError(FloatingPointError):
    """Training produced a NaN or inf loss or parameter."""


def _make_env(env_id: str, num_envs: int, seed: int | None, device: str, env_kwargs: dict):
    from rapidrl.envs import make_vec

    return make_vec(env_id, num_envs, seed=seed, device=device, flatten_observations=True, **env_kwargs)


def check_finite_observations(obs: np.ndarray, what: str) -> None:
    """ValueError naming the first non-finite entry of float observations ``obs`` ([B, *obs_shape])."""
    if obs.dtype.kind == "f" and not np.isfinite(obs).all():
        index = tuple(int(k) for k in np.argwhere(~np.isfinite(obs))[0])
        raise ValueError(f"{what}: observation {index[0]} is not finite (obs[{', '.join(map(str, index))}] = "
                         f"{obs[index]}); the policy needs finite observations")


def check_n_episodes(n_episodes) -> None:
    """``evaluate``'s episode count: a positive int (not a bool)."""
    if isinstance(n_episodes, bool) or not isinstance(n_episodes, int) or n_episodes <= 0:
        raise ValueError(f"n_episodes must be a positive int, got {n_episodes!r}")


class Algorithm:
    """Base class of PPO, A2C, DQN, SAC, TD3 (see each for the hyperparameters)."""

    name: ClassVar[str] = "algorithm"
    config_class: ClassVar[type]
    supports_distributed: ClassVar[bool] = False  # True where every gradient step calls _sync_grads
    has_replay_buffer: ClassVar[bool] = False
    """``save`` takes ``include_buffer=True`` and writes the replay buffer beside the model (off-policy)."""
    # Env steps between two reports (finiteness check, metrics flush to history and loggers, progress bar):
    # after the first iteration that reaches each multiple of it (0: after every iteration). Off-policy
    # iterations can be a single env step, for which that bookkeeping (~1 ms for SAC) would cost more than
    # the step. Callbacks run after every iteration; the ones that save check finiteness themselves.
    report_steps: ClassVar[int] = 0
    bf16_learning_tested: ClassVar[bool] = False
    """The algorithm's learning tests pass with precision="bf16" at the float32 thresholds and seeds
    (``tests/test_learning_bf16.py``): only then may precision="auto" pick bf16 (``rapidrl.train.precision``)."""
    bf16_beats_compiled: ClassVar[bool] = False
    """The bf16 torch update measured faster than the compiled float32 backend on heavy networks (SAC), so "auto"
    for both settings gives torch + bf16 where the hardware has native bf16 (``_auto_bf16_over_compiled``)."""

    def __init__(self, env, config=None, *, eval_env=None, env_kwargs: dict | None = None, distributed: bool = False,
                 **hyperparameters):
        if config is None:
            config = config_from_dict(self.config_class, hyperparameters)
        elif hyperparameters:
            config = dataclasses.replace(config, **hyperparameters)
        if not isinstance(config, self.config_class):
            raise TypeError(f"config must be a {self.config_class.__name__}, got {type(config).__name__}")
        config.validate()
        self.config = config
        self.device = resolve_device(config.device)
        apply_runtime(config)
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
        torch.manual_seed(seed)
        self.np_rng = np.random.default_rng([seed, rank])
        env_seed = None if config.seed is None else seed + 100_003 * rank
        if isinstance(env, str):
            self.env_id = env
            self.env = _make_env(env, config.num_envs, env_seed, config.env_device, self.env_kwargs)
        elif isinstance(env, VecEnvBase):
            self.env_id = getattr(env, "env_id", None)
            if env.num_envs != config.num_envs:
                raise ConfigError(f"num_envs={config.num_envs} but the env given has {env.num_envs} envs")
            self.env = env
        else:
            raise TypeError(f"env must be an environment id (str) or a rapidrl vector env, got {type(env).__name__}")
        self.observation_space: gym.Space = self.env.single_observation_space
        self.action_space: gym.Space = self.env.single_action_space
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
        self.paths: dict[str, PathChoice] = {}
        """The implementation of each path setting that runs, and why (``rapidrl.train.paths``; filled by _build)."""
        self._build()
        _log.info("%s paths: %s", self.name, describe(self.paths))
        if self.dist is not None:
            self.dist.setup(self)

    def _gradient_backends(self) -> dict:
        """The gradient backends this algorithm has, preferred first: name -> check (None when it can run with
        these settings, else what to change). PyTorch autograd only, unless overridden (PPO, DQN, SAC)."""
        return {"torch": lambda: None}

    def _resolve_gradient_backend(self) -> PathChoice:
        """``paths["gradient_backend"]`` from the config's setting (``rapidrl.train.paths.choose``)."""
        requested, candidates = self.config.gradient_backend, self._gradient_backends()
        if requested != "auto" and requested not in candidates:
            raise ConfigError(f"gradient_backend={requested!r} cannot run here: {self.name.upper()} has no "
                              f"{requested} backend (it has {', '.join(candidates)})")
        return choose("gradient_backend", requested, candidates)

    def _resolve_precision(self) -> PathChoice:
        """``paths["precision"]`` from the config's setting, after the gradient backend (rapidrl.train.precision)."""
        return resolve_precision(self.config.precision, device=self.device, gradient_backend=self.gradient_backend,
                                 tested=self.bf16_learning_tested,
                                 heavy=heavy_networks(self.trainable_modules(), self._update_batch()),
                                 unsupported=self._bf16_unsupported())

    def _auto_bf16_over_compiled(self) -> str | None:
        """Why the compiled backend steps aside under gradient_backend="auto" and precision="auto" (None: it does
        not): for algorithms whose bf16 torch update measured faster than their compiled float32 one
        (``bf16_beats_compiled``; ``rapidrl bench precision``), where "auto" would take bf16 (native bf16, the
        learning tests, heavy networks). A check of the compiled backend calls it first."""
        c = self.config
        if not (self.bf16_beats_compiled and c.precision == "auto" and c.gradient_backend == "auto"):
            return None
        if native_bf16(self.device) or not self.bf16_learning_tested \
                or heavy_networks(self.trainable_modules(), self._update_batch()):
            return None
        return ("precision='auto' takes bf16, whose torch update measured faster than the compiled float32 one "
                "here (rapidrl bench precision)")

    def _update_batch(self) -> int:
        """Rows of one gradient step (the minibatch, or the whole rollout): what bf16's gain depends on."""
        c = self.config
        for name in ("minibatch_size", "batch_size"):
            if hasattr(c, name):
                return int(getattr(c, name))
        return int(c.num_steps * c.num_envs)

    def _bf16_unsupported(self) -> str | None:
        """Why these settings cannot run in bf16 at all (a recurrent policy), else None."""
        return None

    @property
    def precision(self) -> str:
        """The precision that runs ("fp32" or "bf16"; ``paths["precision"]`` says why)."""
        choice = self.paths.get("precision")
        return "fp32" if choice is None else choice.value

    def _autocast(self):
        """The arithmetic context of the resolved precision on the model's device: bfloat16 autocast (device type
        from the model's device: "cpu" or "cuda") for "bf16", nothing for "fp32"."""
        return autocast(self.device, self.precision)

    @property
    def gradient_backend(self) -> str:
        """The gradient backend that runs ("compiled" or "torch"; ``paths["gradient_backend"]`` says why)."""
        return self.paths["gradient_backend"].value

    def trainable_modules(self) -> list[torch.nn.Module]:
        """The modules whose parameters are trained (and kept identical across distributed ranks).

        Default: every ``nn.Module`` attribute of the algorithm; override to be explicit."""
        return [v for v in vars(self).values() if isinstance(v, torch.nn.Module)]

    def _sync_grads(self, params) -> None:
        """Average gradients over distributed ranks (a no-op for a single learner)."""
        if self.dist is not None:
            self.dist.all_reduce_grads(params)

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

    def _check_finite(self) -> None:
        """Raise NonFiniteError if a recorded loss or a trained parameter is NaN or inf (at every report,
        before the callbacks run; the callbacks that save skip non-finite states themselves)."""
        bad = non_finite_loss(self.metrics)
        if bad is not None:
            raise NonFiniteError(f"{bad} is {self.metrics[bad]} at step {self.num_timesteps}; training stopped")
        named = [(name, p) for module in self.trainable_modules() for name, p in module.named_parameters()]
        if not named:
            return
        # one reduction over every parameter: the largest |value| of each is NaN or inf exactly when one is
        largest = largest_abs([p.detach() for _, p in named])
        if not bool(torch.isfinite(largest).all()):
            bad = next(name for (name, _), m in zip(named, largest.tolist()) if not math.isfinite(m))
            raise NonFiniteError(f"parameter {bad} is not finite at step {self.num_timesteps}; training stopped")

    def _flush_metrics(self) -> None:
        self.metrics["global_step"] = self.num_timesteps
        if self._returns:
            self.metrics["charts/episodic_return"] = float(np.mean(list(self._returns)[-20:]))
            self.metrics["charts/episodic_length"] = float(np.mean(list(self._lengths)[-20:]))
        rep = self.timer.report(self.num_timesteps - self._start_steps)
        self.metrics["charts/SPS"] = rep.pop("sps")
        self.metrics.update(rep)
        if self.dist is not None:
            self.dist.reduce_metrics(self.metrics)
        self._check_finite()  # again: callbacks may have recorded metrics (evaluation, custom losses)
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
        """
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
                self._train()
                self.num_updates += 1
                report = self.num_timesteps >= min(report_at, target)
                if report:
                    self._check_finite()
                keep_going = cb.on_update_end(self) and keep_going
                if report or not keep_going:
                    report_at = self._next_report()
                    self._flush_metrics()
                    recent = self.recent_returns(20)
                    progress.update(self.num_timesteps, self.metrics["charts/SPS"],
                                    float(np.mean(recent)) if recent else None)
                cb.on_update_logged(self)  # checkpoints come after the logs they resume
                if not keep_going:
                    break
        cb.on_training_end(self)
        return self

    def _next_report(self) -> int:
        """The env step count at or after which the next report is due (multiples of ``report_steps``, so a
        resumed run reports at the same steps as an uninterrupted one)."""
        if not self.report_steps:
            return self.num_timesteps
        return (self.num_timesteps // self.report_steps + 1) * self.report_steps

    def progress_remaining(self) -> float:
        """1 at the start of the current ``learn`` call, falling linearly to 0 at its end (for schedules)."""
        if self._schedule is None:
            return 1.0
        start, total = self._schedule
        return max(0.0, 1.0 - (self.num_timesteps - start) / total)

    # -- acting ----------------------------------------------------------------------------------
    def predict(self, obs, deterministic: bool = False) -> np.ndarray:
        """Actions for ``obs`` ([B, *obs_shape] or a single observation [*obs_shape]), as NumPy."""
        obs = np.asarray(obs)
        shape = self.observation_space.shape
        single = obs.shape == shape
        if single:
            obs = obs[None]
        if obs.shape[1:] != shape:
            raise ValueError(f"obs must have shape {shape} or (B, *{shape}), got {obs.shape}")
        check_finite_observations(obs, "predict")
        actions = self._policy_actions(obs, deterministic)
        return actions[0] if single else actions

    def _get_eval_env(self, n: int):
        if self._eval_env is not None and self._eval_env.num_envs == n:
            return self._eval_env
        if self.env_id is None:
            raise ValueError("evaluate() needs eval_env=... when the model was built from an env without an id")
        # an env class may name the settings of its evaluation env (Atari: no episodic life, unclipped rewards)
        kwargs = {**self.env_kwargs, **getattr(self.env, "eval_overrides", {})}
        self._eval_env = _make_env(self.env_id, n, self.seed + EVAL_SEED_OFFSET, "cpu", kwargs)
        return self._eval_env

    def evaluate(self, n_episodes: int = 10, deterministic: bool = True, progress: bool = False
                 ) -> tuple[float, float]:
        """Mean and std of the return of ``n_episodes`` full episodes on separate eval envs.

        Runs n_episodes envs in parallel (one batched env: Atari's C++ thread pool, a built-in env's kernel) and
        counts each env's first episode only (no bias towards short episodes). Rewards are the env's raw rewards
        (no scaling). The eval env is built with the env class's ``eval_overrides`` (Atari: real scores, whole
        games, FIRE after a lost life; docs/atari.md). deterministic: the policy's mode (greedy); False samples
        actions as in training (DQN: epsilon-greedy at the current epsilon) from generators seeded by the eval seed,
        so a sampled score is reproducible too and training's random streams are left as they were. progress: a
        live line with the episodes finished, the steps taken and the mean return so far (``rapidrl train``/``eval``
        turn it on).
        """
        check_n_episodes(n_episodes)
        env = self._get_eval_env(n_episodes)
        obs, seed = self._reset_for_evaluation(env)
        with self._evaluation_rngs(seed, deterministic):
            return self._evaluate_episodes(env, obs, n_episodes, deterministic, progress)

    def _reset_for_evaluation(self, env) -> tuple[np.ndarray, int]:
        """Reset an eval env with this update's evaluation seed: (first observations, the seed). The seed moves with
        ``num_updates``, so the evaluations along a run see different episodes, and repeats at the same update."""
        seed = self.seed + EVAL_SEED_OFFSET + self.num_updates
        obs, _ = env.reset(seed=seed)
        return obs, seed

    @contextlib.contextmanager
    def _evaluation_rngs(self, seed: int, deterministic: bool):
        """A sampled (``deterministic=False``) evaluation draws its actions from generators seeded by ``seed``, and
        training's streams (torch's global generator, ``np_rng``) are restored afterwards: the same model and seed
        give the same sampled score, and evaluating never changes what training does next."""
        if deterministic:
            yield
            return
        saved_np_rng = self.np_rng
        self.np_rng = np.random.default_rng(seed)
        cuda = [self.device] if self.device.type == "cuda" else []
        try:
            with torch.random.fork_rng(devices=cuda):
                torch.default_generator.manual_seed(seed)
                if cuda:
                    with torch.cuda.device(self.device):
                        torch.cuda.manual_seed(seed)
                yield
        finally:
            self.np_rng = saved_np_rng

    def _evaluate_episodes(self, env, obs, n_episodes: int, deterministic: bool, progress: bool
                           ) -> tuple[float, float]:
        """The episode loop of ``evaluate`` on an eval env already reset to ``obs``."""
        returns = np.zeros(n_episodes)
        finished = np.zeros(n_episodes, dtype=bool)
        starts = np.ones(n_episodes, dtype=bool)
        act = self._episode_actor(n_episodes, deterministic)
        with EvaluationProgress(n_episodes, f"eval {self.env_id or ''}".strip(), enabled=progress) as bar:
            steps = 0
            while not finished.all():
                obs = np.asarray(obs)
                check_finite_observations(obs, f"evaluate (step {steps} of {self.env_id or 'the eval env'})")
                actions = act(obs, starts)
                obs, rewards, term, trunc, _ = env.step(actions)
                returns += np.where(finished, 0.0, rewards)
                starts = term | trunc
                newly = starts & ~finished
                finished |= starts
                steps += 1
                if progress and (newly.any() or steps % 100 == 0):
                    bar.update(int(finished.sum()), steps, float(returns[finished].mean()) if finished.any() else None)
        return float(returns.mean()), float(returns.std())

    def deterministic_module(self) -> torch.nn.Module:
        """A frozen CPU module mapping flat raw observations ``x [B, O]`` float32 to the actions
        ``predict(obs, deterministic=True)`` returns (what ``rapidrl.export`` writes; ``rapidrl.nn.deploy`` has
        the pieces). ValueError where the algorithm has no exportable policy."""
        raise ValueError(f"exporting {self.name!r} models is not supported")

    def _episode_actor(self, n: int, deterministic: bool):
        """``act(obs [n, ...], episode_starts [n] bool) -> actions`` for stepping ``n`` envs through episodes
        (a recurrent policy keeps its state in the closure; a feed-forward one ignores the starts)."""
        return lambda obs, starts: self._policy_actions(obs, deterministic)

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
            "torch_rng": torch.get_rng_state(),
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
        torch.set_rng_state(st["torch_rng"])
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


def env_state(env) -> dict[str, Any]:
    """What fixes the env's future exactly (``VecEnvBase.state_dict``: the built-in families' arenas), or {} for
    envs that cannot be captured, which a resumed run resets."""
    state = env.state_dict() if isinstance(env, VecEnvBase) else None
    return {} if state is None else state


def set_env_state(env, state: dict[str, Any]) -> bool:
    """Inverse of ``env_state``, in place; False (nothing restored) for an empty state."""
    if not state:
        return False
    env.load_state_dict(state)
    return True


_PLAIN_SCALARS = (bool, int, float, str, bytes, type(None), torch.dtype, torch.device, torch.Size)


def check_plain(obj, where: str = "checkpoint") -> None:
    """Raise TypeError unless ``obj`` is made of tensors and plain Python values only (dicts and OrderedDicts with
    str or int keys, lists, tuples, bool, int, float, str, bytes, None, torch dtypes, devices and sizes): what
    ``torch.load(weights_only=True)`` reads back.

    A NumPy scalar or array, a dataclass or any other object would make the file unreadable (PyTorch refuses
    to unpickle it without running code), so it is refused here, at write time, naming where it sits."""
    if isinstance(obj, torch.Tensor) or type(obj) in _PLAIN_SCALARS:
        return
    if type(obj) in (dict, OrderedDict):
        for key, value in obj.items():
            if type(key) not in (str, int):
                raise TypeError(f"{where} has a key of type {type(key).__name__} ({key!r}); a checkpoint's dict "
                                "keys must be str or int")
            check_plain(value, f"{where}.{key}")
        return
    if type(obj) in (list, tuple):
        for i, value in enumerate(obj):
            check_plain(value, f"{where}[{i}]")
        return
    kind = f"{type(obj).__module__}.{type(obj).__qualname__}"
    raise TypeError(f"{where} is a {kind}; a checkpoint holds tensors and plain Python values only (convert NumPy "
                    "arrays with torch.from_numpy and NumPy scalars with float()/int())")


def atomic_torch_save(obj, path: Path) -> None:
    """torch.save to a temp file in the same directory, fsync, then rename over ``path``."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            torch.save(obj, f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def load_checkpoint(path: str | os.PathLike) -> dict:
    """torch.load with weights_only=True (no code runs); clear errors for missing, corrupt or foreign files."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"no model file at {path}")
    try:
        payload = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as e:  # torch raises many types for corrupt/foreign files
        # PyTorch's advice for objects other than tensors (weights_only=False) would run the file's code: not repeated
        if isinstance(e, pickle.UnpicklingError) and "Unsupported global" in str(e):
            raise ValueError(f"{path} is not a rapidrl model file: it holds objects other than tensors and plain "
                             "Python values, which are not loaded (loading them would run the file's code)") from None
        detail = "" if "weights_only" in str(e) else f": {(str(e).splitlines() or [''])[0][:200]}"
        raise ValueError(f"{path} is not a readable rapidrl model file ({type(e).__name__}{detail})") from None
    if not isinstance(payload, dict) or payload.get("format") != "rapidrl":
        raise ValueError(f"{path} is not a rapidrl model file")
    if payload.get("version") != FORMAT_VERSION:
        raise ValueError(f"{path} has format version {payload.get('version')}, this rapidrl reads {FORMAT_VERSION}")
    return payload
