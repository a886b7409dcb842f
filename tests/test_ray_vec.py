"""RayVecEnv: same trajectories as SyncVecEnv, restarts of dead actors, errors, reaping, PPO on top.

One local Ray instance (2 CPUs) serves the module; every env a test makes is closed at its end.
"""

from __future__ import annotations

import functools
import time

import gymnasium as gym
import numpy as np
import psutil
import pytest
import torch
import vec_test_envs
from vec_test_envs import assert_same_trajectory, manual_episode_stats, random_actions

import rapidrl
from rapidrl.envs import ClosedEnvError, check
from rapidrl.envs.adapters.gymnasium import SyncVecEnv
from rapidrl.envs.adapters.subprocess import EnvWorkerError

ray = pytest.importorskip("ray")
from rapidrl.envs.adapters.ray import RayVecEnv  # noqa: E402  (needs ray)

NUM_ENVS = 4
# Ray has 2 CPUs here: half a CPU per actor lets the shared env (2 actors) and one more env run at once.
ACTOR = {"num_cpus": 0.5}


@pytest.fixture(scope="module", autouse=True)
def local_ray():
    """A local Ray instance; the test helper module is pickled by value so that actors need not import it."""
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, configure_logging=False)
    ray.cloudpickle.register_pickle_by_value(vec_test_envs)
    try:
        yield
    finally:
        ray.cloudpickle.unregister_pickle_by_value(vec_test_envs)
        ray.shutdown()


@pytest.fixture(scope="module")
def cartpole():
    """One RayVecEnv shared by the tests that neither kill its actors nor close it (actors start slowly)."""
    envs = RayVecEnv("CartPole-v1", NUM_ENVS, num_workers=2, actor_options=ACTOR)
    try:
        yield envs
    finally:
        envs.close()


@pytest.fixture
def make():
    """Build RayVecEnvs; every one is closed at teardown, whatever happened."""
    made = []

    def _make(*args, **kwargs):
        envs = RayVecEnv(*args, actor_options=ACTOR, **kwargs)
        made.append(envs)
        return envs

    try:
        yield _make
    finally:
        for envs in made:
            envs.close()


def wait_gone(pids: list[int], deadline_s: float = 60.0) -> bool:
    """True once no process in ``pids`` runs (zombies count as gone); False after ``deadline_s``."""
    end = time.monotonic() + deadline_s
    while time.monotonic() < end:
        alive = []
        for pid in pids:
            try:
                alive.append(psutil.Process(pid).status() != psutil.STATUS_ZOMBIE)
            except psutil.NoSuchProcess:
                alive.append(False)
        if not any(alive):
            return True
        time.sleep(0.2)
    return False


def test_same_trajectories_as_sync_same_step(cartpole):
    ref = SyncVecEnv("CartPole-v1", NUM_ENVS)
    try:
        actions = random_actions(ref.single_action_space, NUM_ENVS, 40, seed=1)
        counts = assert_same_trajectory(cartpole, ref, actions, seed=3)
        assert counts["terminated"] > 0  # episode boundaries were crossed
        manual_episode_stats(cartpole, actions, seed=3)
    finally:
        ref.close()
    assert not cartpole.step(actions[0])[4]["restarted_envs"].any()
    assert cartpole.restarts == 0
    assert repr(cartpole) == "RayVecEnv(CartPole-v1, num_envs=4, num_workers=2)"


def test_same_trajectories_as_sync_next_step_box(make):
    ours = make("Pendulum-v1", 3, num_workers=2, autoreset_mode="next_step", max_episode_steps=9)  # 1 + 2 envs
    ref = SyncVecEnv("Pendulum-v1", 3, autoreset_mode="next_step", max_episode_steps=9)
    try:
        actions = random_actions(ref.single_action_space, 3, 25, seed=1)
        counts = assert_same_trajectory(ours, ref, actions, seed=3)
        assert counts["truncated"] > 0
        manual_episode_stats(ours, actions, seed=3)
    finally:
        ref.close()


@pytest.mark.parametrize(("actions", "error", "match"), [
    (np.array([0, 1, 0]), ValueError, "shape"),
    (np.array([0.0, 1.0, 0.0, 1.0]), TypeError, "integer dtype"),
    (np.array([0, 1, 2, 0]), ValueError, r"\[0, 2\)"),
    ([0, 1, 0, 1], TypeError, "numpy.ndarray"),
])
def test_bad_actions_raise_clear_errors(cartpole, actions, error, match):
    cartpole.reset(seed=0)
    with pytest.raises(error, match=match):
        cartpole.step(actions)
    cartpole.step(np.zeros(NUM_ENVS, np.int64))  # still usable


def test_ppo_trains_on_ray_envs(cartpole):
    model = rapidrl.PPO(cartpole, num_envs=NUM_ENVS, num_steps=16, minibatch_size=32, seed=0)
    before = torch.cat([p.detach().reshape(-1) for p in model.policy.parameters()])
    model.learn(3 * 16 * NUM_ENVS, progress_bar=False)
    after = torch.cat([p.detach().reshape(-1) for p in model.policy.parameters()])
    assert model.num_updates == 3 and model.num_timesteps == 3 * 16 * NUM_ENVS
    assert model.paths["collection"].value == "step"  # the per-step path drives the Ray env
    assert not torch.equal(before, after)


