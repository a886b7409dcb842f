"""Atari through ale-py: the preprocessing against Gymnasium's wrappers frame for frame, real game scores as
episode returns, no thread left after close(), PPO/DQN smoke runs with save/load/predict, presets for every ALE id.

Comparability with Gymnasium (``AtariPreprocessing`` + ``FrameStackObservation``): sticky actions off
(``repeat_action_probability=0``), no no-op resets (``noop_max=0``: the two draw their no-op counts from
different generators), no FIRE reset (Gymnasium's wrappers have none), no episodic life and unclipped rewards
(``training=False``); the emulator is then deterministic, so equal actions give equal games whatever the seeds.
Everything else (frame skip 4 with the max of the last two frames, grayscale, 84x84 area resize, 4-frame stack
zero-padded after a reset) is what both implement.
"""

import os

import ale_py
import gymnasium as gym
import numpy as np
import pytest
from docs_examples import run_examples

import rapidrl as rr
from rapidrl.envs.engines.atari import AtariVecEnv
from rapidrl.runs.config import preset_path

gym.register_envs(ale_py)
ENV = "ALE/Breakout-v5"
COMPARABLE = dict(repeat_action_probability=0.0, noop_max=0, fire_reset=False, training=False)


def gymnasium_env(env_id: str = ENV):
    env = gym.make(env_id, frameskip=1, repeat_action_probability=0.0)
    env = gym.wrappers.AtariPreprocessing(env, noop_max=0, frame_skip=4, screen_size=84, terminal_on_life_loss=False,
                                          grayscale_obs=True, scale_obs=False)
    return gym.wrappers.FrameStackObservation(env, 4, padding_type="zero")


def threads() -> int:
    return len(os.listdir("/proc/self/task"))


def test_make_vec_gives_preprocessed_uint8_stacks():
    env = rr.make_vec(ENV, 2, seed=0)
    assert isinstance(env, AtariVecEnv) and env.frame_stack == 4
    obs, _ = env.reset()
    assert obs.dtype == np.uint8 and obs.shape == (2, 4, 84, 84)
    assert env.single_observation_space == gym.spaces.Box(0, 255, (4, 84, 84), np.uint8)
    assert env.repeat_action_probability == 0.25 and env.episodic_life and env.clip_rewards  # v5, training
    env.close()


@pytest.mark.parametrize("env_id", [ENV, "ALE/Pong-v5"])
def test_preprocessing_equals_gymnasium_wrappers_frame_for_frame(env_id):
    n, steps = 2, 400
    ours = rr.make_vec(env_id, n, seed=0, **COMPARABLE)
    refs = [gymnasium_env(env_id) for _ in range(n)]
    obs, _ = ours.reset(seed=0)
    for i, ref in enumerate(refs):
        ref_obs, _ = ref.reset(seed=i)
        np.testing.assert_array_equal(obs[i], ref_obs)
    rng = np.random.default_rng(0)
    game_ends = 0
    for t in range(steps):
        actions = rng.integers(ours.single_action_space.n, size=n)
        obs, rewards, terminated, truncated, info = ours.step(actions)
        for i, ref in enumerate(refs):
            ref_obs, ref_reward, ref_term, ref_trunc, _ = ref.step(int(actions[i]))
            assert (rewards[i], terminated[i], truncated[i]) == (ref_reward, ref_term, ref_trunc), (t, i)
            if ref_term or ref_trunc:
                game_ends += 1
                np.testing.assert_array_equal(info["final_obs"][i], ref_obs)
                ref_obs, _ = ref.reset()
            np.testing.assert_array_equal(obs[i], ref_obs, err_msg=f"step {t}, env {i}")
    ours.close()
    if env_id == ENV:
        assert game_ends > 0  # the comparison covered a game over and the reset after it


