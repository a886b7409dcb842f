"""The offline core shared by BC, TD3+BC, IQL and CQL: training on a dataset, then optionally fine-tuning online.

An offline algorithm is an off-policy algorithm whose minibatches come from a dataset (``rapidrl.buffers.dataset``:
a Minari dataset read into a replay buffer and sampled with the replay sampler) instead of its own collection. Its
``learn(total_timesteps)`` counts *steps*: one gradient step on the dataset is one step, and no env step is taken.
With ``offline_steps=N`` the model trains N steps on the dataset alone and then goes online (offline-to-online
fine-tuning, as CORL's ``finetune/`` scripts): each further step is an env step of its exploration policy into its
replay buffer, with ``gradient_steps`` updates per ``train_freq`` env steps on minibatches that mix the dataset and the
new transitions (``dataset_fraction``). The step count runs on across the switch, so one learning curve (and one run
directory, checkpoints and resume) covers both phases.

The env is the dataset's unless given (``IQL(dataset="rapidrl/hopper/medium-replay-v0")``); evaluation runs in it.
Observations are standardised with the dataset's mean and std + 1e-3 (``normalize_obs``, CORL's ``normalize``), the
statistics kept with the model so acting, evaluation and export apply them to raw observations; rewards optionally
scaled by 1000 / (max - min episode return) (``normalize_reward``, CORL's D4RL locomotion scaling), online rewards
too.

A model loaded with ``load`` does not read its dataset until it trains again (``learn`` reads ``config.dataset``, or
takes ``dataset=``): evaluating, predicting and exporting need no data.
"""

from __future__ import annotations

import contextvars
import dataclasses
import os
from dataclasses import dataclass

import gymnasium as gym
import numpy as np
import torch

from rapidrl.algos.offpolicy import OffPolicyAlgorithm, OffPolicyConfig
from rapidrl.buffers import ReplayBatch
from rapidrl.buffers.dataset import DatasetError, OfflineDataset, load_dataset, normalized_score, read_header
from rapidrl.nn.normalize import ObsNormalizer
from rapidrl.train.config import check_positive, require
from rapidrl.train.paths import fixed

OBS_STD_EPS = 1e-3
"""Added to the dataset's observation std (CORL's compute_mean_std eps)."""
REWARD_RETURN_SPAN = 1000.0
"""normalize_reward scales rewards by this / (max - min episode return): CORL's D4RL locomotion scaling (1000 is
the episode length of those tasks)."""

_defer_dataset = contextvars.ContextVar("rapidrl_defer_dataset", default=False)


@dataclass
class OfflineConfig(OffPolicyConfig):
    """An offline algorithm's settings. Its steps (``learn(total_timesteps)``, ``log_every_steps``, a run's
    ``run.timesteps`` and ``checkpoint_every``) are gradient steps on the dataset, then, after ``offline_steps``, env
    steps of the online phase (module docstring)."""

    log_every_steps: int = 100
    """Steps between two reports: gradient steps offline, env steps after the switch online (the mean statistics of
    the gradient steps since the last report)."""
    learning_starts: int = 0
    """Online phase (``offline_steps`` set): env steps of uniform-random actions after the switch (0: the trained
    policy acts from the first one)."""
    dataset: str = ""
    """Minari dataset id (under $MINARI_DATASETS_PATH) or directory the model trains on; or pass an
    ``OfflineDataset`` as ``dataset=``."""
    dataset_storage: str = "memory"
    """Where the dataset's transitions are kept: "memory", or "mmap" (memory-mapped files in a temporary directory,
    read a chunk of episodes at a time: for datasets larger than the RAM)."""
    normalize_obs: bool = True
    """Standardise observations with the dataset's mean and std + 1e-3 (CORL's ``normalize``)."""
    normalize_reward: bool = False
    """Scale rewards by 1000 / (max - min episode return in the dataset) (CORL's ``normalize_reward`` on D4RL
    locomotion)."""
    offline_steps: int | None = None
    """Offline-to-online: gradient steps on the dataset alone, after which each step is an env step (the dataset
    mixed into the replay). None: every step is offline."""
    dataset_fraction: float | str = "proportional"
    """Online phase: the share of each minibatch drawn from the dataset, the rest from the online replay buffer; or
    "proportional", by the two sizes (one buffer holding both, as CORL's fine-tuning)."""

    def validate(self) -> None:
        super().validate()
        require(self.dataset_storage in ("memory", "mmap"),
                f"dataset_storage must be 'memory' or 'mmap', got {self.dataset_storage!r}")
        require(self.n_step == 1, f"offline algorithms train on one-step targets (n_step=1), got n_step={self.n_step}")
        require(self.num_envs == 1 or self.offline_steps is not None,
                "num_envs > 1 only matters for online fine-tuning (offline_steps set)")
        if self.offline_steps is not None:
            check_positive(self, "offline_steps", allow_zero=True)
        require(self.dataset_fraction == "proportional" or (isinstance(self.dataset_fraction, (int, float))
                                                            and 0.0 < self.dataset_fraction <= 1.0),
                f"dataset_fraction must be in (0, 1] or 'proportional', got {self.dataset_fraction!r}")


