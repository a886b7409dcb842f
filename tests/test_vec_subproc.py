"""SubprocVecEnv: parity with Gymnasium and SyncVecEnv, async send/recv, worker failures, reaping."""

from __future__ import annotations

import functools
import gc
import multiprocessing as mp
import os
import signal

import gymnasium as gym
import numpy as np
import pytest
import vec_test_envs
from gymnasium.vector import AutoresetMode
from vec_test_envs import assert_same_trajectory, gym_reference, manual_episode_stats, random_actions

from rapidrl.envs import ClosedEnvError
from rapidrl.envs.adapters.gymnasium import SyncVecEnv
from rapidrl.envs.adapters.subprocess import AsyncCallOrderError, EnvWorkerError, SubprocVecEnv

NUM_ENVS = 3


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


@pytest.fixture
def make():
    """Build SubprocVecEnvs; every one is closed (workers reaped) at teardown, whatever happened."""
    made = []

    def _make(*args, **kwargs):
        envs = SubprocVecEnv(*args, **kwargs)
        made.append(envs)
        return envs

    try:
        yield _make
    finally:
        for envs in made:
            envs.close()
        assert not any(pid_alive(pid) for envs in made for pid in envs.worker_pids)


def faulty_fns(n: int, bad: int, **fault) -> list:
    """n FaultyEnv factories; env ``bad`` gets the ``fault`` keyword arguments."""
    return [functools.partial(vec_test_envs.make_faulty, **(fault if i == bad else {})) for i in range(n)]


@pytest.mark.parametrize("mode", [AutoresetMode.SAME_STEP, AutoresetMode.NEXT_STEP])
@pytest.mark.parametrize(("env_id", "kwargs"), [("Taxi-v4", {"max_episode_steps": 12}),
                                                ("Pendulum-v1", {"max_episode_steps": 9})])
def test_same_trajectories_as_gymnasium(make, env_id, kwargs, mode):
    ours = make(env_id, NUM_ENVS, num_workers=2, autoreset_mode=mode, **kwargs)
    ref = gym_reference(env_id, NUM_ENVS, kwargs, mode)
    try:
        actions = random_actions(ours.single_action_space, NUM_ENVS, 40, seed=1)
        counts = assert_same_trajectory(ours, ref, actions, seed=321)
    finally:
        ref.close()
    assert counts["truncated"] > 0


def test_spawn_start_method_gives_the_same_results(make):
    spawned = make("Taxi-v4", 2, num_workers=1, start_method="spawn", max_episode_steps=5)
    sync = SyncVecEnv("Taxi-v4", 2, max_episode_steps=5)
    try:
        actions = random_actions(spawned.single_action_space, 2, 12, seed=0)
        assert_same_trajectory(spawned, sync, actions, seed=1)
    finally:
        sync.close()


def test_reset_seeds_and_options_reach_every_worker(make):
    ours = make("CartPole-v1", 3, num_workers=2, seed=4)
    sync = SyncVecEnv("CartPole-v1", 3)
    try:
        options = {"low": -0.001, "high": 0.001}
        np.testing.assert_array_equal(ours.reset()[0], sync.reset(seed=4)[0])  # constructor seed
        obs = ours.reset(seed=[5, None, 6], options=options)[0]
        assert np.abs(obs).max() <= 0.001
        ref = sync.reset(seed=[5, 0, 6], options=options)[0]
        np.testing.assert_array_equal(obs[[0, 2]], ref[[0, 2]])
    finally:
        sync.close()


def test_outputs_and_episode_stats_equal_sync(make):
    ours = make("FrozenLake-v1", 5, num_workers=2)
    sync = SyncVecEnv("FrozenLake-v1", 5)
    try:
        np.testing.assert_array_equal(ours.reset(seed=4)[0], sync.reset(seed=4)[0])
        for a in random_actions(ours.single_action_space, 5, 50, seed=3):
            out, ref = ours.step(a), sync.step(a)
            for x, y in zip(out[:4], ref[:4]):
                np.testing.assert_array_equal(x, y)
            for key in ("_episode", "final_obs", "_final_obs"):
                np.testing.assert_array_equal(out[4][key], ref[4][key])
            for key in ("r", "l"):
                np.testing.assert_array_equal(out[4]["episode"][key], ref[4]["episode"][key])
    finally:
        sync.close()
    manual_episode_stats(ours, random_actions(ours.single_action_space, 5, 50, seed=3), seed=4)


