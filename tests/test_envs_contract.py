"""Every family keeps the vector-env contract (``rapidrl.envs.check``), in both autoreset modes where it has them;
and ``check`` and ``align`` themselves catch what they promise to catch.

The Ray adapter's contract is checked in tests/test_ray_vec.py (it needs that file's local Ray instance).
"""

from __future__ import annotations

import functools

import gymnasium as gym
import numba
import numpy as np
import pytest

import rapidrl as rr
from rapidrl.envs import EnvContractError, NumbaEnv, NumbaVecEnv, align, check, make_vec
from rapidrl.envs.classic import cartpole

MODES = ["same_step", "next_step"]
CLASSIC = {"CartPole-v1": {}, "Acrobot-v1": {"max_episode_steps": 60}, "MountainCar-v0": {"max_episode_steps": 50},
           "MountainCarContinuous-v0": {"max_episode_steps": 50}, "Pendulum-v1": {"max_episode_steps": 50}}


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("env_id", list(CLASSIC))
def test_classic_control(env_id, mode):
    report = check(make_vec(env_id, 4, seed=1, autoreset_mode=mode, **CLASSIC[env_id]), steps=200)
    assert report.episodes > 0 and report.bad_input


@pytest.mark.parametrize("mode", MODES)
def test_classic_control_on_torch(mode):
    check(make_vec("CartPole-v1", 4, seed=1, vectorization="torch", autoreset_mode=mode), steps=200)


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("env_id", ["MinAtar/Breakout-v1", "MinAtar/Seaquest-v0"])
def test_minatar(env_id, mode):
    check(make_vec(env_id, 3, seed=2, autoreset_mode=mode, max_episode_steps=40), steps=150)


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("env_id", ["CartPoleNoVel-v1", "PendulumNoVel-v1", "MemoryCue-v0"])
def test_partially_observed(env_id, mode):
    kwargs = {"max_episode_steps": 40} if env_id == "PendulumNoVel-v1" else {}  # Pendulum's episodes only truncate
    check(make_vec(env_id, 3, seed=3, autoreset_mode=mode, **kwargs), steps=150)


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("continuous", [False, True])
def test_mpe(mode, continuous):
    check(make_vec("MPE/simple_spread-v3", 2, seed=4, autoreset_mode=mode, max_cycles=10,
                   continuous_actions=continuous), steps=60)


def test_pettingzoo_adapter():
    pytest.importorskip("mpe2")
    from mpe2 import simple_spread_v3

    from rapidrl.envs.adapters.pettingzoo import PettingZooVecEnv

    check(PettingZooVecEnv(functools.partial(simple_spread_v3.parallel_env, max_cycles=10), 2, seed=0),
          steps=40)


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("vectorization", ["sync", "subprocess"])
def test_gymnasium_adapters(vectorization, mode):
    envs = make_vec("Taxi-v4", 3, seed=5, vectorization=vectorization, autoreset_mode=mode, max_episode_steps=15)
    try:
        check(envs, steps=80)
    finally:
        envs.close()


@pytest.mark.parametrize("mode", MODES)
def test_mujoco(mode):
    pytest.importorskip("mujoco")
    envs = make_vec("Hopper-v5", 3, seed=6, autoreset_mode=mode, max_episode_steps=15)
    check(envs, steps=50)
    envs.close()


def test_atari_engine_mapped_into_the_contract():
    """ale-py resets its games itself; the adapter's outputs keep the contract. Evaluation setting (no episodic
    life, unclipped rewards): the statistics are the sums of the returned rewards at every episode end; training
    setting: a lost life ends the learner's episode without statistics (strict_episodes=False)."""
    pytest.importorskip("ale_py")
    for training, strict in ((False, True), (True, False)):
        envs = make_vec("ALE/Breakout-v5", 2, seed=7, training=training, max_episode_frames=300)
        try:
            check(envs, steps=120, strict_episodes=strict)
        finally:
            envs.close()


def test_atari_refuses_next_step_before_starting_an_emulator():
    pytest.importorskip("ale_py")
    with pytest.raises(ValueError, match="same_step"):
        make_vec("ALE/Breakout-v5", 2, autoreset_mode="next_step")


# -- check catches violations -------------------------------------------------------------------------------
class _Broken(gym.vector.VectorEnv):
    """A SAME_STEP vector env of counters (episode ends after 3 steps) with one defect switched on by ``defect``."""

    def __init__(self, defect: str, n: int = 2):
        self.num_envs, self.defect = n, defect
        self.single_observation_space = gym.spaces.Box(0, 10, (1,), np.float32)
        self.single_action_space = gym.spaces.Discrete(2)
        self.observation_space = gym.vector.utils.batch_space(self.single_observation_space, n)
        self.action_space = gym.vector.utils.batch_space(self.single_action_space, n)
        self.metadata = {"autoreset_mode": gym.vector.AutoresetMode.SAME_STEP}
        self.calls = 0

    def reset(self, *, seed=None, options=None):
        self.t = np.zeros(self.num_envs, np.float32)
        self.ret = np.zeros(self.num_envs, np.float32)
        self.calls += 1
        return self.t[:, None].copy(), {}

    def step(self, actions):
        a = np.asarray(actions)
        if self.defect != "accepts_bad_input" and (a.shape != (self.num_envs,) or (a < 0).any() or (a > 1).any()):
            raise ValueError("actions must have shape (num_envs,) and lie in [0, 2)")
        rewards = np.asarray(actions, np.float32) + (self.calls if self.defect == "nondeterministic" else 0)
        self.t += 1
        self.ret += rewards
        done = self.t >= 3
        info = {"final_obs": self.t[:, None].copy(), "_final_obs": done.copy(),
                "episode": {"r": self.ret + (1 if self.defect == "wrong_return" else 0), "l": self.t.astype(np.int32)},
                "_episode": done.copy()}
        if self.defect == "no_final_obs":
            info["_final_obs"] = np.zeros_like(done)
        obs = np.where(done, 0.0, self.t)[:, None].astype(np.float32)
        if self.defect == "out_of_space":
            obs += 20.0
        self.t[done], self.ret[done] = 0.0, 0.0
        return obs, rewards, done, np.zeros_like(done), info


