"""Offline datasets (rapidrl.buffers.dataset): the Minari format both ways, streaming into the replay sampler,
D4RL's normalised score, replay buffers and policies as sources, `rapidrl collect`, and bad data refused with one
line naming the problem while nothing is written."""

from __future__ import annotations

import json

import gymnasium as gym
import minari  # the offline extra (make setup-dev installs it)
import numpy as np
import pytest

import rapidrl as rr
from rapidrl import cli
from rapidrl.buffers import ReplayBuffer
from rapidrl.buffers.dataset import (
    DatasetError,
    Episode,
    collect_episodes,
    iter_episodes,
    load_dataset,
    normalized_score,
    policy_return,
    read_header,
    replay_episodes,
    write_dataset,
)

OBS = gym.spaces.Box(-np.inf, np.inf, (3,), np.float32)
ACT = gym.spaces.Box(-2.0, 2.0, (1,), np.float32)


@pytest.fixture
def root(tmp_path, monkeypatch):
    """A fresh datasets directory ($MINARI_DATASETS_PATH, which minari reads too)."""
    path = tmp_path / "datasets"
    monkeypatch.setenv("MINARI_DATASETS_PATH", str(path))
    return path


def episode(T: int, seed: int = 0, terminated: bool = False) -> Episode:
    rng = np.random.default_rng(seed)
    term = np.zeros(T, bool)
    trunc = np.zeros(T, bool)
    (term if terminated else trunc)[-1] = True
    return Episode(rng.normal(size=(T + 1, 3)).astype(np.float32), rng.uniform(-2, 2, (T, 1)).astype(np.float32),
                   rng.normal(size=T), term, trunc)


def test_a_written_dataset_loads_in_minari_and_streams_into_the_replay_sampler(root):
    episodes = [episode(5, 0), episode(7, 1, terminated=True), episode(4, 2)]
    path = write_dataset("test/toy/mixed-v0", episodes, OBS, ACT, env_id="Pendulum-v1", ref_min_score=-10.0,
                         ref_max_score=10.0)
    assert path == root / "test/toy/mixed-v0/data" and not list(root.glob(".*"))  # no temporary left
    # minari reads it: the same episodes, the env recoverable, the same normalised score
    d = minari.load_dataset("test/toy/mixed-v0")
    assert (d.total_episodes, d.total_steps) == (3, 16)
    for mine, theirs in zip(episodes, d.iterate_episodes()):
        np.testing.assert_array_equal(theirs.observations, mine.observations)
        np.testing.assert_array_equal(theirs.actions, mine.actions)
        np.testing.assert_array_equal(theirs.terminations, mine.terminations)
    assert d.spec.env_spec.id == "Pendulum-v1"
    np.testing.assert_allclose(normalized_score([2.5], -10.0, 10.0), 100 * minari.get_normalized_score(d, 2.5))
    assert normalized_score(10.0, -10.0, 10.0) == 100.0 and normalized_score(-10.0, -10.0, 10.0) == 0.0

    for storage, chunk in (("memory", 256), ("mmap", 1)):  # chunk=1: one episode read at a time
        ds = load_dataset("test/toy/mixed-v0", storage=storage, chunk=chunk, gamma=0.9)
        buf = ds.buffer
        assert len(ds) == 16 and buf.storage == storage
        stored = buf.arrays()
        np.testing.assert_array_equal(stored["obs"][:16], np.concatenate([e.observations[:-1] for e in episodes]))
        np.testing.assert_array_equal(stored["next_obs"][:16], np.concatenate([e.observations[1:] for e in episodes]))
        np.testing.assert_array_equal(stored["terminated"][:16], np.concatenate([e.terminations for e in episodes]))
        assert stored["truncated"][[4, 15]].all() and stored["truncated"].sum() == 2
        np.testing.assert_allclose(ds.episode_returns, [e.rewards.sum() for e in episodes])
        all_obs = np.concatenate([e.observations[:-1] for e in episodes]).astype(np.float64)
        np.testing.assert_allclose(ds.obs_mean, all_obs.mean(0), rtol=1e-6)
        np.testing.assert_allclose(ds.obs_std, all_obs.std(0), rtol=1e-6)
        batch = buf.sampler(16, seed=0)()
        np.testing.assert_allclose(batch.discounts, np.where(batch.terminated, 0.0, 0.9))
        assert ds.normalized_score(0.0) == 50.0


