"""NumbaVecEnv behaviour on the classic envs: auto-reset modes, seeding, threads, views, episode stats, render,
resume, bad input."""

from __future__ import annotations

import subprocess
import sys
import warnings

import gymnasium as gym
import numba
import numpy as np
import pytest
import torch

import rapidrl as rr
from rapidrl.envs import BuiltinVecEnv, ClosedEnvError
from rapidrl.envs.classic import CLASSIC_ENVS, get_spec
from rapidrl.envs.core import kernels
from rapidrl.kernels import parallel, rng

ALL = list(CLASSIC_ENVS)


def _policy(env, obs, t):
    """Actions that are a deterministic function of obs (t only varies them): identical runs stay identical."""
    spec = env.definition
    h = (np.abs(obs).sum(axis=1) * 1e4).astype(np.int64) + t
    if spec.action_kind == "discrete":
        return h % spec.action_size
    return ((h % 7) / 3.0 - 1.0).astype(np.float32)[:, None] * spec.action_high


def _episodes(env_id, mode, n, steps, **kwargs):
    """Per env: the list of episodes, each (observations incl. the final one, rewards, term, trunc)."""
    env = BuiltinVecEnv(env_id, n, seed=5, autoreset_mode=mode, **kwargs)
    obs, _ = env.reset()
    eps = [[([o.copy()], [], None)] for o in obs]
    skip = np.zeros(n, dtype=bool)
    for _ in range(steps):
        obs, rew, term, trunc, info = env.step(_policy(env, obs, 0))
        for i in range(n):
            if skip[i]:  # NEXT_STEP: this call reset env i
                assert rew[i] == 0 and not term[i] and not trunc[i] and not info["_episode"][i]
                eps[i].append(([obs[i].copy()], [], None))
                skip[i] = False
                continue
            o, r, _ = eps[i][-1]
            done = term[i] or trunc[i]
            o.append((info["final_obs"][i] if mode == "same_step" and done else obs[i]).copy())
            r.append(float(rew[i]))
            if done:
                eps[i][-1] = (o, r, (bool(term[i]), bool(trunc[i])))
                assert info["_episode"][i]
                assert info["episode"]["l"][i] == len(r)
                np.testing.assert_allclose(info["episode"]["r"][i], sum(r), rtol=1e-5, atol=1e-4)
                if mode == "same_step":
                    eps[i].append(([obs[i].copy()], [], None))
                else:
                    skip[i] = True
            else:
                assert not info["_episode"][i]
    return [[e for e in per_env if e[2] is not None] for per_env in eps]  # finished episodes only


@pytest.mark.parametrize("env_id", ["CartPole-v1", "Pendulum-v1", "MountainCarContinuous-v0"])
def test_same_step_and_next_step_give_the_same_episodes(env_id):
    """Both modes see the same episodes; only where the reset shows up differs."""
    kwargs = {"max_episode_steps": 40}
    same = _episodes(env_id, "same_step", 6, 300, **kwargs)
    nxt = _episodes(env_id, "next_step", 6, 300, **kwargs)
    for i in range(6):
        k = min(len(same[i]), len(nxt[i]))
        assert k >= 3
        for (o1, r1, f1), (o2, r2, f2) in zip(same[i][:k], nxt[i][:k]):
            np.testing.assert_array_equal(np.array(o1), np.array(o2))
            assert r1 == r2 and f1 == f2


def test_same_step_final_obs_is_gymnasium_terminal_obs_and_obs_is_a_reset_obs():
    env = BuiltinVecEnv("CartPole-v1", 3, seed=0)
    env.reset()
    ref = gym.make("CartPole-v1").unwrapped
    ref.reset(seed=0)
    ref.state = np.array([2.39, 1.0, 0.0, 0.0])  # leaves the track on the next step
    env.set_state(1, ref.state)
    ref_obs, ref_rew, ref_term, _, _ = ref.step(1)
    assert ref_term
    obs, rew, term, trunc, info = env.step(np.array([0, 1, 0]))
    assert term[1] and not trunc[1] and rew[1] == ref_rew == 1.0
    np.testing.assert_array_equal(info["final_obs"][1], ref_obs)
    assert np.all(np.abs(obs[1]) <= 0.05)  # the first observation of a fresh episode
    assert info["_final_obs"][1] and info["_episode"][1] and info["episode"]["l"][1] == 1
    assert info["episode"]["r"][1] == 1.0
    np.testing.assert_array_equal(env.get_state()[:, 1].astype(np.float32), obs[1])


