"""The throughput profile (rapidrl.benchmarks.profile_ppo): FLOP counts worked by hand, and a small run whose parts
are all timed and whose table adds up."""

from __future__ import annotations

import pytest

from rapidrl.benchmarks import profile_ppo


def test_mlp_macs_are_the_layer_products():
    assert profile_ppo.mlp_macs([4, 64, 64, 2]) == 4 * 64 + 64 * 64 + 64 * 2  # 4,480
    assert profile_ppo.mlp_macs([4, 64, 64, 1]) == 4 * 64 + 64 * 64 + 64  # 4,416


@pytest.mark.parametrize("update_threads, collect_threads", [(1, 1), (2, 2)])
def test_a_small_profile_times_every_part_and_its_table_adds_up(update_threads, collect_threads):
    result = profile_ppo.profile({"num_envs": 64, "num_steps": 8, "minibatch_size": 256, "update_epochs": 2,
                                  "torch_threads": 1,
                                  "update_threads": update_threads, "collect_threads": collect_threads}, repeats=2)
    s = result["seconds"]
    assert set(s) == {"iteration", "collect", "gae", "update", "env", "acting_forward", "update_forward", "adam"}
    assert all(t > 0 for t in s.values())
    assert result["steps"] == 512 and result["minibatches"] == 2 * (512 // 256)
    macs = 8_896  # CartPole's 4-64-64-2 actor and 4-64-64-1 critic
    assert result["flops"]["acting_forward"] == 2 * macs * 512
    assert result["flops"]["update_backward"] == 2 * result["flops"]["update_forward"] == 2 * 2 * 2 * macs * 512
    rows = profile_ppo.rows(result)
    # two update threads: the update's forward is not a part of its own; two collector threads: the collector's call
    # is one part
    assert len(rows) == (8 if update_threads == 1 else 5)
    if update_threads == 2:
        assert "2 threads" in rows[0][0] and rows[0][1] == pytest.approx(1e6 * s["collect"])
        assert "two threads" in rows[2][0] and "55 MFLOP" in rows[2][3]  # forward and backward: 6 * 8,896 * 512 * 2
    assert sum(us for _, us, _, _ in rows) == pytest.approx(1e6 * s["iteration"])
    assert sum(share for _, _, share, _ in rows) == pytest.approx(1.0)
    text = profile_ppo.table(result)
    assert text.count("\n") == 2 + len(rows) and "SPS measured" in text and "float32" in text