def test_an_episode_without_end_flag_bootstraps_and_the_env_comes_from_the_spec(root):
    e = episode(3)
    e.truncations[-1] = False  # Minari allows it; rapidrl stores it as truncated (bootstrap from the last obs)
    write_dataset("test/toy/open-v0", [e], OBS, ACT)
    header = read_header("test/toy/open-v0")
    assert header.env_id is None and header.ref_min_score is None
    ds = load_dataset(root / "test/toy/open-v0")  # a path works as well as an id
    assert ds.buffer.arrays()["truncated"][2]
    with pytest.raises(DatasetError, match="has no reference scores"):
        ds.normalized_score(0.0)


@pytest.mark.parametrize("edit, message", [
    (lambda e: e.observations.__setitem__((2, 1), np.nan), r"test/toy/bad-v0: episode 1 has NaN in observations at "
                                                            r"step 2$"),
    (lambda e: e.rewards.__setitem__(3, np.inf), r"episode 1 has an infinite value in rewards at step 3$"),
    (lambda e: e.actions.__setitem__((0, 0), -np.inf), r"episode 1 has an infinite value in actions at step 0$"),
    ("empty", r"test/toy/bad-v0: episode 1 is empty \(0 steps\)$"),
    ("shape", r"episode 1: observations have shape \(6, 4\), expected \(6, 3\)"),
    ("early end", r"episode 1 ends at step 1 but holds 5 steps$"),
])
def test_bad_episodes_are_refused_naming_the_problem_and_nothing_is_written(root, edit, message):
    bad = episode(5, 1)
    if edit == "empty":
        bad = Episode(bad.observations[:1], bad.actions[:0], bad.rewards[:0], bad.terminations[:0],
                      bad.truncations[:0])
    elif edit == "shape":
        bad = Episode(np.zeros((6, 4), np.float32), bad.actions, bad.rewards, bad.terminations, bad.truncations)
    elif edit == "early end":
        bad.terminations[1] = True
    else:
        edit(bad)
    with pytest.raises(DatasetError, match=message):
        write_dataset("test/toy/bad-v0", [episode(4, 0), bad], OBS, ACT, chunk=1)  # the first chunk was written
    assert not root.exists() or not any(root.rglob("*"))  # ... and removed with the whole dataset