def test_next_step_mode_resets_on_the_following_call_and_ignores_its_action():
    outs = []
    for action in (0, 1):
        env = BuiltinVecEnv("CartPole-v1", 2, seed=3, autoreset_mode="next_step")
        env.reset()
        env.set_state(0, [2.39, 1.0, 0.0, 0.0])
        obs, _, term, _, info = env.step(np.array([1, 1]))
        assert term[0] and obs[0][0] > 2.4 and "final_obs" not in info  # the final obs stays in obs
        outs.append([x.copy() for x in env.step(np.array([action, 0]))[:4]])
        o, r, te, tr = outs[-1]
        assert r[0] == 0 and not te[0] and not tr[0] and np.all(np.abs(o[0]) <= 0.05)
    for a, b in zip(*outs):
        np.testing.assert_array_equal(a, b)


def test_truncation_sets_both_flags_when_terminal_at_the_limit():
    env = BuiltinVecEnv("CartPole-v1", 1, seed=0, max_episode_steps=1)
    env.reset()
    env.set_state(0, [2.39, 1.0, 0.0, 0.0])
    _, _, term, trunc, _ = env.step(np.array([1]))
    assert term[0] and trunc[0]  # as gymnasium's TimeLimit


@pytest.mark.parametrize("env_id", ALL)
def test_seeding_is_reproducible_and_per_env(env_id):
    def run(seed, n, reset_seed=None):
        env = BuiltinVecEnv(env_id, n, seed=seed, max_episode_steps=30)
        obs, _ = env.reset(seed=reset_seed)
        out = [obs.copy()]
        for t in range(60):
            out.append(env.step(_policy(env, obs, t))[0].copy())
        return np.array(out)

    a, b = run(11, 4), run(11, 4)
    np.testing.assert_array_equal(a, b)
    assert not np.array_equal(a, run(12, 4))
    np.testing.assert_array_equal(run(None, 4, reset_seed=11), a)  # reset(seed=) reseeds
    np.testing.assert_array_equal(run(11, 7)[:, :4], a)  # env i's stream depends on (seed, i) only
    assert not np.array_equal(run(None, 4), run(None, 4))  # fresh entropy
    assert len({tuple(r) for r in a[0]}) == 4  # envs differ from each other


@pytest.mark.parametrize("env_id", ["CartPole-v1", "MountainCarContinuous-v0"])
def test_results_do_not_depend_on_threads_or_kernel_variant(env_id):
    n = parallel.ENV_STEP_PARALLEL_MIN + 37
    spec = get_spec(env_id)
    runs = []
    before = numba.get_num_threads()
    try:
        for threads, kernel in [(1, spec.kernels.step), (1, spec.kernels.step_threads),
                                (min(2, numba.config.NUMBA_NUM_THREADS), spec.kernels.step_threads)]:
            numba.set_num_threads(threads)
            env = BuiltinVecEnv(env_id, n, seed=9, max_episode_steps=25)
            obs, _ = env.reset()
            out = []
            for t in range(50):
                assert kernel(env.arena, _policy(env, obs, t)) == -1
                out.append(np.concatenate([env._obs.ravel(), env._rewards, env._final_obs.ravel(),
                                           env._episode_return, env._terminated, env._truncated]))
            runs.append(np.array(out))
    finally:
        numba.set_num_threads(before)
    np.testing.assert_array_equal(runs[0], runs[1])
    np.testing.assert_array_equal(runs[0], runs[2])
    assert BuiltinVecEnv(env_id, n, seed=0).threads  # chosen above the threshold
    assert not BuiltinVecEnv(env_id, 8, seed=0).threads


