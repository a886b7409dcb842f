"""Exported policies (ONNX through onnxruntime, TorchScript through torch.jit.load) act as ``predict`` does."""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest
import torch

import rapidrl as rr
from rapidrl import cli
from rapidrl.export import export_policy

MODELS = {
    "ppo-discrete": lambda: rr.PPO("CartPole-v1", num_envs=4, num_steps=32, minibatch_size=64, seed=0),
    "ppo-continuous-normalized": lambda: rr.PPO("Pendulum-v1", num_envs=4, num_steps=32, minibatch_size=64, seed=0,
                                                normalize_obs=True),
    "ppo-tanh-squash": lambda: rr.PPO("MountainCarContinuous-v0", num_envs=4, num_steps=32, minibatch_size=64,
                                      seed=0, squash="tanh"),
    "dqn": lambda: rr.DQN("CartPole-v1", seed=0, learning_starts=64, batch_size=32, train_freq=4),
    "pqn": lambda: rr.PQN("CartPole-v1", seed=0, num_envs=4, num_steps=16, minibatch_size=32),
    "c51": lambda: rr.C51("CartPole-v1", seed=0, learning_starts=64, batch_size=32, train_freq=4, gradient_steps=1,
                          n_atoms=11, hidden=(32, 32)),
    "rainbow": lambda: rr.Rainbow("CartPole-v1", seed=0, learning_starts=64, batch_size=32, train_freq=4,
                                  gradient_steps=1, n_atoms=11, hidden=(32, 32)),  # the export: the mean network
    "qrdqn": lambda: rr.QRDQN("CartPole-v1", seed=0, learning_starts=64, batch_size=32, train_freq=4,
                              gradient_steps=2, hidden=(32, 32), n_quantiles=8),
    "iqn": lambda: rr.IQN("CartPole-v1", seed=0, learning_starts=64, batch_size=32, train_freq=4, gradient_steps=2,
                          hidden=(32, 32), num_tau_samples=8, num_tau_prime_samples=8, num_quantile_samples=8),
    "sac_discrete": lambda: rr.SACDiscrete("CartPole-v1", seed=0, learning_starts=64, batch_size=32, train_freq=4,
                                           hidden=(32, 32)),
    "sac": lambda: rr.SAC("Pendulum-v1", seed=0, learning_starts=64, batch_size=32, hidden=(32, 32)),
    "td3": lambda: rr.TD3("Pendulum-v1", seed=0, learning_starts=64, batch_size=32, hidden=(32, 32)),
    "ddpg": lambda: rr.DDPG("Pendulum-v1", seed=0, learning_starts=64, batch_size=32, hidden=(32, 32)),
    "tqc": lambda: rr.TQC("Pendulum-v1", seed=0, learning_starts=64, batch_size=32, hidden=(32, 32), n_critics=2,
                          n_quantiles=5),
    "crossq": lambda: rr.CrossQ("Pendulum-v1", seed=0, learning_starts=64, batch_size=32, hidden=(32, 32),
                                critic_hidden=(32, 32)),  # BatchRenorm in evaluation mode: the running statistics
    "mappo": lambda: rr.MAPPO("MPE/simple_spread-v3", num_envs=6, num_steps=16, minibatch_size=48, seed=0),
}


