"""Many seeds as one experiment: seed parsing, IQM and bootstrap statistics, the runner and its plot."""

from __future__ import annotations

import json

import numpy as np
import pytest
from scipy import stats

from rapidrl import cli
from rapidrl.runs.experiment import bootstrap_ci, iqm, mean_curve, parse_seeds, summarize


def test_parse_seeds():
    assert parse_seeds("0-4") == [0, 1, 2, 3, 4]
    assert parse_seeds("0,2,5") == [0, 2, 5]
    assert parse_seeds("3-4,9") == [3, 4, 9]
    for bad in ("", "a", "4-2", "0,0", "-1", "1-x"):
        with pytest.raises(ValueError, match="--seeds"):
            parse_seeds(bad)


def test_iqm_is_the_mean_of_the_middle_half():
    # sorted: -50, 1, 2, 3, 4, 5, 6, 100; the lowest 2 and highest 2 are dropped -> mean of 2, 3, 4, 5 = 3.5
    assert iqm([100.0, 1.0, 3.0, 4.0, 5.0, 6.0, 2.0, -50.0]) == 3.5
    assert iqm([7.0]) == 7.0 and iqm([1.0, 3.0]) == 2.0  # fewer than 4 values: nothing is dropped
    assert iqm([1.0, 2.0, 3.0, 4.0, 1000.0]) == 3.0  # 5 values: one dropped at each end
    rng = np.random.default_rng(0)
    for n in (4, 9, 10, 31):
        x = rng.standard_normal(n)
        assert iqm(x) == pytest.approx(stats.trim_mean(x, 0.25))
    with pytest.raises(ValueError):
        iqm([])


def test_bootstrap_interval_contains_the_statistic_and_shrinks_with_more_seeds():
    rng = np.random.default_rng(1)
    few, many = rng.normal(10, 2, 5), rng.normal(10, 2, 200)
    lo, hi = bootstrap_ci(few)
    assert lo <= iqm(few) <= hi
    lo2, hi2 = bootstrap_ci(many)
    assert lo2 <= iqm(many) <= hi2 and hi2 - lo2 < hi - lo
    assert bootstrap_ci([3.0, 3.0, 3.0]) == (3.0, 3.0)


def test_mean_curve_on_a_common_grid():
    x = np.array([0.0, 10.0, 20.0])
    steps, mean, lo, hi = mean_curve([(x, np.array([0.0, 1.0, 2.0])), (x, np.array([2.0, 3.0, 4.0]))], points=3)
    np.testing.assert_allclose(steps, x)
    np.testing.assert_allclose(mean, [1.0, 2.0, 3.0])
    assert np.all(lo <= mean) and np.all(mean <= hi)


def test_seeds_run_in_one_experiment_then_plot(tmp_path, capsys):
    exp = tmp_path / "exp"
    code = cli.main(["train", "ppo", "CartPole-v1", "--seeds", "0-1", "--timesteps", "2048", "--eval-episodes", "2",
                     "--run-dir", str(exp), "--set", "algo.num_steps=64"])
    out = capsys.readouterr().out
    assert code == 0, out
    assert json.loads((exp / "experiment.json").read_text())["seeds"] == [0, 1]
    for seed in (0, 1):
        summary = json.loads((exp / f"seed-{seed}" / "summary.json").read_text())
        assert summary["status"] == "finished" and summary["timesteps"] >= 2048
        assert f"seed = {seed}" in (exp / f"seed-{seed}" / "config.toml").read_text()
    assert "IQM" in out and "seed 0: finished" in out and "seed 1: finished" in out
    s = summarize(exp)
    assert set(s["evals"]) == {0, 1} and s["iqm"] == pytest.approx(np.mean(list(s["evals"].values())))
    assert cli.main(["plot", str(exp)]) == 0
    assert (exp / "curves.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "final eval IQM" in capsys.readouterr().out
    assert cli.main(["train", "ppo", "CartPole-v1", "--seeds", "0-1", "--seed", "3"]) == 2
    assert cli.main(["train", "ppo", "CartPole-v1", "--seeds", "2-1"]) == 2


def test_docs_examples_run(tmp_path, monkeypatch):
    """The Python examples of docs/experiments.md run as written."""
    import re
    from pathlib import Path

    monkeypatch.chdir(tmp_path)
    text = (Path(__file__).parents[1] / "docs" / "experiments.md").read_text()
    blocks = re.findall(r"```python\n(.*?)```", text, re.S)
    assert len(blocks) == 2
    for code in blocks:
        exec(compile(code, "docs/experiments.md", "exec"), {})
    assert (tmp_path / "policy.onnx").is_file()