def test_bad_files_and_mismatched_spaces_are_refused_in_one_line(root):
    write_dataset("test/toy/good-v0", [episode(5, 0), episode(6, 1)], OBS, ACT, env_id="Pendulum-v1")
    cartpole = rr.make_vec("CartPole-v1", 1, seed=0)
    with pytest.raises(DatasetError, match=r"test/toy/good-v0: its observation space Box\(.*\(3,\).*\) does not "
                                           r"match CartPole-v1's Box\(.*\(4,\)"):
        load_dataset("test/toy/good-v0", observation_space=cartpole.single_observation_space,
                     action_space=cartpole.single_action_space, env_name="CartPole-v1")
    wide = gym.spaces.Box(-1.0, 1.0, (1,), np.float32)
    with pytest.raises(DatasetError, match=r"its action space .* does not match"):
        load_dataset("test/toy/good-v0", observation_space=OBS, action_space=wide)
    with pytest.raises(DatasetError, match=r"no dataset 'test/toy/missing-v0': nothing at .*MINARI_DATASETS_PATH"):
        load_dataset("test/toy/missing-v0")
    with pytest.raises(DatasetError, match="is not of the form namespace/name-vN"):
        write_dataset("no version", [episode(3)], OBS, ACT)
    with pytest.raises(DatasetError, match="a dataset already exists at"):
        write_dataset("test/toy/good-v0", [episode(3)], OBS, ACT)

    data = root / "test/toy/good-v0/data"
    main = data / "main_data.hdf5"
    main.write_bytes(main.read_bytes()[: main.stat().st_size // 2])  # a copy cut short
    with pytest.raises(DatasetError, match=r"test/toy/good-v0: cannot read episodes 0-1 from .*main_data.hdf5 "
                                           r"\(truncated or corrupt file\? OSError"):
        load_dataset("test/toy/good-v0")
    meta = json.loads((data / "metadata.json").read_text())
    (data / "metadata.json").write_text(json.dumps(meta)[:-20])
    with pytest.raises(DatasetError, match=r"test/toy/good-v0: unreadable .*metadata.json \(JSONDecodeError"):
        load_dataset("test/toy/good-v0")


def test_metadata_that_disagrees_with_the_episodes_is_refused(root):
    write_dataset("test/toy/count-v0", [episode(5, 0)], OBS, ACT)
    meta_file = root / "test/toy/count-v0/data/metadata.json"
    meta = json.loads(meta_file.read_text())
    meta_file.write_text(json.dumps({**meta, "total_steps": 9}))
    with pytest.raises(DatasetError, match="its metadata says 9 steps, the episodes hold 5"):
        load_dataset("test/toy/count-v0")


def test_collect_episodes_of_a_policy_end_at_the_budget_as_truncated():
    env = rr.make_vec("Pendulum-v1", 2, seed=0)
    episodes = list(collect_episodes(env, lambda o: np.zeros((len(o), 1), np.float32), 500, seed=0))
    assert [len(e) for e in episodes] == [200, 200, 50, 50]  # two full episodes per env, then the budget's cut
    assert all(e.truncations[-1] and not e.terminations.any() for e in episodes)
    assert all(np.isfinite(e.observations).all() and e.observations.shape == (len(e) + 1, 3) for e in episodes)
    # the reference score helper: the first episode of each env
    returns = policy_return(rr.make_vec("Pendulum-v1", 3, seed=1), lambda o: np.zeros((len(o), 1), np.float32), 1)
    assert returns.shape == (3,) and (returns < 0).all()


def test_a_replay_buffer_becomes_episodes_per_env_even_after_wrapping():
    """Two envs interleaved (row r is env r % 2), episodes of lengths 3 and 4; the buffer (capacity 10) wrapped."""
    buf = ReplayBuffer(10, (1,), (1,), num_envs=2)
    obs = np.zeros((2, 1), np.float32)
    t = np.zeros(2, int)
    lengths = (3, 4)
    for _ in range(9):
        nxt = obs + 1
        done = np.array([t[e] + 1 == lengths[e] for e in range(2)])
        buf.add(obs, np.zeros((2, 1), np.float32), np.ones(2, np.float32), nxt, done, np.zeros(2, bool))
        t = np.where(done, 0, t + 1)
        obs = np.where(done[:, None], 0.0, nxt).astype(np.float32)
    import tempfile

    with tempfile.TemporaryDirectory() as d:
        buf.save(f"{d}/b")
        config, episodes = replay_episodes(f"{d}/b")
        episodes = list(episodes)
    assert config["num_envs"] == 2
    # 9 steps of 2 rows into 10: steps 4-8 kept. Env 0 (episodes of 3 steps: 0-2, 3-5, 6-8): the last two steps of
    # one, cut at the start, then a whole one; env 1 (episodes of 4: 0-3, 4-7, 8-): a whole one, then an open one
    assert [len(e) for e in episodes] == [2, 3, 4, 1]
    assert [bool(e.terminations[-1]) for e in episodes] == [True, True, True, False]
    assert episodes[3].truncations[-1]  # the newest, unfinished: truncated
    for e in episodes:
        np.testing.assert_array_equal(e.observations[1:], e.observations[:-1] + 1)  # obs chains to next_obs


def test_a_replay_buffer_whose_rows_do_not_chain_is_refused(tmp_path):
    buf = ReplayBuffer(4, (1,), (1,))
    for k in range(2):
        buf.add(np.full((1, 1), k, np.float32), np.zeros((1, 1), np.float32), np.zeros(1, np.float32),
                np.full((1, 1), 5.0, np.float32), np.zeros(1, bool), np.zeros(1, bool))
    buf.save(tmp_path / "b")
    with pytest.raises(DatasetError, match="env 0's rows 0 and 1 do not chain"):
        list(replay_episodes(tmp_path / "b")[1])


def test_rapidrl_collect_writes_a_policy_dataset_and_a_replay_dataset(root, tmp_path, capsys):
    model = rr.SAC("Pendulum-v1", hidden=(16, 16), learning_starts=50, batch_size=32, buffer_size=500,
                   torch_threads=1, seed=0)
    model.learn(250, progress_bar=False)
    path = model.save(tmp_path / "sac.pt", include_buffer=True)
    assert cli.main(["collect", str(path), "--steps", "300", "--noise", "0.2", "--num-envs", "3",
                     "--dataset-id", "test/pendulum/noisy-v0", "--ref-episodes", "2"]) == 0
    out = capsys.readouterr().out
    assert "wrote test/pendulum/noisy-v0: 3 episodes, 300 steps" in out
    header = read_header("test/pendulum/noisy-v0")
    assert header.env_id == "Pendulum-v1" and header.ref_min_score < -500  # a random policy's Pendulum return
    assert header.metadata["rapidrl"]["source"]["noise"] == 0.2
    assert cli.main(["collect", str(path), "--from-replay", "--dataset-id", "test/pendulum/replay-v0",
                     "--ref-min", "-1200", "--ref-max", "-150"]) == 0
    ds = load_dataset("test/pendulum/replay-v0")
    assert len(ds) == 250 and (ds.ref_min_score, ds.ref_max_score) == (-1200.0, -150.0)
    stored = model.buffer.arrays()
    np.testing.assert_array_equal(ds.buffer.arrays()["obs"][:250], stored["obs"][:250])
    # wrong flag for the action space, nothing to do, an existing id: one line, exit 2, nothing written
    assert cli.main(["collect", str(path), "--steps", "10", "--epsilon", "0.1"]) == 2
    assert cli.main(["collect", str(path)]) == 2
    assert cli.main(["collect", str(path), "--steps", "10", "--dataset-id", "test/pendulum/noisy-v0",
                     "--ref-min", "0", "--ref-max", "1"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1] == (f"rapidrl: error: test/pendulum/noisy-v0: a dataset already exists at "
                       f"{root / 'test/pendulum/noisy-v0'}; delete it or choose another id")
    assert sorted(p.name for p in (root / "test/pendulum").iterdir()) == ["noisy-v0", "replay-v0"]
    assert next(iter_episodes("test/pendulum/noisy-v0")).observations.shape == (101, 3)


@pytest.mark.parametrize("algo", ["PPO", "RecurrentSAC"])
def test_rapidrl_collect_carries_a_recurrent_policys_state_through_each_episode(root, tmp_path, algo):
    """A recurrent policy's dataset is what predict gives with its state carried and reset at each episode's start
    (before: collect called predict without a state, which a recurrent PPO model answers with a tuple)."""
    if algo == "PPO":
        model = rr.PPO("PendulumNoVel-v1", recurrent="gru", recurrent_size=8, hidden=(16,), num_envs=2, num_steps=32,
                       minibatch_size=32, seed=0)
    else:
        model = rr.RecurrentSAC("PendulumNoVel-v1", recurrent_size=8, hidden=(), learning_starts=40, batch_size=4,
                                sequence_length=8, burn_in=2, buffer_size=400, seed=0)
    model.learn(64 if algo == "PPO" else 48, progress_bar=False)
    path = model.save(tmp_path / "m.pt")
    dataset_id = f"test/pendulumnovel/{algo.lower()}-v0"
    assert cli.main(["collect", str(path), "--steps", "300", "--num-envs", "2", "--seed", "3", "--dataset-id",
                     dataset_id, "--ref-min", "-1500", "--ref-max", "-150"]) == 0
    episodes = list(iter_episodes(dataset_id))
    assert sum(len(e.actions) for e in episodes) == 300 and len(episodes) == 2  # two 200-step episodes, cut at 150
    reloaded = type(model).load(path)
    for e in episodes:  # each episode from a fresh state, the state carried from step to step
        state, start = None, np.ones(1, bool)
        for t in range(len(e.actions)):
            action, state = reloaded.predict(e.observations[t][None], state, start, deterministic=True)
            np.testing.assert_allclose(action[0], e.actions[t], rtol=1e-5, atol=1e-6, err_msg=f"step {t}")
            start = np.zeros(1, bool)


def test_rapidrl_collect_acts_among_the_valid_actions_of_an_env_with_masks(root, tmp_path, capsys):
    """On Tic-Tac-Toe (the valid moves are the empty cells of the observed board) the policy's actions, the epsilon
    exploration's and the random reference policy's are all valid moves: collect gives them the env's masks as
    evaluation does (before: no masks, so the policy and the exploration played occupied cells)."""
    model = rr.PPO("TicTacToe-v3", hidden=(16,), num_envs=4, num_steps=16, minibatch_size=32, seed=0)
    model.learn(64, progress_bar=False)
    path = model.save(tmp_path / "ppo.pt")
    assert cli.main(["collect", str(path), "--steps", "400", "--num-envs", "4", "--epsilon", "0.5", "--dataset-id",
                     "test/tictactoe/masked-v0", "--ref-episodes", "8"]) == 0, capsys.readouterr().err
    episodes = list(iter_episodes("test/tictactoe/masked-v0"))
    assert sum(len(e.actions) for e in episodes) == 400
    for e in episodes:
        board = e.observations[:-1].reshape(len(e.actions), 9, 2)  # per cell: mine, the opponent's
        empty = ~board.any(-1)
        assert empty[np.arange(len(e.actions)), e.actions.astype(int)].all()
    header = read_header("test/tictactoe/masked-v0")
    assert -1.0 <= header.ref_min_score <= 1.0 and -1.0 <= header.ref_max_score <= 1.0


def test_a_relative_datasets_path_writes_and_reads(tmp_path, monkeypatch):
    """MINARI_DATASETS_PATH=datasets (the docs' setting) relative to the working directory."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("MINARI_DATASETS_PATH", "datasets")
    path = write_dataset("test/toy/relative-v0", [episode(5), episode(3, 1)], OBS, ACT, env_id="Pendulum-v1")
    assert path == tmp_path / "datasets/test/toy/relative-v0/data"
    assert len(load_dataset("test/toy/relative-v0")) == 8
    assert minari.load_dataset("test/toy/relative-v0").total_steps == 8