@pytest.mark.parametrize("name", list(MODELS))
def test_exported_policy_matches_predict(name, tmp_path):
    model = MODELS[name]()
    model.learn(256, progress_bar=False)  # trained weights and, with normalize_obs, non-trivial statistics
    rng = np.random.default_rng(0)
    obs = (rng.standard_normal((64, *model.observation_space.shape)) * 2).astype(np.float32)
    expect = model.predict(obs, deterministic=True)
    onnx_path = export_policy(model, tmp_path / "policy.onnx")
    got = ort.InferenceSession(str(onnx_path)).run(None, {"obs": obs})[0]
    ts = torch.jit.load(str(export_policy(model, tmp_path / "policy.ts", "torchscript")))
    got_ts = ts(torch.from_numpy(obs)).numpy()
    for out in (got, got_ts):
        assert out.shape == expect.shape
        if np.issubdtype(expect.dtype, np.integer):
            np.testing.assert_array_equal(out, expect)
        else:
            np.testing.assert_allclose(out, expect, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("make", [
    lambda: rr.DQN("MinAtar/Breakout-v1", seed=0, learning_starts=32, batch_size=16, buffer_size=500, train_freq=4),
    lambda: rr.PQN("MinAtar/Breakout-v1", seed=0, num_envs=4, num_steps=8, minibatch_size=16, update_epochs=1),
    lambda: rr.QRDQN("MinAtar/Breakout-v1", seed=0, learning_starts=32, batch_size=16, buffer_size=500, train_freq=4,
                     gradient_steps=1, n_quantiles=8),
    lambda: rr.IQN("MinAtar/Breakout-v1", seed=0, learning_starts=32, batch_size=16, buffer_size=500, train_freq=4,
                   gradient_steps=1, num_tau_samples=8, num_tau_prime_samples=8, num_quantile_samples=8),
    lambda: rr.Rainbow("MinAtar/Breakout-v1", seed=0, learning_starts=32, batch_size=16, buffer_size=500, train_freq=4,
                       gradient_steps=1, n_atoms=11),
], ids=["dqn", "pqn", "qrdqn", "iqn", "rainbow"])
def test_exported_cnn_q_network_acts_as_predict(make, tmp_path):
    """The flat float observations of an export are reshaped to the CNN's [C, H, W] (MinAtar's 0/1 frames, which
    ``predict`` stores as uint8 without loss)."""
    model = make()
    model.learn(64, progress_bar=False)
    obs = (np.random.default_rng(0).random((32, *model.observation_space.shape)) < 0.2).astype(np.float32)
    expect = model.predict(obs, deterministic=True)
    got = ort.InferenceSession(str(export_policy(model, tmp_path / "policy.onnx"))).run(None, {"obs": obs})[0]
    got_ts = torch.jit.load(str(export_policy(model, tmp_path / "policy.ts", "torchscript")))(torch.from_numpy(obs))
    np.testing.assert_array_equal(got, expect)
    np.testing.assert_array_equal(got_ts.numpy(), expect)


def test_export_cli_and_bad_input(tmp_path, capsys):
    run = tmp_path / "run"
    assert cli.main(["train", "ppo", "CartPole-v1", "--timesteps", "512", "--run-dir", str(run), "--headless",
                     "--eval-episodes", "0"]) == 0
    assert cli.main(["export", str(run), "--format", "onnx"]) == 0
    assert (run / "policy.onnx").is_file() and "exported the deterministic ppo policy" in capsys.readouterr().out
    assert cli.main(["export", str(run), "--format", "torchscript", "--out", str(tmp_path / "p.ts")]) == 0
    assert (tmp_path / "p.ts").is_file()
    assert cli.main(["export", str(run), "--format", "tflite"]) == 2
    assert "--format must be one of" in capsys.readouterr().err
    assert cli.main(["export", str(tmp_path / "nothing")]) == 2
    assert "no run directory" in capsys.readouterr().err


RECURRENT = dict(num_envs=4, num_steps=16, minibatch_size=32, update_epochs=1, recurrent_size=8, hidden=[16])
OFF = dict(num_envs=2, learning_starts=64, buffer_size=2_000, batch_size=4, sequence_length=6, burn_in=2,
           hidden=(16,), recurrent_size=8)
RECURRENT_MODELS = {
    "ppo-lstm-normalized": lambda: rr.PPO("PendulumNoVel-v1", recurrent="lstm", normalize_obs=True, seed=0,
                                          **RECURRENT),
    "ppo-gru-critic-core": lambda: rr.PPO("CartPoleNoVel-v1", recurrent="gru", critic_recurrent=True, head_hidden=[8],
                                          seed=0, **RECURRENT),
    "a2c-lstm-masked": lambda: rr.A2C("MaskedCue-v0", recurrent="lstm", seed=0, num_envs=4, num_steps=16,
                                      recurrent_size=8, hidden=[16]),
    "r2d2-masked": lambda: rr.R2D2("MaskedCue-v0", seed=0, n_step=2, train_freq=1, **{**OFF, "batch_size": 8}),
    "recurrent_sac": lambda: rr.RecurrentSAC("PendulumNoVel-v1", seed=0, head_hidden=(16, 16), **OFF),
    "recurrent_td3-gru": lambda: rr.RecurrentTD3("PendulumNoVel-v1", seed=0, cell="gru", head_hidden=(16, 16), **OFF),
}


@pytest.mark.parametrize("name", list(RECURRENT_MODELS))
def test_exported_recurrent_policy_carries_its_state_as_predict(name, tmp_path):
    """Six steps of eight envs, the state fed back and episodes starting mid-way: the ONNX and TorchScript graphs
    give predict's actions and states at every step (the observation normalisation folded in, masks as an input)."""
    model = RECURRENT_MODELS[name]()
    model.learn(256, progress_bar=False)
    rng = np.random.default_rng(0)
    B = 8
    onnx = ort.InferenceSession(str(export_policy(model, tmp_path / "policy.onnx")))
    ts = torch.jit.load(str(export_policy(model, tmp_path / "policy.ts", "torchscript")))
    assert [i.name for i in onnx.get_inputs()][:3] == ["obs", "state", "episode_start"]
    size = onnx.get_inputs()[1].shape[1]
    assert size == model.deterministic_module().state_size
    state = None
    state_onnx = state_ts = np.zeros((B, size), np.float32)
    for t in range(6):
        obs = (rng.standard_normal((B, *model.observation_space.shape)) * 2).astype(np.float32)
        starts = np.ones(B, bool) if t == 0 else rng.random(B) < 0.3
        masks = None
        if model.action_mask_size:
            masks = rng.random((B, model.action_mask_size)) < 0.5
            masks[np.arange(B), rng.integers(model.action_mask_size, size=B)] = True
        expect, state = model.predict(obs, state, starts, deterministic=True, action_masks=masks)
        feed = {"obs": obs, "state": state_onnx, "episode_start": starts}
        args = [torch.from_numpy(obs), torch.from_numpy(state_ts), torch.from_numpy(starts)]
        if masks is not None:
            feed["action_masks"] = masks
            args.append(torch.from_numpy(masks))
        got, state_onnx = onnx.run(None, feed)
        got_ts, state_ts = (x.numpy() for x in ts(*args))
        for out, out_state in ((got, state_onnx), (got_ts, state_ts)):
            assert out.shape == expect.shape and out_state.shape == state.shape
            if np.issubdtype(expect.dtype, np.integer):
                np.testing.assert_array_equal(out, expect)
            else:
                np.testing.assert_allclose(out, expect, rtol=1e-4, atol=1e-5)
            np.testing.assert_allclose(out_state, state, rtol=1e-4, atol=1e-5)
    assert not np.allclose(state, 0)  # the state carried something


def test_export_of_a_recurrent_run_from_the_command_line(tmp_path, capsys):
    """A recurrent run (its files are plain tensors) exports from the command line; the graph takes the state."""
    run = tmp_path / "run"
    assert cli.main(["train", "ppo", "CartPoleNoVel-v1", "--timesteps", "512", "--run-dir", str(run), "--headless",
                     "--eval-episodes", "0", "--set", "algo.recurrent_size=8",
                     "--set", "algo.normalize_reward=true"]) == 0
    capsys.readouterr()
    assert cli.main(["export", str(run), "--format", "onnx"]) == 0
    out = capsys.readouterr().out
    assert "exported the deterministic ppo policy" in out and "state: [B, 32] float32" in out, out
    session = ort.InferenceSession(str(run / "policy.onnx"))
    assert [i.name for i in session.get_inputs()] == ["obs", "state", "episode_start"]
    assert [o.name for o in session.get_outputs()] == ["actions", "state_out"]
    assert session.get_inputs()[1].shape[1] == 32  # the preset's critic has its own LSTM: 2 x [h | c] of 8 units