@pytest.mark.filterwarnings("ignore:overflow encountered")
@pytest.mark.parametrize("env_id", ["CartPole-v1", "Pendulum-v1", "MountainCarContinuous-v0"])
@pytest.mark.parametrize("mode", ["same_step", "next_step"])
def test_python_loop_matches_compiled(env_id, mode):
    """The core's step of one env run as Python (``step_env.py_func``, looking the env's functions up at run time)
    gives the compiled results."""
    results = []
    for compiled in (True, False):
        env = BuiltinVecEnv(env_id, 5, seed=4, max_episode_steps=7, autoreset_mode=mode)
        obs, _ = env.reset()
        out = []
        for t in range(20):
            actions = _policy(env, obs, t)
            if compiled:
                env.step(actions)
            else:
                a = kernels.unpack(env.kernel_key, env.arena)
                for i in range(5):
                    kernels.step_env.py_func(env.kernel_key, i, 1, a.state, actions, *a[1:])
            a = env.arrays
            out.append(np.concatenate([a.obs.ravel(), a.rewards, a.final_obs.ravel() * a.done.repeat(a.obs.shape[1]),
                                       a.terminated, a.truncated, a.done_return * a.done, a.state.ravel()]))
        results.append(np.array(out))
    np.testing.assert_array_equal(results[0], results[1])


@pytest.mark.parametrize("env_id", ["Acrobot-v1", "TicTacToe-v3"])  # without and with action masks
def test_arena_views_agree_between_python_and_compiled_code(env_id):
    """``ArenaLayout.views`` (NumPy) and ``kernels.unpack`` (the layout read from the header) see the same arrays."""
    env = rr.make_vec(env_id, 3, seed=0, autoreset_mode="next_step")
    py, key = env.arrays, env.kernel_key
    compiled = numba.njit(lambda arena: kernels.unpack(key, arena))(env.arena)
    for name, x, y in zip(py._fields, py, compiled):
        if isinstance(x, np.ndarray):
            assert x.dtype == y.dtype and x.shape == y.shape, name
            if x.size:  # the empty action masks of an env without them share no memory
                assert np.shares_memory(x, y) and x.ctypes.data == y.ctypes.data and x.strides == y.strides, name
        else:
            assert x == y, name
    if env_id == "Acrobot-v1":
        assert py.next_step_mode and py.state.shape == (4, 3) and py.obs.shape == (3, 6)
        assert py.action_mask.shape == py.final_action_mask.shape == (3, 0)
    else:
        assert py.action_mask.shape == py.final_action_mask.shape == (3, 9)


def test_state_dict_restores_the_run_and_checks_its_layout():
    env = BuiltinVecEnv("CartPole-v1", 4, seed=3, max_episode_steps=20)
    env.reset()
    for t in range(7):
        env.step(np.full(4, t % 2, np.int64))
    saved = env.state_dict()
    after = [env.step(np.ones(4, np.int64))[0].copy() for _ in range(30)]
    other = BuiltinVecEnv("CartPole-v1", 4, seed=99, max_episode_steps=20)
    other.load_state_dict(saved)
    np.testing.assert_array_equal(np.array([other.step(np.ones(4, np.int64))[0].copy() for _ in range(30)]),
                                  np.array(after))
    with pytest.raises(ValueError, match=r"another env|bytes"):
        BuiltinVecEnv("CartPole-v1", 5).load_state_dict(saved)
    with pytest.raises(ValueError, match=r"header|bytes"):
        BuiltinVecEnv("MountainCar-v0", 4).load_state_dict(saved)
    with pytest.raises(ValueError, match="autoreset mode"):
        BuiltinVecEnv("CartPole-v1", 4, autoreset_mode="next_step").load_state_dict(saved)


def test_views_by_default_and_copies_on_request():
    env = BuiltinVecEnv("CartPole-v1", 4, seed=0)
    obs0, _ = env.reset()
    obs1, rew1, _, _, info1 = env.step(np.zeros(4, dtype=np.int64))
    obs2, rew2, *_ , info2 = env.step(np.zeros(4, dtype=np.int64))
    assert obs1 is obs2 and rew1 is rew2 and info1 is info2 and obs0 is obs1
    assert info1["episode"]["r"] is env.arrays.done_return
    for a in env.arrays:
        if isinstance(a, np.ndarray) and a.size:  # (CartPole's action masks are empty)
            assert np.shares_memory(a, env.arena)
    t = torch.from_numpy(obs2)
    env.step(np.ones(4, dtype=np.int64))
    np.testing.assert_array_equal(t.numpy(), env._obs)  # zero-copy: the tensor follows the env
    env_c = BuiltinVecEnv("CartPole-v1", 4, seed=0, copy=True)
    o0, _ = env_c.reset()
    o1, *_, i1 = env_c.step(np.zeros(4, dtype=np.int64))
    o2, *_, i2 = env_c.step(np.zeros(4, dtype=np.int64))
    assert not np.shares_memory(o1, o2) and not np.shares_memory(o1, env_c._obs) and o0 is not o1
    assert i1["episode"]["r"] is not i2["episode"]["r"]


