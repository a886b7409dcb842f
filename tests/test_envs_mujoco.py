"""The batched MuJoCo env against Gymnasium's v5 envs, step by step, for every task.

Both sides run the same MuJoCo calls on the same states (``mj_step`` with the frame skip, then
``mj_rnePostConstraint``; resets ``mj_resetData`` + noise + ``mj_forward``), and env i of rapidrl draws its
reset noise from the generator Gymnasium's env has after ``reset(seed=seed + i)``. So observations,
terminations and truncations must be *identical* (compared exactly), rewards equal to Gymnasium's float64
reward rounded to float32 (rapidrl's reward dtype), and the info reward terms equal to 1e-12 relative: they
are computed batched in NumPy, and a batched reduction may associate a sum differently in the last bit.
"""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
from docs_examples import run_examples

import rapidrl as rr
from rapidrl.envs.engines.mujoco import MUJOCO_TASKS, MujocoVecEnv

N, STEPS, SEED = 3, 60, 7
LIMIT = 25  # a short time limit on both sides, so every task also truncates and autoresets within the test


def _actions(space: gym.spaces.Box, rng: np.random.Generator) -> np.ndarray:
    """[N, act_dim] float32 actions, 10% beyond the bounds (MuJoCo clamps them; the costs see them raw)."""
    lo, hi = space.low, space.high
    return rng.uniform(lo - 0.1 * (hi - lo), hi + 0.1 * (hi - lo), (N, *space.shape)).astype(np.float32)


@pytest.mark.parametrize("env_id", sorted(MUJOCO_TASKS))
def test_steps_equal_gymnasium(env_id):
    ours = MujocoVecEnv(env_id, N, seed=SEED, max_episode_steps=LIMIT)
    refs = [gym.make(env_id, max_episode_steps=LIMIT) for _ in range(N)]
    obs, _ = ours.reset(seed=SEED)
    for i, ref in enumerate(refs):
        ref_obs, _ = ref.reset(seed=SEED + i)
        np.testing.assert_array_equal(obs[i], ref_obs)
    assert ours.single_observation_space == refs[0].observation_space
    assert ours.single_action_space == refs[0].action_space
    rng = np.random.default_rng(0)
    ends = 0
    for t in range(STEPS):
        a = _actions(ours.single_action_space, rng)
        obs, rew, term, trunc, info = ours.step(a)
        for i, ref in enumerate(refs):
            r_obs, r_rew, r_term, r_trunc, r_info = ref.step(a[i])
            where = f"{env_id} step {t} env {i}"
            assert (term[i], trunc[i]) == (r_term, r_trunc), where
            assert rew[i] == np.float32(r_rew), (where, rew[i], r_rew)
            for key, value in r_info.items():
                if np.ndim(value) == 0:
                    np.testing.assert_allclose(info[key][i], value, rtol=1e-12, atol=1e-12, err_msg=f"{where} {key}")
            if r_term or r_trunc:
                ends += 1
                assert info["_final_obs"][i] and info["_episode"][i]
                np.testing.assert_array_equal(info["final_obs"][i], r_obs, err_msg=where)
                r_obs, _ = ref.reset()  # no seed: the env's generator goes on, as rapidrl's does
            np.testing.assert_array_equal(obs[i], r_obs, err_msg=where)
    assert ends >= N  # every env ended at least once (a reset was compared)
    ours.close()


def test_episode_statistics_and_truncation():
    env = MujocoVecEnv("HalfCheetah-v5", 2, seed=0, max_episode_steps=5)
    env.reset()
    total = np.zeros(2)
    for _ in range(5):
        _, rew, term, trunc, info = env.step(np.zeros((2, 6), np.float32))
        total += rew
    assert trunc.all() and not term.any() and info["_episode"].all()
    np.testing.assert_allclose(info["episode"]["r"], total, rtol=1e-6)
    assert (info["episode"]["l"] == 5).all()


def test_threads_give_the_same_result_as_one():
    a = MujocoVecEnv("Ant-v5", 8, seed=3, num_threads=1)
    b = MujocoVecEnv("Ant-v5", 8, seed=3, num_threads=2)
    a.reset(), b.reset()
    rng = np.random.default_rng(1)
    for _ in range(20):
        act = _actions(a.single_action_space, rng)[:1].repeat(8, 0)
        oa, ra, *_ = a.step(act)
        ob, rb, *_ = b.step(act)
        np.testing.assert_array_equal(oa, ob)
        np.testing.assert_array_equal(ra, rb)
    a.close(), b.close()


def test_ctypes_calls_equal_the_bindings():
    """The GIL-free ctypes path (the default) against the ``mujoco`` bindings' calls: identical states."""
    a = MujocoVecEnv("Humanoid-v5", 4, seed=5)
    b = MujocoVecEnv("Humanoid-v5", 4, seed=5)
    assert a._lib is not None
    b._lib = None
    a.reset(), b.reset()
    rng = np.random.default_rng(2)
    for _ in range(30):
        act = _actions(a.single_action_space, rng)[:1].repeat(4, 0)
        oa, ra, *_ = a.step(act)
        ob, rb, *_ = b.step(act)
        np.testing.assert_array_equal(oa, ob)
        np.testing.assert_array_equal(ra, rb)


