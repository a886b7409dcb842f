"""Callbacks for ``learn``: hooks at training start, after each rollout, after each update, per step.

A callback returns ``False`` from ``on_step``/``on_rollout_end``/``on_update_end`` to stop training early.
Each hook receives the algorithm; ``algo.num_timesteps``, ``algo.logger_record`` (latest metrics) and
``algo.timer`` are there to read.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path

from rapidrl.train.finite import training_is_finite


class Callback:
    """Base class: override the hooks you need. Returning False stops training."""

    def on_training_start(self, algo) -> None:
        pass

    def on_step(self, algo) -> bool:
        return True

    def on_rollout_end(self, algo) -> bool:
        return True

    def on_update_end(self, algo) -> bool:
        return True

    def on_update_logged(self, algo) -> None:
        """After the update's metrics reached the loggers (if it was a report step): run files agree here."""

    def on_training_end(self, algo) -> None:
        pass


class CallbackList(Callback):
    """Runs several callbacks in order; stops when any asks to."""

    def __init__(self, callbacks: Sequence[Callback]):
        self.callbacks = list(callbacks)

    def on_training_start(self, algo) -> None:
        for c in self.callbacks:
            c.on_training_start(algo)

    def on_step(self, algo) -> bool:
        return all([c.on_step(algo) for c in self.callbacks])

    def on_rollout_end(self, algo) -> bool:
        return all([c.on_rollout_end(algo) for c in self.callbacks])

    def on_update_end(self, algo) -> bool:
        return all([c.on_update_end(algo) for c in self.callbacks])

    def on_update_logged(self, algo) -> None:
        for c in self.callbacks:
            c.on_update_logged(algo)

    def on_training_end(self, algo) -> None:
        for c in self.callbacks:
            c.on_training_end(algo)


def as_callback(callback) -> Callback:
    """None, a Callback, a list of them, or a function ``f(algo) -> bool`` called on each update end."""
    if callback is None:
        return Callback()
    if isinstance(callback, Callback):
        return callback
    if isinstance(callback, (list, tuple)):
        return CallbackList([as_callback(c) for c in callback])
    if callable(callback):
        return FunctionCallback(callback)
    raise TypeError(f"callback must be a Callback, a list of them or a function, got {type(callback).__name__}")


class FunctionCallback(Callback):
    """Wraps ``f(algo) -> bool | None`` as an on_update_end hook (None means continue)."""

    def __init__(self, fn: Callable):
        self.fn = fn

    def on_update_end(self, algo) -> bool:
        return self.fn(algo) is not False


class EvalCallback(Callback):
    """Evaluate every ``eval_freq`` timesteps on separate envs; optionally stop at ``reward_threshold``.

    ``history`` holds (timesteps, mean, std, wall seconds since training start).
    """

    def __init__(self, eval_freq: int = 10_000, n_episodes: int = 10, reward_threshold: float | None = None,
                 deterministic: bool = True, best_model_path: str | Path | None = None):
        if eval_freq <= 0 or n_episodes <= 0:
            raise ValueError("eval_freq and n_episodes must be positive")
        self.eval_freq, self.n_episodes = int(eval_freq), int(n_episodes)
        self.reward_threshold, self.deterministic = reward_threshold, deterministic
        self.best_model_path = best_model_path
        self.history: list[tuple[int, float, float, float]] = []
        self.best_mean = float("-inf")
        self._next = 0

    def on_training_start(self, algo) -> None:
        self._next = algo.num_timesteps + self.eval_freq

    def on_update_end(self, algo) -> bool:
        if algo.num_timesteps < self._next:
            return True
        self._next = algo.num_timesteps + self.eval_freq
        mean, std = algo.evaluate(self.n_episodes, deterministic=self.deterministic)
        self.history.append((algo.num_timesteps, mean, std, algo.timer.elapsed()))
        algo.record({"eval/mean_return": mean, "eval/std_return": std})
        if mean > self.best_mean:
            self.best_mean = mean
            if self.best_model_path is not None and training_is_finite(algo):
                algo.save(self.best_model_path)
        return self.reward_threshold is None or mean < self.reward_threshold


class CheckpointCallback(Callback):
    """Save the model every ``save_freq`` timesteps to ``directory/<prefix>_<steps>.pt``."""

    def __init__(self, save_freq: int, directory: str | Path, prefix: str = "model"):
        if save_freq <= 0:
            raise ValueError("save_freq must be positive")
        self.save_freq, self.directory, self.prefix = int(save_freq), Path(directory), prefix
        self._next = 0
        self.saved: list[Path] = []

    def on_training_start(self, algo) -> None:
        self.directory.mkdir(parents=True, exist_ok=True)
        self._next = algo.num_timesteps + self.save_freq

    def on_update_end(self, algo) -> bool:
        if algo.num_timesteps >= self._next and training_is_finite(algo):  # a non-finite state is never saved
            self._next = algo.num_timesteps + self.save_freq
            path = self.directory / f"{self.prefix}_{algo.num_timesteps}.pt"
            algo.save(path)
            self.saved.append(path)
        return True


class StopOnReward(Callback):
    """Stop when the mean of the last ``window`` finished training episodes reaches ``threshold``."""

    def __init__(self, threshold: float, window: int = 20):
        self.threshold, self.window = float(threshold), int(window)

    def on_update_end(self, algo) -> bool:
        recent = algo.recent_returns(self.window)
        return len(recent) < self.window or sum(recent) / len(recent) < self.threshold
