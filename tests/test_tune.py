"""``rapidrl tune``: search spaces, a real study of two worker processes on sqlite with pruning, failed trials,
resuming, and the best trial's preset."""

from __future__ import annotations

import dataclasses
import json

import optuna
import pytest

from rapidrl import cli
from rapidrl.algos.registry import get_algorithm
from rapidrl.train.config import ConfigError
from rapidrl.tune import load_space, run_study, sample_params


@pytest.mark.parametrize("algo", ["ppo", "a2c", "dqn", "sac", "td3"])
def test_shipped_spaces_load_and_sample_valid_configs(algo):
    space = load_space(algo)
    fields = {f.name for f in dataclasses.fields(get_algorithm(algo).config_class)}
    assert set(space) <= fields
    fixed = {k: json.dumps(v["choices"][-1]) if v["type"] == "categorical" else v["low"] for k, v in space.items()}
    params = sample_params(optuna.trial.FixedTrial(fixed), space)
    assert set(params) == set(space)
    if "hidden" in params:
        assert isinstance(params["hidden"], list)  # decoded from the storage's JSON string
    config = get_algorithm(algo).config_class(**{k: tuple(v) if k == "hidden" else v for k, v in params.items()})
    assert config is not None


def test_bad_spaces_give_clear_errors(tmp_path):
    cases = {
        "[params.not_a_field]\ntype = 'float'\nlow = 0.1\nhigh = 1.0\n": "has no setting",
        "[params.gamma]\ntype = 'beta'\n": "type must be one of",
        "[params.gamma]\ntype = 'float'\nlow = 0.9\nhigh = 0.5\n": "low < high",
        "[params.learning_rate]\ntype = 'float'\nlow = 0.0\nhigh = 1.0\nlog = true\n": "log scale",
        "[params.activation]\ntype = 'categorical'\nchoices = []\n": "non-empty choices",
        "x = 1\n": r"\[params",
        "[params\n": "invalid TOML",
    }
    for text, match in cases.items():
        path = tmp_path / "space.toml"
        path.write_text(text)
        with pytest.raises(ConfigError, match=match):
            load_space("ppo", path)
    with pytest.raises(ConfigError, match="does not exist"):
        load_space("ppo", tmp_path / "missing.toml")
    with pytest.raises(ConfigError, match="unknown algorithm"):
        load_space("nope")


@pytest.mark.slow
def test_two_worker_study_prunes_and_its_best_preset_trains(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    storage = f"sqlite:///{tmp_path / 'study.db'}"
    code = cli.main(["tune", "ppo", "CartPole-v1", "--trials", "10", "--jobs", "2", "--storage", storage,
                     "--timesteps", "2048", "--eval-every", "512", "--eval-episodes", "2", "--out", "study"])
    out = capsys.readouterr().out
    assert code == 0, out
    study = optuna.load_study(study_name="ppo-CartPole-v1", storage=storage)
    states = [t.state for t in study.trials]
    assert len(states) >= 10 and optuna.trial.TrialState.PRUNED in states, states
    assert len({t.user_attrs["run_dir"] for t in study.trials}) == len(study.trials)  # a run directory per trial
    assert len({t.user_attrs["pid"] for t in study.trials}) == 2, "both worker processes ran trials"
    assert (tmp_path / "study" / "best.toml").is_file() and "pruned" in out
    best = study.best_trial.params  # the preset holds the best trial's values and trains
    assert f"learning_rate = {best['learning_rate']}" in (tmp_path / "study" / "best.toml").read_text()
    assert cli.main(["train", "--config", "study/best.toml", "--timesteps", "512", "--eval-episodes", "1",
                     "--run-dir", "from_best", "--headless"]) == 0


def test_diverging_trials_are_recorded_as_failed_and_a_study_resumes(tmp_path):
    space = tmp_path / "explode.toml"
    space.write_text("[params.learning_rate]\ntype = 'float'\nlow = 1e29\nhigh = 1e30\nlog = true\n")
    storage = f"sqlite:///{tmp_path / 's.db'}"
    kw = dict(storage=storage, timesteps=256, space_path=space, eval_every=128, eval_episodes=1,
              out_dir=tmp_path / "study", pruner="none")
    first = run_study("ppo", "CartPole-v1", trials=2, **kw)
    assert first["states"] == {"complete": 0, "pruned": 0, "fail": 2} and "best_preset" not in first
    study = optuna.load_study(study_name="ppo-CartPole-v1", storage=storage)
    assert all("training stopped" in t.user_attrs.get("error", "") for t in study.trials)  # the reason is kept
    again = run_study("ppo", "CartPole-v1", trials=3, **kw)  # the same study, resumed: one more trial
    assert again["states"]["fail"] == 3