@pytest.mark.parametrize(("defect", "match"), [
    (None, None),
    ("wrong_return", "episode return"),
    ("nondeterministic", "not deterministic"),
    ("no_final_obs", "_final_obs"),
    ("out_of_space", "outside the observation space"),
    ("accepts_bad_input", "accepted actions"),
])
def test_check_catches_each_violation(defect, match):
    envs = _Broken(defect or "none")
    if defect is None:
        assert check(envs, steps=12, bad_input=True).episodes == 8
        return
    with pytest.raises(EnvContractError, match=match):
        check(envs, steps=12, bad_input=True)


def test_check_needs_an_episode_end_and_a_vector_env():
    with pytest.raises(EnvContractError, match="no episode ended"):
        check(make_vec("Pendulum-v1", 2, seed=0), steps=10)
    with pytest.raises(EnvContractError, match="VectorEnv"):
        check(gym.make("CartPole-v1"))


def test_check_runs_on_gymnasiums_own_vector_env():
    envs = gym.wrappers.vector.RecordEpisodeStatistics(gym.vector.SyncVectorEnv(
        [functools.partial(gym.make, "CartPole-v1")] * 2, autoreset_mode=gym.vector.AutoresetMode.NEXT_STEP))
    check(envs, steps=100)


# -- align ------------------------------------------------------------------------------------------------------
def test_align_classic_control_both_ways():
    """Gymnasium's reset states into ours and ours into Gymnasium's, alternately: identical for 800 steps."""
    def load(ref, state):
        ref.unwrapped.state = state

    for env_id in ("CartPole-v1", "Acrobot-v1"):
        report = align(make_vec(env_id, 3, seed=0), lambda e=env_id: gym.make(e), steps=800, load_state=load)
        assert report.ok and report.episodes >= 3, report


@numba.njit(cache=True)
def _bad_step(state, i, actions, params, elapsed, rng_key, rng_counter):
    """CartPole's step with a reward off by 1e-3 after 5 steps of an episode."""
    reward, term = cartpole.step(state, i, actions, params, elapsed, rng_key, rng_counter)
    return reward + (1e-3 if elapsed[i] >= 5 else 0.0), term


def test_align_reports_the_first_difference():
    spec = cartpole.SPEC
    bad = NumbaEnv(id="BadCartPole", observation_space=spec.observation_space, action_space=spec.action_space,
                   state_shape=spec.state_shape, reset=spec.reset, step=_bad_step, observe=spec.observe,
                   params=spec.params, max_episode_steps=500)
    report = align(NumbaVecEnv(bad, 2, seed=0), lambda: gym.make("CartPole-v1"), steps=50)
    d = report.difference
    assert not report.ok and d.field == "reward" and d.step == 5 and d.env == 0, report
    assert "reward of env 0 differs at step 5" in str(report)


def test_make_vec_takes_a_numba_env_and_register_makes_its_id_known():
    """An env made of the same functions shares their compiled kernels (the kernel key names functions, not ids)."""
    spec = cartpole.SPEC
    mine = NumbaEnv(id="MyCartPole-v0", observation_space=spec.observation_space, action_space=spec.action_space,
                    state_shape=spec.state_shape, reset=spec.reset, step=spec.step, observe=spec.observe,
                    params=spec.params, max_episode_steps=50)
    assert type(make_vec(mine, 2)) is NumbaVecEnv and mine.kernel_key == spec.kernel_key
    rr.envs.register(mine)
    assert "MyCartPole-v0" in rr.envs.list_envs()["registered"] and "MyCartPole-v0" in rr.envs.list_builtin_envs()
    check(make_vec("MyCartPole-v0", 2, seed=0), steps=200)
    with pytest.raises(ValueError, match="taken"):
        rr.envs.register(spec)  # CartPole-v1 is classic control's
    with pytest.raises(TypeError, match="NumbaEnv"):
        rr.envs.register("MyCartPole-v0")



def test_every_builtin_numba_env_keeps_its_function_contracts():
    """rapidrl's own ``NumbaEnv`` definitions skip ``check_functions`` at definition (typing them would compile, and
    write Numba's cache, when rapidrl is imported): every one of them is held to it here instead."""
    import importlib
    import pkgutil

    import rapidrl.envs
    from rapidrl.envs.core.contract import check_functions

    found = {}
    for info in pkgutil.walk_packages(rapidrl.envs.__path__, "rapidrl.envs."):
        try:
            module = importlib.import_module(info.name)
        except ImportError:  # an optional engine (MuJoCo, ALE) that is not installed: none of them is a NumbaEnv
            continue
        for value in vars(module).values():
            if isinstance(value, NumbaEnv) and value.step.py_func.__module__.startswith("rapidrl.envs."):
                found[value.id] = value
    assert {"CartPole-v1", "Acrobot-v1", "MountainCar-v0", "Pendulum-v1"} <= set(found)
    for env in found.values():
        check_functions(env)