def test_training_signals_versus_real_game_scores():
    """Same seed and actions, training (episodic life, clipped rewards) vs evaluation settings: the same game;
    training rewards are the signs, a lost life terminates the learner's episode without resetting the game,
    and the logged episode returns of both are the unclipped score of whole games."""
    n, kw = 2, dict(repeat_action_probability=0.0, noop_max=0)
    train = rr.make_vec(ENV, n, seed=3, training=True, **kw)
    real = rr.make_vec(ENV, n, seed=3, training=False, **kw)
    train.reset(seed=3)
    real.reset(seed=3)
    rng = np.random.default_rng(1)
    score, scores, train_scores, life_losses = np.zeros(n), [], [], 0
    for _ in range(700):
        actions = rng.integers(4, size=n)
        o1, r1, te1, _, i1 = train.step(actions)
        o2, r2, te2, tr2, i2 = real.step(actions)
        np.testing.assert_array_equal(o1, o2)
        np.testing.assert_array_equal(r1, np.sign(r2))
        np.testing.assert_array_equal(i1["_episode"], te2 | tr2)  # games end together
        life_losses += int((te1 & ~te2).sum())
        score += r2
        if i2["_episode"].any():
            scores += list(score[i2["_episode"]])
            train_scores += list(i1["episode"]["r"][i1["_episode"]])
            np.testing.assert_array_equal(i2["episode"]["r"][i2["_episode"]], score[i2["_episode"]])
            score[i2["_episode"]] = 0
    assert len(scores) >= 2 and life_losses >= 4 * len(scores)  # Breakout: 5 lives per game
    np.testing.assert_array_equal(train_scores, scores)
    train.close()
    real.close()


def test_close_leaves_no_thread_behind():
    before = threads()
    env = rr.make_vec(ENV, 4, seed=0, num_threads=2)
    env.reset()
    env.step(np.zeros(4, np.int64))
    assert threads() > before
    env.close()
    assert threads() == before
    with pytest.raises(Exception, match="closed"):
        env.step(np.zeros(4, np.int64))


def test_bad_arguments_raise_clear_errors():
    with pytest.raises(ValueError, match="unknown Atari id"):
        rr.make_vec("ALE/NoSuchGame-v5", 1)
    with pytest.raises(ValueError, match="repeat_action_probability"):
        rr.make_vec(ENV, 1, repeat_action_probability=1.5)
    with pytest.raises(ValueError, match="noop_max"):
        rr.make_vec(ENV, 1, noop_max=-1)
    with pytest.raises(ValueError, match="vectorization='ale'"):
        rr.make_vec("CartPole-v1", 1, vectorization="ale")


def test_presets_apply_to_every_ale_and_minatar_id():
    for env_id in (ENV, "ALE/Pong-v5", "PongNoFrameskip-v4"):
        assert preset_path("ppo", env_id).name == "ppo_atari.toml" and preset_path("ppo", env_id).is_file()
        assert preset_path("dqn", env_id).name == "dqn_atari.toml" and preset_path("dqn", env_id).is_file()
    assert preset_path("ppo", "MinAtar/Asterix-v1").name == "ppo_minatar.toml"
    assert preset_path("dqn", "MinAtar/Breakout-v0").name == "dqn_minatar.toml"
    assert preset_path("ppo", "CartPole-v1").name == "ppo_cartpole.toml"
    assert preset_path("sac", "ALE/Pong-v5").name == "sac_atari.toml"  # no such file: no preset applies
    assert not preset_path("sac", "ALE/Pong-v5").is_file()


def test_ppo_smoke_on_breakout_save_load_predict(tmp_path):
    model = rr.PPO(ENV, num_envs=2, num_steps=64, minibatch_size=64, update_epochs=1, seed=0)
    assert model.policy.encoder_kind == "nature" and model.buffer.obs.dtype == np.uint8
    model.learn(512, progress_bar=False)  # 512 agent steps = 2048 frames
    assert model.num_timesteps == 512
    assert model._get_eval_env(1).training is False  # evaluation: real scores, whole games
    obs, _ = rr.make_vec(ENV, 2, seed=5, training=False).reset()
    loaded = rr.PPO.load(model.save(tmp_path / "ppo.pt"))
    np.testing.assert_array_equal(model.predict(obs, deterministic=True), loaded.predict(obs, deterministic=True))


def test_dqn_smoke_on_breakout_uses_frame_replay_save_load_predict(tmp_path):
    model = rr.DQN(ENV, num_envs=2, seed=0, buffer_size=2000, learning_starts=200, train_freq=4, gradient_steps=1,
                   batch_size=8)
    assert isinstance(model.buffer, rr.buffers.FrameReplayBuffer) and model.q_net.has_encoder
    model.learn(800, progress_bar=False)  # 3200 frames
    assert model.num_gradient_steps > 0 and len(model.buffer) == 800
    obs, _ = rr.make_vec(ENV, 2, seed=5, training=False).reset()
    loaded = rr.DQN.load(model.save(tmp_path / "dqn.pt"))
    np.testing.assert_array_equal(model.predict(obs, deterministic=True), loaded.predict(obs, deterministic=True))


