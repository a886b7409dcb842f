"""Evaluation: ``evaluate`` (the mean and std of full episodes' returns on separate eval envs) and what it shares.

A mixin of ``Algorithm``. The eval env is built once per episode count (``_get_eval_env``) with the env class's
``eval_overrides``; each evaluation resets it with a seed that moves with ``num_updates`` (``_reset_for_evaluation``);
a sampled evaluation draws from generators of its own and leaves training's streams as they were
(``_evaluation_rngs``); an algorithm acts through ``episode_actor`` (a recurrent policy carries its state there).
"""

from __future__ import annotations

import contextlib

import numpy as np

from rapidrl.envs.core.base import current_action_masks
from rapidrl.train.progress import EvaluationProgress

__all__ = ["EVAL_SEED_OFFSET", "Evaluation", "check_finite_observations", "check_n_episodes", "make_env"]

EVAL_SEED_OFFSET = 10_000  # evaluation envs and generators are seeded apart from training's (seed + 10_000 + ...)


def make_env(env_id: str, num_envs: int, seed: int | None, device: str, env_kwargs: dict):
    """The vector env of an algorithm built from an id (training's and evaluation's): ``make_vec`` with flat
    observations."""
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


class Evaluation:
    """``evaluate`` and its parts (a mixin of ``Algorithm``; see the module docstring)."""

    def _get_eval_env(self, n: int):
        if self._eval_env is not None and self._eval_env.num_envs == n:
            return self._eval_env
        if self.env_id is None:
            raise ValueError("evaluate() needs eval_env=... when the model was built from an env without an id")
        # an env class may name the settings of its evaluation env (Atari: no episodic life, unclipped rewards)
        kwargs = {**self.env_kwargs, **getattr(self.env, "eval_overrides", {})}
        self._eval_env = make_env(self.env_id, n, self.seed + EVAL_SEED_OFFSET, "cpu", kwargs)
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
        with self._process_settings(), self._evaluation_rngs(seed, deterministic):
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
        training's streams (the model's ``torch_rng``, ``np_rng``) are restored afterwards: the same model and seed
        give the same sampled score, and evaluating never changes what training does next."""
        if deterministic:
            yield
            return
        saved_np_rng, saved_torch = self.np_rng, self.torch_rng.get_state()
        self.np_rng = np.random.default_rng(seed)
        self.torch_rng.manual_seed(seed)
        try:
            yield
        finally:
            self.np_rng = saved_np_rng
            self.torch_rng.set_state(saved_torch)

    def _evaluate_episodes(self, env, obs, n_episodes: int, deterministic: bool, progress: bool
                           ) -> tuple[float, float]:
        """The episode loop of ``evaluate`` on an eval env already reset to ``obs``."""
        returns = np.zeros(n_episodes)
        finished = np.zeros(n_episodes, dtype=bool)
        starts = np.ones(n_episodes, dtype=bool)
        act = self.episode_actor(n_episodes, deterministic)
        with EvaluationProgress(n_episodes, f"eval {self.env_id or ''}".strip(), enabled=progress) as bar:
            steps = 0
            while not finished.all():
                obs = np.asarray(obs)
                check_finite_observations(obs, f"evaluate (step {steps} of {self.env_id or 'the eval env'})")
                # an env with action masks: the policy acts on the valid actions only
                actions = act(obs, starts, current_action_masks(env))
                obs, rewards, term, trunc, _ = env.step(actions)
                returns += np.where(finished, 0.0, rewards)
                starts = term | trunc
                newly = starts & ~finished
                finished |= starts
                steps += 1
                if progress and (newly.any() or steps % 100 == 0):
                    bar.update(int(finished.sum()), steps, float(returns[finished].mean()) if finished.any() else None)
        return float(returns.mean()), float(returns.std())

    def episode_actor(self, n: int, deterministic: bool = True):
        """``act(obs [n, ...], episode_starts [n] bool[, action_masks [n, M] bool]) -> actions`` for stepping ``n``
        envs through episodes, as evaluation, ``rapidrl collect`` and videos act: a recurrent policy keeps each env's
        state in the closure and resets it where ``episode_starts`` is True; a feed-forward one ignores the starts;
        the masks come from an env that has them."""
        def act(obs, starts, action_masks=None):
            if action_masks is None:
                return self._policy_actions(obs, deterministic)
            return self._policy_actions(obs, deterministic, action_masks=action_masks)

        return act