def test_killed_actor_is_restarted_and_reported_then_close_reaps(make):
    envs = make("CartPole-v1", NUM_ENVS, num_workers=2, seed=5, max_restarts=2)
    obs, _ = envs.reset()
    actions = np.ones(NUM_ENVS, np.int64)
    for _ in range(3):
        obs, *_ = envs.step(actions)
    before = obs.copy()
    old_pid = envs.worker_pids[0]
    ray.kill(envs.actors[0])  # asynchronous: a step sent before the process is gone could still be answered
    assert wait_gone([old_pid])
    with pytest.warns(RuntimeWarning, match=r"worker 0 \(envs 0\.\.1.*restart 1 of 2"):
        obs, rewards, terminated, truncated, info = envs.step(actions)
    assert envs.restarts == 1
    np.testing.assert_array_equal(info["restarted_envs"], [True, True, False, False])
    np.testing.assert_array_equal(truncated[:2], [True, True])  # the cut episodes end as at a time limit
    np.testing.assert_array_equal(terminated[:2], [False, False])
    np.testing.assert_array_equal(rewards[:2], [0.0, 0.0])
    np.testing.assert_array_equal(info["_final_obs"][:2], [True, True])
    np.testing.assert_array_equal(info["final_obs"][:2], before[:2])  # the last observation seen
    np.testing.assert_array_equal(info["episode"]["l"][:2], [3, 3])  # 3 steps counted before the failure
    for i in range(2):  # new seeds: seed + i + num_envs * restarts
        np.testing.assert_array_equal(obs[i], gym.make("CartPole-v1").reset(seed=5 + i + NUM_ENVS)[0])
    assert envs.worker_pids[0] != old_pid
    assert wait_gone([old_pid])
    for _ in range(5):  # stepping goes on; no more restarts
        obs, *_, info = envs.step(actions)
        assert not info["restarted_envs"].any()
    assert envs.restarts == 1

    actors, pids = list(envs.actors), list(envs.worker_pids)
    envs.close()
    envs.close()  # idempotent
    assert wait_gone(pids)
    for actor in actors:
        with pytest.raises(ray.exceptions.RayActorError):
            ray.get(actor.describe.remote())
    with pytest.raises(ClosedEnvError):
        envs.reset()


def test_next_step_restart_then_too_many_restarts(make):
    envs = make("CartPole-v1", NUM_ENVS, num_workers=2, seed=0, autoreset_mode="next_step", max_restarts=1)
    envs.reset()
    actions = np.zeros(NUM_ENVS, np.int64)
    obs = envs.step(actions)[0].copy()
    psutil.Process(envs.worker_pids[1]).kill()  # a crash, not a polite ray.kill
    assert wait_gone([envs.worker_pids[1]])
    with pytest.warns(RuntimeWarning, match="restart 1 of 1"):
        obs2, rewards, _, truncated, info = envs.step(actions)
    np.testing.assert_array_equal(info["restarted_envs"], [False, False, True, True])
    np.testing.assert_array_equal(truncated[2:], [True, True])
    np.testing.assert_array_equal(rewards[2:], [0.0, 0.0])
    np.testing.assert_array_equal(obs2[2:], obs[2:])  # NEXT_STEP: the step ending an episode shows its last obs
    obs3, rewards, _, truncated, info = envs.step(actions)  # ...and the next step is the reset step
    np.testing.assert_array_equal(rewards[2:], [0.0, 0.0])
    assert not truncated[2:].any() and not info["_episode"][2:].any()
    assert not np.array_equal(obs3[2:], obs[2:])

    old_pid = envs.worker_pids[0]
    ray.kill(envs.actors[0])  # asynchronous: wait for the process to go, or the step may still be answered
    assert wait_gone([old_pid])
    with pytest.raises(EnvWorkerError, match="max_restarts=1"):
        envs.step(actions)
    assert envs.closed
    with pytest.raises(ClosedEnvError):
        envs.step(actions)


def test_step_before_reset_and_env_exception(make):
    fns = [functools.partial(vec_test_envs.make_faulty, **({"fault": "raise", "fail_at": 2} if i == 3 else {}))
           for i in range(NUM_ENVS)]
    envs = make(fns, num_workers=2)
    with pytest.raises(gym.error.ResetNeeded):
        envs.step(np.zeros(NUM_ENVS, np.int64))
    envs.reset(seed=0)
    envs.step(np.zeros(NUM_ENVS, np.int64))
    with pytest.raises(EnvWorkerError, match=r"(?s)worker 1 \(envs 2\.\.3.*env 3 raised RuntimeError: boom"):
        envs.step(np.zeros(NUM_ENVS, np.int64))
    assert envs.closed
    assert envs.restarts == 0  # an env's exception is not an actor failure


def test_actors_that_cannot_be_scheduled_are_a_clear_error():
    with pytest.raises(RuntimeError, match=r"did not start within start_timeout=1 s.*num_cpus"):
        RayVecEnv("CartPole-v1", 2, num_workers=2, actor_options={"num_cpus": 3}, start_timeout=1)


@pytest.mark.parametrize("mode", ["same_step", "next_step"])
def test_contract(make, mode):
    """The adapter keeps the vector-env contract (rapidrl.envs.check), actor boundaries included."""
    check(make("CartPole-v1", 3, num_workers=2, autoreset_mode=mode, max_episode_steps=12), steps=40)
