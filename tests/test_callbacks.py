"""Callbacks fire as ``rapidrl.train.callbacks`` documents: which hook, in which order, with which counters."""

from __future__ import annotations

import pytest

import rapidrl as rr
from rapidrl.train.callbacks import Callback


class Recorder(Callback):
    def __init__(self, stop_after_rollouts: int | None = None):
        self.events: list[tuple] = []
        self.stop_after = stop_after_rollouts

    def on_training_start(self, algo):
        self.events.append(("start", algo.num_timesteps, algo.num_updates))

    def on_rollout_end(self, algo):
        self.events.append(("rollout", algo.num_timesteps, algo.num_updates))
        rollouts = sum(e[0] == "rollout" for e in self.events)
        return self.stop_after is None or rollouts < self.stop_after

    def on_update_end(self, algo):
        self.events.append(("update", algo.num_timesteps, algo.num_updates))
        return True

    def on_update_logged(self, algo):
        self.events.append(("logged", algo.num_timesteps, algo.num_updates))

    def on_training_end(self, algo):
        self.events.append(("end", algo.num_timesteps, algo.num_updates))


@pytest.mark.parametrize("make,steps", [
    (lambda: rr.PPO("CartPole-v1", num_envs=4, num_steps=16, minibatch_size=32, seed=0), 64),
    (lambda: rr.DQN("CartPole-v1", learning_starts=0, batch_size=8, train_freq=4, gradient_steps=1, seed=0), 4),
])
def test_hooks_fire_in_order_with_the_documented_counters(make, steps):
    model, rec = make(), Recorder()
    model.learn(3 * steps, callback=rec, progress_bar=False)
    want = [("start", 0, 0)]
    for k in range(3):  # the rollout's steps are counted at on_rollout_end, its update at on_update_end
        want += [("rollout", (k + 1) * steps, k), ("update", (k + 1) * steps, k + 1),
                 ("logged", (k + 1) * steps, k + 1)]
    assert rec.events == [*want, ("end", 3 * steps, 3)]


def test_false_from_on_rollout_end_stops_after_that_iterations_update():
    model, rec = rr.A2C("CartPole-v1", num_envs=2, seed=0), Recorder(stop_after_rollouts=2)
    model.learn(10_000, callback=rec, progress_bar=False)
    assert model.num_updates == 2 and [e[0] for e in rec.events][-3:] == ["update", "logged", "end"]


def test_function_callbacks_run_after_each_update():
    seen = []
    rr.A2C("CartPole-v1", num_envs=2, seed=0).learn(30, callback=lambda m: seen.append(m.num_updates),
                                                   progress_bar=False)
    assert seen == [1, 2, 3]


def test_a_per_step_hook_is_refused_where_it_is_written():
    with pytest.raises(TypeError, match="no per-step callback"):
        class PerStep(Callback):
            def on_step(self, algo):
                return True
