"""The results pipeline (`rapidrl bench results`): a row trains its seeds from the CLI, appends them to its CSVs,
draws its curve and the results page; recorded seeds are kept, not re-run; every shipped row resolves."""

from __future__ import annotations

import csv

import pytest

from rapidrl.benchmarks import results
from rapidrl.benchmarks.results import ROWS, Published, Row
from rapidrl.runs.config import resolve


def test_every_row_resolves_to_a_valid_run_configuration():
    for row in ROWS.values():
        for quick in (False, True):
            argv = row.train_argv(row.quick_timesteps if quick else row.timesteps, quick)
            layer = {"run": {"algo": argv[0], "env": argv[1], "timesteps": int(argv[3])}, "algo": {}, "env": {}}
            for assignment in argv[5::2]:
                section, rest = assignment.split(".", 1)
                key, value = rest.split("=", 1)
                layer[section][key] = int(value) if value.isdigit() else value
            config = resolve([("row", layer)])
            assert config.run.timesteps == (row.quick_timesteps if quick else row.timesteps)
        assert row.seeds and row.timesteps > row.quick_timesteps


def test_a_row_runs_records_draws_and_keeps_recorded_seeds(tmp_path, monkeypatch, capsys):
    row = Row("ppo-cartpole-test", "Classic control (test)", "ppo", "CartPole-v1", 1024, (0, 1),
              (Published(500, "Gymnasium", "the maximum return"),), 512, sets=("run.eval_episodes=2",))
    monkeypatch.setattr(results, "ROWS", {row.name: row})
    out = tmp_path / "docs" / "results"
    results.run_row(row, (0,), out, tmp_path / "runs")
    with open(out / "ppo-cartpole-test.csv") as f:
        recorded = list(csv.DictReader(f))
    assert [r["seed"] for r in recorded] == ["0"] and int(recorded[0]["timesteps"]) == 1024
    assert float(recorded[0]["eval_mean"]) >= 8 and int(recorded[0]["eval_episodes"]) == 2
    assert (out / "ppo-cartpole-test-curve.csv").is_file() and (out / "ppo-cartpole-test.png").is_file()
    capsys.readouterr()
    results.run_row(row, (0, 1), out, tmp_path / "runs")  # seed 0 is kept, seed 1 is trained
    assert "seed 0: already recorded" in capsys.readouterr().out
    with open(out / "ppo-cartpole-test.csv") as f:
        assert [r["seed"] for r in csv.DictReader(f)] == ["0", "1"]
    page = results.write_page(out).read_text()
    assert "## Classic control (test)" in page and "`ppo-cartpole-test`" in page
    assert "500 (the maximum return)" in page and "![ppo-cartpole-test](results/ppo-cartpole-test.png)" in page


def test_command_line_lists_rows_and_rejects_unknown_ones(capsys):
    assert results.main(["list"]) == 0
    assert "ppo-hopper" in capsys.readouterr().out
    assert results.main(["no-such-row"]) == 2
    assert "unknown: no-such-row" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        results.main(["--no-such-flag"])
