"""Callbacks for ``learn``: hooks at training start, after each rollout, after each update, at the end.

Each iteration of ``Algorithm.learn`` collects one rollout (on-policy: ``num_steps`` steps of every env;
off-policy: ``train_freq`` steps into the replay buffer), then updates on it. The hooks fire, in this order:

- ``on_training_start(algo)``: once, before the first rollout of a ``learn`` call;
- ``on_rollout_end(algo) -> bool``: after each rollout, before its update (``algo.num_timesteps`` already counts
  the rollout's steps; on-policy ``algo.buffer`` holds it with its advantages);
- ``on_update_end(algo) -> bool``: after each update (``algo.num_updates`` counts it);
- ``on_update_logged(algo)``: after that, once the update's metrics reached the loggers (when it was a report
  step): checkpoints are written here, so that a resumed run has every metrics row up to its step;
- ``on_training_end(algo)``: once, when ``learn`` returns normally.

Returning ``False`` from ``on_rollout_end`` or ``on_update_end`` stops training at the end of that iteration (its
update still runs, so the step counts stay whole). There is no per-env-step hook: the fast paths collect a whole
rollout in one compiled call. Each hook receives the algorithm; ``algo.num_timesteps``, ``algo.metrics`` (the
current record; ``algo.record({...})`` adds to it), ``algo.history`` and ``algo.timer`` are there to read.
"""

from __future__ import annotations

import signal
import sys
import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

from rapidrl.train.finite import training_is_finite


class Callback:
    """Base class: override the hooks you need (see the module docstring for when each fires). Returning False
    from ``on_rollout_end``/``on_update_end`` stops training."""

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        if "on_step" in cls.__dict__:  # it would never be called: say so where the class is written
            raise TypeError(f"{cls.__qualname__}.on_step: rapidrl has no per-step callback (a whole rollout is "
                            "collected in one compiled call); use on_rollout_end or on_update_end")

    def on_training_start(self, algo) -> None:
        pass

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


@contextmanager
def signal_handlers(handlers: dict[signal.Signals, Callable]) -> Iterator[None]:
    """Install ``handlers`` (signal -> handler) while the block runs and restore the previous handlers after it. Off
    the main thread nothing is installed (Python runs signal handlers in the main thread alone)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = {sig: signal.signal(sig, handler) for sig, handler in handlers.items()}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


class StopOnSignal(Callback):
    """Ctrl-C (SIGINT) or ``kill PID`` (SIGTERM) stops training at the end of the update in progress instead of
    in the middle of it: ``learn`` then returns normally, so the other callbacks' end of training runs at a whole
    step (a ``Checkpointer`` writes its checkpoint there, and the run resumes losing nothing). A second signal
    stops at once (``KeyboardInterrupt``). ``requested``: the name of the signal received, else None.

        stop = StopOnSignal()
        with stop.installed():
            model.learn(1_000_000, callback=[Checkpointer("ckpts", every=50_000), stop])
        if stop.requested: ...   # stopped early, at model.num_timesteps

    The handlers exist only inside ``installed()`` and only in the main thread (Python runs signal handlers
    there alone); elsewhere the signals keep their previous handling.
    """

    SIGNALS = (signal.SIGINT, signal.SIGTERM)

    def __init__(self):
        self.requested: str | None = None

    @contextmanager
    def installed(self) -> Iterator[StopOnSignal]:
        """Handle SIGINT and SIGTERM as described above while the block runs; restore the previous handlers."""
        self.requested = None
        with signal_handlers(dict.fromkeys(self.SIGNALS, self._handle)):
            yield self

    def _handle(self, signum, frame) -> None:
        if self.requested is not None:
            raise KeyboardInterrupt
        self.requested = signal.Signals(signum).name
        print(f"\n{self.requested}: stopping at the end of this update (send it again to stop at once)",
              file=sys.stderr, flush=True)

    def on_update_end(self, algo) -> bool:
        return self.requested is None