def dataset_name(dataset: OfflineDataset) -> str:
    """What a config records for ``dataset``: its id when the id finds it, else its directory."""
    try:
        if read_header(dataset.dataset_id).path.resolve() == dataset.header.path.resolve():
            return dataset.dataset_id
    except DatasetError:
        pass
    return str(dataset.header.path)


class OfflineAlgorithm(OffPolicyAlgorithm):
    """Training on a dataset, and offline-to-online fine-tuning (module docstring); BC, TD3+BC, IQL and CQL supply
    networks, losses and acting.

    Subclass hooks (``OffPolicyAlgorithm``'s): ``_build_networks()``, ``_update_step(batch)`` on normalised
    minibatches, ``_act(x, deterministic)`` and ``_explore(x)`` on normalised observation tensors [B, O]
    (``_obs_tensor``) returning env actions as NumPy, ``_actor_module()`` (the deterministic actor for export, on
    normalised input), ``saved_state``.
    """

    # every offline algorithm's learning test in tests/test_offline.py runs in bf16 too (a test there checks that
    # each subclass has one)
    bf16_learning_tested = True
    updates_obs_statistics = False  # normalize_obs: the dataset's statistics, kept when fine-tuning online
    discrete_instead = "discrete_cql or bc, which train on Discrete datasets"

    def __init__(self, env=None, config=None, *, dataset=None, eval_env=None, env_kwargs: dict | None = None,
                 distributed: bool = False, **hyperparameters):
        given = dataset if isinstance(dataset, OfflineDataset) else None
        if given is not None:
            hyperparameters["dataset"] = dataset_name(given)
        elif dataset is not None:
            hyperparameters["dataset"] = os.fspath(dataset)
        if env is None:
            source = hyperparameters.get("dataset") or (config.dataset if config is not None else "")
            if not source:
                raise ValueError(f"{type(self).__name__} needs an env or a dataset (its env is the dataset's)")
            header = given.header if given is not None else read_header(source)
            if header.env_id is None:
                raise DatasetError(f"{header.dataset_id} does not say which env it was collected on: pass env=...")
            env = header.env_id
            env_kwargs = dict(header.env_kwargs) if env_kwargs is None else env_kwargs
        self._given_dataset = given
        super().__init__(env, config, eval_env=eval_env, env_kwargs=env_kwargs, distributed=distributed,
                         **hyperparameters)

    # -- set-up ----------------------------------------------------------------------------------------------------
    def _build(self) -> None:
        c = self.config
        self.reward_scale = 1.0
        self.ref_scores: tuple[float, float] | None = None  # the dataset's (ref_min_score, ref_max_score), saved
        self.dataset: OfflineDataset | None = None
        self._dataset_sampler = self._mix_sampler = None
        self._pending_draws: dict | None = None
        self._restore_mix: dict = {}
        self._online_now = False
        self._steps_now = 0
        super()._build()
        if c.offline_steps is None:
            self.paths["collection"] = fixed("collection", "dataset", "offline: minibatches from the dataset, no env "
                                                                      "steps")
        else:
            self.paths["collection"] = fixed("collection", "dataset+step", f"{c.offline_steps:,} steps on the "
                                             "dataset, then env steps into replay, mixed with the dataset")
        source = self._given_dataset if self._given_dataset is not None else c.dataset
        self._given_dataset = None
        if source and not _defer_dataset.get():
            self._bind_dataset(source)

    def _make_buffer(self):
        """The online replay buffer: allocated for fine-tuning only (``offline_steps`` set), else a minimal one."""
        if self.config.offline_steps is not None:
            return super()._make_buffer()
        cls, (_, obs_shape, action_shape), kwargs = self._buffer_spec()
        return cls(self.config.batch_size, obs_shape, action_shape, **kwargs)

    def _bind_dataset(self, source) -> None:
        """Load ``source`` (an id, a path or an ``OfflineDataset``), check it against the env, and train on it. Its
        normalisation statistics are taken while the model has not trained (a trained model keeps its own)."""
        c = self.config
        ds = load_dataset(source, gamma=c.gamma, storage=c.dataset_storage, observation_space=self.observation_space,
                          action_space=self.action_space, env_name=self.env_id or "the env", seed=self.seed)
        if len(ds) < c.batch_size:
            raise DatasetError(f"{ds.dataset_id} holds {len(ds)} transitions, fewer than batch_size={c.batch_size}")
        self.dataset = ds
        scored = ds.ref_min_score is not None and ds.ref_max_score is not None
        self.ref_scores = (float(ds.ref_min_score), float(ds.ref_max_score)) if scored else None
        if self.num_timesteps == 0 and self.num_gradient_steps == 0:
            if c.normalize_obs:
                rms = self.obs_normalizer.rms
                rms.mean, rms.var = ds.obs_mean.copy(), np.square(ds.obs_std + OBS_STD_EPS)
            if c.normalize_reward:
                span = float(ds.episode_returns.max() - ds.episode_returns.min())
                if span <= 0:
                    raise DatasetError(f"{ds.dataset_id}: normalize_reward needs episodes of different returns, all "
                                       f"are {ds.episode_returns[0]:.4g}")
                self.reward_scale = REWARD_RETURN_SPAN / span
            self._refresh_normalization()
        self._dataset_sampler = ds.buffer.sampler(c.batch_size, seed=self.seed)
        self._mix_sampler = None
        if self._pending_draws is not None:
            self._dataset_sampler.draws = self._pending_draws["dataset"]
            self._restore_mix = self._pending_draws
            self._pending_draws = None

    def _make_obs_normalizer(self) -> ObsNormalizer | None:
        """The dataset's statistics (set when it is bound, ``_bind_dataset``; no clipping, no eps: the std already has
        OBS_STD_EPS added), None without ``normalize_obs``."""
        if not self.config.normalize_obs:
            return None
        return ObsNormalizer(self.observation_space.shape, clip=np.inf, eps=0.0)

    def _check_spaces(self) -> None:
        super()._check_spaces()
        if not isinstance(self.action_space, (gym.spaces.Box, gym.spaces.Discrete)):
            raise TypeError(f"{self.name.upper()} needs Box or Discrete actions, got {self.action_space}")

    # -- the steps ---------------------------------------------------------------------------------------------------
    def learn(self, total_timesteps: int, callback=None, progress_bar: bool = True, *, resume: bool = False,
              dataset=None):
        """Train ``total_timesteps`` steps (module docstring: a step is a gradient step on the dataset, or an env step
        once fine-tuning online). dataset: an id, path or ``OfflineDataset`` to train on (else the model's own:
        ``config.dataset``). Other arguments as ``Algorithm.learn``."""
        if dataset is not None:
            self._bind_dataset(dataset)
            name = dataset_name(self.dataset) if isinstance(dataset, OfflineDataset) else os.fspath(dataset)
            self.config = dataclasses.replace(self.config, dataset=name)
        elif self.dataset is None:
            if not self.config.dataset:
                raise ValueError(f"{type(self).__name__} has no dataset to train on: pass dataset= to the constructor "
                                 "or to learn, or set the dataset field of its config")
            self._bind_dataset(self.config.dataset)
        return super().learn(total_timesteps, callback, progress_bar, resume=resume)

    def _online(self) -> bool:
        c = self.config
        return c.offline_steps is not None and self.num_timesteps >= c.offline_steps

    def _rollout(self) -> int:
        """Online: ``train_freq`` vector-env steps into replay. Offline: no env step; ``gradient_steps`` steps (fewer
        where the learn call or the offline phase ends), which ``_train`` then takes."""
        self._online_now = self._online()
        if self._online_now:
            return super()._rollout()
        start, total = self._schedule
        limit = start + total
        if self.config.offline_steps is not None:
            limit = min(limit, self.config.offline_steps)
        self._steps_now = max(1, min(self.config.gradient_steps, limit - self.num_timesteps))
        return self._steps_now

    def _collect_step(self, steps_so_far: int) -> None:
        # learning_starts counts the env steps after the switch, not the offline steps before it
        super()._collect_step(steps_so_far - self.config.offline_steps)

    def _train(self) -> None:
        with self.timer.phase("update"):
            for _ in range(self.config.gradient_steps if self._online_now else self._steps_now):
                self._train_step()
        if self._online_now:
            self.record({"charts/online_env_steps": float(self.num_timesteps - self.config.offline_steps)})

    def _sample_batch(self) -> ReplayBatch:
        batch = self._mixed_batch() if self._online_now else self._dataset_sampler(as_torch=True)
        return self._prepare(batch)

    def _prepare(self, batch: ReplayBatch) -> ReplayBatch:
        """Normalise a sampled minibatch in place (the sampler's arrays, overwritten by its next call anyway)."""
        self._normalize_batch(batch)
        if self.reward_scale != 1.0:
            batch.rewards.mul_(self.reward_scale)
        return batch

    def _mixed_batch(self) -> ReplayBatch:
        """A minibatch of k dataset rows and B - k online rows (all from the dataset while the online buffer holds
        fewer than B - k)."""
        c = self.config
        B, online = c.batch_size, len(self.buffer)
        if c.dataset_fraction == "proportional":
            k = round(B * len(self.dataset) / (len(self.dataset) + online))
        else:
            k = round(B * c.dataset_fraction)
        if online < B - k or k >= B:
            return self._dataset_sampler(as_torch=True)
        if self._mix_sampler is None or self._mix_sampler.batch_size != k:
            # one stream of the dataset across the batch sizes: the new sampler goes on where the last one stopped
            # (it used to restart at draw 0 at each new k, replaying the same first minibatches all the online phase)
            draws = self._mix_sampler.draws if self._mix_sampler is not None else self._restore_mix.get("mix", 0)
            self._mix_sampler = self.dataset.buffer.sampler(k, seed=self.seed + 1) if k else None
            if self._mix_sampler is not None:
                self._mix_sampler.draws = draws
            self._restore_mix = {}
        new = self.buffer.sample(B - k, as_torch=True)  # the sampler's own arrays: _prepare may normalise them
        if self._mix_sampler is None:
            return new
        old = self._mix_sampler(as_torch=True)
        return ReplayBatch(*(torch.cat([a, b]) for a, b in zip(old, new)))

    # -- scores ------------------------------------------------------------------------------------------------------
    def normalized_score(self, returns) -> np.ndarray:
        """D4RL's normalised score of ``returns`` with the dataset's reference scores (``OfflineDataset``). A loaded
        model has them from its checkpoint, so scoring needs no data on the machine."""
        if self.ref_scores is None and self.dataset is None and self.config.dataset:
            header = read_header(self.config.dataset)  # a checkpoint from before the scores were saved
            if header.ref_min_score is not None and header.ref_max_score is not None:
                self.ref_scores = (float(header.ref_min_score), float(header.ref_max_score))
        if self.ref_scores is not None:  # one source: set when a dataset is bound, saved with the model
            return normalized_score(returns, *self.ref_scores)
        if self.dataset is not None or self.config.dataset:
            raise DatasetError(f"{self.dataset.dataset_id if self.dataset is not None else self.config.dataset} has "
                               "no reference scores (ref_min_score, ref_max_score)")
        raise ValueError("normalized_score needs the model's dataset (learn(..., dataset=...) binds one)")

    # -- persistence -------------------------------------------------------------------------------------------------
    def _state(self) -> dict:
        return {**super()._state(), "reward_scale": float(self.reward_scale),
                "ref_scores": None if self.ref_scores is None else list(self.ref_scores)}

    def _load_state(self, state: dict) -> None:
        super()._load_state(state)
        self.reward_scale = float(state["reward_scale"])
        refs = state.get("ref_scores")  # absent from checkpoints written before 2026-12-07
        if refs is not None:
            self.ref_scores = (float(refs[0]), float(refs[1]))

    @classmethod
    def load(cls, path: str | os.PathLike, env=None, device: str | None = None, *, include_buffer: bool = False,
             **overrides):
        """Like ``OffPolicyAlgorithm.load``; the dataset is read when the model trains again, not now."""
        token = _defer_dataset.set(True)
        try:
            return super().load(path, env=env, device=device, include_buffer=include_buffer, **overrides)
        finally:
            _defer_dataset.reset(token)

    def _extra_training_state(self) -> dict:
        draws = {"dataset": 0 if self._dataset_sampler is None else self._dataset_sampler.draws,
                 "mix": 0 if self._mix_sampler is None else self._mix_sampler.draws,
                 "mix_batch": 0 if self._mix_sampler is None else self._mix_sampler.batch_size}
        return {**super()._extra_training_state(), "dataset_draws": draws}

    def _load_extra_training_state(self, state: dict) -> None:
        super()._load_extra_training_state(state)
        draws = {k: int(v) for k, v in state["dataset_draws"].items()}
        if self._dataset_sampler is not None:
            self._dataset_sampler.draws = draws["dataset"]
            self._restore_mix = draws
        else:
            self._pending_draws = draws