def test_kwargs_are_forwarded_like_gymnasium():
    kw = dict(ctrl_cost_weight=0.5, reset_noise_scale=0.2, forward_reward_weight=2.0)
    ours = MujocoVecEnv("HalfCheetah-v5", 1, seed=1, **kw)
    ref = gym.make("HalfCheetah-v5", **kw)
    obs, _ = ours.reset()
    np.testing.assert_array_equal(obs[0], ref.reset(seed=1)[0])
    a = np.full((1, 6), 0.7, np.float32)
    _, rew, _, _, info = ours.step(a)
    _, r_rew, _, _, r_info = ref.step(a[0])
    assert rew[0] == np.float32(r_rew) and info["reward_ctrl"][0] == r_info["reward_ctrl"]
    with pytest.raises(ValueError, match=r"unknown keyword argument.*ctrl_cost"):
        MujocoVecEnv("HalfCheetah-v5", 1, ctrl_cost=0.5)


def test_bad_input_gets_clear_errors():
    env = MujocoVecEnv("Hopper-v5", 2, seed=0)
    with pytest.raises(RuntimeError, match="reset"):
        env.step(np.zeros((2, 3), np.float32))
    env.reset()
    with pytest.raises(ValueError, match="shape"):
        env.step(np.zeros((2, 4), np.float32))
    with pytest.raises(TypeError, match="float dtype"):
        env.step(np.zeros((2, 3), np.int64))
    with pytest.raises(ValueError, match="NaN"):
        env.step(np.full((2, 3), np.nan, np.float32))
    with pytest.raises(ValueError, match="not a batched MuJoCo task"):
        MujocoVecEnv("Hopper-v4", 2)
    with pytest.raises(ValueError, match="num_envs"):
        MujocoVecEnv("Hopper-v5", 0)
    with pytest.raises(ValueError, match="frame_skip"):
        MujocoVecEnv("Hopper-v5", 1, frame_skip=0)
    env.close()


def test_make_vec_picks_the_batched_backend_and_algorithms_train_on_it():
    env = rr.make_vec("InvertedPendulum-v5", 4, seed=0)
    assert isinstance(env, MujocoVecEnv)
    env.close()
    model = rr.SAC("InvertedPendulum-v5", learning_starts=64, batch_size=32, seed=0)
    assert isinstance(model.env, MujocoVecEnv)
    model.learn(128, progress_bar=False)


def test_render_gives_an_image_or_says_what_is_missing():
    env = MujocoVecEnv("InvertedPendulum-v5", 1, seed=0)
    env.reset()
    try:
        frame = env.render()
    except RuntimeError as e:
        assert "OpenGL backend" in str(e) and "MUJOCO_GL" in str(e)
    else:
        assert frame.shape == (480, 480, 3) and frame.dtype == np.uint8 and frame.any()
    env.close()


def test_docs_examples_run():
    """Every python block of docs/mujoco.md runs, in order, in one namespace."""
    ns = run_examples("mujoco.md", 2)
    assert type(ns["envs"]).__name__ == "MujocoVecEnv" and ns["sac"].num_timesteps == 512


def test_next_step_autoreset_gives_the_same_episodes():
    """NEXT_STEP: the step ending an episode shows its final observation, the next one resets the env (action
    ignored, reward 0, no flags); the episodes are SAME_STEP's, with the same seed and actions."""
    same = MujocoVecEnv("Hopper-v5", 2, seed=4, max_episode_steps=6)
    nxt = rr.make_vec("Hopper-v5", 2, seed=4, max_episode_steps=6, autoreset_mode=gym.vector.AutoresetMode.NEXT_STEP)
    assert isinstance(nxt, MujocoVecEnv) and "final_obs" not in nxt.reset()[1]
    np.testing.assert_array_equal(same.reset()[0], nxt.arrays.obs)
    rng = np.random.default_rng(3)
    ends = 0
    for _ in range(20):
        a = _actions(same.single_action_space, rng)[:1].repeat(2, 0)
        obs_s, r_s, te_s, tr_s, info_s = same.step(a)
        obs_n, r_n, te_n, tr_n, info_n = nxt.step(a)
        np.testing.assert_array_equal(r_s, r_n)
        np.testing.assert_array_equal(te_s | tr_s, te_n | tr_n)
        np.testing.assert_array_equal(info_s["_episode"], info_n["_episode"])
        if (te_s | tr_s).any():
            ends += 1
            np.testing.assert_array_equal(obs_n, info_s["final_obs"])  # both envs end together (same actions)
            np.testing.assert_array_equal(info_s["episode"]["l"], info_n["episode"]["l"])
            obs_n, r_n, te_n, tr_n, info_n = nxt.step(np.full_like(a, 0.3))
            assert (r_n == 0).all() and not (te_n | tr_n).any() and not info_n["_episode"].any()
        np.testing.assert_array_equal(obs_n, obs_s)
    assert ends >= 3
    same.close(), nxt.close()
