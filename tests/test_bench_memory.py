"""`bench_memory --update-cost`: the cost of one recurrent off-policy update at a preset's settings."""

from __future__ import annotations

import json

import pytest

from rapidrl.benchmarks import bench_memory


def test_update_cost_times_a_recurrent_presets_update(capsys):
    bench_memory.main(["--update-cost", "r2d2_cartpolenovel", "--repeats", "3"])
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith("rapidrl from ")
    result = json.loads(lines[1])
    assert result["preset"] == "r2d2_cartpolenovel" and result["repeats"] == 3 and 0 < result["ms_per_update"] < 5_000


def test_update_cost_refuses_a_preset_that_is_not_recurrent_off_policy():
    with pytest.raises(ValueError, match="not a recurrent off-policy preset"):
        bench_memory.update_cost("dqn_cartpole", repeats=1)
