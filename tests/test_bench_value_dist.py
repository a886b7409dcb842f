"""The value-distribution benchmark (``rapidrl bench value_dist``): its arithmetic on hand-made streams, and each
case's rapidrl settings build the algorithm (a renamed setting must not surface only when the benchmark runs)."""

from __future__ import annotations

import pytest

from rapidrl.algos.registry import get_algorithm
from rapidrl.benchmarks import bench_value_dist as bench
from rapidrl.benchmarks.run import SUITES


def test_registered_as_a_suite():
    assert SUITES["value_dist"] == "rapidrl.benchmarks.bench_value_dist"


def test_episode_lines_of_cleanrl_and_of_the_callbacks_parse_alike():
    assert bench._parse("global_step=1234, episodic_return=[10.]\n") == [(1234, 10.0)]
    assert bench._parse(bench._episode_line(50, -3.5)) == [(50, -3.5)]
    assert bench._parse("SPS: 310") == []


def test_training_sps_counts_the_learning_phase_only():
    # (seconds since start, global step, return): two episodes in the random warm-up (step <= 1000), then learning
    events = [(1.0, 500, 9.0), (2.0, 1000, 10.0), (4.0, 1200, 11.0), (6.0, 2200, 12.0), (9.0, 4200, 13.0)]
    got = bench.summary(events, wall=10.0, learning_starts=1000)
    assert got["train_sps"] == pytest.approx((4200 - 1200) / (9.0 - 4.0))
    assert got["final"] == pytest.approx(11.0) and got["episodes"] == 5 and got["wall_s"] == 10.0
    assert bench.summary(events[:3], wall=5.0, learning_starts=1000)["train_sps"] is None  # one learning episode


@pytest.mark.parametrize("case", sorted(bench.CASES))
def test_each_case_configures_its_algorithm(case):
    spec = bench.CASES[case]
    config_class = get_algorithm(spec["algo"]).config_class
    config = config_class(**{**spec["rapidrl"], "learning_starts": spec["learning_starts"]})
    config.validate()


def test_tianshou_runs_where_its_interpreter_is_named(monkeypatch):
    monkeypatch.delenv("RAPIDRL_TIANSHOU_PYTHON", raising=False)
    assert bench.contenders("iqn_cartpole") == ["rapidrl"]
    monkeypatch.setenv("RAPIDRL_TIANSHOU_PYTHON", "/opt/tianshou/bin/python")
    assert bench.contenders("iqn_cartpole") == ["rapidrl", "tianshou"]
    assert "tianshou" not in bench.contenders("c51_cartpole")


def test_iqn_case_is_tianshous_test_setting_in_rapidrls_units():
    """The same run on both sides: Tianshou's target interval (gradient steps) and update ratio in env steps."""
    spec = bench.CASES["iqn_cartpole"]
    ts, ours = spec["tianshou"], spec["rapidrl"]
    env_steps_per_update = ts["collect_steps"] / ts["updates_per_collect"]
    assert ours["train_freq"] * ours["num_envs"] / ours["gradient_steps"] == env_steps_per_update
    assert ours["target_update_interval"] == ts["target_update_freq"] * env_steps_per_update
    assert (ours["num_tau_samples"], ours["num_tau_prime_samples"], ours["num_quantile_samples"]) == (
        ts["online_sample_size"], ts["target_sample_size"], ts["sample_size"])
    assert (ours["gamma"], ours["learning_rate"], ours["batch_size"], ours["n_step"], ours["buffer_size"]) == (
        ts["gamma"], ts["lr"], ts["batch_size"], ts["n_step"], ts["buffer_size"])
    assert list(ours["hidden"]) == ts["hidden"] and ours["quantile_embedding_dim"] == ts["num_cosines"]