def test_docs_examples_run(tmp_path, monkeypatch):
    """Every python block of docs/atari.md runs, in order, in one namespace (in a scratch directory)."""
    monkeypatch.chdir(tmp_path)

    ns = run_examples("atari.md", 3)
    assert ns["batch"].obs.shape == (8, 4, 84, 84) and ns["model"].policy.encoder_kind == "minatar"
    assert (tmp_path / "frames.buffer" / "frames.npy").is_file()


def test_pressing_fire_ends_games_that_a_policy_never_serves():
    """Evaluation presses FIRE at the start of every game and after each lost life (the reference wrappers'
    convention): a policy that only ever plays NOOP loses its 5 Breakout lives in ~120 steps, where without it the
    game waits for a serve until the frame limit (a tiny one here: 2000 frames, 500 agent steps) truncates it.
    16 games with sticky actions: ale-py's own one-frame FIRE reset is swallowed in about half of them."""
    n, budget = 16, 2000
    lengths = {}
    for fire in (True, False):
        env = rr.make_vec(ENV, n, seed=0, training=False, press_fire=fire, max_episode_frames=budget)
        assert env.press_fire is fire and env.fire_action == 1  # Breakout: [NOOP, FIRE, RIGHT, LEFT]
        assert env.repeat_action_probability == 0.25
        env.reset(seed=0)
        ended, how = np.zeros(n, bool), {}
        for _ in range(budget // 4 + 2):
            _, _, term, _, info = env.step(np.zeros(n, np.int64))
            for i in np.flatnonzero(info["_episode"] & ~ended):
                how[i] = ("terminated" if term[i] else "truncated", int(info["episode"]["l"][i]))
            ended |= info["_episode"]
            if ended.all():
                break
        env.close()
        assert ended.all()
        lengths[fire] = how
    assert all(kind == "terminated" and length < 400 for kind, length in lengths[True].values())
    assert all(kind == "truncated" and length == budget // 4 for kind, length in lengths[False].values())


def test_fire_is_pressed_only_in_games_with_fire_and_only_in_evaluation():
    env = rr.make_vec("ALE/MsPacman-v5", 1, seed=0, training=False, press_fire=True)
    assert env.fire_action is None and env.press_fire is False  # MsPacman has no FIRE
    env.close()
    assert AtariVecEnv.eval_overrides == {"training": False, "press_fire": True}
    assert rr.make_vec(ENV, 1, seed=0, training=False).press_fire is False  # only evaluation turns it on


def test_untrained_policy_evaluation_finishes_in_parallel(capsys):
    """An untrained PPO's evaluation on Breakout: 4 games in one batched env (4 envs), each ended by its lost
    lives well before the frame limit, scored by the env's raw rewards of each env's first game, with progress
    output."""
    model = rr.PPO(ENV, num_envs=2, num_steps=8, minibatch_size=16, seed=0,
                   env_kwargs={"max_episode_frames": 40_000})
    env = model._get_eval_env(4)
    assert env.num_envs == 4 and env.press_fire and env.training is False
    steps = []
    step = env.step

    def counted(actions):
        out = step(actions)
        steps.append((out[1].copy(), out[2].copy(), out[3].copy()))  # rewards, terminated, truncated
        return out

    env.step = counted
    mean, std = model.evaluate(4, progress=True)
    assert len(steps) < 2_500  # 10,000 agent steps would be the frame limit
    games, finished, ended_by = np.zeros(4), np.zeros(4, dtype=bool), np.zeros(4, dtype=bool)
    for rewards, term, trunc in steps:
        games += np.where(finished, 0.0, rewards)
        ended_by |= term & ~finished
        finished |= term | trunc
    assert ended_by.all()  # every first game ended by its lives, not a time limit
    assert (mean, std) == pytest.approx((games.mean(), games.std())) and mean > 0  # raw points of the first games
    assert "4/4 episodes" in capsys.readouterr().out