def test_torch_and_numpy_actions_of_any_int_dtype_agree():
    results = []
    for make in (lambda a: a, lambda a: torch.from_numpy(a), lambda a: a.astype(np.uint8),
                 lambda a: a.astype(np.int32), lambda a: torch.from_numpy(a.astype(np.int32))):
        env = BuiltinVecEnv("MountainCar-v0", 3, seed=1)
        env.reset()
        acts = np.random.default_rng(0).integers(0, 3, (30, 3))
        results.append(np.array([env.step(make(a))[0].copy() for a in acts]))
    for r in results[1:]:
        np.testing.assert_array_equal(results[0], r)
    env = BuiltinVecEnv("Pendulum-v1", 3, seed=1)
    env.reset()
    env.step(torch.zeros(3, 1, dtype=torch.float64))
    env.step(np.zeros((3, 1), dtype=np.float32)[:, :])


def test_episode_statistics_match_a_manual_count():
    env = BuiltinVecEnv("MountainCarContinuous-v0", 5, seed=2, max_episode_steps=60)
    env.reset()
    ret, length, seen = np.zeros(5), np.zeros(5, dtype=int), 0
    rng_ = np.random.default_rng(0)
    for _ in range(400):
        _, rew, term, trunc, info = env.step(rng_.uniform(-1, 1, (5, 1)).astype(np.float32))
        ret += rew
        length += 1
        done = term | trunc
        np.testing.assert_array_equal(info["_episode"], done)
        for i in np.flatnonzero(done):
            assert info["episode"]["l"][i] == length[i]
            np.testing.assert_allclose(info["episode"]["r"][i], ret[i], rtol=1e-5)
            ret[i], length[i], seen = 0.0, 0, seen + 1
    assert seen >= 25


@pytest.mark.parametrize("env_id", ALL)
def test_render_rgb_array(env_id):
    env = BuiltinVecEnv(env_id, 3, seed=0, render_mode="rgb_array")
    env.reset()
    frames = env.render()
    ref = gym.make(env_id).unwrapped
    h, w = {"CartPole-v1": (400, 600), "Acrobot-v1": (500, 500), "Pendulum-v1": (500, 500)}.get(env_id, (400, 600))
    assert frames.shape == (3, h, w, 3) and frames.dtype == np.uint8
    assert ref.metadata["render_modes"] and "rgb_array" in env.metadata["render_modes"]
    assert (frames < 255).any(axis=-1).mean() > 0.003  # something is drawn on the white canvas
    one = env.render(env_ids=[2])
    np.testing.assert_array_equal(one[0], frames[2])
    state = env.get_state()[:, 0].copy()
    state[0] += 0.3
    env.set_state(0, state)
    assert not np.array_equal(env.render(env_ids=[0])[0], frames[0])  # the picture follows the state
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        assert BuiltinVecEnv(env_id, 1, seed=0).render() is None


def test_gymnasium_vector_env_contract():
    env = BuiltinVecEnv("Pendulum-v1", 4, seed=0)
    assert isinstance(env, gym.vector.VectorEnv)
    obs, info = env.reset(seed=1)
    assert info == {} and env.observation_space.contains(obs)
    assert env.metadata["autoreset_mode"] == gym.vector.AutoresetMode.SAME_STEP
    assert env.action_space == gym.vector.utils.batch_space(env.single_action_space, 4)
    for _ in range(5):
        obs, *_ = env.step(env.action_space.sample())
        assert env.single_observation_space.contains(obs[0]) and obs.dtype == np.float32
    env.close()
    assert env.closed