def test_async_send_recv_covers_every_env_and_matches_sync(make):
    """batch_size=2 of 5 envs: each env's own trajectory equals a synchronous run with its actions."""
    n, rounds = 5, 12
    envs = make("Taxi-v4", n, num_workers=2, batch_size=2, max_episode_steps=6)
    table = random_actions(envs.single_action_space, n, rounds + 1, seed=9)  # [step k of env i] = table[k, i]
    per_env = {i: [] for i in range(n)}
    envs.reset(seed=11)
    envs.send(table[0])
    steps_done = np.ones(n, np.int64)  # steps sent per env
    for _ in range(rounds * n // 2):
        obs, rew, term, trunc, info, ids = envs.recv()
        assert ids.shape == (2,) and len(set(ids.tolist())) == 2
        for j, i in enumerate(ids.tolist()):
            per_env[i].append((obs[j], rew[j], term[j], trunc[j], info["episode"]["r"][j], info["_episode"][j]))
        actions = np.array([table[min(steps_done[i], rounds), i] for i in ids])
        steps_done[ids] += 1
        envs.send(actions, ids)
    assert all(len(v) >= 2 for v in per_env.values())  # every env came back, repeatedly
    ref = SyncVecEnv("Taxi-v4", n, max_episode_steps=6)
    try:
        ref.reset(seed=11)
        for k in range(max(len(v) for v in per_env.values())):
            obs, rew, term, trunc, info = ref.step(table[min(k, rounds)])
            for i in range(n):
                if k < len(per_env[i]):
                    got = per_env[i][k]
                    want = (obs[i], rew[i], term[i], trunc[i], info["episode"]["r"][i], info["_episode"][i])
                    assert got == want, f"env {i} step {k}"
    finally:
        ref.close()


def test_async_call_order_errors(make):
    envs = make("FrozenLake-v1", 4, num_workers=2, batch_size=2)
    envs.reset(seed=0)
    with pytest.raises(AsyncCallOrderError, match="no step in flight"):
        envs.recv()
    envs.send(np.zeros(1, np.int64), np.array([3]))
    with pytest.raises(AsyncCallOrderError, match="only 1 are in flight"):
        envs.recv()
    with pytest.raises(AsyncCallOrderError, match=r"envs \[3\] still have a step in flight"):
        envs.send(np.zeros(2, np.int64), np.array([0, 3]))
    with pytest.raises(AsyncCallOrderError, match="step"):
        envs.step(np.zeros(4, np.int64))
    with pytest.raises(ValueError, match="repeat"):
        envs.send(np.zeros(2, np.int64), np.array([1, 1]))
    with pytest.raises(ValueError, match=r"\[0, 4\)"):
        envs.send(np.zeros(1, np.int64), np.array([4]))
    with pytest.raises(ValueError, match="shape"):
        envs.send(np.zeros(2, np.int64), np.array([1]))
    envs.send(np.zeros(3, np.int64), np.array([0, 1, 2]))
    first = envs.recv()[5].copy()
    second = envs.recv()[5].copy()
    assert sorted([*first, *second]) == [0, 1, 2, 3]  # unreceived results are kept for the next recv
    envs.step(np.zeros(4, np.int64))  # all idle again: the synchronous API works
    envs.send(np.zeros(3, np.int64), np.array([0, 1, 2]))
    envs.recv()
    np.testing.assert_array_equal(envs.reset(seed=0)[0], np.zeros(4))  # reset drops what is in flight
    envs.send(np.zeros(4, np.int64))  # so every env is idle again


@pytest.mark.parametrize("num_workers", [1, 2])
def test_exception_in_env_names_the_env(make, num_workers):
    envs = make(faulty_fns(3, bad=2, fault="raise", fail_at=3), num_workers=num_workers)
    envs.reset(seed=0)
    envs.step(np.ones(3, np.int64))
    envs.step(np.ones(3, np.int64))
    with pytest.raises(EnvWorkerError, match=r"env 2 \(make_faulty\)") as err:
        envs.step(np.ones(3, np.int64))
    assert err.value.env_index == 2
    assert "RuntimeError: boom at step 3" in err.value.worker_traceback
    assert "boom at step 3" in str(err.value)
    assert not any(pid_alive(p) for p in envs.worker_pids)
    with pytest.raises(ClosedEnvError):
        envs.step(np.ones(3, np.int64))


def test_dying_worker_names_the_env(make):
    envs = make(faulty_fns(4, bad=1, fault="exit", fail_at=2), num_workers=2)
    envs.reset(seed=0)
    envs.step(np.zeros(4, np.int64))
    with pytest.raises(EnvWorkerError, match=rf"env 1 .* died \(exit code {vec_test_envs.EXIT_CODE}\)") as err:
        envs.step(np.zeros(4, np.int64))
    assert err.value.env_index == 1 and err.value.worker_pid == envs.worker_pids[0]
    assert not any(pid_alive(p) for p in envs.worker_pids)


def test_worker_killed_from_outside_is_reported(make):
    envs = make("FrozenLake-v1", 4, num_workers=2)
    envs.reset(seed=0)
    os.kill(envs.worker_pids[1], signal.SIGKILL)  # e.g. the OOM killer, while the worker is idle
    with pytest.raises(EnvWorkerError, match=r"envs 2\.\.3 \(FrozenLake-v1\) in worker 1 .* died") as err:
        envs.step(np.zeros(4, np.int64))
    assert err.value.env_index == -1 and err.value.worker_pid == envs.worker_pids[1]


@pytest.mark.parametrize("api", ["recv", "step"])
def test_hanging_worker_times_out(make, api):
    envs = make(faulty_fns(2, bad=0, fault="hang", fail_at=1), num_workers=2, timeout=2.0, batch_size=1)
    envs.reset(seed=0)
    with pytest.raises(EnvWorkerError, match=r"env 0 .* did not answer within timeout=2 s"):
        if api == "step":
            envs.step(np.zeros(2, np.int64))
        else:
            envs.send(np.zeros(2, np.int64))
            # env 1 answers; env 0 sleeps 60 s, far beyond the timeout
            assert envs.recv()[5].tolist() == [1]
            envs.recv()
    assert not any(pid_alive(p) for p in envs.worker_pids)


def test_failing_factory_is_reported_at_construction():
    before = set(mp.active_children())
    with pytest.raises(EnvWorkerError, match="refuses to be made") as err:
        SubprocVecEnv(faulty_fns(3, bad=2, fail_on_make=True), num_workers=2)
    assert err.value.env_index == 2
    assert not pid_alive(err.value.worker_pid)
    assert set(mp.active_children()) <= before  # the healthy worker was reaped too


def test_gymnasium_id_registered_in_a_user_module(make):
    envs = make(vec_test_envs.FAULTY_MODULE_ID, 3, num_workers=2, horizon=2)
    assert envs.env_id == vec_test_envs.FAULTY_ID
    envs.reset(seed=0)
    envs.step(np.array([2, 1, 0]))
    obs, rew, _, trunc, info = envs.step(np.array([0, 1, 2]))
    np.testing.assert_array_equal(rew, [0.0, 1.0, 2.0])
    assert trunc.all()
    np.testing.assert_array_equal(info["episode"]["r"], [2.0, 2.0, 2.0])
    np.testing.assert_array_equal(info["final_obs"], [[2.0]] * 3)
    np.testing.assert_array_equal(obs, [[0.0]] * 3)


def test_close_reaps_workers_and_is_idempotent():
    envs = SubprocVecEnv("FrozenLake-v1", 3, num_workers=3)
    pids = list(envs.worker_pids)
    try:
        assert len(set(pids)) == 3 and all(pid_alive(p) for p in pids)
        envs.reset(seed=0)
    finally:
        envs.close()
    assert not any(pid_alive(p) for p in pids)
    envs.close()
    with pytest.raises(ClosedEnvError):
        envs.step(np.zeros(3, np.int64))
    with pytest.raises(ClosedEnvError):
        envs.send(np.zeros(3, np.int64))


def test_garbage_collection_reaps_workers():
    envs = SubprocVecEnv("FrozenLake-v1", 2, num_workers=2)
    pids = list(envs.worker_pids)
    del envs
    gc.collect()
    assert not any(pid_alive(p) for p in pids)


def test_bad_arguments(make):
    with pytest.raises(ValueError, match="batch_size"):
        SubprocVecEnv("FrozenLake-v1", 2, batch_size=3)
    with pytest.raises(ValueError, match="timeout"):
        SubprocVecEnv("FrozenLake-v1", 2, timeout=0)
    with pytest.raises(ValueError, match="fork is unsafe"):
        SubprocVecEnv("FrozenLake-v1", 2, start_method="fork")
    with pytest.raises(TypeError, match="flatten_observations=True"):
        SubprocVecEnv("Blackjack-v1", 2)
    envs = make("FrozenLake-v1", 2, num_workers=1)
    with pytest.raises(gym.error.ResetNeeded):
        envs.step(np.zeros(2, np.int64))
    envs.reset(seed=0)
    with pytest.raises(TypeError, match="integer dtype"):
        envs.step(np.zeros(2, np.float32))
    with pytest.raises(ValueError, match=r"\[0, 4\)"):
        envs.send(np.array([0, 9]), np.array([0, 1]))
    with pytest.raises(TypeError, match="env_ids"):
        envs.send(np.array([0]), np.array([0.0]))
