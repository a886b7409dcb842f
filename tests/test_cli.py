"""The `rapidrl` command as a user meets it: train/eval/list/plot/bench, config layering, run directories,
and one-line errors (exit code 2, no traceback) for every kind of bad input."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import imageio.v3 as iio
import pytest
import tomllib
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from rapidrl import cli
from rapidrl.algos.registry import algorithms
from rapidrl.runs import config as rundir
from rapidrl.runs import layout
from rapidrl.runs.layout import read_csv_metrics
from rapidrl.train.config import ConfigError

SMALL = ["--set", "algo.num_envs=4", "--set", "algo.num_steps=64", "--set", "algo.minibatch_size=128",
         "--set", "algo.update_epochs=2"]


def train(tmp_path, *extra, name="run") -> tuple[int, Path]:
    run = tmp_path / name
    code = cli.main(["train", "ppo", "CartPole-v1", "--timesteps", "2048", "--run-dir", str(run), "--eval-episodes",
                     "2", *SMALL, *extra])
    return code, run


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """One short training run shared by the read-only tests below (stdout captured by the first test)."""
    tmp = tmp_path_factory.mktemp("trained")
    code, run = train(tmp, "--headless", "--set", "run.checkpoint_every=1024")
    assert code == 0
    return run


def test_train_writes_a_complete_run_directory(trained, capsys):
    run = trained
    for name in ("config.toml", "metrics.csv", "summary.json", "model.pt", "monitor.bin"):
        assert (run / name).is_file(), name
    config = tomllib.loads((run / "config.toml").read_text())
    assert config["run"]["algo"] == "ppo" and config["run"]["timesteps"] == 2048
    assert config["algo"]["num_envs"] == 4 and config["algo"]["clip_coef"] == 0.2  # resolved: defaults included
    csv = read_csv_metrics(run / "metrics.csv")
    assert csv["global_step"] == [256.0 * i for i in range(1, 9)]
    assert all(v > 0 for v in csv["charts/SPS"])
    acc = EventAccumulator(str(run))
    acc.Reload()
    assert [e.step for e in acc.Scalars("losses/value_loss")] == [256 * i for i in range(1, 9)]
    summary = layout.read_summary(run)
    assert summary["status"] == "finished" and summary["timesteps"] == 2048 and summary["eval_episodes"] == 2
    assert sorted(p.name for p in (run / "checkpoints").iterdir()) == [
        "step_000000001024.pt", "step_000000002048.pt"]
    # which implementation ran, and why (rapidrl.train.paths), in config.toml and summary.json alike
    assert config["paths"]["gradient_backend"] == summary["paths"]["gradient_backend"] == {
        "value": "handwritten", "reason": "auto: the first that applies"}
    assert config["paths"]["collection"]["value"] == summary["paths"]["collection"]["value"] == "fused"
    assert rundir.load_run_config(run).algo_config.gradient_backend == "auto"  # a record, not a setting


def test_train_prints_run_dir_eval_and_model_path(tmp_path, capsys):
    code, run = train(tmp_path)
    out = capsys.readouterr().out
    assert code == 0
    assert f"run directory: {run}" in out and "eval return:" in out and " ± " in out
    assert f"model saved to {run / 'model.pt'}" in out
    assert "paths: collection=fused (auto: the first that applies); gradient_backend=handwritten (" in out


def test_paths_are_set_in_algo_and_refused_in_a_hand_written_paths_section(tmp_path, capsys):
    user = tmp_path / "user.toml"
    user.write_text('[paths]\ngradient_backend = "torch"\n')
    assert cli.main(["train", "ppo", "CartPole-v1", "--config", str(user)]) == 2
    assert "set gradient_backend or collection in [algo]" in capsys.readouterr().err
    code, run = train(tmp_path, "--set", "algo.gradient_backend=torch", "--set", "algo.collection=step",
                      "--headless", name="explicit")
    assert code == 0
    summary = layout.read_summary(run)
    assert summary["paths"]["gradient_backend"] == {"value": "torch", "reason": "gradient_backend='torch'"}
    assert summary["paths"]["collection"]["value"] == "step"
    again, rerun = train(tmp_path, "--config", str(run / "config.toml"), "--headless", name="from-a-run")
    assert again == 0 and layout.read_summary(rerun)["paths"]["gradient_backend"]["value"] == "torch"
    assert cli.main(["train", "ppo", "CartPole-v1", "--set", "algo.gradient_backend=handwritten",
                     "--set", "algo.shared=true"]) == 2
    assert "gradient_backend='handwritten' cannot run here: needs separate actor and critic MLPs" in \
        capsys.readouterr().err


def test_default_run_directory_name_and_latest(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert cli.main(["train", "a2c", "CartPole-v1", "--timesteps", "40", "--eval-episodes", "0", "--headless",
                     "--set", "algo.num_envs=4"]) == 0
    (run,) = (tmp_path / "runs").iterdir()
    assert run.name.startswith("a2c-CartPole-v1-") and len(run.name.split("-")) == 5
    assert rundir.latest_run(tmp_path / "runs") == run
    second = rundir.new_run_dir(tmp_path / "runs", "a2c", "CartPole-v1")
    assert second != run and rundir.find_runs(tmp_path / "runs") == [run]  # no config.toml yet: not a run


def test_eval_and_gif_video(trained, tmp_path, capsys):
    gif = tmp_path / "play.gif"
    assert cli.main(["eval", str(trained), "--episodes", "3", "--video", str(gif)]) == 0
    out = capsys.readouterr().out
    assert "eval return" in out and "over 3 episodes" in out and str(gif) in out
    frames = iio.imread(gif, index=None)
    assert frames.ndim == 4 and frames.shape[0] >= 2 and frames.shape[1:3] == (200, 300)  # CartPole 400x600 / 2


def test_mp4_needs_imageio_ffmpeg(trained, tmp_path, capsys):
    code = cli.main(["eval", str(trained), "--episodes", "1", "--video", str(tmp_path / "play.mp4")])
    try:
        import imageio_ffmpeg  # noqa: F401
    except ImportError:
        assert code == 2 and "imageio-ffmpeg" in capsys.readouterr().err
    else:
        assert code == 0 and (tmp_path / "play.mp4").stat().st_size > 0


def test_plot_writes_a_png(trained, tmp_path, capsys):
    out = tmp_path / "curves.png"
    assert cli.main(["plot", str(trained), str(trained), "--out", str(out)]) == 0
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and out.stat().st_size > 5000


def test_list(capsys):
    assert cli.main(["list"]) == 0
    out = capsys.readouterr().out
    assert "ppo" in out and "CartPole-v1" in out and "Pendulum-v1" in out and "ppo_cartpole" in out


def test_bench_forwards_arguments(monkeypatch, capsys):
    from rapidrl.benchmarks import run

    monkeypatch.setattr(run, "main", lambda argv: print("bench got", argv) or 3)
    assert cli.main(["bench", "kernels", "--quick"]) == 3
    assert "bench got ['kernels', '--quick']" in capsys.readouterr().out


# -- configuration ---------------------------------------------------------------------------------------

def test_layering_defaults_preset_config_set(tmp_path, monkeypatch):
    presets = tmp_path / "presets"
    presets.mkdir()
    (presets / "ppo_cartpole.toml").write_text(
        '[run]\ntimesteps = 5000\n[algo]\nlearning_rate = 1e-3\nnum_steps = 64\nnum_envs = 2\n')
    monkeypatch.setattr(rundir, "PRESETS_DIR", presets)
    user = tmp_path / "user.toml"
    user.write_text('[run]\nalgo = "ppo"\nenv = "CartPole-v1"\n[algo]\nnum_steps = 32\nminibatch_size = 32\n'
                    '[env]\nmax_episode_steps = 100\n')
    config = rundir.resolve([("--config", rundir.read_toml(user)),
                             ("--set", cli._set_layer(["algo.num_steps=16", "algo.target_kl=0.02"]))])
    c = config.algo_config
    assert c.learning_rate == 1e-3 and c.num_envs == 2  # preset
    assert c.minibatch_size == 32  # --config over the default
    assert c.num_steps == 16 and c.target_kl == 0.02  # --set over --config over preset
    assert c.update_epochs == 4  # algorithm default
    assert config.run.timesteps == 5000 and config.env_kwargs == {"max_episode_steps": 100}
    config.write(tmp_path / "resolved.toml")
    again = rundir.load_run_config_file(tmp_path / "resolved.toml")
    assert again.algo_config == c and again.run == config.run and again.env_kwargs == config.env_kwargs


def test_none_and_types_through_set():
    layer = cli._set_layer(["run.algo=ppo", "run.env=CartPole-v1", "algo.target_kl=none", "algo.hidden=[32, 32]",
                            "algo.learning_rate=1"])
    c = rundir.resolve([("--set", layer)]).algo_config
    assert c.target_kl is None and c.hidden == (32, 32) and c.learning_rate == 1.0 and isinstance(
        c.learning_rate, float)


@pytest.mark.parametrize("argv, expected", [
    (["train", "ppx", "CartPole-v1"], "unknown algorithm 'ppx'; allowed: a2c, "),  # then every registered one
    (["train", "ppo", "CartPol-v1"], "unknown env 'CartPol-v1'; did you mean CartPole-v1"),
    (["train", "ppo", "CartPole-v1", "--set", "algo.learning_rat=1e-3"],
     "unknown key algo.learning_rat; did you mean learning_rate"),
    (["train", "ppo", "CartPole-v1", "--set", "algo.num_envs=many"], "algo.num_envs must be int, got 'many'"),
    (["train", "ppo", "CartPole-v1", "--set", "algo.learning_rate=-1"], "learning_rate must be > 0"),
    (["train", "ppo", "CartPole-v1", "--set", "algo.normalize_advantage=sometimes"],
     "normalize_advantage must be 'minibatch', 'batch' or 'none'"),
    (["train", "ppo", "CartPole-v1", "--set", "agent.lr=1"], "unknown section [agent]; allowed sections: run, algo"),
    (["train", "ppo", "CartPole-v1", "--set", "lr"], "--set expects section.key=value"),
    (["train", "ppo", "CartPole-v1", "--set", "env.gravity=3"], "unexpected keyword argument"),
    (["train", "ppo", "CartPole-v1", "--set", "run.timesteps=0"], "run.timesteps must be > 0"),
    (["train", "--config", "missing.toml"], "config file not found: missing.toml"),
    (["train"], "no algorithm given"),
    (["train", "--resume", "nowhere"], "nowhere is not a run directory"),
    (["eval", "nowhere"], "no run directory or model file at nowhere"),
    (["monitor", "--runs-root", "nowhere"], "no runs under nowhere/"),
    (["plot", "nowhere"], "no metrics.csv in nowhere"),
    (["list", "things"], "invalid choice: 'things'"),
    (["trian"], "invalid choice: 'trian'"),
])
def test_bad_input_is_one_line_exit_2(argv, expected, capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert cli.main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].startswith("rapidrl: error: ") and expected in err[-1], err
    if "ppx" in argv:
        assert err[-1].endswith("allowed: " + ", ".join(algorithms())), err
    assert not any("Traceback" in line for line in err)
    assert not (tmp_path / "runs").exists() or not any((tmp_path / "runs").iterdir())  # no half-made run


def test_bad_toml_file_names_the_file(tmp_path, capsys):
    bad = tmp_path / "bad.toml"
    bad.write_text("[algo\nx = 1\n")
    assert cli.main(["train", "--config", str(bad)]) == 2
    assert f"{bad}: invalid TOML" in capsys.readouterr().err
    unknown = tmp_path / "unknown.toml"
    unknown.write_text('[algorithm]\nx = 1\n')
    with pytest.raises(ConfigError, match=r"unknown section \[algorithm\]; did you mean \[algo\]\?"):
        rundir.read_toml(unknown)


def test_real_entry_point_no_traceback(tmp_path):
    out = subprocess.run([sys.executable, "-m", "rapidrl", "train", "ppo", "NoSuchEnv-v0"], capture_output=True,
                         text=True, cwd=tmp_path)
    assert out.returncode == 2 and out.stderr.count("\n") == 1 and "unknown env 'NoSuchEnv-v0'" in out.stderr
    helped = subprocess.run([sys.executable, "-m", "rapidrl", "train", "--help"], capture_output=True, text=True)
    assert helped.returncode == 0 and "--resume RUN_DIR" in helped.stdout and "examples:" in helped.stdout


def test_every_preset_resolves_for_its_algorithm_and_env():
    presets = rundir.list_presets()
    assert {p.stem for p in presets} >= {"ppo_cartpole", "ppo_pendulum", "a2c_cartpole", "dqn_cartpole",
                                         "sac_pendulum", "td3_pendulum"}
    for path in presets:
        run = rundir.read_toml(path)["run"]
        assert run["algo"] in algorithms(), f"{path.name}: algorithm {run['algo']!r} is not registered"
        assert path == rundir.preset_path(run["algo"], run["env"])  # picked automatically for its pair
        config = rundir.resolve([("test", {"run": {"algo": run["algo"], "env": run["env"]}})])
        assert config.run.timesteps == run["timesteps"]