def test_bad_inputs_raise_clear_errors_and_leave_the_state_alone():
    env = BuiltinVecEnv("CartPole-v1", 3, seed=0)
    with pytest.raises(RuntimeError, match="reset"):
        env.step(np.zeros(3, dtype=np.int64))
    env.reset()
    before = env.get_state()
    with pytest.raises(ValueError, match="shape"):
        env.step(np.zeros(4, dtype=np.int64))
    with pytest.raises(TypeError, match="integer"):
        env.step(np.zeros(3, dtype=np.float32))
    with pytest.raises(TypeError):
        env.step(np.zeros(3, dtype=bool))
    with pytest.raises(ValueError, match=r"\[0, 2\)"):
        env.step(np.array([0, 2, 1]))
    with pytest.raises(ValueError, match=r"\[0, 2\)"):
        env.step(np.array([0, 1, -1]))
    with pytest.raises(TypeError):
        env.step([0, 1, 1])
    np.testing.assert_array_equal(env.get_state(), before)
    pend = BuiltinVecEnv("Pendulum-v1", 2, seed=0)
    pend.reset()
    with pytest.raises(ValueError, match=r"NaN|inf"):
        pend.step(np.array([[0.0], [np.nan]], dtype=np.float32))
    with pytest.raises(ValueError, match="shape"):
        pend.step(np.zeros(2, dtype=np.float32))
    with pytest.raises(TypeError):
        pend.step(np.zeros((2, 1), dtype=np.float16))
    with pytest.raises(TypeError, match="float"):
        pend.step(np.zeros((2, 1), dtype=np.int64))
    with pytest.raises(TypeError, match="unexpected keyword"):
        BuiltinVecEnv("Pendulum-v1", 2, gravity=3.0)
    with pytest.raises(ValueError, match="max_episode_steps"):
        BuiltinVecEnv("Pendulum-v1", 2, max_episode_steps=0)
    with pytest.raises(ValueError, match="num_envs"):
        BuiltinVecEnv("Pendulum-v1", 0)
    with pytest.raises(ValueError, match="Did you mean 'Pendulum-v1'"):
        BuiltinVecEnv("Pendulum-v0", 2)
    with pytest.raises(ValueError, match="render_mode"):
        BuiltinVecEnv("Pendulum-v1", 2, render_mode="human")
    with pytest.raises(ValueError, match="env_ids"):
        BuiltinVecEnv("Pendulum-v1", 2, render_mode="rgb_array").render(env_ids=[2])
    with pytest.raises(TypeError, match="seed"):
        pend.reset(seed=1.5)
    pend.close()
    with pytest.raises(ClosedEnvError):
        pend.step(np.zeros((2, 1), dtype=np.float32))
    with pytest.raises(ClosedEnvError):
        pend.reset()


def test_rng_matches_reference_and_is_uniform():
    keys = rng.derive_keys(42, 3)
    assert len(set(keys.tolist())) == 3
    np.testing.assert_array_equal(keys, rng.derive_keys(42, 3))
    assert not np.array_equal(keys, rng.derive_keys(43, 3))
    np.testing.assert_array_equal(rng.derive_keys(-1, 2), rng.derive_keys(2**64 - 1, 2))
    counter = np.zeros(3, dtype=np.uint64)
    draws = [rng.next_uniform(keys, counter, 1) for _ in range(5)]
    assert counter.tolist() == [0, 5, 0]
    assert draws == [rng.uniform_reference(int(keys[1]), c) for c in range(5)]
    many = np.array([rng.next_uniform(keys, counter, 0) for _ in range(20000)])
    assert 0.0 <= many.min() and many.max() < 1.0 and abs(many.mean() - 0.5) < 0.01


def test_import_compiles_nothing():
    code = ("import rapidrl, rapidrl.envs\n"
            "from rapidrl.envs.classic import cartpole\n"
            "from rapidrl.envs.core import kernels\n"
            "rapidrl.make_vec('CartPole-v1', 2)\n"
            "assert not cartpole.step.signatures and not kernels.step_envs.signatures\n")
    subprocess.run([sys.executable, "-c", code], check=True)


def test_kernels_reject_actions_of_the_other_kind():
    """An env's compiled step given actions of the wrong kind or rank compiles to "-2, nothing stepped"."""
    cart = BuiltinVecEnv("CartPole-v1", 3, seed=0)
    cart.reset()
    before = cart.get_state()
    assert cart.definition.kernels.step(cart.arena, np.zeros((3, 1), dtype=np.float32)) == -2
    np.testing.assert_array_equal(cart.get_state(), before)
    pend = BuiltinVecEnv("Pendulum-v1", 3, seed=0)
    pend.reset()
    before = pend.get_state()
    assert pend.definition.kernels.step(pend.arena, np.zeros(3, dtype=np.int64)) == -2
    np.testing.assert_array_equal(pend.get_state(), before)
